package bus

import (
	"context"
	"time"
)

// maxNodeCheck bounds the wait for a node's answer to checkNode's PING.
const maxNodeCheck = time.Second

// checkNode asks the connection's NATS node for a PONG within wait, after a
// read got no answer: a node that is paused, hung or cut off does not
// answer, and nats.go's own pings notice it only after PingsOut+1
// intervals, while every read and request through it goes unanswered.
// A node that does not answer is left for another of the cluster's
// (nats.Conn.ForceReconnect, which tries the rest of the server pool
// first); the caller then sends its read again. One check runs at a time
// per connection: a caller that finds one running waits for it (or for
// ctx). A node that answers (a stream electing its leader, a slow
// replica) is kept.
func (c *Conn) checkNode(ctx context.Context, wait time.Duration) {
	c.mu.Lock()
	if running := c.nodeCheck; running != nil {
		c.mu.Unlock()
		select {
		case <-running:
		case <-ctx.Done():
		}
		return
	}
	done := make(chan struct{})
	c.nodeCheck = done
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.nodeCheck = nil
		c.mu.Unlock()
		close(done)
	}()
	nc := c.nc
	if nc == nil || !nc.IsConnected() {
		return // no connection (a Conn built bare), reconnecting already, or closed
	}
	server, start := nc.ConnectedServerName(), time.Now()
	if err := nc.FlushTimeout(wait); err == nil || !nc.IsConnected() {
		return
	}
	if len(nc.Servers()) < 2 {
		return // nowhere else to go: nats.go's pings decide
	}
	c.nodesLeft.Add(1)
	c.log.Warn("NATS node does not answer; moving to another", "server", server, "waited", time.Since(start).Round(time.Millisecond))
	_ = nc.ForceReconnect()
}

// NodesLeft reports how many times the connection left its NATS node
// because the node did not answer a check after a read got no answer.
func (c *Conn) NodesLeft() uint64 { return c.nodesLeft.Load() }
