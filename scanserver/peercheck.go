package scanserver

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/internal/remoting"
)

// fromAttemptPeer reports whether a Cancel (cancel true) or BatchAck for
// the attempt key, being handled in c, may act on it. On a secured remote
// the Guard hands the actor the address of the peer the message came
// from (remoting.PeerAddress); the attempt's StartScan named the two
// actors that may steer it: its client (acks, cancels) and its tablet
// actor (cancels). A message from any other peer is refused, counted and
// logged on the remote's Guard: a client can steer only its own streams,
// a coordinator only the attempts it dispatched. A local message, or one
// from a plain-text remote, carries no peer address and is taken, as is
// one for an attempt this server does not hold (it acts on nothing).
func (s *ScanServerActor) fromAttemptPeer(c actor.Context, key ScanKey, cancel bool) bool {
	peer := remoting.PeerAddress(c)
	if peer == "" {
		return true
	}
	job := s.running[key]
	if job == nil {
		job = s.pending[key]
	}
	if job == nil {
		return true
	}
	if job.client.GetAddress() == peer || (cancel && job.tablet.GetAddress() == peer) {
		return true
	}
	kind := "BatchAck"
	if cancel {
		kind = "Cancel"
	}
	s.guard.Refuse(peer, remoting.ReasonAttempt, "server", s.id, "message", kind, "request", key.RequestID, "attempt", key.Attempt,
		"client", job.client.GetAddress(), "tablet_actor", job.tablet.GetAddress())
	return false
}
