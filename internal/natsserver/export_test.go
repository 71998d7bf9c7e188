package natsserver

import "github.com/nats-io/nats-server/v2/server"

// SilenceBeacons stops this node's beacons and its quorum watch, as a
// paused process's stop, and leaves its routes open.
func (s *EmbeddedServer) SilenceBeacons() { s.quorum.close() }

// NumRoutes is the number of route connections this node has.
func (s *EmbeddedServer) NumRoutes() int { return s.srv.NumRoutes() }

// SilentAfter is how long a peer's beacons may stop before it counts as
// unreachable.
const SilentAfter = silentAfter

// HeardPeers is the number of peers whose beacons this node has heard.
func (s *EmbeddedServer) HeardPeers() int {
	s.quorum.mu.Lock()
	defer s.quorum.mu.Unlock()
	return len(s.quorum.heard)
}

// RouteInBytes is the bytes this node received over its routes.
func (s *EmbeddedServer) RouteInBytes() int64 {
	rz, err := s.srv.Routez(nil)
	if err != nil {
		return -1
	}
	var n int64
	for _, r := range rz.Routes {
		n += r.InBytes
	}
	return n
}

// ServesDirectGets reports whether this node's replica of stream takes
// direct gets (a follower subscribes once it is nearly current).
func (s *EmbeddedServer) ServesDirectGets(stream string) bool {
	sz, err := s.srv.Subsz(&server.SubszOptions{Subscriptions: true, Limit: 1 << 10, Test: "$JS.API.DIRECT.GET." + stream})
	if err != nil {
		return false
	}
	for _, sd := range sz.Subs {
		if sd.Queue != "" { // not the JetStream API's import of $JS.API.>
			return true
		}
	}
	return false
}
