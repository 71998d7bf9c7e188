package sim

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/scanserver"
	"github.com/scanplane/scanplane/tablets"
	"google.golang.org/protobuf/proto"
)

// These tests break what is around the real actors on purpose and check
// that the harness notices: they test the harness, not shipped
// behaviour.

// calmConfig is seed's run without network or process faults, so that
// whatever goes wrong is the mutation's doing.
func calmConfig(seed uint64) Config {
	c := ConfigFor(seed)
	c.Net.Drop, c.Net.Duplicate, c.Net.Reorder, c.Net.Late = 0, 0, 0, 0
	c.Faults = ProcFaults{DetectMax: c.Faults.DetectMax, LeaseTTL: c.Faults.LeaseTTL}
	return c
}

// hunt runs seeds with a fresh mutation each and returns once a problem
// contains want, or fails.
func hunt(t *testing.T, seeds int, cfg func(uint64) Config, mutate func() mutations, want string) {
	t.Helper()
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		res, err := run(cfg(seed), false, mutate())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range res.Problems {
			if strings.Contains(p, want) {
				t.Logf("caught by seed %d: %s", seed, p)
				return
			}
		}
	}
	t.Fatalf("no problem containing %q in %d seeds: the harness misses this broken component", want, seeds)
}

// dropRow loses the middle row of a batch whose first key ends in 7
// (chosen by key, so a replay loses the same ones); it reports whether
// it did. fix re-counts the batch's digest over what is left (a server
// that lies consistently).
func dropRow(b *messages.RowBatch, digests map[scanserver.ScanKey]*tablets.RowDigest, fix bool) bool {
	rows, err := tablets.BatchRows(b, 0)
	if err != nil || len(rows) < 3 || !bytes.HasSuffix(rows[0].Key, []byte("7")) {
		if fix && err == nil {
			fold(b, rows, digests)
		}
		return false
	}
	rows = append(rows[:len(rows)/2:len(rows)/2], rows[len(rows)/2+1:]...)
	var packed []byte
	for _, r := range rows {
		packed = tablets.AppendPackedRow(packed, r.Key, r.Value)
	}
	b.PackedRows = packed
	if fix {
		fold(b, rows, digests)
	}
	return true
}

// fold sets b's count and checksum (and its final ScanFinished's) to the
// digest of the rows its attempt sent so far.
func fold(b *messages.RowBatch, rows []tablets.Entry, digests map[scanserver.ScanKey]*tablets.RowDigest) {
	k := scanserver.ScanKey{RequestID: b.GetRequestId(), Attempt: b.GetAttempt()}
	d := digests[k]
	if d == nil {
		d = &tablets.RowDigest{}
		digests[k] = d
	}
	for _, r := range rows {
		d.Add(r.Key, r.Value)
	}
	b.RowCount, b.Checksum = d.Rows(), d.Sum()
	if f := b.GetFinished(); f != nil {
		f.Rows, f.Checksum = d.Rows(), d.Sum()
	}
}

// A server that loses a row and computes its counts over what it sent
// cannot be caught by a client that does not check the block proofs; the
// comparison with the ground truth catches it.
func TestHarnessCatchesLyingServer(t *testing.T) {
	hunt(t, 300, calmConfig, func() mutations {
		digests := map[scanserver.ScanKey]*tablets.RowDigest{}
		return mutations{noVerify: true, deliver: func(m proto.Message) {
			switch m := m.(type) {
			case *messages.RowBatch:
				dropRow(m, digests, true)
			case *messages.ScanFinished:
				if d := digests[scanserver.ScanKey{RequestID: m.RequestId, Attempt: m.Attempt}]; d != nil {
					m.Rows, m.Checksum = d.Rows(), d.Sum()
				}
			}
		}}
	}, "finished with")
}

// A server that loses a row after computing its counts is caught by the
// real client, which refuses the batch and resumes: no wrong row.
func TestClientSurvivesRowLosingServer(t *testing.T) {
	lost := 0
	for seed := uint64(1); seed <= 100; seed++ {
		mut := mutations{deliver: func(m proto.Message) {
			if b, ok := m.(*messages.RowBatch); ok && dropRow(b, nil, false) {
				lost++
			}
		}}
		res, err := run(calmConfig(seed), false, mut)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range res.Problems {
			if strings.Contains(p, "row") {
				t.Errorf("seed %d: %s", seed, p)
			}
		}
	}
	if lost == 0 {
		t.Fatal("the mutation never lost a row")
	}
	t.Logf("%d batches lost a row; every scan still got exactly its rows", lost)
}

// Servers that never get a Cancel keep cancelled attempts running (a
// hedge loser, an abandoned scan's stream) after their scan ended, and
// the harness says so.
func TestHarnessCatchesIgnoredCancel(t *testing.T) {
	hunt(t, 300, calmConfig, func() mutations {
		return mutations{drop: func(_ string, _ *actor.PID, m proto.Message) bool {
			_, ok := m.(*messages.Cancel)
			return ok
		}}
	}, "is still on")
}

// A coordinator that drops a request forwarded to it by another (the
// tablet's owner never serves it, and nothing tells the forwarder or the
// client) leaves the client waiting for its idle timeout, and the harness
// says so.
func TestHarnessCatchesDroppedForward(t *testing.T) {
	hunt(t, 300, calmConfig, func() mutations {
		return mutations{drop: func(_ string, _ *actor.PID, m proto.Message) bool {
			r, ok := m.(*messages.ScanRequest)
			return ok && r.GetForwardedBy() != ""
		}}
	}, "in a run without faults")
}

// Servers that send no accept notice while a slow (cold) read keeps their
// first batch back let the tablet actor's busy timer fire for scans that
// did start: it gives up on healthy servers, and the harness says so.
// The notice may be folded into the first batch only when that comes
// soon (scanserver.AcceptNoticeDelay).
func TestHarnessCatchesMissingAcceptNotice(t *testing.T) {
	hunt(t, 300, calmConfig, func() mutations {
		return mutations{drop: func(_ string, _ *actor.PID, m proto.Message) bool {
			s, ok := m.(*messages.ScanStarted)
			return ok && !s.GetFirstData()
		}}
	}, "though it had no fault")
}

// A coordinator that never sends ScanProgress leaves a client whose
// request waits for a server (a paused host, a busy one) without a word,
// and the harness says so.
func TestHarnessCatchesSilentWait(t *testing.T) {
	paused := func(seed uint64) Config {
		c := calmConfig(seed)
		c.Hosts, c.Faults.HostPauses, c.Faults.Window, c.Faults.PauseMax = 1, 1, c.ScanStartMax, 4*time.Second
		return c
	}
	hunt(t, 300, paused, func() mutations {
		return mutations{drop: func(_ string, _ *actor.PID, m proto.Message) bool {
			_, ok := m.(*messages.ScanProgress)
			return ok
		}}
	}, "heard nothing")
}

// lies are the real scan server's lies that send rows (FaultConfig.Lie).
var lies = []scanserver.Lie{scanserver.LieForge, scanserver.LieDrop, scanserver.LieAdd, scanserver.LieEmpty}

// Real scan servers that lie (forged, dropped, added rows, an empty
// success) against clients that do not check the block proofs: the
// harness sees the wrong rows.
func TestHarnessCatchesRealLyingServers(t *testing.T) {
	hunt(t, 100, calmConfig, func() mutations { return mutations{lie: lies, noVerify: true} }, "row")
}

// The same lying servers against clients that verify, as client.Client
// does for a table ingested with digests: no wrong row reaches a caller;
// scans end with a named error.
func TestVerifiedClientSurvivesLyingServers(t *testing.T) {
	failed := 0
	for seed := uint64(1); seed <= 100; seed++ {
		res, err := run(calmConfig(seed), false, mutations{lie: lies})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range res.Problems {
			t.Errorf("seed %d: %s", seed, p)
		}
		for k, n := range res.Stats.Failed {
			if k != "ERROR_CODE_NO_SERVERS" {
				failed += n
			}
		}
	}
	if failed == 0 {
		t.Fatal("no scan failed: the servers did not lie")
	}
	t.Logf("%d scans failed with a named error; no wrong row", failed)
}

// The heartbeats of a restarted host's new incarnation never reach one
// coordinator: the settled view check finds its servers missing there.
func TestHarnessCatchesUnseenRestart(t *testing.T) {
	cfg := func(seed uint64) Config {
		c := calmConfig(seed)
		c.Faults.HostRestartRaces, c.Faults.Window = 1, c.ScanStartMax
		return c
	}
	drop := func(to string, hb *messages.Heartbeat) bool {
		return to == "coord-1:8090" && strings.HasSuffix(hb.GetIncarnation(), "-i2")
	}
	hunt(t, 20, cfg, func() mutations { return mutations{heartbeat: drop} }, "coord-1:8090's view has server")
}
