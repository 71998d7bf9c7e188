package bus

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/scanplane/scanplane/internal/testutil"
)

// TestNodeCheckKeepsABusyNode: a connection whose node sends it more
// than its link carries in a second (a flood of messages through a
// proxy that passes 1 MB/s towards the client) gets the PONG of its node
// check seconds late, behind the flood, while messages keep arriving: it
// stays on the node and loses none of them. Once the proxy passes
// nothing in either direction (a paused node), the check leaves the node
// within a few seconds.
func TestNodeCheckKeepsABusyNode(t *testing.T) {
	srv := startServer(t)
	// Two proxies to the one server: the connection knows two nodes, so
	// the check has another to go to.
	p1, p2 := startThrottle(t, srv.ClientURL(), 1<<20), startThrottle(t, srv.ClientURL(), 1<<20)
	cfg := DefaultConfig()
	cfg.URL, cfg.Name, cfg.NodeCheck = p1.url+","+p2.url, t.Name(), 100*time.Millisecond
	conn, err := Connect(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(conn.Close)
	var got atomic.Int64
	sub, err := conn.NATS().Subscribe("flood", func(*nats.Msg) { got.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := conn.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	pub, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)

	// 4 MB: about 4 s behind the proxy, more than the check's second.
	const n, size = 64, 64 << 10
	payload := make([]byte, size)
	for range n {
		if err := pub.Publish("flood", payload); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// The flood comes at the proxy's pace, slower on a loaded machine:
	// the wait fails when no message came for 30 s, not at a fixed time.
	for k := got.Load(); k < n; k = got.Load() {
		if !testutil.Poll(30*time.Second, func() bool { return got.Load() != k }) {
			t.Fatalf("%d of %d flood messages received, none in the last 30s; the connection left %d nodes and reconnected %d times meanwhile, want 0: its node sent messages all along",
				k, n, conn.NodesLeft(), conn.NATS().Stats().Reconnects)
		}
	}
	t.Logf("%d messages of %d KB received through the proxy in %v", n, size>>10, time.Since(start).Round(time.Millisecond))
	if left := conn.NodesLeft(); left != 0 {
		t.Fatalf("the connection left %d nodes during the flood, want 0: its node sent messages all along", left)
	}

	on := conn.NATS().ConnectedUrl()
	p1.freeze()
	p2.freeze()
	frozen := time.Now()
	testutil.Eventually(t, 10*time.Second, "the node left once its proxy passes nothing", func() bool { return conn.NodesLeft() == 1 })
	t.Logf("left %s %v after its proxy stopped passing anything", on, time.Since(frozen).Round(time.Millisecond))
}

// throttle is a TCP proxy to a NATS server that passes at most rate
// bytes a second towards the client, and nothing at all once frozen.
type throttle struct {
	url    string
	ln     net.Listener
	rate   int
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startThrottle(t *testing.T, target string, rate int) *throttle {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &throttle{url: "nats://" + ln.Addr().String(), ln: ln, rate: rate}
	addr := strings.TrimPrefix(target, "nats://")
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Add(2)
			go p.pipe(s, c, 0)
			go p.pipe(c, s, p.rate)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// freeze stops the proxy passing anything, as a paused node would.
func (p *throttle) freeze() { p.frozen.Store(true) }

// pipe copies from src to dst, at most rate bytes a second (0: as fast
// as it can), holding what it read while the proxy is frozen.
func (p *throttle) pipe(dst, src net.Conn, rate int) {
	defer p.wg.Done()
	defer dst.Close()
	buf := make([]byte, 16<<10)
	for {
		k, err := src.Read(buf)
		for k > 0 && p.frozen.Load() {
			if _, err := dst.Write(nil); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return
			}
			if rate > 0 {
				time.Sleep(time.Duration(k) * time.Second / time.Duration(rate))
			}
		}
		if err != nil {
			return // EOF, or the proxy closed
		}
	}
}
