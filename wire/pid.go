package wire

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/messages"
)

// ToPID converts a wire Pid to a protoactor PID (nil for nil or empty).
func ToPID(p *messages.Pid) *actor.PID {
	if p == nil || p.Address == "" || p.Id == "" {
		return nil
	}
	return actor.NewPID(p.Address, p.Id)
}

// FromPID converts a protoactor PID to a wire Pid.
func FromPID(p *actor.PID) *messages.Pid {
	if p == nil {
		return nil
	}
	return &messages.Pid{Address: p.Address, Id: p.Id}
}
