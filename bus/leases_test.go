package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
)

func leaseStore(t *testing.T, c *Conn, cfg LeaseConfig) *LeaseStore {
	t.Helper()
	s, err := c.Leases(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func leaseInfo(id, addr string) *messages.ClusterInfo {
	return &messages.ClusterInfo{MemberId: id, CoordinatorAddress: addr, RouterId: "router", Incarnation: "inc-" + id}
}

func announce(t *testing.T, s *LeaseStore, ci *messages.ClusterInfo) *Lease {
	t.Helper()
	l, err := s.Announce(testCtx(t), ci)
	if err != nil {
		t.Fatalf("Announce %s: %v", ci.GetMemberId(), err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// leaseLog records what a LeaseStore.Watch delivered and fails the test
// if fn is ever called concurrently.
type leaseLog struct {
	t       *testing.T
	running atomic.Int32
	mu      sync.Mutex
	calls   int
	last    []*messages.ClusterInfo
	at      time.Time // when fn delivered last
}

func (l *leaseLog) fn(live []*messages.ClusterInfo) {
	if l.running.Add(1) != 1 {
		l.t.Error("Watch called fn concurrently")
	}
	defer l.running.Add(-1)
	if !slices.IsSortedFunc(live, func(a, b *messages.ClusterInfo) int { return strings.Compare(a.MemberId, b.MemberId) }) {
		l.t.Errorf("Watch delivered unsorted leases %v", ids(live))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	l.last = live
	l.at = time.Now()
}

func (l *leaseLog) state() ([]*messages.ClusterInfo, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last, l.calls
}

func ids(live []*messages.ClusterInfo) []string {
	var out []string
	for _, ci := range live {
		out = append(out, ci.GetMemberId())
	}
	return out
}

// waitIDs polls until the watch's latest set is exactly want and returns
// how long that took.
func (l *leaseLog) waitIDs(want []string, bound time.Duration) time.Duration {
	l.t.Helper()
	start := time.Now()
	l.waitIDsBy(want, start.Add(bound))
	return time.Since(start)
}

// waitIDsBy polls until the watch's latest set is exactly want and
// returns when fn delivered that set; it fails the test if the set is
// still another one after deadline (testutil.Poll looks once more after
// the deadline: a late look cannot fail a set delivered in time).
func (l *leaseLog) waitIDsBy(want []string, deadline time.Time) time.Time {
	l.t.Helper()
	var live []*messages.ClusterInfo
	var at time.Time
	if !testutil.Poll(time.Until(deadline), func() bool {
		l.mu.Lock()
		live, at = l.last, l.at
		l.mu.Unlock()
		return slices.Equal(ids(live), want)
	}) {
		l.t.Fatalf("watch still reports %v past the deadline, want %v", ids(live), want)
	}
	return at
}

func watchLeases(t *testing.T, s *LeaseStore) *leaseLog {
	t.Helper()
	l := &leaseLog{t: t}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := s.Watch(ctx, l.fn); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLeaseConfigValidate(t *testing.T) {
	if err := DefaultLeaseConfig().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	for field, mut := range map[string]func(*LeaseConfig){
		"LeaseConfig.TTL":    func(c *LeaseConfig) { c.TTL = 50 * time.Millisecond },
		"LeaseConfig.Renew":  func(c *LeaseConfig) { c.Renew = c.TTL },
		"LeaseConfig.Bucket": func(c *LeaseConfig) { c.Bucket = "a.b" },
	} {
		c := DefaultLeaseConfig()
		mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: Validate = %v, want an error naming it", field, err)
		}
	}
	c := DefaultLeaseConfig()
	c.Renew = 0
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "LeaseConfig.Renew") {
		t.Errorf("Renew 0: %v", err)
	}
}

func TestCheckLease(t *testing.T) {
	ok := leaseInfo("m-1", "127.0.0.1:1")
	if err := CheckLease("m-1", ok); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		key string
		ci  *messages.ClusterInfo
	}{
		"nil":          {"m", nil},
		"key mismatch": {"m-2", ok},
		"empty id":     {"", leaseInfo("", "127.0.0.1:1")},
		"dot in id":    {"a.b", leaseInfo("a.b", "127.0.0.1:1")},
		"long id":      {strings.Repeat("x", MaxMemberIDLen+1), leaseInfo(strings.Repeat("x", MaxMemberIDLen+1), "h:1")},
		"no address":   {"m", leaseInfo("m", "")},
	} {
		if err := CheckLease(c.key, c.ci); !errors.Is(err, ErrBadLease) {
			t.Errorf("%s: CheckLease = %v, want ErrBadLease", name, err)
		}
	}
}

// TestLeasesAnnounceWatchUpdateClose: two coordinators announce; a
// watcher sees both at once, sees an update, is not called for renewals
// that change nothing, and sees a Close long before the TTL.
func TestLeasesAnnounceWatchUpdateClose(t *testing.T) {
	srv := startServer(t)
	cfg := DefaultLeaseConfig()
	cfg.TTL, cfg.Renew = 20*time.Second, 50*time.Millisecond
	a := announce(t, leaseStore(t, connect(t, srv), cfg), leaseInfo("a", "127.0.0.1:1001"))
	bStore := leaseStore(t, connect(t, srv), cfg)
	b := announce(t, bStore, leaseInfo("b", "127.0.0.1:1002"))
	if _, err := bStore.Announce(testCtx(t), leaseInfo("c.d", "x:1")); !errors.Is(err, ErrBadLease) {
		t.Fatalf("Announce of a bad member id: %v", err)
	}

	ws := leaseStore(t, connect(t, srv), cfg)
	w := watchLeases(t, ws)
	live, calls := w.state()
	if calls != 1 || !slices.Equal(ids(live), []string{"a", "b"}) {
		t.Fatalf("after Watch returned: %d calls, %v; want 1 call with [a b]", calls, ids(live))
	}
	if live[0].GetCoordinatorAddress() != "127.0.0.1:1001" || live[0].GetRenewedUnixMs() == 0 {
		t.Fatalf("lease a = %v", live[0])
	}
	listed, err := ws.List(testCtx(t))
	if err != nil || !slices.Equal(ids(listed), []string{"a", "b"}) {
		t.Fatalf("List = %v, %v", ids(listed), err)
	}

	// Renewals that change nothing do not call fn: wait until List shows
	// b renewed 3 times more, then check the call count.
	r0 := listed[1].GetRenewedUnixMs()
	eventually(t, "b renewed", func() bool {
		l, err := ws.List(testCtx(t))
		return err == nil && len(l) == 2 && l[1].GetRenewedUnixMs() >= r0+3*cfg.Renew.Milliseconds()
	})
	if _, calls := w.state(); calls != 1 {
		t.Fatalf("unchanged renewals made %d calls of fn, want 1", calls)
	}
	// Yet the store knows how fresh each lease is: Fresh gives b's
	// latest renewal time, not the one fn was given.
	delivered, _ := w.state()
	if fresh := ws.Fresh(delivered); fresh[1].GetRenewedUnixMs() < delivered[1].GetRenewedUnixMs()+3*cfg.Renew.Milliseconds() {
		t.Fatalf("Fresh renewed %d, delivered %d: want at least 3 renewals later", fresh[1].GetRenewedUnixMs(), delivered[1].GetRenewedUnixMs())
	}

	// Update is seen with the next renewal.
	up := leaseInfo("ignored", "127.0.0.1:1001")
	up.TabletActors = 7
	a.Update(up)
	eventually(t, "update seen", func() bool {
		live, _ := w.state()
		return len(live) == 2 && live[0].GetTabletActors() == 7 && live[0].GetMemberId() == "a"
	})
	a.Update(leaseInfo("a", "")) // refused: no address
	// Close: gone at once (the TTL is 20s).
	start := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	took := w.waitIDs([]string{"a"}, 5*time.Second)
	t.Logf("closed lease gone from the watch %v after Close returned (Close took %v)", took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if listed, err := ws.List(testCtx(t)); err != nil || !slices.Equal(ids(listed), []string{"a"}) {
		t.Fatalf("List after Close = %v, %v", ids(listed), err)
	}
	if live, _ := w.state(); live[0].GetTabletActors() != 7 {
		t.Fatalf("refused update replaced the lease: %v", live[0])
	}
	if a.Failures() != 0 {
		t.Fatalf("%d renewal failures", a.Failures())
	}
}

// TestLeaseExpiresWhenHolderDies: a holder whose process dies (its
// connection closed: no more renewals, no delete) disappears from a watch
// at most TTL + 2 × Renew after it died (its last renewal was at most
// Renew before; the rest is delivery and the expiry check's round trips),
// and from List once the server's MaxAge drops it; the other lease stays.
func TestLeaseExpiresWhenHolderDies(t *testing.T) {
	srv := startServer(t)
	cfg := DefaultLeaseConfig()
	cfg.TTL, cfg.Renew = 300*time.Millisecond, 100*time.Millisecond
	dying := connect(t, srv)
	announce(t, leaseStore(t, dying, cfg), leaseInfo("dies", "127.0.0.1:1001"))
	announce(t, leaseStore(t, connect(t, srv), cfg), leaseInfo("lives", "127.0.0.1:1002"))
	ws := leaseStore(t, connect(t, srv), cfg)
	w := watchLeases(t, ws)
	w.waitIDs([]string{"dies", "lives"}, 10*time.Second)

	// The bound, and a second of slack for a machine whose scheduler
	// runs this process late: a watch that did not expire leases itself
	// would keep the dead lease for good (the bucket's MaxAge drops the
	// key without telling watchers).
	bound := cfg.TTL + 2*cfg.Renew
	const slack = time.Second
	died := time.Now()
	dying.Close() // as SIGKILL would: the key stays until it expires
	gone := w.waitIDsBy([]string{"lives"}, died.Add(bound+slack)).Sub(died)
	if gone > bound+slack {
		t.Fatalf("dead holder's lease left the watch %v after the holder died, want at most TTL + 2 × Renew = %v (and %v of slack)", gone, bound, slack)
	}
	t.Logf("dead holder's lease left the watch %v after the holder died (bound %v)", gone.Round(time.Millisecond), bound)
	eventually(t, "List without the dead lease", func() bool {
		l, err := ws.List(testCtx(t))
		return err == nil && slices.Equal(ids(l), []string{"lives"})
	})
	// A new watcher does not see it either.
	w2 := watchLeases(t, ws)
	w2.waitIDs([]string{"lives"}, 10*time.Second)
}

// TestLeaseWatchSkipsInvalid: values that are not valid leases are
// skipped and counted; valid leases still come through.
func TestLeaseWatchSkipsInvalid(t *testing.T) {
	srv := startServer(t)
	cfg := DefaultLeaseConfig()
	c := connect(t, srv)
	s := leaseStore(t, c, cfg)
	announce(t, s, leaseInfo("good", "127.0.0.1:1"))
	ctx := testCtx(t)
	put := func(key string, v []byte) {
		t.Helper()
		if _, err := s.kv.Put(ctx, key, v); err != nil {
			t.Fatal(err)
		}
	}
	mustMarshal := func(ci *messages.ClusterInfo) []byte {
		b, err := proto.Marshal(ci)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	put("junk", []byte{0xff, 0xff, 0xff})
	put("other", mustMarshal(leaseInfo("not-other", "h:1")))
	put("noaddr", mustMarshal(leaseInfo("noaddr", "")))
	w := watchLeases(t, s)
	w.waitIDs([]string{"good"}, 10*time.Second)
	if n := s.Invalid(); n != 3 {
		t.Fatalf("Invalid = %d, want 3", n)
	}
	if l, err := s.List(ctx); err != nil || !slices.Equal(ids(l), []string{"good"}) {
		t.Fatalf("List = %v, %v", ids(l), err)
	}
	if c.DecodeErrors() < 6 {
		t.Fatalf("DecodeErrors = %d, want ≥ 6 (3 by the watch, 3 by List)", c.DecodeErrors())
	}
	// A valid lease replaced by garbage is gone at once.
	put("good", []byte("garbage"))
	w.waitIDs(nil, 10*time.Second)
}

// TestLeaseWatchResyncsAfterServerRestart: a watch and a holder living
// through a NATS server restart see the holder's lease again, and a lease
// announced after the restart promptly.
func TestLeaseWatchResyncsAfterServerRestart(t *testing.T) {
	r := startRestartable(t)
	cfg := DefaultLeaseConfig()
	holder := connect(t, r.srv)
	a := announce(t, leaseStore(t, holder, cfg), leaseInfo("a", "127.0.0.1:1"))
	watcher := connect(t, r.srv)
	w := watchLeases(t, leaseStore(t, watcher, cfg))
	w.waitIDs([]string{"a"}, 10*time.Second)

	r.restart()
	eventually(t, "clients reconnect", func() bool { return watcher.NATS().IsConnected() && holder.NATS().IsConnected() })
	late := connect(t, r.srv)
	start := time.Now()
	announce(t, leaseStore(t, late, cfg), leaseInfo("b", "127.0.0.1:2"))
	w.waitIDs([]string{"a", "b"}, 2*time.Second) // well under the library's 5s idle heartbeat
	t.Logf("lease announced after the restart seen %v after Announce began (renewal failures of a during the restart: %d)", time.Since(start).Round(time.Millisecond), a.Failures())
}

// TestLeasesAdoptBucketTTL: a store asking for another TTL than the
// bucket's uses the bucket's, so holders and readers agree.
func TestLeasesAdoptBucketTTL(t *testing.T) {
	srv := startServer(t)
	first := DefaultLeaseConfig()
	first.TTL, first.Renew = 600*time.Millisecond, 100*time.Millisecond
	leaseStore(t, connect(t, srv), first)
	s := leaseStore(t, connect(t, srv), DefaultLeaseConfig())
	if got := s.Config(); got.TTL != first.TTL || got.Renew != first.TTL/3 {
		t.Fatalf("second store: TTL %v renew %v, want the bucket's %v and %v", got.TTL, got.Renew, first.TTL, first.TTL/3)
	}
}

// TestLeaseWatchHoldsExpiryWhileDisconnected: a watcher that cannot hear
// the server drops no lease however long that lasts (its expiry checks
// are held, and counted), and follows the leases again once the server is
// back.
func TestLeaseWatchHoldsExpiryWhileDisconnected(t *testing.T) {
	r := startRestartable(t)
	cfg := DefaultLeaseConfig()
	cfg.TTL, cfg.Renew = 300*time.Millisecond, 50*time.Millisecond
	holder := connect(t, r.srv)
	announce(t, leaseStore(t, holder, cfg), leaseInfo("a", "127.0.0.1:1"))
	watcher := connect(t, r.srv)
	ws := leaseStore(t, watcher, cfg)
	w := watchLeases(t, ws)
	w.waitIDs([]string{"a"}, 10*time.Second)

	r.srv.Close()
	// Two held checks: the lease was due (no renewal for TTL) at least
	// twice while the connection was down.
	eventually(t, "expiry checks held", func() bool { return ws.ExpiryHeld() >= 2 })
	if live, _ := w.state(); !slices.Equal(ids(live), []string{"a"}) {
		t.Fatalf("a watcher cut off from NATS dropped leases: %v", ids(live))
	}
	r.start()
	eventually(t, "clients reconnect", func() bool { return watcher.NATS().IsConnected() && holder.NATS().IsConnected() })
	w.waitIDs([]string{"a"}, 10*time.Second)
}

// TestLeaseLapsedAfterRenewalsStoppedLongerThanTTL: renewals that
// succeed less than TTL apart by the lease's clock are no lapse, however
// late the machine runs them; the first renewal that succeeds more than
// TTL after the previous one (the store was down meanwhile) reports the
// lapse. The lease's clock moves only when the test moves it: by 0.9 ×
// TTL after each renewal, and by 1.05 × TTL during the outage, so the
// lapse check is pinned between the two.
func TestLeaseLapsedAfterRenewalsStoppedLongerThanTTL(t *testing.T) {
	r := startRestartable(t)
	var clock manualClock
	clock.set(time.Now())
	cfg := LeaseConfig{TTL: time.Second, Renew: 100 * time.Millisecond, Bucket: "lapse", Clock: clock.now}
	holder := connect(t, r.srv)
	l := announce(t, leaseStore(t, holder, cfg), leaseInfo("a", "127.0.0.1:1"))
	lapsed := func() bool {
		select {
		case <-l.Lapsed():
			return true
		default:
			return false
		}
	}
	// A renewal shows as Unrenewed 0: it ran at the clock's present time.
	// The clock then moves on by step, so it moves at most once between
	// two renewals: no two are more than step apart.
	step := cfg.TTL * 9 / 10
	const want = 20
	renewals := 0
	testutil.Eventually(t, 60*time.Second, fmt.Sprintf("%d renewals", want), func() bool {
		if lapsed() {
			t.Fatalf("lapsed while renewals succeed at most %v apart (TTL %v; %d seen)", step, cfg.TTL, renewals)
		}
		if l.Unrenewed() != 0 {
			return false
		}
		if renewals++; renewals == want {
			return true
		}
		clock.advance(step)
		return false
	})
	// The server goes down; once a renewal has failed (the renewer is
	// past its check of the last success), the outage lasts 1.05 × TTL
	// by the lease's clock.
	failures := l.Failures()
	r.srv.Close()
	eventually(t, "a renewal fails", func() bool { return l.Failures() > failures })
	if lapsed() {
		t.Fatalf("lapsed while renewals succeed at most %v apart (TTL %v)", step, cfg.TTL)
	}
	clock.advance(cfg.TTL + cfg.Renew/2)
	r.start()
	select {
	case <-l.Lapsed():
	case <-time.After(15 * time.Second):
		t.Fatalf("no lapse reported after a %v outage (renewal failures %d)", cfg.TTL+cfg.Renew/2, l.Failures())
	}
	if got := l.Info().GetMemberId(); got != "a" {
		t.Fatalf("Info member id %q", got)
	}
}

// manualClock is a clock (LeaseConfig.Clock) that moves only when told.
type manualClock struct{ ns atomic.Int64 }

func (c *manualClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *manualClock) set(t time.Time)         { c.ns.Store(t.UnixNano()) }
func (c *manualClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestLeaseWatchForgivesItsOwnPause: an expiry check that runs late (the
// watching process was stopped) does not count the time it was stopped
// against the leases: renewals of that time may not be delivered yet.
func TestLeaseWatchForgivesItsOwnPause(t *testing.T) {
	srv := startServer(t)
	cfg := LeaseConfig{TTL: time.Second, Renew: 300 * time.Millisecond, Bucket: "pause"}
	s := leaseStore(t, connect(t, srv), cfg)
	w, err := s.kv.WatchAll(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer stopWatcher(w)
	now := time.Now()
	lw := &leaseWatch{s: s, fn: func([]*messages.ClusterInfo) {}, live: map[string]*leaseEntry{
		"a": {ci: leaseInfo("a", "127.0.0.1:1"), seen: now.Add(-1500 * time.Millisecond)},
	}}
	for e := range w.Updates() { // the initial (empty) state
		if e == nil {
			break
		}
	}
	// The check was due 1.2s ago: the watch was stopped for that long. Of
	// the 1.5s since the last renewal only 0.3s were lived: not expired.
	lw.due = now.Add(-1200 * time.Millisecond)
	lw.expire(w)
	if lw.live["a"] == nil {
		t.Fatal("a lease expired for time the watch itself was stopped")
	}
	if s.PausesForgiven() != 1 {
		t.Fatalf("PausesForgiven %d", s.PausesForgiven())
	}
	// On time, the same age expires it.
	lw.live["a"].seen = time.Now().Add(-1500 * time.Millisecond)
	lw.due = time.Now()
	lw.expire(w)
	if lw.live["a"] != nil {
		t.Fatal("a lease 1.5s without renewal (TTL 1s) did not expire")
	}
}

// TestStoreOutage: a renewal gap is an outage of the store only while
// the bucket took fewer writes than the other live leases make in a TTL.
func TestStoreOutage(t *testing.T) {
	cfg := DefaultLeaseConfig() // 3 renewals per TTL
	for _, c := range []struct {
		rev, prev uint64
		others    int
		want      bool
	}{
		{rev: 11, prev: 10, others: 2, want: true},  // nobody wrote meanwhile
		{rev: 16, prev: 10, others: 2, want: true},  // 5 writes: others renewed after the outage, before this one
		{rev: 17, prev: 10, others: 2, want: false}, // 6 writes: both others renewed for a whole TTL
		{rev: 11, prev: 10, others: 0, want: false}, // alone: no way to tell
		{rev: 10, prev: 10, others: 2, want: false}, // no newer revision: no claim
	} {
		if got := storeOutage(c.rev, c.prev, c.others, cfg); got != c.want {
			t.Errorf("storeOutage(rev %d, prev %d, others %d) = %v, want %v", c.rev, c.prev, c.others, got, c.want)
		}
	}
}
