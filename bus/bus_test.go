package bus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
)

// startServer runs a NATS server with JetStream on a random port with its
// own store (startTestServer).
func startServer(tb testing.TB) *testServer {
	tb.Helper()
	srv := startTestServer(tb, -1, tb.TempDir())
	tb.Cleanup(srv.Close)
	return srv
}

func connect(tb testing.TB, srv *testServer) *Conn {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.URL = srv.ClientURL()
	cfg.Name = tb.Name()
	c, err := Connect(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("Connect: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or the deadline passes.
func eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	testutil.Eventually(tb, 10*time.Second, what, cond)
}

// receive waits for one value on ch.
func receive[T any](tb testing.TB, ch <-chan T) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		tb.Fatal("timed out waiting for a message")
	}
	panic("unreachable")
}

func TestToken(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"host-a", "host-a"},
		{"Host_1", "Host_1"},
		{"127.0.0.1:8101/0", "127_0_0_1_8101_0"},
		{"a b*c>d", "a_b_c_d"},
		{"", "_"},
		{"héllo", "h_llo"},
		{"x.y", "x_y"},
	} {
		if got := Token(tc.in); got != tc.want {
			t.Errorf("Token(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got, want := HeartbeatSubject("h1", "127.0.0.1:8101/0"), "scanplane.v1.hb.h1.127_0_0_1_8101_0"; got != want {
		t.Errorf("HeartbeatSubject = %q, want %q", got, want)
	}
	if got, want := BusySubject("h.1", "s"), "scanplane.v1.busy.h_1.s"; got != want {
		t.Errorf("BusySubject = %q, want %q", got, want)
	}
	if got, want := TimeoutSubject("h", "s"), "scanplane.v1.timeout.h.s"; got != want {
		t.Errorf("TimeoutSubject = %q, want %q", got, want)
	}
}

// The KV's own rule for keys (nats.go jetstream keyValid).
var validKVKey = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)

func kvKeyValid(k string) bool {
	return k != "" && k[0] != '.' && k[len(k)-1] != '.' && !strings.Contains(k, "..") && validKVKey.MatchString(k)
}

func TestEscapeKey(t *testing.T) {
	for _, tc := range []struct {
		in      string
		keepSep bool
		want    string
	}{
		{"f0001/b000001", true, "f0001/b000001"},
		{"file.idx", true, "file.idx"},
		{".x", true, "=2Ex"},
		{"x.", true, "x=2E"},
		{"a..b", true, "a=2E=2Eb"},
		{"a=b", true, "a=3Db"},
		{"a b:c", true, "a=20b=3Ac"},
		{"tab.le", false, "tab=2Ele"},
		{"t/x", false, "t=2Fx"},
		{"plain_name-1", false, "plain_name-1"},
	} {
		got := escapeKey(tc.in, tc.keepSep)
		if got != tc.want {
			t.Errorf("escapeKey(%q, %v) = %q, want %q", tc.in, tc.keepSep, got, tc.want)
		}
	}
	// Every input maps to a valid key and back.
	inputs := []string{"a", ".", "..", "...", "a.b.c", "é", "=", "==41", "*", ">", "a\x00b", "/./", "x..y.z.", " "}
	for i := 0; i < 256; i++ {
		inputs = append(inputs, "k"+string(rune(i))+"."+string([]byte{byte(i)}))
	}
	for _, in := range inputs {
		for _, keep := range []bool{true, false} {
			k := escapeKey(in, keep)
			if !kvKeyValid(k) {
				t.Errorf("escapeKey(%q, %v) = %q: not a valid KV key", in, keep, k)
			}
			if !keep && strings.ContainsAny(k, "./") {
				t.Errorf("escapeKey(%q, false) = %q: holds a separator", in, k)
			}
			if back, ok := unescapeKey(k); !ok || back != in {
				t.Errorf("unescapeKey(%q) = %q, %v; want %q", k, back, ok, in)
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for _, tc := range []struct {
		field string
		mod   func(*Config)
	}{
		{"URL", func(c *Config) { c.URL = " " }},
		{"URL", func(c *Config) { c.URL = "nats://a:1,,nats://b:2" }},
		{"ConnectTimeout", func(c *Config) { c.ConnectTimeout = 0 }},
		{"OpTimeout", func(c *Config) { c.OpTimeout = 0 }},
		{"BlocksBucket", func(c *Config) { c.BlocksBucket = "a.b" }},
		{"MetaBucket", func(c *Config) { c.MetaBucket = "" }},
		{"MetaBucket", func(c *Config) { c.MetaBucket = c.BlocksBucket }},
		{"Replicas", func(c *Config) { c.Replicas = -1 }},
		{"Replicas", func(c *Config) { c.Replicas = 6 }},
		{"BucketWait", func(c *Config) { c.BucketWait = -time.Second }},
	} {
		c := DefaultConfig()
		tc.mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Validate with bad %s: %v", tc.field, err)
		}
	}
}

func TestConnectNoServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := DefaultConfig()
	cfg.URL = "nats://" + addr
	cfg.ConnectTimeout = time.Second
	if c, err := Connect(context.Background(), cfg); err == nil {
		c.Close()
		t.Fatal("Connect to a closed port succeeded")
	}
}

func TestHeartbeatRoundTrip(t *testing.T) {
	srv := startServer(t)
	pub, sub := connect(t, srv), connect(t, srv)
	got := make(chan *messages.Heartbeat, 4)
	s, err := sub.SubscribeHeartbeats(func(hb *messages.Heartbeat) { got <- hb })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := sub.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	hb := &messages.Heartbeat{Host: "host-a", Server: "127.0.0.1:8101/0", Zone: "z1", QueueLen: 3, CacheHitRatio: 0.5}
	if err := pub.PublishHeartbeat(hb); err != nil {
		t.Fatal(err)
	}
	if r := receive(t, got); !proto.Equal(r, hb) {
		t.Fatalf("received %v, want %v", r, hb)
	}
	if err := pub.PublishHeartbeat(&messages.Heartbeat{Host: "h"}); !errors.Is(err, ErrBadSignal) {
		t.Errorf("heartbeat without server: %v", err)
	}
}

func TestGarbageHeartbeatCounted(t *testing.T) {
	srv := startServer(t)
	c := connect(t, srv)
	got := make(chan *messages.Heartbeat, 4)
	s, err := c.SubscribeHeartbeats(func(hb *messages.Heartbeat) { got <- hb })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := c.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := c.NATS().Publish(HeartbeatSubject("h", "s"), []byte{0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	// The subscriber survives and still delivers good heartbeats.
	if err := c.PublishHeartbeat(&messages.Heartbeat{Host: "h", Server: "s"}); err != nil {
		t.Fatal(err)
	}
	if r := receive(t, got); r.GetServer() != "s" {
		t.Fatalf("received %v", r)
	}
	eventually(t, "decode error counted", func() bool { return c.DecodeErrors() == 1 })
	select {
	case r := <-got:
		t.Fatalf("garbage reached the callback: %v", r)
	default:
	}
}

func TestSignalsRoundTrip(t *testing.T) {
	srv := startServer(t)
	pub, sub := connect(t, srv), connect(t, srv)
	type ev struct {
		kind SignalKind
		sig  *messages.LoadSignal
	}
	got := make(chan ev, 4)
	s, err := sub.SubscribeSignals(func(k SignalKind, sig *messages.LoadSignal) { got <- ev{k, sig} })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := sub.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	busy := &messages.LoadSignal{Host: "h", Server: "h:1/0", RequestId: "r1", QueueLen: 7}
	timeout := &messages.LoadSignal{Host: "h", Server: "h:1/1", RequestId: "r2", Origin: "coord"}
	if err := pub.PublishSignal(SignalBusy, busy); err != nil {
		t.Fatal(err)
	}
	if e := receive(t, got); e.kind != SignalBusy || !proto.Equal(e.sig, busy) {
		t.Fatalf("got %v %v, want busy %v", e.kind, e.sig, busy)
	}
	if err := pub.PublishSignal(SignalTimeout, timeout); err != nil {
		t.Fatal(err)
	}
	if e := receive(t, got); e.kind != SignalTimeout || !proto.Equal(e.sig, timeout) {
		t.Fatalf("got %v %v, want timeout %v", e.kind, e.sig, timeout)
	}
	if err := pub.PublishSignal(SignalKind(9), busy); !errors.Is(err, ErrBadSignal) {
		t.Errorf("unknown kind: %v", err)
	}
	// After Close nothing more arrives (a later message would be buffered).
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pub.PublishSignal(SignalBusy, busy); err != nil {
		t.Fatal(err)
	}
	if err := pub.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := sub.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-got:
		t.Fatalf("received %v after Close", e)
	default:
	}
}

func TestMetaChangedRoundTrip(t *testing.T) {
	srv := startServer(t)
	c := connect(t, srv)
	got := make(chan *messages.TableMeta, 1)
	s, err := c.SubscribeMetaChanged(func(m *messages.TableMeta) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := c.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	meta := &messages.TableMeta{Name: "t", Generation: 3, SplitPoints: [][]byte{[]byte("m")},
		Tablets: []*messages.TabletMeta{{Rows: 1}, {Rows: 2}}}
	if err := c.PublishMetaChanged(meta); err != nil {
		t.Fatal(err)
	}
	r := receive(t, got)
	if r.GetName() != "t" || r.GetGeneration() != 3 || len(r.GetSplitPoints()) != 1 || len(r.GetTablets()) != 0 {
		t.Fatalf("received %v", r)
	}
	if len(meta.Tablets) != 2 {
		t.Fatal("PublishMetaChanged modified its argument")
	}
}

// TestTransientBucketErr: the errors opening a bucket retries are those a
// forming or degraded cluster gives, not configuration errors.
func TestTransientBucketErr(t *testing.T) {
	api := func(code, errCode int) error {
		return fmt.Errorf("wrapped: %w", &jetstream.APIError{Code: code, ErrorCode: jetstream.ErrorCode(errCode), Description: "x"})
	}
	if transientBucketErr(api(503, 10023), false) {
		t.Error("insufficient resources from a standalone server (a full store) is transient")
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("%w: no answer within 10s", ErrUnavailable), true},
		{api(400, 10005), true}, // no suitable peers for placement
		{api(503, 10008), true}, // JetStream system temporarily unavailable
		{api(503, 10023), true}, // insufficient resources, from a clustered server
		{jetstream.ErrNoStreamResponse, true},
		{context.DeadlineExceeded, true},
		{api(500, 10074), false}, // replicas > 1 not supported in non-clustered mode
		{api(400, 10058), false}, // stream name already in use with a different configuration
		{errors.New("something else"), false},
	} {
		if got := transientBucketErr(tc.err, true); got != tc.want {
			t.Errorf("transientBucketErr(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
