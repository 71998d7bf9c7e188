package natsserver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil"
)

// TestQuorumLostFollowsRoutes: a node of a three-node cluster reports a
// lost quorum once two nodes are down, naming the count, and a quorum
// again once one of them is back, without waiting for JetStream.
func TestQuorumLostFollowsRoutes(t *testing.T) {
	tc := startCluster(t, 3)
	eventually := func(what string, cond func() bool) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, what, cond)
	}
	n := tc.nodes[0]
	// The routes of a cluster just started form within moments; until
	// JetStream's meta group knows every node, its size is smaller.
	eventually("routes to all 3 nodes", func() bool { up, size := n.ClusterNodes(); return up == 3 && size == 3 })
	if lost, _, why := n.QuorumLost(); lost {
		t.Fatalf("quorum lost with every node up: %s", why)
	}
	tc.stop(1)
	tc.stop(2)
	stopped := time.Now()
	eventually("lost", func() bool { lost, _, _ := n.QuorumLost(); return lost })
	_, since, why := n.QuorumLost()
	t.Logf("%v after two nodes stopped: %s (since %v)", time.Since(stopped).Round(time.Millisecond), why, since.Sub(stopped).Round(time.Millisecond))
	if want := "reaches 1 of the 3 nodes"; !strings.Contains(why, want) {
		t.Errorf("why %q, want %q in it", why, want)
	}
	tc.start(1)
	back := time.Now()
	eventually("back", func() bool { lost, _, _ := n.QuorumLost(); return !lost })
	t.Logf("quorum back %v after a node restarted", time.Since(back).Round(time.Millisecond))
}

// TestQuorumLostWhenPeersFallSilent: two peers of a three-node cluster
// that stop their beacons but keep their routes open (as paused
// processes do until the routes' pings give up) are unreachable within
// a few SilentAfter, and the lost quorum names them silent; the routes
// stay open.
func TestQuorumLostWhenPeersFallSilent(t *testing.T) {
	tc := startCluster(t, 3)
	n := tc.nodes[0]
	testutil.Eventually(t, 30*time.Second, "routes to all 3 nodes", func() bool { up, size := n.ClusterNodes(); return up == 3 && size == 3 })
	// A peer never heard from counts by its route: wait for both peers'
	// beacons before they stop.
	testutil.Eventually(t, 30*time.Second, "beacons of both peers", func() bool { return n.HeardPeers() == 2 })
	routes := n.NumRoutes()
	tc.nodes[1].SilenceBeacons()
	tc.nodes[2].SilenceBeacons()
	silenced := time.Now()
	testutil.Eventually(t, 30*time.Second, "lost", func() bool { lost, _, _ := n.QuorumLost(); return lost })
	_, _, why := n.QuorumLost()
	t.Logf("%v after two nodes fell silent: %s", time.Since(silenced).Round(time.Millisecond), why)
	for _, want := range []string{"reaches 1 of the 3 nodes", "2 with a route but silent"} {
		if !strings.Contains(why, want) {
			t.Errorf("why %q, want %q in it", why, want)
		}
	}
	if got := n.NumRoutes(); got < routes {
		t.Errorf("%d routes after the peers fell silent, want the %d open before", got, routes)
	}
}
