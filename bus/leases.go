package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/internal/backoff"
	"github.com/scanplane/scanplane/messages"
)

// LeaseConfig configures coordinator leases (see LeaseStore).
type LeaseConfig struct {
	// TTL is how long a lease lives without a renewal: the bucket's MaxAge
	// (the server drops older entries) and the time after which a watcher
	// that saw no renewal takes the lease as gone. At least 100ms (the
	// smallest MaxAge JetStream accepts). Default 3s.
	TTL time.Duration
	// Renew is the renewal interval; must be < TTL. Default 1s.
	Renew time.Duration
	// Bucket is the JetStream KV bucket holding the leases (file storage,
	// so a restarted standalone server still has the bucket; history 1;
	// Config.Replicas of the Conn). Default "scanplane-coordinators".
	Bucket string
	// Clock reads the time a lease holder judges its renewals by: the gap
	// between two successful ones (Lease.Lapsed) and Lease.Unrenewed.
	// Renewals are sent every Renew of real time whatever it says. nil =
	// time.Now. Default nil.
	Clock func() time.Time
}

// DefaultLeaseConfig returns the defaults documented on LeaseConfig.
func DefaultLeaseConfig() LeaseConfig {
	return LeaseConfig{TTL: 3 * time.Second, Renew: time.Second, Bucket: "scanplane-coordinators"}
}

// minLeaseTTL is the smallest MaxAge JetStream accepts for a stream.
const minLeaseTTL = 100 * time.Millisecond

// Validate reports the first invalid field by name.
func (c LeaseConfig) Validate() error {
	switch {
	case c.TTL < minLeaseTTL:
		return fmt.Errorf("bus: LeaseConfig.TTL %s: must be at least %s", c.TTL, minLeaseTTL)
	case c.Renew <= 0:
		return fmt.Errorf("bus: LeaseConfig.Renew %s: must be positive", c.Renew)
	case c.Renew >= c.TTL:
		return fmt.Errorf("bus: LeaseConfig.Renew %s: must be less than LeaseConfig.TTL %s", c.Renew, c.TTL)
	case !validBucket(c.Bucket):
		return fmt.Errorf("bus: LeaseConfig.Bucket %q: want 1+ characters of [A-Za-z0-9_-]", c.Bucket)
	}
	return nil
}

// MaxMemberIDLen bounds ClusterInfo.MemberId, the lease key.
const MaxMemberIDLen = 128

// ErrBadLease is wrapped by the errors of CheckLease.
var ErrBadLease = errors.New("bus: bad lease")

// CheckLease reports why ci cannot be the lease stored under key: key must
// equal ci.MemberId, be 1..MaxMemberIDLen characters of [A-Za-z0-9_=-],
// and ci must name its coordinator address. Announce checks what it sends
// and every reader checks what it receives.
func CheckLease(key string, ci *messages.ClusterInfo) error {
	switch {
	case ci == nil:
		return fmt.Errorf("%w: no ClusterInfo", ErrBadLease)
	case ci.GetMemberId() != key:
		return fmt.Errorf("%w: member_id %q is not the key %q", ErrBadLease, ci.GetMemberId(), key)
	case key == "" || len(key) > MaxMemberIDLen || strings.ContainsFunc(key, func(r rune) bool { return !isTokenRune(r) && r != '=' }):
		return fmt.Errorf("%w: member_id %q: want 1..%d characters of [A-Za-z0-9_=-]", ErrBadLease, key, MaxMemberIDLen)
	case ci.GetCoordinatorAddress() == "":
		return fmt.Errorf("%w: member %q: empty coordinator_address", ErrBadLease, key)
	}
	return nil
}

// LeaseStore keeps one lease per coordinator in a JetStream KV bucket:
// key = ClusterInfo.MemberId, value = the ClusterInfo (protobuf). The
// holder renews it every LeaseConfig.Renew (Lease); the bucket's MaxAge
// is LeaseConfig.TTL, so the server drops a lease nobody renewed for TTL.
// A KV watch does not report such an expiry, so Watch also judges it with
// this process's clock. (JetStream's per-message TTL with limit markers,
// jetstream.LimitMarkerTTL, would report it, but needs nats-server 2.11
// on every node and drops a lease a leaderless stream could not renew,
// where Watch holds it for the election.) Safe for concurrent use.
type LeaseStore struct {
	conn     *Conn
	cfg      LeaseConfig
	kv       jetstream.KeyValue
	invalid  atomic.Uint64
	held     atomic.Uint64
	forgiven atomic.Uint64
	lagging  atomic.Uint64
	// renewed: member id -> the local time its latest revision reached a
	// watch of this store (Renewed).
	renewed sync.Map
	// watched: a watch of this store runs; watchLive is how many leases
	// it held when it last called its fn.
	watched   atomic.Bool
	watchLive atomic.Int64
}

// othersLive is how many leases other than member's a watch of this store
// holds; false without a watch.
func (s *LeaseStore) othersLive(member string) (int, bool) {
	if !s.watched.Load() {
		return 0, false
	}
	n := int(s.watchLive.Load())
	if _, ok := s.renewed.Load(member); ok {
		n--
	}
	return max(n, 0), true
}

// Fresh returns copies of leases whose RenewedUnixMs is when their latest
// renewal reached a watch of this store (see Renewed), where known.
func (s *LeaseStore) Fresh(leases []*messages.ClusterInfo) []*messages.ClusterInfo {
	out := make([]*messages.ClusterInfo, len(leases))
	for i, ci := range leases {
		c := proto.Clone(ci).(*messages.ClusterInfo)
		if t, ok := s.Renewed(ci.GetMemberId()); ok {
			c.RenewedUnixMs = t.UnixMilli()
		}
		out[i] = c
	}
	return out
}

// Renewed is when the latest renewal of member's lease reached a watch of
// this store, by this process's clock (false: none seen). A watch calls
// its fn only when a lease changes; this says how fresh each one is.
func (s *LeaseStore) Renewed(member string) (time.Time, bool) {
	v, ok := s.renewed.Load(member)
	if !ok {
		return time.Time{}, false
	}
	return v.(time.Time), true
}

// Leases binds the lease bucket, creating it if missing with TTL
// cfg.TTL. The bucket's TTL (MaxAge) is the cluster's: if the bucket
// exists with another one, the store adopts it, with a warning (and a
// Renew of a third of it if cfg.Renew is not below it), so every holder
// and reader agrees on when a lease is gone.
func (c *Conn) Leases(ctx context.Context, cfg LeaseConfig) (*LeaseStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	kv, err := c.bucket(ctx, jetstream.KeyValueConfig{
		Bucket:      cfg.Bucket,
		Description: "scanplane coordinator leases",
		History:     1,
		TTL:         cfg.TTL,
		Storage:     jetstream.FileStorage,
		Replicas:    c.cfg.Replicas,
	})
	if err != nil {
		return nil, err
	}
	st, err := timed(c, ctx, func(octx context.Context) (jetstream.KeyValueStatus, error) { return kv.Status(octx) })
	if err != nil {
		return nil, c.storeErr(ctx, "status of bucket "+cfg.Bucket, err)
	}
	if ttl := st.TTL(); ttl != cfg.TTL && ttl >= minLeaseTTL {
		adopted := cfg
		adopted.TTL = ttl
		if adopted.Renew >= ttl {
			adopted.Renew = ttl / 3
		}
		c.log.Warn("lease bucket exists with another TTL; using it", "bucket", cfg.Bucket,
			"ttl", ttl, "renew", adopted.Renew, "asked_ttl", cfg.TTL, "asked_renew", cfg.Renew)
		cfg = adopted
	}
	return &LeaseStore{conn: c, cfg: cfg, kv: kv}, nil
}

// Config returns the store's configuration (with the bucket's TTL).
func (s *LeaseStore) Config() LeaseConfig { return s.cfg }

// Invalid counts leases read from the bucket and skipped: undecodable, or
// failing CheckLease. Each is also counted in the Conn's DecodeErrors.
func (s *LeaseStore) Invalid() uint64 { return s.invalid.Load() }

// ExpiryHeld counts the times a watch of this store had a lease to expire
// but put it off because its NATS connection was down or did not answer a
// ping, or the lease bucket's stream had no leader (see Watch).
func (s *LeaseStore) ExpiryHeld() uint64 { return s.held.Load() }

// WatchLagged counts leases a watch was about to expire that the bucket
// showed renewed (the watch had not delivered the renewal yet).
func (s *LeaseStore) WatchLagged() uint64 { return s.lagging.Load() }

// PausesForgiven counts expiry checks that ran late (this process was
// stopped or paused) and did not count that time against any lease.
func (s *LeaseStore) PausesForgiven() uint64 { return s.forgiven.Load() }

// decode turns a KV entry into a checked lease; nil (counted and logged)
// if it is not one.
func (s *LeaseStore) decode(e jetstream.KeyValueEntry) *messages.ClusterInfo {
	ci := new(messages.ClusterInfo)
	err := proto.Unmarshal(e.Value(), ci)
	if err == nil {
		err = CheckLease(e.Key(), ci)
	}
	if err != nil {
		s.invalid.Add(1)
		s.conn.decodeErrors.Add(1)
		s.conn.log.Warn("ignoring invalid coordinator lease", "bucket", s.cfg.Bucket, "key", e.Key(), "err", err)
		return nil
	}
	return ci
}

// Lease is one announced lease, renewed until Close.
type Lease struct {
	store    *LeaseStore
	key      string
	ctx      context.Context // cancelled by Close: stops the renewer and its put
	cancel   context.CancelFunc
	done     chan struct{} // closed when the renewer has returned
	failures atomic.Uint64
	// lapsed is closed when a renewal succeeded more than TTL after the
	// previous one; lastOK is when the last put succeeded (renewer only).
	lapsed     chan struct{}
	lapsedOnce sync.Once
	lastOK     time.Time
	lastRev    uint64 // the bucket revision of the last successful put (renewer only)
	// lastPut: unix nanoseconds of the last successful put.
	lastPut atomic.Int64

	mu sync.Mutex
	ci *messages.ClusterInfo // what the next renewal sends

	closeOnce sync.Once
	closeErr  error
}

// Announce puts ci under key ci.MemberId and renews it every Renew until
// the Lease is closed (Close deletes the key: a clean leave is seen at
// once) or the Conn is closed (then the lease expires after TTL, as a
// killed process's would). ci must pass CheckLease. ctx bounds the first
// put only, whose failure is returned; a failing renewal is retried at the
// next interval, counted (Lease.Failures) and logged, never fatal. Each
// renewal sets RenewedUnixMs.
func (s *LeaseStore) Announce(ctx context.Context, ci *messages.ClusterInfo) (*Lease, error) {
	if err := CheckLease(ci.GetMemberId(), ci); err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.Background())
	l := &Lease{store: s, key: ci.GetMemberId(), ctx: lctx, cancel: cancel, done: make(chan struct{}),
		ci: proto.Clone(ci).(*messages.ClusterInfo), lapsed: make(chan struct{})}
	rev, err := l.put(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	l.lastOK, l.lastRev = l.now(), rev
	l.lastPut.Store(l.lastOK.UnixNano())
	go l.renewLoop()
	return l, nil
}

// Lapsed is closed once a renewal succeeded more than TTL after the
// previous successful one while others could renew: the holder was paused
// or cut off from NATS for that long, so watchers may have taken the
// lease as gone meanwhile (and a Proto.Actor cluster blocks a member id
// that left). When this store is watched, the bucket's revisions tell the
// two apart: a gap in which the bucket took fewer writes than the other
// live leases make in a TTL is an outage of the store (a leader election,
// a stalled machine), during which watchers hold every lease (see Watch),
// and is no lapse. Time the bucket had no leader, as this holder saw it
// when a renewal failed, does not count either. The lease is still renewed; the holder decides what to do (a
// coordinator rejoins under a new member id).
func (l *Lease) Lapsed() <-chan struct{} { return l.lapsed }

// Unrenewed is how long ago the lease was last written successfully, by
// LeaseConfig.Clock.
func (l *Lease) Unrenewed() time.Duration {
	return l.now().Sub(time.Unix(0, l.lastPut.Load()))
}

// now reads LeaseConfig.Clock.
func (l *Lease) now() time.Time {
	if c := l.store.cfg.Clock; c != nil {
		return c()
	}
	return time.Now()
}

// Info returns a copy of the content the next renewal sends.
func (l *Lease) Info() *messages.ClusterInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return proto.Clone(l.ci).(*messages.ClusterInfo)
}

// MemberID returns the lease key.
func (l *Lease) MemberID() string { return l.key }

// Failures counts renewals that failed.
func (l *Lease) Failures() uint64 { return l.failures.Load() }

// Update replaces the lease's content; the next renewal sends it. The
// member id cannot change (ci.MemberId is ignored); content that would
// fail CheckLease is refused with a warning.
func (l *Lease) Update(ci *messages.ClusterInfo) {
	c := proto.Clone(ci).(*messages.ClusterInfo)
	c.MemberId = l.key
	if err := CheckLease(l.key, c); err != nil {
		l.store.conn.log.Warn("lease update refused", "err", err)
		return
	}
	l.mu.Lock()
	l.ci = c
	l.mu.Unlock()
}

// put writes the current content with a fresh RenewedUnixMs, bounded by
// ctx and Config.OpTimeout, and returns its revision.
func (l *Lease) put(ctx context.Context) (uint64, error) {
	l.mu.Lock()
	ci := proto.Clone(l.ci).(*messages.ClusterInfo)
	l.mu.Unlock()
	ci.RenewedUnixMs = time.Now().UnixMilli()
	data, err := proto.Marshal(ci)
	if err != nil {
		return 0, fmt.Errorf("bus: encode lease %q: %w", l.key, err)
	}
	c := l.store.conn
	if err := c.checkSize("lease "+l.key, len(data), 1<<20); err != nil {
		return 0, err
	}
	rev, err := timed(c, ctx, func(octx context.Context) (uint64, error) { return l.store.kv.Put(octx, l.key, data) })
	if err != nil {
		return 0, c.storeErr(ctx, "put lease "+l.key, err)
	}
	return rev, nil
}

// renewLoop renews the lease every Renew until Close or Conn.Close. Each
// put is bounded by TTL: a later one would not keep the lease alive.
func (l *Lease) renewLoop() {
	defer close(l.done)
	c, cfg := l.store.conn, l.store.cfg
	t := time.NewTicker(cfg.Renew)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-c.closed:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(l.ctx, cfg.TTL)
		rev, err := l.put(ctx)
		cancel()
		switch {
		case err != nil && l.ctx.Err() != nil:
			return
		case err != nil:
			if l.store.leaderless(min(cfg.TTL/2, time.Second)) {
				// No holder can renew now, and watchers hold their expiry
				// meanwhile: this time does not count toward a lapse.
				l.lastOK = l.now()
			}
			n := l.failures.Add(1)
			if !failing || n%10 == 0 {
				c.log.Warn("lease renewal failed; retrying", "member", l.key, "failures", n, "err", err)
			}
			failing = true
		default:
			now := l.now()
			l.lastPut.Store(now.UnixNano())
			if gap := now.Sub(l.lastOK); gap > cfg.TTL {
				if others, watched := l.store.othersLive(l.key); watched && storeOutage(rev, l.lastRev, others, cfg) {
					c.log.Info("lease renewed after a gap longer than its TTL in which no other lease was renewed either: a store outage, not a lapse",
						"member", l.key, "gap", gap.Round(time.Millisecond), "ttl", cfg.TTL, "writes_meanwhile", rev-l.lastRev-1)
				} else {
					c.log.Warn("lease renewed after a gap longer than its TTL: watchers may have dropped it", "member", l.key,
						"gap", gap.Round(time.Millisecond), "ttl", cfg.TTL)
					l.lapsedOnce.Do(func() { close(l.lapsed) })
				}
			}
			l.lastOK, l.lastRev = now, rev
			if failing {
				c.log.Info("lease renewed again", "member", l.key, "failures", l.failures.Load())
				failing = false
			}
		}
	}
}

// storeOutage reports whether a renewal at revision rev, after one at
// prev, found the bucket written fewer times meanwhile than `others` live
// leases are renewed in one TTL: they could not renew either, so watchers
// held every lease (see Watch) rather than expire this one.
func storeOutage(rev, prev uint64, others int, cfg LeaseConfig) bool {
	if others == 0 || rev <= prev {
		return false
	}
	perTTL := max(uint64(cfg.TTL/cfg.Renew), 1)
	return rev-prev-1 < uint64(others)*perTTL
}

// Close stops renewing and deletes the lease, so watchers see the leave at
// once. The delete is bounded by TTL (after which the lease is gone
// anyway); its failure is returned. Safe to call more than once.
func (l *Lease) Close() error {
	l.closeOnce.Do(func() {
		l.cancel()
		<-l.done
		c := l.store.conn
		ctx, cancel := context.WithTimeout(context.Background(), l.store.cfg.TTL)
		defer cancel()
		if _, err := timed(c, ctx, func(octx context.Context) (struct{}, error) {
			return struct{}{}, l.store.kv.Delete(octx, l.key)
		}); err != nil {
			l.closeErr = c.storeErr(ctx, "delete lease "+l.key, err)
		}
	})
	return l.closeErr
}

// List returns the live leases once, sorted by MemberId: those the server
// holds (it drops a lease not renewed for TTL, by its own clock). Invalid
// entries are skipped (see Invalid).
func (s *LeaseStore) List(ctx context.Context) ([]*messages.ClusterInfo, error) {
	entries, err := s.conn.listEntries(ctx, s.kv, "list leases", false, ">")
	if err != nil {
		return nil, err
	}
	var out []*messages.ClusterInfo
	for _, e := range entries {
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		if ci := s.decode(e); ci != nil {
			out = append(out, ci)
		}
	}
	slices.SortFunc(out, func(a, b *messages.ClusterInfo) int { return strings.Compare(a.GetMemberId(), b.GetMemberId()) })
	return out, nil
}

// Watch calls fn (serially, never concurrently) with the full set of live
// leases, sorted by MemberId: first once with the current state (before
// Watch returns, unless that takes longer than 10s or ctx ends) and then
// on every change — a new or changed lease, a deleted one, and one that
// expired. Renewals that change nothing but RenewedUnixMs do not call fn.
// fn owns the slice and the messages it is given.
//
// Expiry is judged with this process's clock: a lease of which no renewal
// arrived for TTL is gone. Before expiring anything the watch checks that
// it can still hear the server (the connection is up and answers a ping
// within min(TTL/2, 1s)), so a stalled or lost connection does not make
// every coordinator look dead; the check is repeated until it passes, and
// a node that does not answer it is left for another node of the cluster
// (the watch re-synchronises there, as after any reconnect). It
// likewise holds while the bucket's stream has no leader (a NATS node was
// lost and JetStream elects a new one, which takes seconds: nobody can
// renew meanwhile), and then gives every lease a full TTL. With two or
// more leases it holds too while not one of them was renewed for TTL —
// the holders did not all stop at once; the bucket took no writes — and
// gives every lease a full TTL from the first renewal after. A lease is
// gone only once the stream's leader says it has no newer revision than
// the watch (a replica behind the others would answer from what it has).
//
// After every NATS reconnect the watch re-synchronises with a new
// watcher: its initial values update the set (a lease whose revision did
// not change keeps the time it was last renewed); a lease it does not
// deliver is not dropped at once but expires by the TTL unless renewed
// (the initial values of a watcher on a node whose stream is still
// electing a leader can be incomplete). Watch
// returns when the watch is set up; it stops when ctx ends or the Conn
// closes.
func (s *LeaseStore) Watch(ctx context.Context, fn func(live []*messages.ClusterInfo)) error {
	reconnected := s.conn.reconnectSignal() // before the watcher: no reconnect is missed
	wctx, wcancel := watchCtx(ctx)
	w, err := s.kv.WatchAll(wctx)
	if err != nil {
		wcancel()
		return s.conn.storeErr(ctx, "watch leases", err)
	}
	lw := &leaseWatch{s: s, fn: fn, live: map[string]*leaseEntry{}, revs: revisions{}, syncing: map[string]bool{}, initial: make(chan struct{}),
		lastRenewal: time.Now()}
	s.watched.Store(true)
	initial := lw.initial
	go func() {
		defer wcancel()
		lw.loop(ctx, wctx, w, reconnected)
	}()
	select {
	case <-initial:
	case <-ctx.Done():
	case <-s.conn.closed:
	case <-time.After(watchSetupTimeout):
		s.conn.log.Warn("lease watch: initial values not complete, continuing")
	}
	return nil
}

// leaseEntry is one live lease as a watch sees it.
type leaseEntry struct {
	ci   *messages.ClusterInfo
	rev  uint64
	seen time.Time // local time its latest revision arrived
}

// leaseWatch is the state of one Watch, owned by its loop goroutine.
type leaseWatch struct {
	s       *LeaseStore
	fn      func([]*messages.ClusterInfo)
	live    map[string]*leaseEntry
	revs    revisions       // the highest revision applied per key (replays refused)
	syncing map[string]bool // keys seen since the current watcher started; nil once its initial values are in
	changed bool            // live changed since fn was last called
	initial chan struct{}   // closed after the first fn call; nil after that
	holdOff time.Time       // no expiry before this (the connection check failed)
	due     time.Time       // when the expiry timer was armed to fire
	outage  bool            // the bucket had no leader, or no lease was renewed, at the last check
	// lastRenewal is when a lease last got a new revision; maxRev is the
	// highest revision delivered.
	lastRenewal time.Time
	maxRev      uint64
	// behind: an expiry check found a renewal the watcher had not
	// delivered; the loop sets up a new watcher.
	behind bool
}

// loop runs the watch until ctx ends or the Conn closes; wctx is
// watchCtx(ctx), for the watchers.
func (lw *leaseWatch) loop(ctx, wctx context.Context, w jetstream.KeyWatcher, reconnected <-chan struct{}) {
	c := lw.s.conn
	defer func() {
		if w != nil {
			stopWatcher(w)
		}
	}()
	// renew replaces the watcher (w: the old one, stopped unless nil);
	// false: ctx ended or the Conn closed first.
	renew := func() bool {
		if w != nil {
			stopWatcher(w)
		}
		if w, reconnected = c.rewatch(ctx, "lease watch", reconnected, func() (jetstream.KeyWatcher, error) { return lw.s.kv.WatchAll(wctx) }); w == nil {
			return false
		}
		lw.syncing = map[string]bool{}
		return true
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		lw.arm(timer)
		select {
		case <-ctx.Done():
			return
		case <-c.closed:
			return
		case <-reconnected:
			reconnected = c.reconnectSignal()
			c.log.Info("lease watch: re-synchronising after a NATS reconnect")
			if !renew() {
				return
			}
		case e, ok := <-w.Updates():
			if !ok {
				w = nil
				if ctx.Err() != nil || c.nc.IsClosed() {
					return
				}
				c.log.Warn("lease watch: watcher ended; setting up a new one")
				if !renew() {
					return
				}
				continue
			}
			lw.handle(e, time.Now())
		case <-timer.C:
			lw.expire(w)
			if lw.behind {
				// The leader has renewals this watcher did not deliver
				// for a TTL: its consumer is gone (it lived on a node
				// that died) or stuck, and new leases would not reach
				// this watch until the library noticed.
				lw.behind = false
				c.log.Info("lease watch: behind the bucket; setting up a new watcher")
				if !renew() {
					return
				}
			}
		}
		lw.emit()
	}
}

// arm sets timer to the next moment a lease could expire.
func (lw *leaseWatch) arm(timer *time.Timer) {
	next := time.Now().Add(time.Hour)
	if lw.syncing == nil {
		for _, le := range lw.live {
			if d := le.seen.Add(lw.s.cfg.TTL); d.Before(next) {
				next = d
			}
		}
	}
	if next.Before(lw.holdOff) {
		next = lw.holdOff
	}
	lw.due = next
	timer.Reset(time.Until(next))
}

// handle applies one watcher delivery; e == nil ends a (re)sync.
func (lw *leaseWatch) handle(e jetstream.KeyValueEntry, now time.Time) {
	if e == nil {
		// End of a (re)sync. A lease the new watcher did not deliver is
		// not dropped here: after a reconnect to another NATS node whose
		// stream is still electing a leader, the initial values can come
		// back incomplete, and dropping what they lack would make every
		// coordinator look gone at once. It stays until it expires by the
		// TTL, like any lease that is no longer renewed.
		lw.syncing = nil
		return
	}
	key := e.Key()
	if !lw.revs.fresh(key, e.Revision()) {
		lw.s.conn.replayed.Add(1)
		return
	}
	lw.maxRev = max(lw.maxRev, e.Revision())
	old := lw.live[key]
	var ci *messages.ClusterInfo
	if e.Operation() == jetstream.KeyValuePut {
		ci = lw.s.decode(e)
	}
	if ci == nil { // deleted, purged, or not a valid lease
		if old != nil {
			delete(lw.live, key)
			lw.s.renewed.Delete(key)
			lw.changed = true
		}
		return
	}
	seen := now
	if old != nil && old.rev == e.Revision() {
		seen = old.seen // the same revision again (a resync): not a renewal
	} else {
		lw.lastRenewal = now
		if lw.outage {
			// The first renewal after an outage: from now on every lease
			// has a full TTL to be renewed again.
			lw.outage = false
			for _, le := range lw.live {
				le.seen = now
			}
		}
	}
	lw.live[key] = &leaseEntry{ci: ci, rev: e.Revision(), seen: seen}
	lw.s.renewed.Store(key, seen)
	if lw.syncing != nil {
		lw.syncing[key] = true
	}
	if old == nil || !sameLease(old.ci, ci) {
		lw.changed = true
	}
}

// sameLease compares two leases ignoring RenewedUnixMs.
func sameLease(a, b *messages.ClusterInfo) bool {
	ra, rb := a.GetRenewedUnixMs(), b.GetRenewedUnixMs()
	a.RenewedUnixMs, b.RenewedUnixMs = 0, 0
	eq := proto.Equal(a, b)
	a.RenewedUnixMs, b.RenewedUnixMs = ra, rb
	return eq
}

// expire drops the leases not renewed for TTL — after taking in what the
// watcher has delivered meanwhile and checking the connection (see Watch).
func (lw *leaseWatch) expire(w jetstream.KeyWatcher) {
	cfg := lw.s.cfg
	if late := time.Since(lw.due); late > pauseForgiven {
		// The timer fired late: this process was stopped, paused or
		// starved meanwhile, and renewals of that time may still sit in
		// the connection's buffers, delivered after the ping below. Only
		// time this watch was running counts against a lease.
		for _, le := range lw.live {
			le.seen = le.seen.Add(late)
		}
		lw.s.forgiven.Add(1)
	}
	lw.drain(w)
	if lw.syncing != nil || !lw.anyDue(time.Now()) {
		return
	}
	if !lw.s.conn.checkNode(context.Background(), min(cfg.TTL/2, maxNodeCheck)) {
		lw.holdOff = time.Now().Add(max(cfg.Renew/2, 50*time.Millisecond))
		lw.s.held.Add(1)
		return
	}
	lw.drain(w) // renewals that arrived during the ping
	if lw.syncing != nil {
		return
	}
	if !lw.anyDue(time.Now()) {
		return
	}
	leaderless, lastSeq := lw.s.bucketState(min(cfg.TTL/2, time.Second))
	if leaderless {
		// Nobody can renew: hold, and give every lease a full TTL from
		// the moment the bucket can take renewals again.
		lw.holdOff = time.Now().Add(max(cfg.Renew/2, 50*time.Millisecond))
		lw.outage = true
		lw.s.held.Add(1)
		return
	}
	if lw.outage {
		lw.outage = false
		now := time.Now()
		for _, le := range lw.live {
			le.seen = now
		}
		return
	}
	now := time.Now()
	if len(lw.live) >= 2 && now.Sub(lw.lastRenewal) >= cfg.TTL && lastSeq <= lw.maxRev {
		// Not one lease was renewed for TTL, and the bucket took no write
		// this watch has not seen: the holders did not all stop at once,
		// the bucket could not take writes (an election, a stalled
		// machine). Hold until renewals come again. (Writes the watch has
		// not delivered are checked lease by lease below.)
		lw.holdOff = now.Add(max(cfg.Renew/2, 50*time.Millisecond))
		lw.outage = true
		lw.s.held.Add(1)
		return
	}
	for k, le := range lw.live {
		if now.Sub(le.seen) < cfg.TTL {
			continue
		}
		// Ask the bucket's leader before believing the watch: its
		// deliveries can lag (after a reconnect to another node, or behind
		// a busy connection), and a renewal it has not delivered yet is
		// not an expiry. A replica that is behind (just back from a pause,
		// it drops by MaxAge what the others renewed meanwhile) would
		// answer from what it has. Only a lease the leader no longer has,
		// or still has at the same revision, is gone; no answer: decide
		// later, and give every lease a full TTL once the bucket answers.
		gctx, cancel := context.WithTimeout(context.Background(), min(cfg.TTL/2, time.Second))
		_, rev, deleted, err := lw.s.conn.leaderGet(gctx, cfg.Bucket, kvSubjectPrefix+cfg.Bucket+"."+k)
		cancel()
		switch {
		case err == nil && !deleted && rev != le.rev:
			// Renewed, and the watcher has not delivered it: the new
			// watcher will.
			le.seen = time.Now()
			lw.s.renewed.Store(k, le.seen)
			lw.s.lagging.Add(1)
			lw.behind = true
			continue
		case err != nil && !errors.Is(err, jetstream.ErrMsgNotFound):
			lw.holdOff = time.Now().Add(max(cfg.Renew/2, 50*time.Millisecond))
			lw.outage = true
			lw.s.held.Add(1)
			continue
		}
		lw.s.conn.log.Info("coordinator lease expired", "member", k, "address", le.ci.GetCoordinatorAddress(),
			"last_renewal_seen", now.Sub(le.seen).Round(time.Millisecond))
		delete(lw.live, k)
		lw.s.renewed.Delete(k)
		lw.changed = true
	}
}

// leaderless reports whether the lease bucket's stream has no leader (or
// does not answer within d): then no holder can renew its lease, and
// neither holders nor watchers count that time (a JetStream leader
// election takes seconds, longer than the default TTL).
//
// A connection that is down is this process's trouble, not the bucket's:
// not leaderless (a holder cut off from NATS may well have been dropped).
// Connected but without an answer (JetStream answers stream info from the
// stream's leader) counts as leaderless.
func (s *LeaseStore) leaderless(d time.Duration) bool {
	leaderless, _ := s.bucketState(d)
	return leaderless
}

// bucketState is leaderless and, when the stream answered, the sequence
// of the last write to the bucket (0: unknown).
func (s *LeaseStore) bucketState(d time.Duration) (leaderless bool, lastSeq uint64) {
	if !s.conn.nc.IsConnected() {
		return false, 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	st, err := s.conn.js.Stream(ctx, kvStreamPrefix+s.cfg.Bucket)
	if err != nil {
		return s.conn.nc.IsConnected(), 0
	}
	ci := st.CachedInfo()
	if ci == nil {
		return false, 0
	}
	if ci.Cluster == nil {
		return false, ci.State.LastSeq // standalone server: it answered, so it has its stream
	}
	return ci.Cluster.Leader == "", ci.State.LastSeq
}

// pauseForgiven: an expiry check this much later than armed forgives its
// lateness (see expire).
const pauseForgiven = 250 * time.Millisecond

// anyDue reports whether a lease has had no renewal for TTL at now.
func (lw *leaseWatch) anyDue(now time.Time) bool {
	for _, le := range lw.live {
		if now.Sub(le.seen) >= lw.s.cfg.TTL {
			return true
		}
	}
	return false
}

// drain handles what the watcher has delivered already, without waiting.
func (lw *leaseWatch) drain(w jetstream.KeyWatcher) {
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			lw.handle(e, time.Now())
		default:
			return
		}
	}
}

// emit calls fn if the set changed (and the first time, once the initial
// values are in), unless a resync is under way.
func (lw *leaseWatch) emit() {
	if lw.syncing != nil || (!lw.changed && lw.initial == nil) {
		return
	}
	out := make([]*messages.ClusterInfo, 0, len(lw.live))
	for _, le := range lw.live {
		out = append(out, proto.Clone(le.ci).(*messages.ClusterInfo))
	}
	slices.SortFunc(out, func(a, b *messages.ClusterInfo) int { return strings.Compare(a.GetMemberId(), b.GetMemberId()) })
	lw.s.watchLive.Store(int64(len(out)))
	lw.changed = false
	lw.fn(out)
	if lw.initial != nil {
		close(lw.initial)
		lw.initial = nil
	}
}

// stopWatcher stops w, then drains it so a delivery blocked on the full
// channel returns and the library closes the channel.
func stopWatcher(w jetstream.KeyWatcher) {
	_ = w.Stop()
	for range w.Updates() {
	}
}

// rewatch sets up a new watcher with start, retrying after the delays of
// watchBackoff; nil when ctx ends or the connection closes first. A
// reconnect while it waits starts the next attempt at once; it returns
// the reconnect signal to wait on next. what names the watch in the log.
func (c *Conn) rewatch(ctx context.Context, what string, reconnected <-chan struct{}, start func() (jetstream.KeyWatcher, error)) (jetstream.KeyWatcher, <-chan struct{}) {
	ctx, cancel := c.untilClosed(ctx)
	defer cancel()
	b := backoff.New(watchBackoff)
	for {
		w, err := start()
		if err == nil {
			return w, reconnected
		}
		if ctx.Err() != nil || c.nc.IsClosed() {
			return nil, reconnected
		}
		d := b.Next()
		c.log.Warn(what+": cannot set up the watcher yet; retrying", "in", d, "err", err)
		if backoff.Sleep(ctx, d, reconnected) != nil {
			return nil, reconnected
		}
		select {
		case <-reconnected:
			reconnected = c.reconnectSignal()
		default:
		}
	}
}

// watchCtx returns a context for a long-lived key watcher that ends
// when ctx ends but has no deadline: nats.go bounds the request that
// makes the watcher's consumer by ctx's deadline when it has one, else
// by the JetStream context's timeout (5 s). JetStream may put the
// consumer on a node that does not answer (stopped, cut off); the
// request then fails within seconds and the watcher is asked for again
// (rewatch), rather than waiting until ctx's deadline.
func watchCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	return wctx, func() { stop(); cancel() }
}

// untilClosed returns a context that also ends when the Conn closes.
func (c *Conn) untilClosed(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-c.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
