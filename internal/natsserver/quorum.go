package natsserver

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/scanplane/scanplane/bus"
)

// A node of a NATS cluster knows before JetStream does that the cluster
// lost its quorum, while a JetStream request waits for its timeout and a
// lease goes unrenewed for as long as one chooses to wait. The embedded
// server watches its peers (quorumWatch) so that its holder can name a
// lost quorum early, and stop naming it as soon as the nodes are back.
//
// A peer counts as reachable while this node has a route to it and the
// peer's beacons keep arriving. Every clustered embedded server publishes
// a beacon (its server ID) every beaconEvery on beaconSubject through an
// in-process connection, and listens to the others'. A peer that closed
// or lost its routes is unreachable at once; a peer that is paused or cut
// off without closing them (SIGSTOP, a frozen machine, a network that
// drops packets) falls silent and is unreachable silentAfter later, long
// before the route's pings give up (bus.PingInterval × bus.PingsOut) and
// without closing the route: a loaded peer whose beacons are late costs
// nothing but a moment counted as silent. A peer never heard from (a
// node that publishes no beacons) counts by its route alone.

const (
	// quorumCheck is how often a clustered embedded server counts the
	// nodes it reaches.
	quorumCheck = 250 * time.Millisecond
	// beaconEvery is how often each node announces itself to its peers.
	beaconEvery = 500 * time.Millisecond
	// silentAfter is how long a peer's beacons may stop before the peer
	// counts as unreachable.
	silentAfter = 2 * time.Second
	// beaconSubject carries the beacons: the publishing server's ID. Only
	// the coordinator and admin roles may publish on it (UserPermissions).
	beaconSubject = bus.SubjectPrefix + ".node.beacon"
	// beaconForget drops what is known of a peer that has had no route
	// and no beacon for this long (a node that restarted has a new ID).
	beaconForget = 30 * silentAfter
)

// quorumWatch keeps the count of the nodes a clustered server reaches.
type quorumWatch struct {
	srv *server.Server
	nc  *nats.Conn // the beacons' in-process connection
	log *slog.Logger
	// lostSince: unix nanoseconds since when too few nodes are reachable
	// (0: a quorum is reachable, or unknown).
	lostSince             atomic.Int64
	up, size, silentPeers atomic.Int64

	mu        sync.Mutex
	heard     map[string]time.Time // peer server ID → its last beacon's arrival
	lastCheck time.Time

	once sync.Once
	stop chan struct{}
	done chan struct{}
}

func startQuorumWatch(srv *server.Server, cfg ServerConfig, log *slog.Logger) (*quorumWatch, error) {
	nc, err := connectInProcess(srv, cfg, "scanplane node beacons", 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("natsserver: quorum watch: %w", err)
	}
	w := &quorumWatch{srv: srv, nc: nc, log: log.With("component", "bus", "node", srv.Name()), heard: map[string]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	self := srv.ID()
	if _, err := nc.Subscribe(beaconSubject, func(m *nats.Msg) {
		if id := string(m.Data); id != self && len(id) <= 128 {
			w.mu.Lock()
			w.heard[id] = time.Now()
			w.mu.Unlock()
		}
	}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsserver: quorum watch: subscribe %s: %w", beaconSubject, err)
	}
	go w.run()
	return w, nil
}

func (w *quorumWatch) run() {
	defer close(w.done)
	check := time.NewTicker(quorumCheck)
	defer check.Stop()
	beacon := time.NewTicker(beaconEvery)
	defer beacon.Stop()
	id := []byte(w.srv.ID())
	for {
		select {
		case <-w.stop:
			return
		case <-beacon.C:
			// A failed publish (the connection reconnecting) is a beacon
			// missed, which is what the peers are to notice.
			_ = w.nc.Publish(beaconSubject, id)
		case <-check.C:
			w.check(time.Now())
		}
	}
}

// check counts the nodes of the JetStream cluster this server reaches
// (itself included).
func (w *quorumWatch) check(now time.Time) {
	jsz, err := w.srv.Jsz(&server.JSzOptions{})
	if err != nil || jsz.Meta == nil || jsz.Meta.Size < 2 {
		w.lostSince.Store(0)
		return
	}
	rz, err := w.srv.Routez(&server.RoutezOptions{})
	if err != nil {
		return
	}
	routed := map[string]bool{}
	for _, r := range rz.Routes {
		routed[r.RemoteID] = true
	}
	w.mu.Lock()
	// A check that comes late means this process itself stalled (paused,
	// starved of CPU): its peers' beacons are late for that reason, so
	// each peer gets a fresh silentAfter.
	if !w.lastCheck.IsZero() && now.Sub(w.lastCheck) > silentAfter/2 {
		for id := range w.heard {
			w.heard[id] = now
		}
	}
	w.lastCheck = now
	reached, silent := reachable(now, routed, w.heard)
	w.mu.Unlock()

	// The meta group's size is the number of nodes JetStream has known,
	// which grows while a cluster forms; it never shrinks here, so a node
	// that went away still counts.
	up, size := int64(reached+1), max(int64(jsz.Meta.Size), w.size.Load())
	w.up.Store(up)
	w.size.Store(size)
	w.silentPeers.Store(int64(silent))
	if up > size/2 {
		if w.lostSince.Swap(0) != 0 {
			w.log.Info("NATS node reaches a quorum of its cluster again", "up", up, "size", size)
		}
	} else if w.lostSince.CompareAndSwap(0, now.UnixNano()) {
		w.log.Warn("NATS node reaches too few nodes of its cluster for a quorum", "up", up, "size", size, "silent", silent)
	}
}

// reachable counts the peers (server IDs) this node has a route to and
// has not found silent: a peer whose last beacon (heard) is more than
// silentAfter old. A peer never heard from counts by its route. heard
// forgets peers with neither a route nor a beacon for beaconForget.
func reachable(now time.Time, routed map[string]bool, heard map[string]time.Time) (reached, silent int) {
	for id := range routed {
		if last, ok := heard[id]; ok && now.Sub(last) > silentAfter {
			silent++
			continue
		}
		reached++
	}
	for id, last := range heard {
		if !routed[id] && now.Sub(last) > beaconForget {
			delete(heard, id)
		}
	}
	return reached, silent
}

func (w *quorumWatch) close() {
	if w == nil {
		return
	}
	w.once.Do(func() {
		close(w.stop)
		<-w.done
		w.nc.Close()
	})
}

// ClusterNodes reports, for a node of a NATS cluster, how many nodes of
// the cluster (itself included) it reached at the last check, and how
// many the cluster has (the most JetStream's meta group has known); 0, 0
// for a standalone server or before the first check.
func (s *EmbeddedServer) ClusterNodes() (up, size int) {
	if s.quorum == nil {
		return 0, 0
	}
	return int(s.quorum.up.Load()), int(s.quorum.size.Load())
}

// QuorumLost reports, for a node of a NATS cluster, whether it has
// reached too few nodes of the cluster (itself included) for a quorum
// since when, and why in words; false for a standalone server or while
// unknown. It reads what a background check (every 250 ms) found.
func (s *EmbeddedServer) QuorumLost() (lost bool, since time.Time, why string) {
	if s.quorum == nil {
		return false, time.Time{}, ""
	}
	ns := s.quorum.lostSince.Load()
	if ns == 0 {
		return false, time.Time{}, ""
	}
	up, size, silent := s.quorum.up.Load(), s.quorum.size.Load(), s.quorum.silentPeers.Load()
	msg := fmt.Sprintf("NATS node %s reaches %d of the %d nodes of its cluster, fewer than a quorum", s.srv.Name(), up, size)
	if silent > 0 {
		msg += fmt.Sprintf(" (%d with a route but silent for over %v)", silent, silentAfter)
	}
	return true, time.Unix(0, ns), msg
}
