package protosim

import (
	"bytes"
	"strings"
	"testing"

	coordpkg "github.com/scanplane/scanplane/coordinator"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/scanserver"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/tablets"
)

// These tests break a simulated component on purpose and check that the
// harness notices: they test the harness, not shipped behaviour.

// calmConfig is seed's run without network or process faults, so that
// whatever goes wrong is the mutation's doing.
func calmConfig(seed uint64) Config {
	c := ConfigFor(seed)
	c.Net.Drop, c.Net.Duplicate, c.Net.Reorder, c.Net.Late = 0, 0, 0, 0
	c.Faults = ProcFaults{DetectMax: c.Faults.DetectMax}
	return c
}

// hunt runs seeds with a fresh mutation each and returns the first
// problem containing want (and its seed), or fails.
func hunt(t *testing.T, seeds int, mutate func() mutations, want string) {
	t.Helper()
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		res, err := run(calmConfig(seed), false, mutate())
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

// dropOne loses the middle row of some batches (chosen by key, so a
// replay loses the same ones).
func dropOne(rows []*messages.Row) []*messages.Row {
	if len(rows) < 3 || !bytes.HasSuffix(rows[0].Key, []byte("7")) {
		return rows
	}
	out := append([]*messages.Row(nil), rows[:len(rows)/2]...)
	return append(out, rows[len(rows)/2+1:]...)
}

// A server that loses a row and computes its checksum over what it sent
// cannot be caught by the client; the comparison with the ground truth
// catches it.
func TestHarnessCatchesLyingServer(t *testing.T) {
	hunt(t, 300, func() mutations { return mutations{serverRows: dropOne} }, "finished with")
}

// A server that loses a row after computing its checksum is caught by the
// real client, which rejects the batch and resumes: no wrong row.
func TestClientSurvivesRowLosingServer(t *testing.T) {
	lost := 0
	for seed := uint64(1); seed <= 300; seed++ {
		mut := mutations{serverBatch: func(b *messages.RowBatch) {
			if r := dropOne(b.Rows); len(r) != len(b.Rows) {
				b.Rows = r
				lost++
			}
		}}
		res, err := run(calmConfig(seed), false, mut)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range res.Problems {
			if strings.Contains(p, "row") && !strings.Contains(p, "blamed") {
				t.Errorf("seed %d: %s", seed, p)
			}
		}
	}
	if lost == 0 {
		t.Fatal("the mutation never lost a row")
	}
	t.Logf("%d batches lost a row; every scan still got exactly its rows", lost)
}

// The same server with a client that ignores checksums (the harness
// rewrites each batch's count and checksum to match what arrived) gives
// wrong rows, and the harness catches them.
func TestHarnessCatchesClientIgnoringChecksums(t *testing.T) {
	hunt(t, 300, func() mutations {
		digests := map[scanserver.ScanKey]*tablets.RowDigest{}
		return mutations{
			serverBatch: func(b *messages.RowBatch) { b.Rows = dropOne(b.Rows) },
			deliver: func(env *envelope) {
				switch m := env.msg.(type) {
				case *messages.RowBatch:
					k := scanserver.ScanKey{RequestID: m.RequestId, Attempt: m.Attempt}
					d := digests[k]
					if d == nil {
						d = &tablets.RowDigest{}
						digests[k] = d
					}
					rows, _ := tablets.BatchRows(m, 0)
					for _, r := range rows {
						d.Add(r.Key, r.Value)
					}
					m.RowCount, m.Checksum = d.Rows(), d.Sum()
					if f := m.Finished; f != nil {
						f.Rows, f.Checksum = d.Rows(), d.Sum()
					}
				case *messages.ScanFinished:
					if d := digests[scanserver.ScanKey{RequestID: m.RequestId, Attempt: m.Attempt}]; d != nil {
						m.Rows, m.Checksum = d.Rows(), d.Sum()
					}
				}
			},
		}
	}, "finished with")
}

// A tablet actor that counts a cancelled attempt (a hedge loser) as an
// error blames a server for nothing, and the harness says so.
func TestHarnessCatchesBlamedLoser(t *testing.T) {
	hunt(t, 500, func() mutations {
		return mutations{flowActions: func(acts []coordpkg.Action) []coordpkg.Action {
			for i := range acts {
				if acts[i].Kind == coordpkg.ActAccount && acts[i].Result == selection.Cancelled {
					acts[i].Result = selection.Error
				}
			}
			return acts
		}}
	}, "though it had no fault")
}

// Servers that ignore Cancel leave cancelled attempts running after their
// scan ended, and the harness says so.
func TestHarnessCatchesIgnoredCancel(t *testing.T) {
	hunt(t, 500, func() mutations { return mutations{ignoreCancel: true} }, "is still on")
}

// Servers that send no accept notice while a slow (cold) read keeps their
// first batch back let the tablet actor's busy timer fire for scans that
// did start: it blames healthy servers, and the harness says so. The
// notice may be folded into the first batch only when that comes soon
// (scanserver.AcceptNoticeDelay).
func TestHarnessCatchesMissingAcceptNotice(t *testing.T) {
	hunt(t, 500, func() mutations { return mutations{noAcceptNotice: true} }, "though it had no fault")
}
