package scanserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/cache"
	"github.com/scanplane/scanplane/internal/actorenv"
	"github.com/scanplane/scanplane/internal/metrics"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// ScanServerConfig configures one scan-server actor.
type ScanServerConfig struct {
	// Workers: scans run concurrently; default 4.
	Workers int
	// MaxQueue: scans waiting for a worker beyond Workers; default 64.
	MaxQueue int
	// BatchRows: rows per RowBatch when the request says 0; default 2000
	// (with BatchBytes, whichever comes first). A proven stream's batch
	// then ends at the first block end at or past it, if that is within
	// twice it, else at the last block end within it. Per batch the server and
	// the client each pay a message, an ack and a wake-up, so larger
	// batches stream a tablet faster.
	BatchRows int
	// BatchBytes: bytes of packed rows per RowBatch (a batch ends with the
	// row that reaches it); default 256 KiB (well under NATS/gRPC message
	// limits).
	BatchBytes int
	// Window: unacknowledged batches in flight when the request says 0;
	// default 4.
	Window int
	// AckTimeout: a client that acknowledges nothing for this long is
	// gone; the scan is abandoned. Default 30s.
	AckTimeout time.Duration
	// FirstAckTimeout: a client that has acknowledged no batch this long
	// after the first one went out is gone; the scan is abandoned. A
	// client acknowledges a batch as it takes it, and it is waiting for
	// the first batch of a stream it opened, so only a client that never
	// acknowledges (or one that is gone) reaches it. Default 2s, at most
	// AckTimeout.
	FirstAckTimeout time.Duration
	// MaxQueueWait: the longest a scan waits in the queue for a worker,
	// whatever its busy timeout (a StartScan's busy timeout of 0, "wait
	// for ever", or one beyond this waits this long); then it is answered
	// Busy. It bounds how long a burst of scans that hold their workers
	// keeps the queue full after it ends. Default 2s.
	MaxQueueWait time.Duration
	// SilentStrikes and SilentFor: a client (by its actor-system address)
	// that acknowledged no batch of SilentStrikes scans in a row here, each
	// abandoned at FirstAckTimeout, has its StartScans refused
	// (BAD_REQUEST, which ends the coordinator's flow instead of retrying
	// it on another server) until SilentFor has passed since the last of
	// them; any BatchAck from it lifts this at once. Defaults 8 and 10s:
	// an honest client paused (a GC, a SIGSTOP) while fewer than 8 of its
	// scans start here is never refused.
	SilentStrikes int
	SilentFor     time.Duration
	// Fault injection (off by default).
	Fault FaultConfig
	// Clock reads the time the server decides with; nil = time.Now. Only
	// durations on it matter: a StartScan carries time left, not a time
	// of day.
	Clock func() time.Time
	// Env: the actor's timers, worker goroutines and dispatcher; the
	// zero Env is the real ones (actorenv). A deterministic harness sets
	// it; its workers are then not reused from scan to scan.
	Env actorenv.Env
}

// DefaultScanServerConfig returns the defaults documented on each field.
func DefaultScanServerConfig() ScanServerConfig {
	return ScanServerConfig{Workers: 4, MaxQueue: 64, BatchRows: 2000, BatchBytes: wire.DefaultBatchBytes, Window: wire.DefaultWindow, AckTimeout: 30 * time.Second,
		FirstAckTimeout: 2 * time.Second, MaxQueueWait: 2 * time.Second, SilentStrikes: 8, SilentFor: 10 * time.Second}
}

// Validate names the first bad field.
func (c ScanServerConfig) Validate() error {
	switch {
	case c.Workers < 1:
		return fmt.Errorf("scanserver: scan server Workers %d must be >= 1", c.Workers)
	case c.MaxQueue < 0:
		return fmt.Errorf("scanserver: scan server MaxQueue %d must be >= 0", c.MaxQueue)
	case c.BatchRows < 1 || c.BatchRows > wire.MaxBatchRows:
		return fmt.Errorf("scanserver: scan server BatchRows %d must be in [1, %d]", c.BatchRows, wire.MaxBatchRows)
	case c.BatchBytes < wire.MinBatchBytes || c.BatchBytes > wire.MaxBatchBytes:
		return fmt.Errorf("scanserver: scan server BatchBytes %d must be in [1 KiB, 4 MiB]", c.BatchBytes)
	case c.Window < 1 || c.Window > wire.MaxWindow:
		return fmt.Errorf("scanserver: scan server Window %d must be in [1, %d]", c.Window, wire.MaxWindow)
	case int64(c.Window)*int64(c.BatchBytes) > wire.MaxInFlightBytes:
		return fmt.Errorf("scanserver: scan server Window %d × BatchBytes %d must be at most %d MiB", c.Window, c.BatchBytes, wire.MaxInFlightBytes>>20)
	case c.AckTimeout <= 0:
		return fmt.Errorf("scanserver: scan server AckTimeout %v must be > 0", c.AckTimeout)
	case c.FirstAckTimeout <= 0 || c.FirstAckTimeout > c.AckTimeout:
		return fmt.Errorf("scanserver: scan server FirstAckTimeout %v must be in (0, AckTimeout=%v]", c.FirstAckTimeout, c.AckTimeout)
	case c.MaxQueueWait <= 0:
		return fmt.Errorf("scanserver: scan server MaxQueueWait %v must be > 0", c.MaxQueueWait)
	case c.SilentStrikes < 1:
		return fmt.Errorf("scanserver: scan server SilentStrikes %d must be >= 1", c.SilentStrikes)
	case c.SilentFor <= 0:
		return fmt.Errorf("scanserver: scan server SilentFor %v must be > 0", c.SilentFor)
	}
	return c.Fault.Validate()
}

// ServerCounters are a scan server's counters, read by heartbeats and by
// the host agent's metrics (Collectors).
type ServerCounters struct {
	QueueLen atomic.Int64  // scans waiting for a worker
	Active   atomic.Int64  // scans running
	Busy     atomic.Uint64 // attempts answered busy
	Scans    atomic.Uint64 // scans started
	Rows     atomic.Uint64 // rows sent in row batches
	Bytes    atomic.Uint64 // key and value bytes sent in row batches
	Probes   atomic.Uint64 // Prequal probes answered (probe.go)
	// ReadAhead counts blocks read ahead of scans in batches (readahead.go).
	ReadAhead atomic.Uint64
	// Finished counts ended scans by messages.ErrorCode (index 0: ok).
	Finished [metrics.NumOutcomes]atomic.Uint64
}

// scanJob is one admitted attempt.
type scanJob struct {
	key      ScanKey
	req      *messages.StartScan
	client   *actor.PID
	tablet   *actor.PID
	received time.Time
	// deadline: received plus the StartScan's timeout_ms (zero: none).
	deadline time.Time
	started  time.Time
	// firstSent: when the first RowBatch went out (worker goroutine only).
	firstSent time.Time
	ctx       context.Context
	cancel    context.CancelFunc
	acked     atomic.Uint64
	// sent is the seq of the last RowBatch sent; an ack beyond it is
	// refused (it would wrap waitWindow's arithmetic and stall the stream).
	sent  atomic.Uint64
	ackCh chan struct{}
	// stream is jobFresh until the first RowBatch is sent (jobStreaming)
	// or the scan is cancelled before that (jobCancelled); the job
	// goroutine and the actor (a Cancel{unless_streaming}) race for it.
	stream atomic.Int32
	// rif: scans running and queued here when it arrived (probe.go).
	rif int
	// notice is noticePending from start until either the accept notice
	// (ScanStarted{first_data: false}) goes out (noticeSent, by
	// noticeTimer) or a message that implies it does (noticeFolded: the
	// first batch or the ScanFinished); see AcceptNoticeDelay.
	notice      atomic.Int32
	noticeTimer actorenv.Timer
}

const (
	noticePending int32 = iota
	noticeSent
	noticeFolded
)

// AcceptNoticeDelay is how long a scan server holds back the accept
// notice (ScanStarted{first_data: false}) of a scan it started: if the
// first batch or the end of the scan goes out within it, the notice is
// never sent, since the ScanStarted{first_data} or ScanFinished that the
// tablet actor then gets implies it (a one-row scan of a cached block
// sends the tablet actor one message instead of three). The
// notice still comes promptly for a scan that waits for a slow read: the
// tablet actor's busy timer fires at the busy timeout +
// FlowConfig.BusySlack (default 25 ms) and its hedge timers after the
// policy's hedge delay (ClickHouse's 50 ms), and the server started the
// scan within the busy timeout, so the held-back notice arrives at most
// AcceptNoticeDelay after the start — well inside the slack. A StartScan
// with a busy timeout under 4 ms gets its notice after a quarter of it
// instead.
const AcceptNoticeDelay = time.Millisecond

// noticeDelay is the accept-notice delay of a scan with busy timeout bt
// (<= 0: none): AcceptNoticeDelay, at most bt/4.
func noticeDelay(bt time.Duration) time.Duration {
	if bt > 0 {
		return min(AcceptNoticeDelay, bt/4)
	}
	return AcceptNoticeDelay
}

// foldNotice settles the accept notice before a message that implies it
// is sent; it reports whether the notice was held back for good (false:
// it went out already, or is going).
func (j *scanJob) foldNotice() bool {
	if j.notice.CompareAndSwap(noticePending, noticeFolded) {
		if j.noticeTimer != nil {
			j.noticeTimer.Stop()
		}
		return true
	}
	return false
}

const (
	jobFresh int32 = iota
	jobStreaming
	jobCancelled
)

// cancelUnlessStreaming cancels the job if it has sent no RowBatch yet and
// reports whether it did.
func (j *scanJob) cancelUnlessStreaming() bool {
	if j.stream.CompareAndSwap(jobFresh, jobCancelled) || j.stream.Load() == jobCancelled {
		j.cancel()
		return true
	}
	return false
}

// jobDone: a job ended; silent: abandoned because its client acknowledged
// no batch within FirstAckTimeout.
type jobDone struct {
	key    ScanKey
	silent bool
}

// silentClient counts a client's scans in a row abandoned for want of a
// first ack (ScanServerConfig.SilentStrikes).
type silentClient struct {
	strikes int
	last    time.Time
}

// maxSilentClients bounds the silent-client table; past it, expired
// entries are dropped and new clients are not tracked until there is room.
const maxSilentClients = 4096

type expireTick struct{}

// ScanServerActor runs scans for one scan server.
type ScanServerActor struct {
	id       string
	host     string
	cfg      ScanServerConfig
	fetcher  tablets.BlockFetcher
	digests  *tablets.DigestCache
	gate     *pauseGate
	sys      *actor.ActorSystem
	self     *actor.PID
	queue    *ServerQueue
	pending  map[ScanKey]*scanJob
	running  map[ScanKey]*scanJob
	timer    actorenv.Timer
	counters *ServerCounters
	lies     atomic.Uint64 // scans answered under FaultConfig.Lie
	onBusy   func(*messages.LoadSignal)
	log      *slog.Logger
	// life ends when the host agent closes: it interrupts fault pauses.
	life context.Context
	// gens, when set, tells whether a block missing from the store belongs
	// to a generation newer ingests deleted (STALE_GENERATION) rather than
	// a lost one (CORRUPT_BLOCK).
	gens wire.GenerationSource
	// lat answers Prequal probes (probe.go).
	lat latencyEstimator
	// stages observes the stages of each scan (servermetrics.go).
	stages stageObservers
	// guard counts and logs the Cancels and BatchAcks refused because
	// they came from neither the attempt's client nor its tablet actor
	// (peercheck.go); nil: not counted.
	guard *remoting.Guard
	// parked hands a scan to a worker goroutine waiting for one (see
	// dispatch); stopped ends parked workers when the actor stops.
	parked   chan *scanJob
	stopped  chan struct{}
	stopOnce sync.Once
	// silent: clients whose recent scans here got no first ack, by
	// actor-system address (ScanServerConfig.SilentStrikes).
	silent map[string]*silentClient
}

// staleCheckTimeout bounds a scan server's look-up of the current
// generation after a block was missing.
const staleCheckTimeout = 2 * time.Second

// now reads the server's clock (ScanServerConfig.Clock).
func (s *ScanServerActor) now() time.Time { return s.cfg.Clock() }

// ServerDeps is what a scan-server actor works with besides its
// configuration.
type ServerDeps struct {
	// ID names the scan server (wire.ServerID); Host is its host.
	ID, Host string
	// Fetcher reads the blocks; required.
	Fetcher tablets.BlockFetcher
	// Digests keeps the digest trees of the blocks proofs are built
	// from, shared by the host's servers; nil: each block's are computed
	// whenever a scan proves rows of it and its Block has none.
	Digests *tablets.DigestCache
	// Gens, when set, tells a block of a generation newer ingests deleted
	// (STALE_GENERATION) from a lost one (CORRUPT_BLOCK); nil: never.
	Gens wire.GenerationSource
	// System is the actor system the actor runs on; it sends through its
	// root. Required.
	System *actor.ActorSystem
	// Life ends when the host agent closes: it interrupts fault pauses.
	// nil: context.Background().
	Life context.Context
	// Counters receives the server's counts; nil: counters nobody reads.
	Counters *ServerCounters
	// OnBusy receives the load signal of every Busy answer; nil: nobody.
	OnBusy func(*messages.LoadSignal)
	// Logger; nil: discard.
	Logger *slog.Logger
}

// NewScanServerActor returns the actor of scan server deps.ID, configured
// by cfg.
func NewScanServerActor(cfg ScanServerConfig, deps ServerDeps) *ScanServerActor {
	if deps.Life == nil {
		deps.Life = context.Background()
	}
	if deps.Counters == nil {
		deps.Counters = &ServerCounters{}
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	fetcher := deps.Fetcher
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	gate := newPauseGate(cfg.Fault, cfg.Clock())
	if gate != nil || cfg.Fault.SlowFactor > 1 {
		floor := cfg.Fault.SlowFloor
		if floor == 0 {
			floor = 500 * time.Microsecond
		}
		fetcher = &faultyFetcher{inner: fetcher, gate: gate, factor: cfg.Fault.SlowFactor, floor: floor}
	}
	return &ScanServerActor{
		id: deps.ID, host: deps.Host, cfg: cfg, fetcher: fetcher, digests: deps.Digests, gens: deps.Gens, gate: gate, sys: deps.System,
		queue:   NewServerQueue(cfg.Workers, cfg.MaxQueue),
		pending: map[ScanKey]*scanJob{}, running: map[ScanKey]*scanJob{},
		counters: deps.Counters, onBusy: deps.OnBusy, log: deps.Logger.With("server", deps.ID), life: deps.Life,
		parked: make(chan *scanJob), stopped: make(chan struct{}), silent: map[string]*silentClient{},
	}
}

// Receive implements actor.Actor.
func (s *ScanServerActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		s.self = c.Self()
	case *actor.Stopping, *actor.Restarting:
		// A restart (after a panic) starts a fresh actor: this one ends its
		// scans as a stop does, so their tablet actors retry them.
		s.shutdown()
	case *messages.StartScan:
		s.gate.wait(s.life)
		s.onStartScan(m)
	case *messages.Cancel:
		s.gate.wait(s.life)
		if m.GetRequestId() == "" {
			// A coordinator opening its connection: answer, which opens ours.
			if c.Sender() != nil {
				c.Respond(&messages.Cancel{Reason: "connected"})
			}
			return
		}
		if err := wire.ValidateCancel(m); err != nil {
			s.log.Debug("bad Cancel dropped", "err", err)
			return
		}
		if !s.fromAttemptPeer(c, ScanKey{RequestID: m.GetRequestId(), Attempt: m.GetAttempt()}, true) {
			return
		}
		s.onCancel(m)
	case *messages.BatchAck:
		if err := wire.ValidateBatchAck(m); err != nil {
			s.log.Debug("bad BatchAck dropped", "err", err)
			return
		}
		if !s.fromAttemptPeer(c, ScanKey{RequestID: m.GetRequestId(), Attempt: m.GetAttempt()}, false) {
			return
		}
		s.onAck(m)
	case *messages.Probe:
		s.gate.wait(s.life)
		s.onProbe(m)
	case *jobDone:
		if m.silent {
			s.strike(m.key)
		}
		s.onJobDone(m.key)
	case *expireTick:
		s.expire(s.now())
	}
	s.counters.QueueLen.Store(int64(s.queue.Len()))
	s.counters.Active.Store(int64(s.queue.Active()))
}

// scanLogAttrs are the attributes of every log line about a scan: its
// request id, attempt, table and tablet (the server is in the logger).
func scanLogAttrs(m *messages.StartScan) []any {
	t := m.GetTablet()
	return []any{"request", m.GetRequestId(), "attempt", m.GetAttempt(), "table", t.GetTable(), "tablet",
		fmt.Sprintf("%s/g%d/t%d", t.GetTable(), t.GetGeneration(), t.GetIndex())}
}

func (s *ScanServerActor) onStartScan(m *messages.StartScan) {
	err := wire.ValidateStartScan(m)
	if err == nil {
		err = wire.ValidateFlow(m.GetWindow(), m.GetBatchRows(), m.GetBatchBytes(), s.cfg.Window, s.cfg.BatchBytes)
	}
	if err != nil {
		s.log.Warn("bad StartScan", append(scanLogAttrs(m), "err", err)...)
		s.counters.countFinished(messages.ErrorCode_ERROR_CODE_BAD_REQUEST)
		fin := &messages.ScanFinished{RequestId: m.GetRequestId(), Attempt: m.GetAttempt(), Server: s.id,
			Error: messages.ErrorCode_ERROR_CODE_BAD_REQUEST, ErrorMessage: "scan server " + s.id + ": bad StartScan: " + err.Error()}
		if p := wire.ToPID(m.GetTabletActor()); p != nil {
			s.sys.Root.Send(p, fin)
		}
		if p := wire.ToPID(m.GetClient()); p != nil {
			s.sys.Root.Send(p, fin)
		}
		return
	}
	key := ScanKey{RequestID: m.RequestId, Attempt: m.Attempt}
	now := s.now()
	held := s.pending[key]
	if held == nil {
		held = s.running[key]
	}
	if held != nil {
		if from := wire.ToPID(m.GetTabletActor()); !held.tablet.Equal(from) { // ValidateStartScan: from is not nil
			// The same attempt from another tablet actor: a second flow
			// of the request, at a coordinator that took another copy of
			// it. That flow is told busy, so it goes on elsewhere rather
			// than waiting for an answer this server never sends it and
			// blaming the server.
			s.replyBusy(&scanJob{key: key, req: m, tablet: from, received: now}, now)
		}
		return // a duplicate delivery of the attempt this server holds
	}
	if addr := m.GetClient().GetAddress(); s.isSilent(addr, now) {
		s.counters.countFinished(messages.ErrorCode_ERROR_CODE_BAD_REQUEST)
		fin := &messages.ScanFinished{RequestId: m.GetRequestId(), Attempt: m.GetAttempt(), Server: s.id, Error: messages.ErrorCode_ERROR_CODE_BAD_REQUEST,
			ErrorMessage: fmt.Sprintf("scan server %s: client %s acknowledged no batch of its last %d scans here; its scans are refused until %v after the last or until it acknowledges one",
				s.id, addr, s.silent[addr].strikes, s.cfg.SilentFor)}
		if p := wire.ToPID(m.GetTabletActor()); p != nil {
			s.sys.Root.Send(p, fin)
		}
		if p := wire.ToPID(m.GetClient()); p != nil {
			s.sys.Root.Send(p, fin)
		}
		return
	}
	job := &scanJob{key: key, req: m, client: wire.ToPID(m.Client), tablet: wire.ToPID(m.TabletActor), received: now, ackCh: make(chan struct{}, 1),
		rif: s.queue.Len() + s.queue.Active(), deadline: wire.Deadline(now, m.GetTimeoutMs(), 0)}
	switch s.queue.Offer(now, key, queueWait(time.Duration(m.BusyTimeoutUs)*time.Microsecond, s.cfg.MaxQueueWait)) {
	case AdmitStart:
		s.start(job, now)
	case AdmitQueued:
		s.pending[key] = job
		s.armTimer()
	case AdmitBusy:
		s.replyBusy(job, now)
	}
}

// queueWait is how long a scan with busy timeout bt (<= 0: for ever) may
// wait in the queue: bt, at most max.
func queueWait(bt, max time.Duration) time.Duration {
	if bt <= 0 || bt > max {
		return max
	}
	return bt
}

func (s *ScanServerActor) start(job *scanJob, now time.Time) {
	job.started = now
	switch {
	case !job.deadline.IsZero() && s.cfg.Env.AfterFunc != nil:
		// The deadline on the Env's clock, not the runtime's.
		ctx, cancel := context.WithCancelCause(context.Background())
		t := s.cfg.Env.After(job.deadline.Sub(now), func() { cancel(context.DeadlineExceeded) })
		job.ctx, job.cancel = deadlineCtx{ctx}, func() { t.Stop(); cancel(context.Canceled) }
	case !job.deadline.IsZero():
		job.ctx, job.cancel = context.WithTimeout(context.Background(), job.deadline.Sub(now))
	default:
		job.ctx, job.cancel = context.WithCancel(context.Background())
	}
	s.running[job.key] = job
	s.counters.Scans.Add(1)
	// The accept notice waits AcceptNoticeDelay for a message that implies
	// it (the first batch or the end).
	started := &messages.ScanStarted{RequestId: job.key.RequestID, Attempt: job.key.Attempt, Server: s.id,
		QueueLen: uint32(s.queue.Len()), QueuedUs: now.Sub(job.received).Microseconds()}
	root, tablet := s.sys.Root, job.tablet
	job.noticeTimer = s.cfg.Env.After(noticeDelay(time.Duration(job.req.BusyTimeoutUs)*time.Microsecond), func() {
		if job.notice.CompareAndSwap(noticePending, noticeSent) {
			root.Send(tablet, started)
		}
	})
	s.dispatch(job)
}

// workerIdle is how long a worker goroutine waits for another scan before
// it ends.
const workerIdle = time.Second

// dispatch runs job on a worker goroutine: a parked one if there is one,
// else a new one. Workers are reused from scan to scan (no goroutine start
// and no stack growth per scan) and end after workerIdle without a scan,
// when the actor stops, or when the host agent closes.
func (s *ScanServerActor) dispatch(job *scanJob) {
	if s.cfg.Env.Go != nil {
		s.cfg.Env.Go(func() { s.run(job) })
		return
	}
	select {
	case s.parked <- job:
	default:
		go s.worker(job)
	}
}

func (s *ScanServerActor) worker(job *scanJob) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		s.run(job)
		idle.Reset(workerIdle)
		select {
		case job = <-s.parked:
		case <-idle.C:
			return
		case <-s.stopped:
			return
		case <-s.life.Done():
			return
		}
	}
}

func (s *ScanServerActor) replyBusy(job *scanJob, now time.Time) {
	s.counters.Busy.Add(1)
	ql := uint32(s.queue.Len())
	s.sys.Root.Send(job.tablet, &messages.Busy{RequestId: job.key.RequestID, Attempt: job.key.Attempt, Server: s.id, Host: s.host,
		QueueLen: ql, WaitedUs: now.Sub(job.received).Microseconds()})
	if s.onBusy != nil {
		s.onBusy(&messages.LoadSignal{Host: s.host, Server: s.id, RequestId: job.key.RequestID, Table: job.req.GetTablet().GetTable(),
			QueueLen: ql, AtUnixMs: now.UnixMilli(), Origin: s.id})
	}
}

func (s *ScanServerActor) expire(now time.Time) {
	for _, w := range s.queue.Expire(now) {
		if job := s.pending[w.Key]; job != nil {
			delete(s.pending, w.Key)
			s.replyBusy(job, now)
		}
	}
	s.armTimer()
}

func (s *ScanServerActor) armTimer() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	at, ok := s.queue.NextDeadline()
	if !ok {
		return
	}
	self, root := s.self, s.sys.Root
	s.timer = s.cfg.Env.After(at.Sub(s.now()), func() { root.Send(self, &expireTick{}) })
}

func (s *ScanServerActor) onJobDone(key ScanKey) {
	now := s.now()
	if job := s.running[key]; job != nil && job.stream.Load() != jobCancelled {
		s.lat.add(now, job.rif, now.Sub(job.received))
	}
	delete(s.running, key)
	next, ok, expired := s.queue.Done(now)
	for _, w := range expired {
		if job := s.pending[w.Key]; job != nil {
			delete(s.pending, w.Key)
			s.replyBusy(job, now)
		}
	}
	if ok {
		if job := s.pending[next.Key]; job != nil {
			delete(s.pending, next.Key)
			s.start(job, now)
		} else {
			// Cannot happen (queue and pending agree); release the slot.
			s.queue.Done(now)
		}
	}
	s.armTimer()
}

func (s *ScanServerActor) onCancel(m *messages.Cancel) {
	key := ScanKey{RequestID: m.GetRequestId(), Attempt: m.GetAttempt()}
	for _, k := range s.queue.Remove(key) {
		job := s.pending[k]
		delete(s.pending, k)
		if job != nil {
			s.sys.Root.Send(job.tablet, &messages.ScanFinished{RequestId: k.RequestID, Attempt: k.Attempt, Server: s.id,
				Error: messages.ErrorCode_ERROR_CODE_CANCELLED, ErrorMessage: "cancelled while queued: " + m.GetReason(), Cancelled: true})
		}
	}
	for k, job := range s.running {
		if k != key {
			continue
		}
		if m.GetUnlessStreaming() {
			// The client may be reading this stream: only the client
			// cancels a stream it reads.
			job.cancelUnlessStreaming()
			continue
		}
		job.stream.Store(jobCancelled)
		job.cancel()
	}
	s.armTimer()
}

// strike counts a scan abandoned for want of a first ack against its
// client.
func (s *ScanServerActor) strike(key ScanKey) {
	job := s.running[key]
	if job == nil || job.client == nil {
		return
	}
	now, addr := s.now(), job.client.Address
	c := s.silent[addr]
	if c == nil {
		if len(s.silent) >= maxSilentClients {
			for a, o := range s.silent {
				if now.Sub(o.last) >= s.cfg.SilentFor {
					delete(s.silent, a)
				}
			}
			if len(s.silent) >= maxSilentClients {
				return
			}
		}
		c = &silentClient{}
		s.silent[addr] = c
	}
	c.strikes++
	c.last = now
	if c.strikes == s.cfg.SilentStrikes {
		s.log.Warn("refusing the scans of a client that acknowledges no batch", "client", addr, "scans", c.strikes, "for", s.cfg.SilentFor)
	}
}

// isSilent reports whether the client at addr has its scans refused.
func (s *ScanServerActor) isSilent(addr string, now time.Time) bool {
	c := s.silent[addr]
	if c == nil {
		return false
	}
	if now.Sub(c.last) >= s.cfg.SilentFor {
		delete(s.silent, addr)
		return false
	}
	return c.strikes >= s.cfg.SilentStrikes
}

func (s *ScanServerActor) onAck(m *messages.BatchAck) {
	job := s.running[ScanKey{RequestID: m.GetRequestId(), Attempt: m.GetAttempt()}]
	if job == nil {
		return
	}
	if job.client != nil && len(s.silent) > 0 {
		delete(s.silent, job.client.Address)
	}
	if m.GetSeq() > job.sent.Load() {
		s.log.Debug("ignoring BatchAck beyond the batches sent", append(scanLogAttrs(job.req), "seq", m.GetSeq(), "sent", job.sent.Load())...)
		return
	}
	for {
		cur := job.acked.Load()
		if m.Seq <= cur || job.acked.CompareAndSwap(cur, m.Seq) {
			break
		}
	}
	select {
	case job.ackCh <- struct{}{}:
	default:
	}
}

func (s *ScanServerActor) shutdown() {
	s.stopOnce.Do(func() { close(s.stopped) })
	if s.timer != nil {
		s.timer.Stop()
	}
	now := s.now()
	for k, job := range s.pending {
		s.queue.Remove(k)
		s.replyBusy(job, now)
	}
	s.pending = map[ScanKey]*scanJob{}
	for _, job := range s.running {
		job.cancel()
	}
}

// run executes one scan on a worker goroutine and streams it to the client.
func (s *ScanServerActor) run(job *scanJob) {
	defer job.cancel()
	req := job.req
	fin := &messages.ScanFinished{RequestId: job.key.RequestID, Attempt: job.key.Attempt, Server: s.id,
		QueuedUs: job.started.Sub(job.received).Microseconds()}
	final, err := s.stream(job, fin)
	job.foldNotice() // ScanFinished implies it
	s.stages.observe(job)
	if final {
		// The client got fin inside the last batch (and may be reading
		// it): fin is not changed any more. The worker yields first, so
		// that the batch's writer, readied by its send, runs before the
		// tablet actor's (a goroutine readied later would run first).
		s.counters.countFinished(fin.Error)
		runtime.Gosched()
		s.sys.Root.Send(job.tablet, fin)
		s.sys.Root.Send(s.self, &jobDone{key: job.key})
		return
	}
	if err != nil {
		fin.Error, fin.ErrorMessage = errorCode(err), fmt.Sprintf("scan server %s, tablet %s/%d: %v", s.id, req.GetTablet().GetTable(), req.GetTablet().GetIndex(), err)
		fin.Cancelled = fin.Error == messages.ErrorCode_ERROR_CODE_CANCELLED
		if fin.Error == messages.ErrorCode_ERROR_CODE_CORRUPT_BLOCK && bus.IsNotFound(err) {
			t := req.GetTablet()
			ctx, cancel := context.WithTimeout(s.life, staleCheckTimeout)
			cur, stale := wire.Stale(ctx, s.gens, t.GetTable(), t.GetGeneration())
			cancel()
			if stale {
				fin.Error = messages.ErrorCode_ERROR_CODE_STALE_GENERATION
				fin.ErrorMessage = fmt.Sprintf("scan server %s, tablet %s/%d: %s (%v)", s.id, t.GetTable(), t.GetIndex(),
					wire.StaleMessage(t.GetTable(), t.GetGeneration(), cur), err)
			} else {
				fin.ErrorMessage += " (named by the table's metadata but missing from the block store: lost, or its generation was deleted by newer ingests)"
			}
		}
		if fin.Error == messages.ErrorCode_ERROR_CODE_STORAGE || fin.Error == messages.ErrorCode_ERROR_CODE_CORRUPT_BLOCK {
			s.log.Warn("scan failed reading the block store", append(scanLogAttrs(job.req), "code", fin.Error.String(), "rows", fin.Rows, "err", fin.ErrorMessage)...)
		}
	}
	fin.DurationUs = s.now().Sub(job.started).Microseconds()
	s.counters.countFinished(fin.Error)
	s.sys.Root.Send(job.client, fin)
	s.sys.Root.Send(job.tablet, fin)
	s.sys.Root.Send(s.self, &jobDone{key: job.key, silent: errors.Is(err, errClientGone) && job.acked.Load() == 0})
}

var errClientGone = errors.New("client stopped acknowledging batches")

// tabletFiles is the request's files, loaded from the manifests it names
// when the tablet keeps them there.
func (s *ScanServerActor) tabletFiles(ctx context.Context, req *messages.StartScan) ([]*messages.FileRef, error) {
	if len(req.GetManifests()) == 0 {
		return req.GetFiles(), nil
	}
	l, ok := s.gens.(interface {
		TabletFiles(context.Context, *messages.TabletRef, []*messages.ManifestRef) ([]*messages.FileRef, error)
	})
	if !ok {
		return nil, fmt.Errorf("%w: tablet %s keeps its files in manifests and this server has no metadata store", tablets.ErrNotFound, req.GetTablet())
	}
	return l.TabletFiles(ctx, req.GetTablet(), req.GetManifests())
}

// maxCountedProofs bounds the counted block proofs of one batch of a
// count-only scan (about 100 bytes each).
const maxCountedProofs = 512

// provenEnd is the row count at which a proven batch ends, counted
// from the batch's first row: the last block end within batchRows; or,
// when batchRows is the server's own (the request asked for none), the
// first block end at or past it if that is within twice batchRows, so
// that cutting at block ends does not make a proven stream's batches,
// each a message, an acknowledgement and a wake-up on both sides,
// smaller than another stream's.
func provenEnd(p *tablets.Prover, batchRows int, own bool) (int, error) {
	within, past, err := p.Cuts(batchRows)
	if own && past <= 2*batchRows {
		return past, err
	}
	return within, err
}

// stream sends the scan's batches to the client. final reports that the
// last batch carried fin (RowBatch.finished): the scan succeeded and fin
// is complete and shared with the client's message.
func (s *ScanServerActor) stream(job *scanJob, fin *messages.ScanFinished) (final bool, err error) {
	req := job.req
	batchRows, batchBytes, window := s.cfg.BatchRows, s.cfg.BatchBytes, s.cfg.Window
	// Within the limits (ValidateStartScan, ValidateFlow); 0 = ours.
	if r := int(req.BatchRows); r > 0 {
		batchRows = r
	}
	if b := int(req.BatchBytes); b > 0 {
		batchBytes = b
	}
	if w := int(req.Window); w > 0 {
		window = w
	}
	rng := tablets.Range{Start: req.GetRange().GetStart(), End: req.GetRange().GetEnd()}
	var lie Lie
	if n := len(s.cfg.Fault.Lie); n > 0 {
		lie = s.cfg.Fault.Lie[s.lies.Add(1)%uint64(n)]
		switch lie {
		case LieEmpty:
			return false, nil
		case LieCorrupt:
			return false, fmt.Errorf("%w: fault injection (lie)", tablets.ErrCorrupt)
		}
	}
	var after []byte
	if len(req.ResumeAfter) > 0 {
		after = req.ResumeAfter
	}
	files, err := s.tabletFiles(job.ctx, req)
	if err != nil {
		return false, err
	}
	// The scan's reads are one scan's for the host cache: past its first
	// blocks they enter the cache only into free room. A block it misses
	// starts reading the next ones.
	// A deterministic harness (Env.Go) owns every goroutine of a scan:
	// no read-ahead there.
	sctx := cache.WithScan(job.ctx)
	fetcher := s.fetcher
	if s.cfg.Env.Go == nil {
		ra := newReadAhead(sctx, s.fetcher, files, rng.End, &s.counters.ReadAhead)
		defer ra.close()
		fetcher = ra
	}
	// The reader and the prover read the same index and blocks: fetched
	// once for both.
	fetcher = tablets.NewScanMemo(fetcher)
	reader := tablets.NewTabletReader(files, fetcher)
	// The block proofs that let the client check the rows against the
	// table's block roots go out with the batches (RowBatch.proofs).
	prover := tablets.NewProver(sctx, files, fetcher, rng, after)
	if req.RootsLeftOut && len(req.GetManifests()) == 0 {
		prover.RootsLeftOut()
	}
	prover.UseDigests(s.digests)
	// A count-only scan sends the rows of its first block (first), then
	// the counted proofs of the blocks up to countTo instead of their
	// rows, then the rows from countTo on (Prover.CountSpan).
	var countTo []byte
	first := rng
	if rng.Validate() == nil {
		if err := prover.Start(); err != nil {
			return false, err
		}
		if req.CountOnly && req.Limit == 0 && (lie == "" || lie == LieCount) {
			from, to, ok, err := prover.CountSpan()
			if err != nil {
				return false, err
			}
			if ok {
				countTo, first.End = to, from
			}
		}
	}
	// The reader starts where the prover found the first row.
	it := reader.ScanAt(sctx, first, after, prover)
	var prev tablets.ReadStats // of the iterators before it
	readStats := func() (uint64, uint64) {
		st := it.Stats()
		return prev.BlocksRead + st.BlocksRead, prev.CacheHits + st.CacheHits
	}
	defer func() {
		if !final {
			fin.BlocksRead, fin.CacheHits = readStats()
		}
	}()
	var held []*messages.BlockProof // proofs for the next batch besides the prover's (LieCount)
	self := wire.FromPID(s.self)
	// A batch's rows go into one packed buffer (RowBatch.packed_rows),
	// sized from the previous batch: a buffer of a batch the client
	// acknowledged (sendBufs), or a new one. A proven batch takes rows
	// up to a block end (provenEnd), so
	// that its proofs cover all its rows and the client holds none back;
	// one that reaches its size in bytes first is cut at the last block
	// end it holds, and the rows past the cut (less than a block) start
	// the next batch. Rows
	// are copied a run of a block at a time (Iterator.NextRun: the packed
	// encoding is a block's own); those of a lying server one at a time.
	var packed []byte
	bufs := sendBufs{remote: job.client != nil && job.client.GetAddress() != s.sys.Address()}
	var lastKeyBuf []byte // fin.LastKey's own bytes
	nrows, lastKeyAt, lastKeyLen, sizeHint := 0, 0, 0, 0
	kv := 0          // key and value bytes in the batch (the Bytes counter)
	lied := 0        // rows the batch has beyond the honest ones (FaultConfig.Lie)
	var marks []mark // the ends of the runs of rows in packed, in order
	runs := lie == ""
	// dig covers the rows sent, folded in per batch as it goes out; only
	// counted when the client checks the prover's proofs instead
	// (proofs_checked).
	var dig tablets.RowDigest
	hash := !req.ProofsChecked || !prover.Proves()
	proven := runs && prover.Proves()
	// end is the row count at which the batch in hand goes out; -1 until
	// worked out for it. A proven batch ends at a block end (provenEnd
	// from the batch's first row, which moves only when a batch goes
	// out): no row past it is read into the batch, to be copied into the
	// next one.
	end := -1
	// flush sends the batch in hand; last: the scan ends with it (the
	// iterator is exhausted or the limit reached), so it carries fin.
	// The next batch's end is worked out anew.
	flush := func(last bool) error {
		end = -1
		seq := fin.Batches + 1
		if err := s.waitWindow(job, seq, uint64(window)); err != nil {
			return err
		}
		s.gate.wait(job.ctx)
		if err := job.ctx.Err(); err != nil {
			return err
		}
		if seq == 1 && !job.stream.CompareAndSwap(jobFresh, jobStreaming) {
			return context.Canceled // cancelled unless streaming, just now
		}
		// send: the rows of this batch; the rest go into the next.
		send, sendBytes, sendKV := nrows, len(packed), kv
		lastKey := fin.LastKey // a batch of counted proofs alone has no row
		if nrows > 0 {
			lastKey = packed[lastKeyAt : lastKeyAt+lastKeyLen : lastKeyAt+lastKeyLen]
		}
		if !last && lie == "" && nrows > 0 {
			k, err := prover.Cut(nrows)
			if err != nil {
				return err
			}
			// A cut is at a block end, which ends a run.
			if j, ok := slices.BinarySearchFunc(marks, k, func(m mark, k int) int { return m.rows - k }); ok && k < nrows {
				m := marks[j]
				send, sendBytes, sendKV = k, m.end, m.kv
				lastKey = packed[m.keyAt : m.keyAt+m.keyLen : m.keyAt+m.keyLen]
			}
		}
		if err := prover.Rows(send - lied); err != nil {
			return err
		}
		if last {
			if err := prover.Finish(req.Limit > 0 && dig.Rows()+uint64(nrows) >= req.Limit); err != nil {
				return err
			}
		}
		sent := packed[:sendBytes:sendBytes]
		if hash {
			dig.AddPacked(sent, send) // one hash call per batch, equal to Add per row
		} else {
			dig.Count(send)
		}
		sum := dig.Sum()
		fin.Batches, fin.Rows, fin.Checksum = seq, dig.Rows(), sum
		// A copy: the batch's buffer is reused once the client has it.
		lastKeyBuf = append(lastKeyBuf[:0], lastKey...)
		fin.LastKey = lastKeyBuf
		proofs := prover.Take()
		if held != nil {
			proofs, held = append(held, proofs...), nil
		}
		b := &messages.RowBatch{RequestId: job.key.RequestID, Attempt: job.key.Attempt, Seq: seq, PackedRows: sent, Server: s.id,
			ServerPid: self, RowCount: dig.Rows(), Checksum: sum, Proofs: proofs}
		if last {
			fin.BlocksRead, fin.CacheHits = readStats()
			fin.DurationUs = s.now().Sub(job.started).Microseconds()
			b.Finished, final = fin, true
		}
		if seq == 1 {
			job.foldNotice() // the first batch's news implies it
			job.firstSent = s.now()
		}
		job.sent.Store(seq) // before the send: the ack can come back at once
		s.sys.Root.Send(job.client, b)
		if !last {
			bufs.sent(seq, packed) // the last batch's buffer is never needed again
		}
		s.counters.Rows.Add(uint64(send))
		s.counters.Bytes.Add(uint64(sendKV))
		// First data: ScanStarted{first_data}, unless this batch is also
		// the last; then the ScanFinished the tablet actor gets next says
		// so (batches > 0) and nothing else is sent it.
		if seq == 1 && !last {
			s.sys.Root.Send(job.tablet, &messages.ScanStarted{RequestId: job.key.RequestID, Attempt: job.key.Attempt, Server: s.id, FirstData: true,
				QueueLen: uint32(s.counters.QueueLen.Load())})
		}
		sizeHint = len(packed)
		rest := packed[sendBytes:]
		packed, nrows, kv, lied = nil, nrows-send, kv-sendKV, 0
		if nrows > 0 {
			packed = append(bufs.get(max(len(rest), sizeHint+sizeHint/8), job.acked.Load()), rest...)
			j := len(marks) - 1
			for j > 0 && marks[j-1].rows > send {
				j--
			}
			marks = marks[:copy(marks, marks[j:])]
			for i := range marks {
				marks[i].rows -= send
				marks[i].end -= sendBytes
				marks[i].kv -= sendKV
				marks[i].keyAt -= sendBytes
			}
			lastKeyAt -= sendBytes
		} else {
			marks = marks[:0]
		}
		return nil
	}
	for {
		for runs {
			if packed == nil {
				packed = bufs.get(max(256, min(sizeHint+sizeHint/8, batchBytes+batchBytes/8)), job.acked.Load())
			}
			if end < 0 {
				end = batchRows
				if proven {
					k, err := provenEnd(prover, batchRows, req.BatchRows == 0)
					if err != nil {
						return false, err
					}
					if k > nrows {
						end = k
					}
				}
			}
			maxRows := end - nrows
			if req.Limit > 0 {
				maxRows = min(maxRows, int(min(req.Limit-dig.Rows(), uint64(batchRows)))-nrows)
			}
			var run tablets.Run
			var ok bool
			if packed, run, ok = it.NextRun(packed, maxRows, batchBytes); !ok {
				break
			}
			lastKeyAt, lastKeyLen = run.LastKeyAt, run.LastKeyLen
			nrows += run.Rows
			kv += run.KV
			marks = append(marks, mark{rows: nrows, end: len(packed), kv: kv, keyAt: lastKeyAt, keyLen: lastKeyLen})
			if req.Limit > 0 && dig.Rows()+uint64(nrows) >= req.Limit {
				break
			}
			if nrows >= end || len(packed) >= batchBytes {
				if err := flush(false); err != nil {
					return false, err
				}
			}
		}
		for !runs && it.Next() {
			e := it.Entry()
			switch {
			case lie == LieForge && nrows == 0:
				e.Value = []byte("EVIL")
			case lie == LieDrop && nrows == 1 && lied == 0:
				lied--
				continue
			case lie == LieAdd && nrows == 1 && lied == 0:
				packed = tablets.AppendPackedRow(packed, append(bytes.Clone(packed[lastKeyAt:lastKeyAt+lastKeyLen]), 0), []byte("EVIL"))
				nrows++
				lied++
			}
			need := tablets.PackedRowSize(len(e.Key), len(e.Value))
			if packed == nil {
				packed = make([]byte, 0, max(need, min(sizeHint, batchBytes+need), 256))
			}
			lastKeyAt, lastKeyLen = tablets.PackedKeyAt(len(packed), len(e.Key), len(e.Value)), len(e.Key)
			packed = tablets.AppendPackedRow(packed, e.Key, e.Value)
			nrows++
			kv += len(e.Key) + len(e.Value)
			marks = append(marks, mark{rows: nrows, end: len(packed), kv: kv, keyAt: lastKeyAt, keyLen: lastKeyLen})
			if req.Limit > 0 && dig.Rows()+uint64(nrows) >= req.Limit {
				break
			}
			if nrows >= batchRows || len(packed) >= batchBytes {
				if err := flush(false); err != nil {
					return false, err
				}
			}
		}
		if err := it.Err(); err != nil {
			return false, err
		}
		if countTo == nil {
			break
		}
		// The first block is read (a count-only scan never has a limit):
		// its rows go out before the counted blocks' proofs, which the next
		// batch carries.
		if nrows > 0 {
			if err := flush(false); err != nil {
				return false, err
			}
		}
		for lied := false; ; {
			_, more, err := prover.Count(maxCountedProofs)
			if err != nil {
				return false, err
			}
			if lie == LieCount && !lied {
				if ps := prover.Take(); len(ps) > 1 {
					held = ps[1:] // one counted block left out: a count short by its rows
				}
				lied = true
			}
			if !more {
				break
			}
			// A batch of proofs alone keeps messages small.
			if err := flush(false); err != nil {
				return false, err
			}
		}
		st := it.Stats()
		prev.BlocksRead, prev.CacheHits = prev.BlocksRead+st.BlocksRead, prev.CacheHits+st.CacheHits
		it = reader.Scan(sctx, tablets.Range{Start: countTo, End: rng.End}, nil)
		countTo = nil
	}
	if nrows > 0 {
		err := flush(true)
		return final, err
	}
	if err := job.ctx.Err(); err != nil {
		return false, err
	}
	// The scan ended after its last batch (or sent none): the proofs of
	// its end go in the ScanFinished.
	if err := prover.Finish(req.Limit > 0 && dig.Rows() >= req.Limit); err != nil {
		return false, err
	}
	fin.Proofs = append(held, prover.Take()...)
	return false, nil
}

// mark is the end of a run of rows in a batch's packed buffer: the rows
// up to it, its byte offset, the key and value bytes up to it, and where
// its last row's key is.
type mark struct{ rows, end, kv, keyAt, keyLen int }

// waitWindow blocks until batch seq may be sent: at most window batches
// unacknowledged. It gives up (errClientGone) after AckTimeout without an
// ack, or FirstAckTimeout after the first batch went out if none came yet.
func (s *ScanServerActor) waitWindow(job *scanJob, seq, window uint64) error {
	ready := func() bool { return seq-1-job.acked.Load() < window }
	if ready() {
		return nil
	}
	wait := s.cfg.AckTimeout
	if job.acked.Load() == 0 {
		wait = min(wait, s.cfg.FirstAckTimeout-s.now().Sub(job.firstSent))
	}
	if wait <= 0 {
		if err := job.ctx.Err(); err != nil {
			return err
		}
		return errClientGone
	}
	err := s.cfg.Env.Block(job.ctx, job.ackCh, ready, wait)
	if errors.Is(err, actorenv.ErrWaitTimeout) {
		return errClientGone
	}
	return err
}

// deadlineCtx is a context cancelled with context.DeadlineExceeded as its
// cause at a deadline on the Env's clock: its Err is the cause, as a
// context.WithTimeout's is.
type deadlineCtx struct{ context.Context }

func (c deadlineCtx) Err() error {
	if c.Context.Err() == nil {
		return nil
	}
	return context.Cause(c.Context)
}

func errorCode(err error) messages.ErrorCode {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, errClientGone):
		return messages.ErrorCode_ERROR_CODE_CANCELLED
	case errors.Is(err, context.DeadlineExceeded):
		return messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED
	case errors.Is(err, bus.ErrUnavailable):
		// The store could not answer, or could not say whether an object
		// exists (no leader for its stream): retryable, whatever else the
		// error names.
		return messages.ErrorCode_ERROR_CODE_STORAGE
	case errors.Is(err, tablets.ErrCorrupt), errors.Is(err, bus.ErrCorrupt), bus.IsNotFound(err):
		// A missing object is named by the metadata being read: retrying
		// elsewhere reads the same shared store.
		return messages.ErrorCode_ERROR_CODE_CORRUPT_BLOCK
	default:
		return messages.ErrorCode_ERROR_CODE_STORAGE
	}
}
