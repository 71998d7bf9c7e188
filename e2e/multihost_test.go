//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/messages"
)

// mhMachine is one "machine" of TestMultiHost: a network namespace with
// its own address, hostname and zone, running one coordinator (embedding
// one node of the three-node NATS cluster) and one scanserver.
type mhMachine struct {
	node                *mhNode
	zone                string
	data                string // the coordinator's --data (or the nats-server's files)
	coord, server, nats *mhProc
}

const (
	mhRows    = 20000
	mhTablets = 8
	// mhRecoverBound: after a whole machine (a coordinator, its NATS node
	// and a scanserver) drops off the network, a full scan started then
	// succeeds within this long, and no scan fails after it (the test logs
	// the time as "recovered"). Recovery waits for a connection to the
	// lost NATS node to be found stale by pings, then for the lost
	// coordinator's lease to expire (3 s); the bound leaves room for -race
	// on a loaded machine.
	mhRecoverBound = 30 * time.Second
)

// TestMultiHost deploys scanplane on three "machines" — network
// namespaces joined by a bridge in a namespace of its own, each with its
// own IP address (10.213.0.11-13), hostname (c1, c2, c3: a UTS namespace
// per process) and zone (us-east-1a/b/c) — exactly as deploy/README.md
// ("Three coordinators, each embedding a NATS node") tells an operator:
// on each machine a coordinator whose embedded NATS server is one node of
// a three-node cluster (JetStream replicas 3, the default there) and a
// scanserver with --host $(hostname -s) and --advertise $(hostname -f),
// everything on 0.0.0.0 with --insecure, names resolved through the
// machines' /etc/hosts, the shipped deploy/profiles.json. A fourth
// namespace on the bridge is the client's machine: `scanctl ingest`
// there loads a table, and the test binary re-executed there (the client
// agent) scans it. No process of the test listens or connects outside
// the namespaces.
//
// It checks: the buckets have 3 replicas; scans match the ground truth;
// every coordinator sees each server with its machine's hostname and
// zone; clickhouse-nearest_hostname ranks the servers of one machine (the
// coordinator's own) first, and ribbon-zone offers the servers of one
// zone. Then the machine of the client's coordinator is taken away — its
// link set down, then its processes SIGKILLed, while scans run — and:
// no scan returns a wrong row or loses data, a full scan succeeds again
// within mhRecoverBound, the survivors drop its servers, and routes avoid
// them. Finally the machine comes back (link up, the same commands and
// data directory) and rejoins: its coordinator's lease is back, every
// coordinator sees all six servers, both streams are current on all
// three nodes, and scans still match.
//
// Needs root and a working `ip netns` (CI has both); skipped otherwise.
func TestMultiHost(t *testing.T) { runMultiHost(t, false) }

// TestMultiHostNATSServer is TestMultiHost with the other recipe of
// deploy/README.md: on each machine (hostnames n1, n2, n3, the names
// nats-server.conf and the systemd units use) a separate `nats-server -c
// nats-server.conf` with NATS_SERVER_NAME set (the file copied unchanged
// but for its store_dir, since the test's machines share one disk; the
// nats-server built from this module's dependency), and the coordinator
// and scanserver started with the ExecStart lines of
// scanplane-coordinator.service and scanplane-scanserver.service (%H and
// %l the machine's hostname, the zone edited per machine, as an operator
// does).
func TestMultiHostNATSServer(t *testing.T) { runMultiHost(t, true) }

func runMultiHost(t *testing.T, natsServer bool) {
	if testing.Short() {
		t.Skip("end-to-end test with real processes")
	}
	if why := netnsUsable(); why != "" {
		t.Skip(t.Name() + " " + why)
	}
	tStart := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, err := localcluster.SourceRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins := clustertest.Binaries(t, ctx)
	scanctl := clustertest.BuildTool(t, ctx, "scanctl")
	natsBin := ""
	if natsServer {
		toolDir := t.TempDir()
		build := exec.CommandContext(ctx, "go", "build", "-o", toolDir+string(filepath.Separator), "github.com/nats-io/nats-server/v2")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build nats-server: %v\n%s", err, out)
		}
		natsBin = filepath.Join(toolDir, "nats-server")
	}
	profiles := mhProfiles(t, filepath.Join(root, "deploy", "profiles.json"))
	t.Logf("binaries built in %v", time.Since(tStart).Round(time.Millisecond))

	base := t.TempDir()
	logDir := filepath.Join(base, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-registered first: the processes (registered
	// later) stop before the namespaces go; the log tails come first.
	names := []string{"c1", "c2", "c3"}
	serversPerHost := 2
	if natsServer {
		names = []string{"n1", "n2", "n3"}
		serversPerHost = 4 // the unit's --servers
	}
	lab := newMHNet(t, append(slices.Clone(names), "client"), 11)
	t.Cleanup(func() { logTails(t, base) })
	var machines []*mhMachine
	zoneOf := map[string]string{}
	for i, nd := range lab.nodes[:3] {
		m := &mhMachine{node: nd, zone: "us-east-1" + string(rune('a'+i)), data: filepath.Join(base, nd.hostname)}
		machines = append(machines, m)
		zoneOf[nd.hostname] = m.zone
	}
	clientNode := lab.nodes[3]
	t.Logf("network: bridge namespace %s, machines %s", lab.bridge, strings.Join(func() (s []string) {
		for _, nd := range lab.nodes {
			s = append(s, fmt.Sprintf("%s=%s (ns %s)", nd.hostname, nd.ip, nd.ns))
		}
		return
	}(), ", "))

	natsURLs := "nats://" + names[0] + ":4222,nats://" + names[1] + ":4222,nats://" + names[2] + ":4222"
	routes := "nats-route://c1:6222,nats-route://c2:6222,nats-route://c3:6222"
	var coordUnit, serverUnit string
	if natsServer {
		coordUnit = execStart(t, filepath.Join(root, "deploy", "scanplane-coordinator.service"))
		serverUnit = execStart(t, filepath.Join(root, "deploy", "scanplane-scanserver.service"))
	}
	// unit turns a unit's ExecStart into machine m's command: the
	// binaries and profiles where the test has them, %H and %l the
	// machine's hostname, the zone the machine's.
	unit := func(m *mhMachine, cmd string) string {
		r := strings.NewReplacer("/usr/local/bin/", bins+"/", "/etc/scanplane/profiles.json", profiles,
			"%H", m.node.hostname, "%l", m.node.hostname, "--zone default", "--zone "+m.zone)
		return r.Replace(cmd)
	}
	natsConf, err := os.ReadFile(filepath.Join(root, "deploy", "nats-server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	startNATS := func(m *mhMachine) {
		const store = "store_dir: /var/lib/scanplane/nats"
		if !strings.Contains(string(natsConf), store) {
			t.Fatalf("deploy/nats-server.conf has no %q", store)
		}
		conf := filepath.Join(m.data, "nats-server.conf")
		if err := os.MkdirAll(m.data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(conf, []byte(strings.Replace(string(natsConf), store, "store_dir: "+filepath.Join(m.data, "nats"), 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		m.nats = startIn(t, m.node, logDir, m.node.hostname+"-nats-server", "NATS_SERVER_NAME="+m.node.hostname+" exec "+shq(natsBin)+" -c "+shq(conf))
	}
	coordReady := func(m *mhMachine) string { return filepath.Join(logDir, m.node.hostname+"-coordinator.ready.json") }
	serverReady := func(m *mhMachine) string { return filepath.Join(logDir, m.node.hostname+"-scanserver.ready.json") }
	// The commands of deploy/README.md, with the test's paths and a
	// ready file (the test waits for it) and --die-with-parent (nothing
	// outlives the test).
	startCoordinator := func(m *mhMachine) {
		_ = os.Remove(coordReady(m))
		h := m.node.hostname
		if natsServer {
			m.coord = startIn(t, m.node, logDir, h+"-coordinator", "exec "+unit(m, coordUnit)+
				" --log-level info --ready-file "+shq(coordReady(m))+" --die-with-parent")
			return
		}
		m.coord = startIn(t, m.node, logDir, h+"-coordinator", "exec "+shq(filepath.Join(bins, "coordinator"))+
			" --nats-listen 0.0.0.0:4222 --nats-cluster 0.0.0.0:6222 --nats-name "+h+
			" --nats-routes "+routes+
			" --data "+shq(m.data)+" --listen 0.0.0.0:8090 --advertise "+h+":8090 --http 0.0.0.0:8091"+
			" --profiles "+shq(profiles)+" --insecure"+
			" --log-level info --ready-file "+shq(coordReady(m))+" --die-with-parent")
	}
	// waitCoordinator waits for m's coordinator to be ready, starting it
	// again when it exits first, up to 5 times, as the systemd unit's
	// Restart=on-failure would: while a new cluster forms, a coordinator
	// may exit on a JetStream error (such as "bind stream of bucket
	// scanplane-meta: stream not found" just after creating it).
	waitCoordinator := func(m *mhMachine) {
		t.Helper()
		for try := 1; ; try++ {
			err := waitFile(m.coord, coordReady(m), 100*time.Second)
			if err == nil {
				return
			}
			if m.coord.alive() || try == 5 {
				t.Fatal(err)
			}
			t.Logf("%v; starting it again (try %d)", err, try+1)
			startCoordinator(m)
		}
	}
	startScanserver := func(m *mhMachine) {
		_ = os.Remove(serverReady(m))
		if natsServer {
			m.server = startIn(t, m.node, logDir, m.node.hostname+"-scanserver", "exec "+unit(m, serverUnit)+
				" --log-level info --ready-file "+shq(serverReady(m))+" --die-with-parent")
			return
		}
		m.server = startIn(t, m.node, logDir, m.node.hostname+"-scanserver", "exec "+shq(filepath.Join(bins, "scanserver"))+
			" --nats "+natsURLs+" --host $(hostname -s) --zone "+m.zone+
			fmt.Sprintf(" --servers %d", serversPerHost)+" --listen 0.0.0.0:8100 --advertise $(hostname -f):8100 --cache-size 64MiB --insecure"+
			" --log-level info --ready-file "+shq(serverReady(m))+" --die-with-parent")
	}

	ag := startAgent(t, clientNode, logDir)
	// Start all three NATS nodes or coordinators together
	// (deploy/README.md: a new cluster elects its first JetStream leader
	// once every node is up).
	t0 := time.Now()
	if natsServer {
		for _, m := range machines {
			startNATS(m)
		}
		if r := ag.do(mhReq{Op: "jsReady", NATS: natsURLs, TimeoutMs: 60000}, 70*time.Second); r.Err != "" {
			t.Fatalf("NATS cluster: %s", r.Err)
		}
		t.Logf("3 nats-server nodes: JetStream answering on each in %v", time.Since(t0).Round(time.Millisecond))
		t0 = time.Now()
	}
	for _, m := range machines {
		startCoordinator(m)
	}
	for _, m := range machines {
		waitCoordinator(m)
	}
	t.Logf("3 coordinators (NATS cluster formed, JetStream answering) ready in %v", time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	for _, m := range machines {
		startScanserver(m)
	}
	for _, m := range machines {
		if err := waitFile(m.server, serverReady(m), 60*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	httpOf := func(ms ...*mhMachine) (hs []string) {
		for _, m := range ms {
			hs = append(hs, m.node.hostname+":8091")
		}
		return hs
	}
	all := 3 * serversPerHost
	if r := ag.do(mhReq{Op: "waitServers", HTTP: httpOf(machines...), N: all, TimeoutMs: 60000}, 70*time.Second); r.Err != "" {
		t.Fatal(r.Err)
	}
	t.Logf("3 scanservers ready and seen alive by every coordinator in %v", time.Since(t0).Round(time.Millisecond))

	// Ingest from the client machine with scanctl, as deploy/README.md does.
	t0 = time.Now()
	ictx, icancel := context.WithTimeout(ctx, 60*time.Second)
	out, err := exec.CommandContext(ictx, "ip", "netns", "exec", clientNode.ns, scanctl, "ingest", "--nats", "nats://"+names[0]+":4222",
		"--table", table, "--splits", fmt.Sprint(mhTablets), "--generate", fmt.Sprint(mhRows)).CombinedOutput()
	icancel()
	if err != nil {
		t.Fatalf("scanctl ingest: %v: %s", err, out)
	}
	t.Logf("scanctl ingest (%v): %s", time.Since(t0).Round(time.Millisecond), strings.TrimSpace(string(out)))
	if r := ag.do(mhReq{Op: "connect", NATS: natsURLs, Listen: clientNode.ip + ":0", Rows: mhRows, TimeoutMs: 30000}, 40*time.Second); r.Err != "" {
		t.Fatalf("client: %s", r.Err)
	}
	waitStreamsCurrent(t, ag, natsURLs, 30*time.Second)

	// Verified scans.
	t0 = time.Now()
	mustScan(t, ag, 0, mhRows, "full scan")
	if r := ag.do(mhReq{Op: "run", N: 60, Seed: 1, TimeoutMs: 60000}, 70*time.Second); r.Wrong != "" || len(r.Errs) > 0 || r.Err != "" {
		t.Fatalf("60 random scans: wrong %q, errors %q %s", r.Wrong, r.Errs, r.Err)
	}
	t.Logf("1 full and 60 random scans, all rows right, in %v", time.Since(t0).Round(time.Millisecond))

	// Every coordinator sees every server with its machine's host name
	// (the scanserver's --host $(hostname -s)) and zone.
	sts := statuses(t, ag, httpOf(machines...))
	for i, st := range sts {
		perHost := map[string]int{}
		for _, s := range st.Servers {
			if want, ok := zoneOf[s.Host]; !ok || s.Zone != want || !s.Alive {
				t.Fatalf("coordinator %s sees server %s on host %q zone %q alive=%v; want hosts %v with zones %v, alive", names[i], s.Id, s.Host, s.Zone, s.Alive, names, zoneOf)
			}
			perHost[s.Host]++
		}
		if len(perHost) != 3 || perHost[names[0]] != serversPerHost || perHost[names[1]] != serversPerHost {
			t.Fatalf("coordinator %s sees servers per host %v", names[i], perHost)
		}
	}
	hostOf, zoneOfServer := map[string]string{}, map[string]string{}
	for _, s := range sts[0].Servers {
		hostOf[s.Id], zoneOfServer[s.Id] = s.Host, s.Zone
	}
	checkRoutes(t, ag, hostOf, zoneOfServer, "")

	// Take a whole machine away: the one whose coordinator the client
	// uses. The link goes down first, so nothing it had open learns of
	// its end (no FIN, no RST: as a machine that loses power), then its
	// processes are killed.
	r := ag.do(mhReq{Op: "coordinator"}, 10*time.Second)
	victim := machines[1]
	for _, m := range machines {
		if len(r.Strs) > 0 && strings.HasPrefix(r.Strs[0], m.node.hostname+":") {
			victim = m
		}
	}
	var survivors []*mhMachine
	for _, m := range machines {
		if m != victim {
			survivors = append(survivors, m)
		}
	}
	t.Logf("the client's coordinator is %q (of %q); taking machine %s away", r.Strs[0], r.Strs[1:], victim.node.hostname)
	if r := ag.do(mhReq{Op: "loadStart", Workers: 3, Seed: 7}, 10*time.Second); r.Err != "" {
		t.Fatal(r.Err)
	}
	mustScan(t, ag, 0, mhRows, "full scan under load")
	tLoss := time.Now()
	lab.setLink(victim.node, false)
	victim.coord.kill()
	victim.server.kill()
	if victim.nats != nil {
		victim.nats.kill()
	}
	// The first full scan that succeeds after the loss (each try bounded).
	var tries []string
	for {
		r := ag.do(mhReq{Op: "scan", A: 0, B: mhRows, TimeoutMs: 20000}, 30*time.Second)
		if r.Wrong != "" {
			t.Fatalf("full scan after the loss of %s: WRONG: %s", victim.node.hostname, r.Wrong)
		}
		if r.Err == "" {
			break
		}
		tries = append(tries, fmt.Sprintf("+%v: %s", time.Since(tLoss).Round(time.Millisecond), r.Err))
		if time.Since(tLoss) > mhRecoverBound {
			t.Fatalf("no full scan succeeded within %v of the loss of %s:\n%s", mhRecoverBound, victim.node.hostname, strings.Join(tries, "\n"))
		}
	}
	recovered := time.Since(tLoss)
	t.Logf("recovered: a full scan succeeded %v after machine %s went away (%d failed tries before)", recovered.Round(time.Millisecond), victim.node.hostname, len(tries))
	for _, s := range tries {
		t.Logf("  failed try %s", s)
	}
	if recovered > mhRecoverBound {
		t.Fatalf("the first full scan after the loss succeeded after %v, want within %v", recovered, mhRecoverBound)
	}
	if r := ag.do(mhReq{Op: "waitServers", HTTP: httpOf(survivors...), N: all - serversPerHost, TimeoutMs: 30000}, 40*time.Second); r.Err != "" {
		t.Fatalf("survivors do not drop %s's servers: %s", victim.node.hostname, r.Err)
	}
	t.Logf("both surviving coordinators see only the %d surviving servers %v after the loss", all-serversPerHost, time.Since(tLoss).Round(time.Millisecond))
	if r := ag.do(mhReq{Op: "run", N: 60, Seed: 2, TimeoutMs: 60000}, 70*time.Second); r.Wrong != "" || len(r.Errs) > 0 || r.Err != "" {
		t.Fatalf("60 random scans after the loss: wrong %q, errors %q %s", r.Wrong, r.Errs, r.Err)
	}
	mustScan(t, ag, 0, mhRows, "full scan after the loss")
	lr := ag.do(mhReq{Op: "loadStop"}, 40*time.Second)
	if lr.Err != "" || lr.Load == nil {
		t.Fatalf("load: %s", lr.Err)
	}
	l := lr.Load
	window := "none failed"
	if l.Failed > 0 {
		window = fmt.Sprintf("failures ended at loss+%v", time.UnixMilli(l.LastFailMs).Sub(tLoss).Round(time.Millisecond))
	}
	t.Logf("background load across the loss: %d scans right, %d failed (%s), %d wrong", l.OK, l.Failed, window, l.Wrong)
	for _, s := range l.Samples {
		t.Logf("  %s", s)
	}
	if l.Wrong > 0 {
		t.Fatalf("%d scans returned wrong rows across the loss of %s", l.Wrong, victim.node.hostname)
	}
	if l.Failed > 0 && time.UnixMilli(l.LastFailMs).Sub(tLoss) > mhRecoverBound {
		t.Fatalf("background scans still failed %v after the loss", time.UnixMilli(l.LastFailMs).Sub(tLoss))
	}
	// Both streams still have 3 replicas configured and a leader among
	// the survivors (a stream whose leader was on the lost machine
	// elects a new one; its info requests time out meanwhile).
	survivorURLs := "nats://" + survivors[0].node.hostname + ":4222,nats://" + survivors[1].node.hostname + ":4222"
	var streams mhResp
	if !testutil.Poll(30*time.Second, func() bool {
		streams = ag.do(mhReq{Op: "streams", NATS: survivorURLs, TimeoutMs: 5000}, 15*time.Second)
		return streams.Err == "" && streams.Ints["KV_scanplane-blocks"] == 3 && streams.Ints["KV_scanplane-meta"] == 3 && len(streams.Strs) == 2
	}) {
		t.Fatalf("streams after the loss: %v %q %s", streams.Ints, streams.Strs, streams.Err)
	}
	t.Logf("streams %v after the loss: %q", time.Since(tLoss).Round(time.Millisecond), streams.Strs)
	// Routes and status requests go to a coordinator the client takes as
	// up; a lost one is known as lost once its lease expires.
	waitLease(t, ag, victim.node.hostname+":8090", false, 20*time.Second)
	t.Logf("the lease of coordinator %s:8090 is gone %v after the loss", victim.node.hostname, time.Since(tLoss).Round(time.Millisecond))
	checkRoutes(t, ag, hostOf, zoneOfServer, victim.node.hostname)

	// Bring the machine back: link up, the same commands, the same data
	// directory.
	tBack := time.Now()
	lab.setLink(victim.node, true)
	if natsServer {
		startNATS(victim)
	}
	startCoordinator(victim)
	startScanserver(victim)
	waitCoordinator(victim)
	if err := waitFile(victim.server, serverReady(victim), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("machine %s back: coordinator and scanserver ready %v after link up", victim.node.hostname, time.Since(tBack).Round(time.Millisecond))
	if r := ag.do(mhReq{Op: "waitServers", HTTP: httpOf(machines...), N: all, TimeoutMs: 60000}, 70*time.Second); r.Err != "" {
		t.Fatalf("after %s came back: %s", victim.node.hostname, r.Err)
	}
	t.Logf("every coordinator (the returned one too) sees all %d servers %v after link up", all, time.Since(tBack).Round(time.Millisecond))
	waitLease(t, ag, victim.node.hostname+":8090", true, 40*time.Second)
	t.Logf("coordinator %s:8090 is a member again (lease) %v after link up", victim.node.hostname, time.Since(tBack).Round(time.Millisecond))
	waitStreamsCurrent(t, ag, natsURLs, 60*time.Second)
	t.Logf("both streams current on all 3 NATS nodes %v after link up", time.Since(tBack).Round(time.Millisecond))
	mustScan(t, ag, 0, mhRows, "full scan after the return")
	if r := ag.do(mhReq{Op: "run", N: 30, Seed: 3, TimeoutMs: 60000}, 70*time.Second); r.Wrong != "" || len(r.Errs) > 0 || r.Err != "" {
		t.Fatalf("30 random scans after the return: wrong %q, errors %q %s", r.Wrong, r.Errs, r.Err)
	}
	checkRoutes(t, ag, hostOf, zoneOfServer, "")
	t.Logf("%s total %v", t.Name(), time.Since(tStart).Round(time.Millisecond))
}

func mustScan(t *testing.T, ag *mhAgent, a, b int, what string) {
	t.Helper()
	r := ag.do(mhReq{Op: "scan", A: a, B: b, TimeoutMs: 30000}, 40*time.Second)
	if r.Wrong != "" {
		t.Fatalf("%s: WRONG: %s", what, r.Wrong)
	}
	if r.Err != "" {
		t.Fatalf("%s: %s", what, r.Err)
	}
}

func statuses(t *testing.T, ag *mhAgent, https []string) []*messages.StatusReply {
	t.Helper()
	r := ag.do(mhReq{Op: "status", HTTP: https, TimeoutMs: 10000}, 20*time.Second)
	if r.Err != "" {
		t.Fatal(r.Err)
	}
	var out []*messages.StatusReply
	for _, j := range r.JSON {
		var st messages.StatusReply
		if err := protojson.Unmarshal(j, &st); err != nil {
			t.Fatal(err)
		}
		out = append(out, &st)
	}
	return out
}

// checkRoutes asks the client's coordinator where a row of every tablet
// would be scanned, with clickhouse-nearest_hostname (scan_type=nearest)
// and ribbon-zone (scan_type=zone) of deploy/profiles.json:
//   - nearest_hostname ranks (explain) first the servers of the one host
//     whose name is nearest the tablet's coordinator's hostname — its own
//     machine, all of its servers, before any other, and chooses one of
//     them. With hostnames that were not the machines' (all equally far),
//     the ranking would mix hosts.
//   - ribbon-zone with zoneTriggerLoad 0 (scan_type=zonepick, a profile
//     the test adds to deploy/profiles.json: every request avoids one
//     zone and picks one of the others) offers the servers of exactly one
//     zone, every live one of it, and chooses one of them; with the
//     shipped profile (Ribbon's default trigger load 0.2) it offers
//     every live server, or one zone's under load.
//
// gone, if set, is a host that is down: no route may name its servers.
func checkRoutes(t *testing.T, ag *mhAgent, hostOf, zoneOf map[string]string, gone string) {
	t.Helper()
	perHost := map[string]int{}
	zoneSize := map[string]int{}
	live := 0
	for id, h := range hostOf {
		if h != gone {
			perHost[h]++
			zoneSize[zoneOf[id]]++
			live++
		}
	}
	nearestHosts, zones := map[string]int{}, map[string]int{}
	for k := range mhTablets {
		row := k*mhRows/mhTablets + 1
		var near, zone, zoneAll client.Route
		// Right after a machine's return, a coordinator's view may lack
		// the returned servers after its status listed them alive: a
		// connection attempt made while the machine was away ends after
		// its return and marks every server at that address dead until
		// their next heartbeat (the coordinator logs "servers marked
		// dead: endpoint terminated"). Ask again for a bounded time
		// while a route offers fewer than every live server.
		testutil.Poll(15*time.Second, func() bool {
			routeRow(t, ag, row, &near, &zone, &zoneAll, hostOf, gone)
			if len(near.Candidates) >= live {
				return true
			}
			t.Logf("route row %d: nearest_hostname offers %d of %d live servers (%q)", row, len(near.Candidates), live, near.Candidates)
			return false
		})
		if near.Policy != "clickhouse-nearest_hostname" || zone.Policy != "ribbon-zone" || zoneAll.Policy != "ribbon-zone" {
			t.Fatalf("routes used policies %q, %q and %q", near.Policy, zone.Policy, zoneAll.Policy)
		}
		// With Ribbon's default zoneTriggerLoad, every zone is kept (all
		// live servers offered) while no zone's load per server reaches
		// 0.2, else one zone is avoided and one of the others chosen:
		// either way the candidates are whole zones. (Seen once, right
		// after a machine's return: two of the three zones, the returned
		// machine's new servers not yet among ribbon-zone's candidates.)
		inZone := map[string]int{}
		for _, c := range zoneAll.Candidates {
			inZone[zoneOf[c]]++
		}
		for z, n := range inZone {
			if n != zoneSize[z] || !slices.Contains(zoneAll.Candidates, zoneAll.Choice) {
				t.Fatalf("ribbon-zone (default zoneTriggerLoad) row %d: candidates %q, choice %s: want whole zones (%v)", row, zoneAll.Candidates, zoneAll.Choice, zoneSize)
			}
		}
		h := hostOf[near.Choice]
		n := perHost[h]
		if len(near.Candidates) != live || len(near.Candidates) < n {
			t.Fatalf("nearest_hostname row %d: candidates %q", row, near.Candidates)
		}
		for i, c := range near.Candidates {
			if (i < n) != (hostOf[c] == h) {
				t.Fatalf("nearest_hostname row %d: candidates %q (hosts in order %v) do not rank host %s's %d servers first: the coordinator does not see its machine's hostname",
					row, near.Candidates, hostsOf(hostOf, near.Candidates), h, n)
			}
		}
		nearestHosts[h]++
		z := zoneOf[zone.Choice]
		if len(zone.Candidates) != zoneSize[z] || !slices.Contains(zone.Candidates, zone.Choice) {
			t.Fatalf("ribbon-zone row %d: candidates %q, choice %s: want the %d servers of zone %s", row, zone.Candidates, zone.Choice, zoneSize[z], z)
		}
		for _, c := range zone.Candidates {
			if zoneOf[c] != z {
				t.Fatalf("ribbon-zone row %d: candidates %q span zones", row, zone.Candidates)
			}
		}
		zones[z]++
	}
	t.Logf("routes of %d tablets: nearest_hostname chose hosts %v (each tablet's coordinator's own), ribbon-zone zones %v", mhTablets, nearestHosts, zones)
}

// routeRow asks the route of row for each scan type checkRoutes looks at
// and checks that none names a server not in hostOf or on host gone.
func routeRow(t *testing.T, ag *mhAgent, row int, near, zone, zoneAll *client.Route, hostOf map[string]string, gone string) {
	t.Helper()
	for _, q := range []struct {
		hint string
		into *client.Route
	}{{"nearest", near}, {"zonepick", zone}, {"zone", zoneAll}} {
		// A route request is answered by the tablet's owner: a
		// coordinator that forwards it to a lost owner gets no
		// answer until its member list drops the owner, which can
		// lag the lease by seconds (scans are re-sent by the client
		// and are not affected; docs/coordinators.md).
		// Retry that case for a bounded time.
		var r mhResp
		testutil.Poll(30*time.Second, func() bool {
			r = ag.do(mhReq{Op: "route", Row: row, Hint: q.hint, TimeoutMs: 10000}, 20*time.Second)
			if !strings.Contains(r.Err, "no coordinator") {
				return true
			}
			t.Logf("route row %d scan_type=%s: %s", row, q.hint, r.Err)
			return false
		})
		if r.Err != "" || len(r.JSON) != 1 {
			t.Fatalf("route row %d scan_type=%s: %s", row, q.hint, r.Err)
		}
		*q.into = client.Route{}
		if err := json.Unmarshal(r.JSON[0], q.into); err != nil {
			t.Fatal(err)
		}
		for _, c := range append(slices.Clone(q.into.Candidates), q.into.Choice) {
			if h, ok := hostOf[c]; !ok || h == gone {
				t.Fatalf("route row %d scan_type=%s names %s (host %q; down: %q): %v", row, q.hint, c, h, gone, q.into)
			}
		}
	}
}

// mhProfiles writes the shipped profiles file plus one profile of the
// test's: scan_type=zonepick, ribbon-zone with zoneTriggerLoad 0.
func mhProfiles(t *testing.T, shipped string) string {
	t.Helper()
	data, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	var list []json.RawMessage
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatalf("%s: %v", shipped, err)
	}
	list = append(list, json.RawMessage(`{"scanTypeActivations": ["zonepick"], "policy": "ribbon-zone", "zoneTriggerLoad": 0,
		"attemptPlans": [{"servers": "100%", "busyTimeout": "100ms"}]}`))
	data, err = json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "profiles.json")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// execStart returns a systemd unit's ExecStart command, its continuation
// lines joined.
func execStart(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cmd strings.Builder
	in := false
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if !in && !strings.HasPrefix(l, "ExecStart=") {
			continue
		}
		in = true
		l = strings.TrimPrefix(l, "ExecStart=")
		more := strings.HasSuffix(l, "\\")
		cmd.WriteString(strings.TrimSpace(strings.TrimSuffix(l, "\\")) + " ")
		if !more {
			return strings.TrimSpace(cmd.String())
		}
	}
	t.Fatalf("%s: no ExecStart", path)
	return ""
}

func hostsOf(hostOf map[string]string, ids []string) []string {
	var out []string
	for _, id := range ids {
		out = append(out, hostOf[id])
	}
	return out
}

// waitStreamsCurrent waits until both KV streams have 3 replicas, a
// leader and every replica current.
func waitStreamsCurrent(t *testing.T, ag *mhAgent, natsURLs string, timeout time.Duration) {
	t.Helper()
	var r mhResp
	if !testutil.Poll(timeout, func() bool {
		r = ag.do(mhReq{Op: "streams", NATS: natsURLs, TimeoutMs: 10000}, 20*time.Second)
		return r.Err == "" && r.Ints["KV_scanplane-blocks"] == 3 && r.Ints["KV_scanplane-meta"] == 3 &&
			r.Ints["KV_scanplane-blocks/current"] == 1 && r.Ints["KV_scanplane-meta/current"] == 1
	}) {
		t.Fatalf("streams not 3 current replicas within %v: %v %q %s", timeout, r.Ints, r.Strs, r.Err)
	}
	t.Logf("streams: %q", r.Strs)
}

// waitLease waits until a coordinator lease names addr (present) or none
// does (!present).
func waitLease(t *testing.T, ag *mhAgent, addr string, present bool, timeout time.Duration) {
	t.Helper()
	var got []string
	var r mhResp
	if !testutil.Poll(timeout, func() bool {
		r, got = ag.do(mhReq{Op: "leases", TimeoutMs: 10000}, 20*time.Second), nil
		for _, j := range r.JSON {
			var l client.CoordinatorLease
			if err := json.Unmarshal(j, &l); err == nil {
				got = append(got, l.Address)
			}
		}
		return r.Err == "" && slices.Contains(got, addr) == present
	}) {
		t.Fatalf("lease of %s present=%v not reached within %v (leases: %q %s)", addr, present, timeout, got, r.Err)
	}
}
