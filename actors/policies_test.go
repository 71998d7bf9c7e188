package actors_test

// Policy behaviour on real processes (coordinator and scan servers as
// child processes, in-process NATS): what each policy promises.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/messages"
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

// TestHedgedScansSkipPausedServer: one of three servers is paused 10 s of
// every 11 s (a long GC). clickhouse-random with hedging dispatches a
// second server after 50 ms, so no scan waits out the pause although the
// busy timeout (30 s) would let it.
func TestHedgedScansSkipPausedServer(t *testing.T) {
	profiles := `[{"isDefault":true,"policy":"clickhouse-random","hedge":true,"hedgedConnectionTimeout":"50ms",
	  "attemptPlans":[{"servers":"100%","busyTimeout":"30s"}]}]`
	tc := startCluster(t, clusterOpts{hosts: 3, servers: 1, rows: 4000, tablets: 4, profiles: profiles,
		hostArgs: func(i int) []string {
			if i == 0 {
				return []string{"--fault-pause", "10s/11s"}
			}
			return nil
		}})
	c := tc.client(nil)
	paused := tc.cl.Host(0).Ready.Servers[0]
	for i := 0; i < 30; i++ {
		a := (i * 131) % 3900
		start := time.Now()
		tc.check(c, a, a+50, client.ScanOptions{})
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("scan %d took %v: it waited for the paused server", i, d)
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

// TestQueueAwarePoliciesMoveAwayAndBack: when the home server's queue
// grows, bookkeeper and adaptive send the tablet's scans elsewhere; when it
// drains they come back home (cache affinity).
func TestQueueAwarePoliciesMoveAwayAndBack(t *testing.T) {
	for _, policy := range []struct{ name, json string }{
		{"bookkeeper", `"policy":"bookkeeper","reorderThresholdPendingRequests":5,"speculativeReadTimeout":"0"`},
		{"adaptive", `"policy":"adaptive"`},
	} {
		t.Run(policy.name, func(t *testing.T) {
			profiles := fmt.Sprintf(`[{"isDefault":true,%s,"attemptPlans":[{"servers":"1","busyTimeout":"10s"},{"servers":"100%%","busyTimeout":"10s"}]}]`, policy.json)
			tc := startCluster(t, clusterOpts{hosts: 2, servers: 1, rows: 2000, tablets: 1, profiles: profiles,
				hostArgs: func(int) []string { return []string{"--workers", "2", "--queue", "64"} }})
			c := tc.client(nil)
			ctx := context.Background()
			route, err := c.Route(ctx, &messages.RouteRequest{Table: "t", Row: tc.truth[0].Key})
			if err != nil {
				t.Fatal(err)
			}
			home := route.Choice
			homeHost := 0
			if tc.cl.Host(1).Ready.Servers[0] == home {
				homeHost = 1
			}
			scan := func(n int) uint64 {
				before := serverStatus(tc, home).Dispatched
				for i := 0; i < n; i++ {
					tc.check(c, i*10, i*10+20, client.ScanOptions{})
				}
				return serverStatus(tc, home).Dispatched - before
			}
			if got := scan(5); got < 4 {
				t.Fatalf("idle cluster: only %d of 5 scans went to the home server %s", got, home)
			}
			// Make the home server's queue long: 2 running scans that
			// stall on flow control and 12 queued behind them.
			p := newProbe(t)
			for i := 0; i < 14; i++ {
				p.startScan(tc, serverPID(tc, homeHost, 0), fmt.Sprintf("hold-%d", i), 10*time.Minute, 1)
			}
			waitFor(t, "a long queue visible to the coordinator", 10*time.Second, func() bool { return serverStatus(tc, home).QueueLen >= 12 })
			if got := scan(10); got != 0 {
				t.Fatalf("%d of 10 scans still went to the overloaded home server", got)
			}
			for i := 0; i < 14; i++ {
				p.root.Send(serverPID(tc, homeHost, 0), &messages.Cancel{RequestId: fmt.Sprintf("hold-%d", i)})
			}
			waitFor(t, "the queue drained", 10*time.Second, func() bool {
				s := serverStatus(tc, home)
				h := tc.heartbeat(home)
				return s.QueueLen == 0 && h != nil && h.Active == 0 && h.QueueLen == 0
			})
			if got := scan(10); got < 8 {
				t.Fatalf("after draining only %d of 10 scans came back home", got)
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
		r, err := c.Route(ctx, &messages.RouteRequest{Table: "t", Row: tc.truth[0].Key})
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
	r, err := c.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Ok || !strings.Contains(r.Message, "nope") {
		t.Fatalf("bad reload accepted: %+v", r)
	}
	if p := policy(); p != "accumulo-host" {
		t.Fatalf("after a refused reload the policy is %q", p)
	}
	tc.check(c, 0, 100, client.ScanOptions{})
	// A good file through scanctl's path.
	if err := os.WriteFile(path, []byte(`[{"isDefault":true,"policy":"adaptive"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Reload(ctx); err != nil || !r.Ok {
		t.Fatalf("reload: %+v %v", r, err)
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
