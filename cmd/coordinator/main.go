// Command coordinator runs scanplane's coordinator: an embedded NATS server
// with JetStream (unless --nats names an external cluster), the actor
// system with remote, the registry, host actors, the router and tablet
// actors, and an HTTP endpoint with /metrics, /status (JSON), / (the
// same status as an HTML page that reloads itself) and Go's profiles
// under /debug/pprof/ (go tool pprof; see docs/operations.md). With --secrets the
// HTTP endpoint is HTTPS and every path needs a client or admin
// certificate of the cluster CA or the bearer token (--http-token-file,
// default DIR/http.token); without it, it is plain HTTP on loopback.
//
// Exit status: 0 after a clean shutdown (SIGINT/SIGTERM), 1 on a runtime
// failure, 2 on bad flags or config. SIGHUP reloads --profiles.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/coordinator"
	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
)

func main() { os.Exit(run(os.Args[1:])) }

// about is what --help says the command does.
const about = "Run a scanplane coordinator: an embedded NATS server (unless --nats), the tablet actors, and /status and /metrics on --http."

type options struct {
	listen, advertise, natsURL, natsListen, data, httpAddr, profiles, readyFile, logLevel string
	secrets, httpTokenFile                                                                string
	natsCluster, natsRoutes, natsName, clusterProvider, clusterName                       string
	logFormat                                                                             string
	checkConfig, dieWithParent, insecure, showVersion                                     bool
	misses, replicas                                                                      int
	busySlack, startStall, leaseTTL                                                       time.Duration
}

// newFlagSet defines the coordinator's flags on o.
func newFlagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8090", "actor remote `ADDR` (host:port; port 0 = ephemeral)")
	fs.StringVar(&o.advertise, "advertise", "", "`ADDR` other processes use to reach this coordinator (default: the --listen address)")
	fs.StringVar(&o.natsURL, "nats", "", "external NATS `URLS`, comma separated; empty = run an embedded NATS server")
	fs.StringVar(&o.natsListen, "nats-listen", "127.0.0.1:4222", "embedded NATS server `ADDR` (host:port; port 0 = random)")
	fs.StringVar(&o.natsCluster, "nats-cluster", "", "route listener `ADDR` (host:port; port 0 = random) making the embedded NATS server one node of a cluster; empty = standalone")
	fs.StringVar(&o.natsRoutes, "nats-routes", "", "with --nats-cluster: nats-route://host:port `URLS` of the cluster's nodes, comma separated (every node, this one included, is usual)")
	fs.StringVar(&o.natsName, "nats-name", "", "embedded NATS server `NAME`, unique per node and stable across restarts (default with --nats-cluster: <hostname>-<nats port>)")
	fs.IntVar(&o.replicas, "replicas", 0, "JetStream replicas `N` of the buckets this coordinator creates, 1..5 (default: 3 with --nats-cluster and 2+ other nodes' routes, else 1)")
	fs.StringVar(&o.data, "data", "./data", "data `DIR` (embedded JetStream lives in DIR/nats)")
	fs.StringVar(&o.httpAddr, "http", "127.0.0.1:8091", "HTTP `ADDR` for /metrics, /status (JSON), the HTML status page / and /debug/pprof/; empty = off")
	fs.StringVar(&o.profiles, "profiles", "", "scan server selection profiles JSON `FILE` (Accumulo format + policy); empty = the built-in profiles")
	fs.BoolVar(&o.checkConfig, "check-config", false, "validate --profiles, print one line per profile, and exit")
	fs.StringVar(&o.readyFile, "ready-file", "", "write a JSON `FILE` with the listen addresses once ready")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "text", cliutil.LogFormatUsage)
	fs.IntVar(&o.misses, "heartbeat-misses", 3, "heartbeats a server may miss before it leaves the view")
	fs.DurationVar(&o.busySlack, "busy-slack", coordinator.DefaultFlowConfig().BusySlack, "network slack added to busy timeouts")
	fs.DurationVar(&o.startStall, "start-stall", coordinator.DefaultFlowConfig().StartStall, "a started scan without data for this long is retried elsewhere")
	fs.StringVar(&o.clusterProvider, "cluster-provider", "nats-kv", "coordinator membership `PROVIDER`: nats-kv (leases in NATS JetStream KV: several coordinators form a Proto.Actor cluster) or none (this coordinator alone serves every tablet)")
	fs.StringVar(&o.clusterName, "cluster-name", coordinator.DefaultClusterName, "Proto.Actor cluster `NAME`; coordinators with the same name share the tablets")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", bus.DefaultLeaseConfig().TTL, "a coordinator whose lease is not renewed for this long is taken as gone (renewed every third of it)")
	fs.BoolVar(&o.dieWithParent, "die-with-parent", false, "shut down when stdin closes (used by scanctl up)")
	fs.BoolVar(&o.insecure, "insecure", false, cliutil.InsecureUsage)
	fs.StringVar(&o.secrets, "secrets", "", cliutil.SecretsUsage)
	fs.StringVar(&o.httpTokenFile, "http-token-file", "", cliutil.HTTPTokenUsage)
	fs.BoolVar(&o.showVersion, "version", false, cliutil.VersionUsage)
	return fs
}

// member is one start of the coordinator: the coordinator and how it
// announces itself (a cluster member's provider, or a plain lease).
type member struct {
	co  *coordinator.Coordinator
	lp  *coordinator.LeaseProvider
	ann *announcement
}

// status is the coordinator's status with its member id and the live
// coordinator leases.
func (m *member) status() *messages.StatusReply {
	st := m.co.Status()
	switch {
	case m.lp != nil:
		st.MemberId, st.Coordinators = m.co.MemberID(), m.lp.Live()
	case m.ann != nil:
		st = m.ann.status(st)
	}
	return st
}

// live is the live coordinators as this member's lease watch sees them.
func (m *member) live() []*messages.ClusterInfo {
	switch {
	case m == nil:
		return nil
	case m.lp != nil:
		return m.lp.Live()
	case m.ann != nil:
		return m.ann.status(&messages.StatusReply{}).GetCoordinators()
	}
	return nil
}

// peerWait bounds each peer's answer when /status gathers the cluster.
const peerWait = time.Second

// clusterStatus is status with every other live coordinator's counters
// (StatusReply.peers), for /status and the status page.
func (m *member) clusterStatus() *messages.StatusReply {
	st := m.status()
	var addrs []string
	for _, ci := range st.GetCoordinators() {
		addrs = append(addrs, ci.GetCoordinatorAddress())
	}
	st.Peers = m.co.PeerStatuses(addrs, peerWait)
	return st
}

// close withdraws the lease first (clients move on at once), then stops
// the coordinator (a cluster member withdraws as it stops).
func (m *member) close(log *slog.Logger) {
	if m == nil {
		return
	}
	if m.ann != nil {
		if err := m.ann.Close(); err != nil {
			log.Warn("withdrawing the coordinator lease failed; it expires by itself", "err", err)
		}
	}
	m.co.Close()
}

// checkListens applies cliutil.CheckListen to every address this
// coordinator listens on: the actor remote, the HTTP endpoint and, when
// it embeds NATS, the NATS client and route ports (all secured by
// --secrets).
func checkListens(o options, log *slog.Logger) error {
	secured := cliutil.SecretsDir(o.secrets) != ""
	listens := []cliutil.Listen{{Flag: "listen", Addr: o.listen, Secured: secured, SecureWith: "--secrets DIR"},
		{Flag: "http", Addr: o.httpAddr, Secured: secured, SecureWith: "--secrets DIR"}}
	if o.natsURL == "" {
		// --secrets: the embedded NATS server's client and route ports
		// are TLS with client certificates (natsserver.ServerConfig.TLS, Users).
		listens = append(listens, cliutil.Listen{Flag: "nats-listen", Addr: o.natsListen, Secured: secured, SecureWith: "--secrets DIR"},
			cliutil.Listen{Flag: "nats-cluster", Addr: o.natsCluster, Secured: secured, SecureWith: "--secrets DIR"})
	}
	return cliutil.CheckListens(log, o.insecure, cliutil.SystemLookupIP, listens...)
}

// countNATSErrors counts nc's asynchronous errors and disconnects (with
// an error) under op async and disconnect, keeping the handlers bus set
// (they log).
func countNATSErrors(nc *nats.Conn, count func(op string)) {
	asyncCB, discCB := nc.ErrorHandler(), nc.DisconnectErrHandler()
	nc.SetErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
		count(coordinator.NATSOpAsync)
		if asyncCB != nil {
			asyncCB(c, sub, err)
		}
	})
	nc.SetDisconnectErrHandler(func(c *nats.Conn, err error) {
		if err != nil {
			count(coordinator.NATSOpDisconnect)
		}
		if discCB != nil {
			discCB(c, err)
		}
	})
}

func orNone(s string) string {
	if s == "" {
		return "off"
	}
	return s
}

// warnProfiles logs what the profiles parser accepted but warned about
// (unknown fields, repeated keys), as Accumulo's lenient parser would
// silently accept them.
func warnProfiles(log *slog.Logger, path string, p *selection.Profiles) {
	for _, w := range p.Warnings() {
		log.Warn("profiles: "+w, "file", path)
	}
}

func loadProfiles(path string) (*selection.Profiles, error) {
	if path == "" {
		return selection.DefaultProfiles(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--profiles: %w", err)
	}
	p, err := selection.ParseProfiles(data)
	if err != nil {
		return nil, fmt.Errorf("--profiles %s: %w", path, err)
	}
	return p, nil
}

func splitHostPort(s string) (string, int, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	var port int
	if _, err := fmt.Sscanf(p, "%d", &port); err != nil || port < 0 || port > 65535 {
		return "", 0, errors.New("bad port " + p)
	}
	return h, port, nil
}
