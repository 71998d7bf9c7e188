package wire

import (
	"time"

	"github.com/scanplane/scanplane/messages"
)

// ValidateProbe checks a Probe from the network, naming the bad field.
// Unknown fields are ignored (protobuf skips them when decoding).
func ValidateProbe(m *messages.Probe) error {
	if ToPID(m.GetReplyTo()) == nil {
		return bad("reply_to pid is missing")
	}
	if err := checkPid("reply_to", m.GetReplyTo()); err != nil {
		return err
	}
	return checkNames("server", m.GetServer())
}

// ValidateProbeReply checks a ProbeReply from the network.
func ValidateProbeReply(m *messages.ProbeReply) error {
	switch {
	case m.GetId() == 0:
		return bad("id is 0")
	case m.GetRif() > MaxQueueLen+MaxWorkers:
		return bad("rif %d is over %d", m.GetRif(), MaxQueueLen+MaxWorkers)
	case m.GetLatencyUs() < 0 || m.GetLatencyUs() > time.Hour.Microseconds():
		return bad("latency_us %d is outside [0, 1h]", m.GetLatencyUs())
	}
	return checkNames("server", m.GetServer())
}
