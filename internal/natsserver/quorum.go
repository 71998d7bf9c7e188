package natsserver

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// A node of a NATS cluster knows before JetStream does that the cluster
// lost its quorum: its routes to the other nodes close when their pings
// go unanswered (bus.PingInterval × bus.PingsOut), while a JetStream request
// waits for its timeout and a lease goes unrenewed for as long as one
// chooses to wait. And once the nodes are back, the routes are up again
// at once, seconds before JetStream has elected its leaders. The
// embedded server watches its routes (quorumCheck) so that its holder
// can name a lost quorum early, and stop naming it as soon as the nodes
// are back.

// quorumCheck is how often a clustered embedded server counts the nodes
// it has routes to.
const quorumCheck = 250 * time.Millisecond

// quorumWatch keeps the route count of a clustered server.
type quorumWatch struct {
	srv *server.Server
	// lostSince: unix nanoseconds since when too few nodes are reachable
	// (0: a quorum is reachable, or unknown).
	lostSince atomic.Int64
	up, size  atomic.Int64

	once sync.Once
	stop chan struct{}
	done chan struct{}
}

func startQuorumWatch(srv *server.Server) *quorumWatch {
	w := &quorumWatch{srv: srv, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *quorumWatch) run() {
	defer close(w.done)
	t := time.NewTicker(quorumCheck)
	defer t.Stop()
	for {
		w.check(time.Now())
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
	}
}

// check counts the nodes of the JetStream cluster this server has a
// route to (itself included).
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
	peers := map[string]bool{}
	for _, r := range rz.Routes {
		peers[r.RemoteID] = true
	}
	// The meta group's size is the number of nodes JetStream has known,
	// which grows while a cluster forms; it never shrinks here, so a node
	// that went away still counts.
	up, size := int64(len(peers)+1), max(int64(jsz.Meta.Size), w.size.Load())
	w.up.Store(up)
	w.size.Store(size)
	if up > size/2 {
		w.lostSince.Store(0)
	} else {
		w.lostSince.CompareAndSwap(0, now.UnixNano())
	}
}

func (w *quorumWatch) close() {
	if w == nil {
		return
	}
	w.once.Do(func() { close(w.stop); <-w.done })
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
	up, size := s.quorum.up.Load(), s.quorum.size.Load()
	return true, time.Unix(0, ns), fmt.Sprintf("NATS node %s reaches %d of the %d nodes of its cluster, fewer than a quorum", s.srv.Name(), up, size)
}
