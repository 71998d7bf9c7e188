package coordinator_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
)

func serverStatus(tc *testCluster, id string) *messages.ServerStatus {
	for _, s := range tc.status().Servers {
		if s.Id == id {
			return s
		}
	}
	tc.t.Fatalf("server %s not in status", id)
	return nil
}

// TestHedgedScansSkipPausedServer: one of three servers is paused (a
// process that still heartbeats but answers nothing, like a long GC) for
// the whole test. clickhouse-random with hedging dispatches a second server
// after 50 ms, so every scan completes and hedges are counted. The busy
// timeout (10 min) is far beyond checkScan's 60 s deadline, so no retry
// after a busy timeout rescues a scan; without hedging the test fails on
// the hedge count (checked: hedges=0) or on a scan that runs out of time —
// no wall-clock bound is needed to tell the two apart.
func TestHedgedScansSkipPausedServer(t *testing.T) {
	profiles := `[{"isDefault":true,"policy":"clickhouse-random","hedge":true,"hedgedConnectionTimeout":"50ms",
	  "connectTimeoutWithFailover":"10m","attemptPlans":[{"servers":"100%","busyTimeout":"10m"}]}]`
	tc := startCluster(t, clusterOpts{hosts: 3, servers: 1, rows: 4000, tablets: 4, profiles: profiles,
		hostArgs: func(i int) []string {
			if i == 0 {
				return []string{"--fault-pause", "59m/1h"}
			}
			return nil
		}})
	c := tc.client(nil)
	paused := tc.cl.Host(0).Ready.Servers[0]
	for i := 0; i < 30; i++ {
		a := (i * 131) % 3900
		if err := checkScan(c, tc.truth, a, a+50, client.ScanOptions{}); err != nil {
			t.Fatalf("scan %d did not complete: it waited for the paused server instead of hedging around it: %v", i, err)
		}
	}
	st := tc.status()
	if st.Hedges == 0 || serverStatus(tc, paused).Dispatched == 0 {
		t.Fatalf("the paused server was never tried or never hedged around: hedges=%d dispatched=%d", st.Hedges, serverStatus(tc, paused).Dispatched)
	}
	if s := serverStatus(tc, paused); s.Slowdowns == 0 {
		t.Fatalf("no slowdown counted for the paused server: %+v", s)
	}
}

// queueAwareProfiles are the two queue-aware policies under test, with
// everything that reacts to timing rather than to queues switched off:
// bookkeeper's speculative reads, adaptive's hedging and its stale-heartbeat
// penalty. What is left decides by queue length (and, for adaptive, by the
// start-latency EWMA, which only moves a scan after a sixfold outlier).
var queueAwareProfiles = []struct{ name, json string }{
	{"bookkeeper", `"policy":"bookkeeper","reorderThresholdPendingRequests":5,"speculativeReadTimeout":"0"`},
	{"adaptive", `"policy":"adaptive","hedge":false,"staleHeartbeat":"0"`},
}

func queueAwareProfile(policyJSON string) string {
	return fmt.Sprintf(`[{"isDefault":true,%s,"attemptPlans":[{"servers":"1","busyTimeout":"10s"},{"servers":"100%%","busyTimeout":"10s"}]}]`, policyJSON)
}

// TestQueueAwarePoliciesDecide is the deterministic core of
// TestQueueAwarePoliciesMoveAwayAndBack: the same profiles on a load view
// built by hand (two hosts, one server each, two workers), at a fixed time.
// Idle: the tablet's home server. Home queue 12 + 2 running: the other
// server. Drained: home again.
func TestQueueAwarePoliciesDecide(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	tablet := selection.Tablet{Table: "t", EndRow: []byte("row000001000")}
	for _, policy := range queueAwareProfiles {
		t.Run(policy.name, func(t *testing.T) {
			profiles, err := selection.ParseProfiles([]byte(queueAwareProfile(policy.json)))
			if err != nil {
				t.Fatal(err)
			}
			prof := profiles.Default()
			view := func(homeQueue, homeActive int, home selection.ServerID) *selection.LoadView {
				var ss []*selection.ServerLoad
				for _, h := range []string{"host1", "host2"} {
					s := &selection.ServerLoad{ID: selection.ServerID(h + ":1/0"), Host: h, Group: selection.DefaultGroup, Zone: "default",
						Alive: true, Workers: 2, LastHeartbeat: now, Address: h + ":1", ActorID: "scanserver-0"}
					if s.ID == home {
						s.QueueLen, s.Active = homeQueue, homeActive
					}
					ss = append(ss, s)
				}
				return selection.NewLoadView(ss, profiles.Decays(), now)
			}
			choose := func(v *selection.LoadView, seed uint64) selection.ServerID {
				var st selection.TabletState
				in := &selection.Input{Tablet: tablet, Profile: prof, View: v, Now: now, Rand: rand.New(rand.NewPCG(seed, seed)), State: &st}
				d, err := profiles.Policy(prof).Select(in)
				if err != nil {
					t.Fatal(err)
				}
				return d.Server
			}
			home := choose(view(0, 0, ""), 1)
			for seed := uint64(1); seed <= 50; seed++ {
				if got := choose(view(0, 0, home), seed); got != home {
					t.Fatalf("idle, seed %d: chose %s, want home %s", seed, got, home)
				}
				if got := choose(view(12, 2, home), seed); got == home {
					t.Fatalf("home queue 12 + 2 running, seed %d: still chose home %s", seed, home)
				}
			}
		})
	}
}

// TestQueueAwarePoliciesMoveAwayAndBack: when the home server's queue
// grows, bookkeeper and adaptive send the tablet's scans elsewhere; when it
// drains they come back home (cache affinity). The decision itself is
// pinned by TestQueueAwarePoliciesDecide; this test shows the queue travels
// from a real server through heartbeats to the coordinator's choice. Each
// scan starts from a settled view (the previous scan accounted, heartbeats
// showing it ended) and heartbeat misses are generous, so a slow machine
// changes when scans run, not where they go.
func TestQueueAwarePoliciesMoveAwayAndBack(t *testing.T) {
	for _, policy := range queueAwareProfiles {
		t.Run(policy.name, func(t *testing.T) {
			tc := startCluster(t, clusterOpts{hosts: 2, servers: 1, rows: 2000, tablets: 1, profiles: queueAwareProfile(policy.json),
				hostArgs:  func(int) []string { return []string{"--workers", "2", "--queue", "64"} },
				coordArgs: []string{"--heartbeat-misses", "100"}})
			c := tc.client(nil)
			ctx := context.Background()
			route, err := c.Route(ctx, client.RouteQuery{Table: "t", Row: tc.truth[0].Key})
			if err != nil {
				t.Fatal(err)
			}
			home := route.Choice
			homeHost := 0
			if tc.cl.Host(1).Ready.Servers[0] == home {
				homeHost = 1
			}
			// settled: the coordinator counts nothing in flight and the
			// latest heartbeats (sent after the last scan ended) show idle
			// servers, or — while held scans keep home's queue long — at
			// least held queued scans on home.
			settled := func(homeQueue uint32) func() bool {
				return func() bool {
					for _, s := range tc.status().Servers {
						h := tc.heartbeat(s.Id)
						want := uint32(0)
						if s.Id == home {
							want = homeQueue
						}
						if !s.Alive || s.InFlight != 0 || s.QueueLen < want || h == nil || h.QueueLen < want || (want == 0 && (h.Active != 0 || h.QueueLen != 0 || s.QueueLen != 0)) {
							return false
						}
					}
					return true
				}
			}
			scan := func(n int, homeQueue uint32) uint64 {
				before := serverStatus(tc, home).Dispatched
				for i := 0; i < n; i++ {
					waitFor(t, "a settled load view before the scan", 30*time.Second, settled(homeQueue))
					tc.check(c, i*10, i*10+20, client.ScanOptions{})
				}
				return serverStatus(tc, home).Dispatched - before
			}
			if got := scan(5, 0); got < 4 {
				t.Fatalf("idle cluster: only %d of 5 scans went to the home server %s: %+v", got, home, serverStatus(tc, home))
			}
			// Make the home server's queue long: 2 running scans that
			// stall on flow control and 12 queued behind them.
			p := newProbe(t)
			for i := 0; i < 14; i++ {
				p.startScan(tc, serverPID(tc, homeHost, 0), fmt.Sprintf("hold-%d", i), 10*time.Minute, 1)
			}
			waitFor(t, "a long queue visible to the coordinator", 30*time.Second, func() bool { return serverStatus(tc, home).QueueLen >= 12 })
			if got := scan(10, 12); got != 0 {
				t.Fatalf("%d of 10 scans still went to the overloaded home server: %+v", got, serverStatus(tc, home))
			}
			for i := 0; i < 14; i++ {
				p.root.Send(serverPID(tc, homeHost, 0), &messages.Cancel{RequestId: fmt.Sprintf("hold-%d", i), Attempt: 1})
			}
			waitFor(t, "the queue drained", 30*time.Second, settled(0))
			if got := scan(10, 0); got < 8 {
				t.Fatalf("after draining only %d of 10 scans came back home: %+v", got, serverStatus(tc, home))
			}
		})
	}
}

// TestProfilesReload: the coordinator re-reads its profiles file on
// request (scanctl reload) and on SIGHUP; a bad file is refused and the
// old profiles stay in force.
func TestProfilesReload(t *testing.T) {
	first := `[{"isDefault":true,"policy":"accumulo-host","attemptPlans":[{"servers":"1","busyTimeout":"33ms"}]}]`
	tc := startCluster(t, clusterOpts{hosts: 1, servers: 1, rows: 100, tablets: 1, profiles: first})
	c := tc.client(nil)
	ctx := context.Background()
	path := filepath.Join(tc.dataDir, "profiles.json")
	policy := func() string {
		r, err := c.Route(ctx, client.RouteQuery{Table: "t", Row: tc.truth[0].Key})
		if err != nil {
			t.Fatal(err)
		}
		return r.Policy
	}
	if p := policy(); p != "accumulo-host" {
		t.Fatalf("policy %q", p)
	}
	// A bad file: refused with the reason, the old profiles stay.
	if err := os.WriteFile(path, []byte(`[{"isDefault":true,"policy":"nope","attemptPlans":[{"servers":"1","busyTimeout":"33ms"}]}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Reload(ctx); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("bad reload: %q, %v; want an error naming the bad policy", r, err)
	}
	if p := policy(); p != "accumulo-host" {
		t.Fatalf("after a refused reload the policy is %q", p)
	}
	tc.check(c, 0, 100, client.ScanOptions{})
	// A good file through scanctl's path.
	if err := os.WriteFile(path, []byte(`[{"isDefault":true,"policy":"adaptive"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Reload(ctx); err != nil || r == "" {
		t.Fatalf("reload: %q %v", r, err)
	}
	if p := policy(); p != "adaptive" {
		t.Fatalf("policy %q after reload", p)
	}
	// And through SIGHUP.
	if err := os.WriteFile(path, []byte(`[{"isDefault":true,"policy":"bookkeeper"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(tc.cl.Coordinator().PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "SIGHUP reload", 10*time.Second, func() bool { return policy() == "bookkeeper" })
	tc.check(c, 0, 100, client.ScanOptions{})
}
