package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
)

// TestCloseOrdersSendsBeforeTheRemoteStops: goroutines send through a
// client's own actor remote on each of its send paths — a scan's Send, a
// request's ask (probes, Status, Reload, Ping), the lease
// watch's EndpointTerminatedEvent (dropEndpoint) — without pause while
// the client closes and after. The remote's stop writes the endpoint
// manager's state that each of those reads unsynchronised, which the race
// detector reports unless Close orders every send before the stop; a
// send after Close sends nothing.
func TestCloseOrdersSendsBeforeTheRemoteStops(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NATSURL = startNATS(t)
	cfg.Coordinators = []string{"127.0.0.1:5"} // nothing listens there
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	peer := actor.NewPID("127.0.0.1:5", "nobody")
	senders := map[string]func() bool{
		"send": func() bool {
			c.send(peer, &messages.Cancel{RequestId: "r"})
			return true
		},
		"ask": func() bool {
			_, err := c.ask(context.Background(), peer, &messages.StatusRequest{}, time.Millisecond)
			return !errors.Is(err, ErrClosed)
		},
		"dropEndpoint": func() bool {
			c.dropEndpoint(peer.Address)
			return true
		},
	}
	var closed atomic.Bool
	counts := make([]atomic.Int64, len(senders))
	var wg sync.WaitGroup
	i := 0
	for _, send := range senders {
		n := &counts[i]
		i++
		wg.Go(func() {
			for {
				done := closed.Load()
				send()
				n.Add(1)
				if done {
					return
				}
			}
		})
	}
	testutil.Eventually(t, 10*time.Second, "every sender has sent", func() bool {
		for i := range counts {
			if counts[i].Load() < 10 {
				return false
			}
		}
		return true
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	closed.Store(true)
	wg.Wait()
	if _, err := c.ask(context.Background(), peer, &messages.StatusRequest{}, time.Millisecond); !errors.Is(err, ErrClosed) {
		t.Fatal("a request was sent after Close")
	}
}

// TestCloseEndsProbes: a probe of a lost coordinator ends before Close
// returns, whether it waits between dials (nothing listens at the
// address) or has asked the coordinator for its status (the address
// accepts TCP connections, so the probe sends the request).
func TestCloseEndsProbes(t *testing.T) {
	for _, accept := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		var accepted atomic.Int64
		if accept {
			go func() {
				for {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					accepted.Add(1)
					conn.Close()
				}
			}()
		} else {
			ln.Close()
		}
		cfg := DefaultConfig()
		cfg.NATSURL = startNATS(t)
		cfg.Coordinators = []string{addr}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c, err := Dial(ctx, cfg)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		c.coordLost(addr, "test")
		in, _, _, err := c.openStream()
		if err != nil {
			t.Fatal(err)
		}
		// The probe is past its first dial, waiting for the next round
		// or for the status request's answer.
		testutil.EventuallyErr(t, 10*time.Second, "the probe waits", func() error {
			st := probeStates()
			if len(st) == 1 && (st[0] == "select" || st[0] == "sleep") && (!accept || accepted.Load() > 0) {
				return nil
			}
			return fmt.Errorf("probe goroutines in states %q, %d accepted", st, accepted.Load())
		})
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if st := probeStates(); len(st) > 0 {
			t.Fatalf("accepting %v: a probe still runs after Close returned (%q)", accept, st)
		}
		c.closeStream(in, nil)
		ln.Close()
	}
}

// probeStates returns the state ("select", "sleep", ...) of every
// goroutine running Client.probe.
func probeStates() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var states []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if !strings.Contains(g, "client.(*Client).probe(") {
			continue
		}
		head, _, _ := strings.Cut(g, "\n")
		if _, st, ok := strings.Cut(head, "["); ok {
			st, _, _ = strings.Cut(st, "]")
			st, _, _ = strings.Cut(st, ",")
			states = append(states, st)
		}
	}
	return states
}
