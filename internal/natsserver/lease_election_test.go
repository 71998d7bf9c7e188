package natsserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
)

// leaseView records every set of lease ids a watch delivered.
type leaseView struct {
	mu    sync.Mutex
	views [][]string
}

func (v *leaseView) fn(live []*messages.ClusterInfo) {
	ids := make([]string, 0, len(live))
	for _, ci := range live {
		ids = append(ids, ci.GetMemberId())
	}
	v.mu.Lock()
	v.views = append(v.views, ids)
	v.mu.Unlock()
}

func (v *leaseView) last() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.views) == 0 {
		return nil
	}
	return v.views[len(v.views)-1]
}

// without returns the first delivered view after the first n that lacks id.
func (v *leaseView) without(id string, n int) ([]string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, ids := range v.views[n:] {
		if !slices.Contains(ids, id) {
			return ids, true
		}
	}
	return nil, false
}

func (v *leaseView) count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.views)
}

// nodeEnv names the environment variable that makes this test binary run
// one NATS node (its ServerConfig as JSON) instead of the tests: a node in
// a process of its own can be killed or stopped as a machine can.
const nodeEnv = "SCANPLANE_TEST_NATS_NODE"

// runNode starts the node spec describes, says "ready" on stdout and runs
// until the process is killed.
func runNode(spec string) {
	var cfg natsserver.ServerConfig
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "node spec:", err)
		os.Exit(2)
	}
	srv, err := natsserver.StartServer(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start node:", err)
		os.Exit(1)
	}
	defer srv.Close()
	fmt.Println("ready", srv.ClientURL())
	select {}
}

// procNode is a NATS node in a child process.
type procNode struct {
	cmd *exec.Cmd
	url string
}

// startProcCluster starts n nodes routed to each other, each in a child
// process, and returns once every one listens.
func startProcCluster(t *testing.T, n int) ([]*procNode, []natsserver.ServerConfig) {
	t.Helper()
	return startProcClusterWith(t, n, nil)
}

// startProcClusterWith is startProcCluster with each node's
// configuration changed by mod (nil: none) before it starts.
func startProcClusterWith(t *testing.T, n int, mod func(*natsserver.ServerConfig)) ([]*procNode, []natsserver.ServerConfig) {
	t.Helper()
	skipLongClusterTest(t)
	routes := freeAddrs(t, n)
	var cfgs []natsserver.ServerConfig
	var nodes []*procNode
	for i := range n {
		cfg := natsserver.DefaultServerConfig()
		cfg.Port, cfg.StoreDir = -1, t.TempDir()
		cfg.Name = fmt.Sprintf("n%d", i+1)
		cfg.ClusterListen = routes[i]
		for _, a := range routes {
			cfg.Routes = append(cfg.Routes, "nats-route://"+a)
		}
		if mod != nil {
			mod(&cfg)
		}
		cfgs = append(cfgs, cfg)
		nodes = append(nodes, startProcNode(t, cfg))
	}
	return nodes, cfgs
}

// startProcNode starts the node cfg describes in a child process (again,
// after it was killed: same name, store and route address, another
// client port) and returns once it listens. The test's cleanup kills it.
func startProcNode(t *testing.T, cfg natsserver.ServerConfig) *procNode {
	t.Helper()
	spec, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), nodeEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if url, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				ready <- url
			}
		}
	}()
	node := &procNode{cmd: cmd}
	select {
	case node.url = <-ready:
	case <-time.After(30 * time.Second):
		t.Fatalf("node %s did not start within 30s", cfg.Name)
	}
	return node
}

// procDial connects to the given client URLs with replicas 3.
func procDial(t *testing.T, urls ...string) *bus.Conn {
	t.Helper()
	return procDialWith(t, nil, urls...)
}

// TestLeaseSurvivesBucketLeaderLoss: three nodes, the lease bucket at
// replicas 3, and on each node a coordinator's part of it: a lease it
// renews and a watch of everyone's. The node leading the lease bucket's
// stream fails with its coordinator:
//
//   - kill: the machine is lost (the node SIGKILLed, its holder gone
//     without a word);
//   - pause: the node is stopped for 8 s and resumed, its holder gone; a
//     client watches the leases through that node.
//
// Until the two survivors elect a new leader — JetStream's election
// timeout is 4–9 s, longer than the 3 s lease TTL — nobody can renew: an
// outage of the store, not of the holders. Neither survivor reports its
// lease lapsed, no watch of a survivor or a client ever drops a
// survivor's lease, and the failed coordinator's lease leaves every
// watch.
func TestLeaseSurvivesBucketLeaderLoss(t *testing.T) {
	t.Parallel()
	t.Run("kill", func(t *testing.T) { t.Parallel(); leaseLeaderLoss(t, false) })
	t.Run("pause", func(t *testing.T) { t.Parallel(); leaseLeaderLoss(t, true) })
}

func leaseLeaderLoss(t *testing.T, pause bool) {
	nodes, cfgs := startProcCluster(t, 3)
	ctx := ctxFor(t, 3*time.Minute)
	cfg := bus.DefaultLeaseConfig()
	conns := make([]*bus.Conn, 3)
	leases := make([]*bus.Lease, 3)
	stores := make([]*bus.LeaseStore, 3)
	views := make([]*leaseView, 4)
	for i := range 3 {
		conns[i] = procDial(t, nodes[i].url)
		var store *bus.LeaseStore
		if _, err := retry(60*time.Second, func(ctx context.Context) (err error) {
			store, err = conns[i].Leases(ctx, cfg)
			return err
		}); err != nil {
			t.Fatalf("lease bucket on node %d: %v", i, err)
		}
		stores[i] = store
		views[i] = &leaseView{}
		if err := store.Watch(ctx, views[i].fn); err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("member-%d", i)
		var err error
		leases[i], err = store.Announce(ctx, &messages.ClusterInfo{MemberId: id,
			CoordinatorAddress: fmt.Sprintf("127.0.0.1:%d", 1001+i), RouterId: "router", Incarnation: "inc-" + id})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range leases {
		t.Cleanup(func() { _ = l.Close() })
	}
	info, err := kvStreamInfo(ctx, conns[0], cfg.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	lost := slices.IndexFunc(cfgs, func(c natsserver.ServerConfig) bool { return c.Name == info.Cluster.Leader })
	if lost < 0 {
		t.Fatalf("lease bucket leader %q is none of the nodes", info.Cluster.Leader)
	}
	var survivors []int
	for i := range 3 {
		if i != lost {
			survivors = append(survivors, i)
		}
	}
	clientURLs := []string{nodes[survivors[0]].url, nodes[survivors[1]].url}
	if pause {
		clientURLs = []string{nodes[lost].url}
	}
	client := procDial(t, clientURLs...)
	cstore, err := client.Leases(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	views[3] = &leaseView{}
	if err := cstore.Watch(ctx, views[3].fn); err != nil {
		t.Fatal(err)
	}
	all := []string{"member-0", "member-1", "member-2"}
	watchers := append(slices.Clone(survivors), 3)
	for _, i := range watchers {
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("watch %d sees every lease", i), func() bool {
			return slices.Equal(views[i].last(), all)
		})
	}
	seen := make([]int, 4)
	for i, v := range views {
		seen[i] = v.count()
	}

	stopped := time.Now()
	proc := nodes[lost].cmd.Process
	sig := syscall.SIGKILL
	if pause {
		sig = syscall.SIGSTOP
	}
	if err := proc.Signal(sig); err != nil {
		t.Fatal(err)
	}
	conns[lost].Close()
	if pause {
		testutil.Eventually(t, 60*time.Second, "the survivors renew without the paused node", func() bool {
			return time.Since(stopped) > 8*time.Second && leases[survivors[0]].Unrenewed() < cfg.Renew
		})
		if err := proc.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range survivors {
		testutil.Eventually(t, 60*time.Second, fmt.Sprintf("member-%d renews again", i), func() bool {
			return time.Since(stopped) > cfg.TTL && leases[i].Unrenewed() < cfg.Renew
		})
	}
	t.Logf("renewal failures %d and %d; survivors renew again %v after the leader failed",
		leases[survivors[0]].Failures(), leases[survivors[1]].Failures(), time.Since(stopped).Round(time.Millisecond))
	gone := fmt.Sprintf("member-%d", lost)
	for _, i := range watchers {
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("watch %d drops the failed coordinator's lease", i), func() bool {
			return !slices.Contains(views[i].last(), gone)
		})
		t.Logf("watch %d dropped the failed coordinator's lease %v after it failed", i, time.Since(stopped).Round(time.Millisecond))
	}
	t.Logf("every watch dropped the failed coordinator's lease %v after it failed", time.Since(stopped).Round(time.Millisecond))
	// A coordinator that joins now reaches every watch, also one whose
	// watcher's consumer lived on the failed node.
	joined := time.Now()
	newcomer, err := stores[survivors[0]].Announce(ctx, &messages.ClusterInfo{MemberId: "member-new",
		CoordinatorAddress: "127.0.0.1:1009", RouterId: "router", Incarnation: "inc-new"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = newcomer.Close() })
	for _, i := range watchers {
		testutil.Eventually(t, 60*time.Second, fmt.Sprintf("watch %d sees a new lease", i), func() bool {
			return slices.Contains(views[i].last(), "member-new")
		})
	}
	t.Logf("a lease announced after the fault reached every watch in %v; renewals found before their watch delivered them: %d, %d, client %d",
		time.Since(joined).Round(time.Millisecond), stores[survivors[0]].WatchLagged(), stores[survivors[1]].WatchLagged(), cstore.WatchLagged())
	for _, i := range survivors {
		select {
		case <-leases[i].Lapsed():
			t.Errorf("member-%d reported its lease lapsed: the store was out for everyone (renewal failures %d)", i, leases[i].Failures())
		default:
		}
		for _, w := range watchers {
			if ids, dropped := views[w].without(fmt.Sprintf("member-%d", i), seen[w]); dropped {
				t.Errorf("watch %d dropped surviving member-%d: delivered %v", w, i, ids)
			}
		}
	}
}
