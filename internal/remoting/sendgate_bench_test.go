package remoting

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"
)

// nopProcess is a process that does nothing: what the gate adds to a send
// is all that the benchmark measures.
type nopProcess struct{}

func (nopProcess) SendUserMessage(*actor.PID, any)   {}
func (nopProcess) SendSystemMessage(*actor.PID, any) {}
func (nopProcess) Stop(*actor.PID)                   {}

// BenchmarkGatedSend is the cost of a send through a remote PID's process
// with and without the Gate in front of it, from one goroutine and from
// every P at once (the gate's counter is shared by the process).
func BenchmarkGatedSend(b *testing.B) {
	pid := actor.NewPID("127.0.0.1:1", "x")
	var g Gate
	for _, c := range []struct {
		name string
		p    actor.Process
	}{{"plain", nopProcess{}}, {"gated", gatedProcess{inner: nopProcess{}, gate: &g}}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				c.p.SendUserMessage(pid, nil)
			}
		})
		b.Run(c.name+"-parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					c.p.SendUserMessage(pid, nil)
				}
			})
		})
	}
}
