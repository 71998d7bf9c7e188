package bus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// maxNodeCheck bounds the wait for a node's answer to checkNode's PING.
const maxNodeCheck = time.Second

// checkNode asks the connection's NATS node for a PONG within wait and
// reports whether it answered, after a read got no answer or a watch
// went quiet, and every Config.NodeCheck (watchNode): a node that is paused, hung or cut off does not
// answer, and nats.go's own pings notice it only after PingsOut+1
// intervals, while every read and request through it goes unanswered.
// A node that does not answer is left for another of the cluster's
// (nats.Conn.ForceReconnect, which tries the rest of the server pool
// first); the caller then sends its read again. One check runs at a time
// per connection: a caller that finds one running waits for it (or for
// ctx) and gets its result. A node that answers (a stream electing its
// leader, a slow replica) is kept, and so is one whose PONG is late but
// which sends the connection messages meanwhile. A connection that is
// not connected (reconnecting, closed) has no node to answer: false.
func (c *Conn) checkNode(ctx context.Context, wait time.Duration) (answered bool) {
	c.mu.Lock()
	if running := c.nodeCheck; running != nil {
		c.mu.Unlock()
		select {
		case <-running.done:
			return running.answered
		case <-ctx.Done():
			return false
		}
	}
	check := &nodeCheck{done: make(chan struct{})}
	c.nodeCheck = check
	c.mu.Unlock()
	defer func() {
		check.answered = answered
		c.mu.Lock()
		c.nodeCheck = nil
		c.mu.Unlock()
		close(check.done)
	}()
	nc := c.nc
	if nc == nil || !nc.IsConnected() {
		return false // no connection (a Conn built bare), reconnecting already, or closed
	}
	server, start := nc.ConnectedServerName(), time.Now()
	for in := received(nc); ; {
		if err := nc.FlushTimeout(wait); err == nil || !nc.IsConnected() {
			return err == nil
		}
		// The PONG is queued behind what the node sends this connection,
		// and the node reads the PING after what the connection sent
		// before it: under heavy traffic, or on a starved machine, the
		// PONG of a node that works can take longer than wait. A node
		// that sent messages meanwhile is not silent: it is asked again,
		// and kept (false, nats.go's pings decide) once busyNodeWait
		// passed or ctx ended.
		now := received(nc)
		if now == in {
			break
		}
		if time.Since(start) >= busyNodeWait || ctx.Err() != nil {
			return false
		}
		in = now
	}
	if len(nc.Servers()) < 2 {
		return false // nowhere else to go: nats.go's pings decide
	}
	c.nodesLeft.Add(1)
	c.log.Warn("NATS node does not answer; moving to another", "server", server, "waited", time.Since(start).Round(time.Millisecond))
	_ = nc.ForceReconnect()
	return false
}

// busyNodeWait bounds how long checkNode keeps asking a node that sends
// messages but does not answer its PING in time: nats.go's own pings
// find a connection stale after about as long.
const busyNodeWait = PingInterval * PingsOut

// received counts the messages and payload bytes the connection has
// received from its node.
func received(nc *nats.Conn) [2]uint64 {
	st := nc.Stats()
	return [2]uint64{st.InMsgs, st.InBytes}
}

// nodeCheck is a running checkNode: done is closed when it ends, and
// answered (written before) is its result.
type nodeCheck struct {
	done     chan struct{}
	answered bool
}

// NodesLeft reports how many times the connection left its NATS node
// because the node did not answer a check: one after a read that got no
// answer, or the periodic one (Config.NodeCheck).
func (c *Conn) NodesLeft() uint64 { return c.nodesLeft.Load() }

// watchNode checks the connection's node every interval (checkNode, as
// after a read that got no answer) until the connection closes.
func (c *Conn) watchNode(interval time.Duration) {
	defer c.watching.Done()
	ctx, cancel := c.untilClosed(context.Background())
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.checkNode(ctx, maxNodeCheck)
		}
	}
}
