package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/wire"
)

// ErrBadEcho: the echo actor answered with something else than what was
// sent.
var ErrBadEcho = errors.New("client: echo answered with a different message")

// Ping sends one bare request to the echo actor of the scan-server
// process whose actor address is addr and returns the round-trip time:
// the network and actor-system floor under every scan, with no
// coordinator, policy or storage in the path.
func (c *Client) Ping(ctx context.Context, addr string) (time.Duration, error) {
	if c.sys == nil || c.rx == nil {
		return 0, ErrClosed
	}
	timeout := c.cfg.RequestTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl) + 100*time.Millisecond
	}
	probe := &messages.Row{Key: []byte("ping")}
	t := time.Now()
	// The answer is handed over a channel: no extra goroutine in the path
	// being timed.
	res, err := c.ask(ctx, actor.NewPID(addr, wire.EchoName), probe, timeout)
	rtt := time.Since(t)
	if errors.Is(err, ErrClosed) {
		return 0, ErrClosed
	}
	if err != nil {
		return 0, fmt.Errorf("client: ping %s: %w", addr, err)
	}
	if r, ok := res.(*messages.Row); !ok || string(r.GetKey()) != "ping" {
		return 0, fmt.Errorf("%w: %s sent %T", ErrBadEcho, addr, res)
	}
	return rtt, nil
}
