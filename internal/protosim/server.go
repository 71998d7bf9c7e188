package protosim

import (
	"fmt"
	"time"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/scanserver"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// ServerModel is how the simulated scan servers behave when healthy.
type ServerModel struct {
	Workers, MaxQueue int           // scanserver.ServerQueue bounds per server
	BatchRows, Window int           // defaults when the request says 0
	AckTimeout        time.Duration // no ack for this long: the client is gone
	ReadBase          time.Duration // time to read one batch...
	ReadPerRow        time.Duration // ...plus this per row
	// ColdRead: the chance that a batch's blocks are not cached and its
	// read takes up to ColdReadMax (healthy, not a fault: it makes
	// hedges race).
	ColdRead    float64
	ColdReadMax time.Duration
	Heartbeat   time.Duration // heartbeat interval
}

// hostProc is one scanserver process: several scan servers behind one
// address, heartbeating to every coordinator. Killing it loses every
// server's queue and jobs; a restart brings new servers with a new
// incarnation on the same address.
type hostProc struct {
	w           *world
	name        string
	addr        string
	zone        string
	proc        *process
	incarnation string
	servers     []*scanServer
}

func (h *hostProc) boot() {
	h.incarnation = fmt.Sprintf("%s#%d", h.name, h.proc.inc)
	h.servers = nil
	for i := range h.w.cfg.ServersPerHost {
		h.servers = append(h.servers, &scanServer{host: h, idx: i, id: fmt.Sprintf("%s/%d", h.addr, i),
			self:    pid{h.addr, fmt.Sprintf("scan-%d", i)},
			queue:   scanserver.NewServerQueue(h.w.cfg.Server.Workers, h.w.cfg.Server.MaxQueue),
			pending: map[scanserver.ScanKey]*serverJob{}, running: map[scanserver.ScanKey]*serverJob{}, busied: map[scanserver.ScanKey]bool{}})
	}
	h.heartbeat()
}

func (h *hostProc) heartbeat() {
	for _, s := range h.servers {
		for _, c := range h.w.coords {
			h.w.net.send(s.self, pid{c.addr, "hosts"}, &messages.Heartbeat{Host: h.name, Server: s.id, Zone: h.zone, Group: "default",
				Pid: s.self.wire(), Incarnation: h.incarnation, QueueLen: uint32(s.queue.Len()), Active: uint32(s.queue.Active()),
				Workers: uint32(h.w.cfg.Server.Workers), IntervalMs: h.w.cfg.Server.Heartbeat.Milliseconds()})
		}
	}
	h.proc.timer(h.w.cfg.Server.Heartbeat, "", "heartbeat", h.heartbeat)
}

// stopped reports whether the process was paused since t (its timers
// then fire late).
func (h *hostProc) stopped(since time.Time) bool {
	_, ok := h.w.faults.procTroubled(h.addr, since, h.w.s.now)
	return ok
}

func (h *hostProc) receive(env *envelope) {
	for _, s := range h.servers {
		if s.self.id == env.to.id {
			s.receive(env)
			return
		}
	}
}

// scanServer is one simulated scan server: admission by the real
// scanserver.ServerQueue, and a streamer that sends the ground truth's rows
// in RowBatches with the cumulative row count and tablets.RowDigest,
// within the client's window.
type scanServer struct {
	host    *hostProc
	idx     int
	id      string
	self    pid
	queue   *scanserver.ServerQueue
	pending map[scanserver.ScanKey]*serverJob
	running map[scanserver.ScanKey]*serverJob
	expiry  *event
	// busied: attempts answered Busy, which must never run.
	busied map[scanserver.ScanKey]bool
}

// serverJob is one admitted attempt.
type serverJob struct {
	key            scanserver.ScanKey
	req            *messages.StartScan
	client, tablet pid
	received       time.Time
	rows           []*messages.Row // what it will send
	sent           int
	seq, acked     uint64
	batchRows      int
	window         uint64
	digest         tablets.RowDigest
	lastKey        []byte
	read, ackWait  *event
	deadline       *event
	blocked        bool // a batch is read and waits for the window
	// notice: the accept notice's timer (scanserver.AcceptNoticeDelay); nil
	// once it fired or a message that implies it went out.
	notice *event
	// finalSent: the last batch carried the ScanFinished, so the client
	// gets no separate one.
	finalSent bool
}

func (s *scanServer) w() *world { return s.host.w }

func (s *scanServer) receive(env *envelope) {
	switch m := env.msg.(type) {
	case *messages.StartScan:
		s.onStartScan(m)
	case *messages.Cancel:
		s.onCancel(m)
	case *messages.BatchAck:
		s.onAck(m)
	}
}

func (s *scanServer) onStartScan(m *messages.StartScan) {
	w := s.w()
	if err := wire.ValidateStartScan(m); err != nil {
		fin := &messages.ScanFinished{RequestId: m.GetRequestId(), Attempt: m.GetAttempt(), Server: s.id,
			Error: messages.ErrorCode_ERROR_CODE_BAD_REQUEST, ErrorMessage: "bad StartScan: " + err.Error()}
		w.net.send(s.self, pidOf(m.GetTabletActor()), fin)
		w.net.send(s.self, pidOf(m.GetClient()), fin)
		return
	}
	key := scanserver.ScanKey{RequestID: m.RequestId, Attempt: m.Attempt}
	if s.pending[key] != nil || s.running[key] != nil || s.busied[key] {
		return // a duplicate (of one answered Busy too: the network duplicates)
	}
	now := w.s.now
	j := &serverJob{key: key, req: m, client: pidOf(m.Client), tablet: pidOf(m.TabletActor), received: now}
	switch s.queue.Offer(now, key, time.Duration(m.BusyTimeoutUs)*time.Microsecond) {
	case scanserver.AdmitStart:
		s.start(j)
	case scanserver.AdmitQueued:
		s.pending[key] = j
		s.armExpiry()
	case scanserver.AdmitBusy:
		s.replyBusy(j)
	}
}

func (s *scanServer) start(j *serverJob) {
	w := s.w()
	m := j.req
	// ServerQueue's promises: a scan answered Busy never runs, and one
	// that runs started within its busy timeout.
	if s.busied[j.key] {
		w.violate("server %s starts %s/%d, which it answered Busy", s.id, j.key.RequestID, j.key.Attempt)
	}
	if bt := time.Duration(m.BusyTimeoutUs) * time.Microsecond; bt > 0 && w.s.now.Sub(j.received) > bt && !s.host.stopped(j.received) {
		w.violate("server %s starts %s/%d after %v in its queue, beyond its busy timeout %v", s.id, j.key.RequestID, j.key.Attempt,
			w.s.now.Sub(j.received), bt)
	}
	model := w.cfg.Server
	j.batchRows, j.window = model.BatchRows, uint64(model.Window)
	if r := int(m.BatchRows); r > 0 && r < model.BatchRows*100 {
		j.batchRows = r
	}
	if v := uint64(m.Window); v > 0 && v <= 1024 {
		j.window = v
	}
	rng := tablets.Range{Start: m.GetRange().GetStart(), End: m.GetRange().GetEnd()}
	j.rows = w.truth.scan(rng, m.GetResumeAfter())
	if lim := m.GetLimit(); lim > 0 && uint64(len(j.rows)) > lim {
		j.rows = j.rows[:lim]
	}
	s.running[j.key] = j
	// The accept notice waits for a message that implies it, as the real
	// server's does (scanserver.AcceptNoticeDelay).
	started := &messages.ScanStarted{RequestId: j.key.RequestID, Attempt: j.key.Attempt, Server: s.id,
		QueueLen: uint32(s.queue.Len()), QueuedUs: w.s.now.Sub(j.received).Microseconds()}
	delay := scanserver.AcceptNoticeDelay
	if bt := time.Duration(m.BusyTimeoutUs) * time.Microsecond; bt > 0 {
		delay = min(delay, bt/4)
	}
	if !w.mut.noAcceptNotice {
		j.notice = s.host.proc.timer(delay, j.key.RequestID, "accept notice", func() {
			j.notice = nil
			w.net.send(s.self, j.tablet, started)
		})
	}
	if d := m.GetTimeoutMs(); d > 0 {
		j.deadline = s.host.proc.timer(time.Duration(d)*time.Millisecond-w.s.now.Sub(j.received), j.key.RequestID, "server deadline", func() {
			s.finish(j, messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED, "deadline exceeded")
		})
	}
	s.readNext(j)
}

// readNext reads the next batch (or finds the end) after the read time.
func (s *scanServer) readNext(j *serverJob) {
	model := s.w().cfg.Server
	n := min(j.batchRows, len(j.rows)-j.sent)
	d := model.ReadBase + time.Duration(n)*model.ReadPerRow
	if s.w().s.chance(model.ColdRead) {
		d += s.w().s.uniform(0, model.ColdReadMax)
	}
	j.read = s.host.proc.timer(d, j.key.RequestID, "read batch", func() {
		j.read = nil
		if j.sent == len(j.rows) {
			s.finish(j, messages.ErrorCode_ERROR_CODE_UNSPECIFIED, "")
			return
		}
		s.flush(j)
	})
}

// flush sends the batch in hand if the window allows, else waits for an
// ack (at most AckTimeout).
func (s *scanServer) flush(j *serverJob) {
	w := s.w()
	if j.seq-j.acked >= j.window {
		j.blocked = true
		if j.ackWait == nil {
			j.ackWait = s.host.proc.timer(w.cfg.Server.AckTimeout, j.key.RequestID, "ack timeout", func() {
				j.ackWait = nil
				s.finish(j, messages.ErrorCode_ERROR_CODE_CANCELLED, "client stopped acknowledging batches")
			})
		}
		return
	}
	j.blocked = false
	w.s.cancel(j.ackWait)
	j.ackWait = nil
	n := min(j.batchRows, len(j.rows)-j.sent)
	rows := j.rows[j.sent : j.sent+n]
	if w.mut.serverRows != nil {
		rows = w.mut.serverRows(rows) // a lying server: the checksum covers what it sends
	}
	for _, r := range rows {
		j.digest.Add(r.Key, r.Value)
	}
	j.sent += n
	j.seq++
	j.lastKey = j.rows[j.sent-1].Key
	// Like the real server, the model knows a batch is the last only when
	// it is not full (a full last batch is followed by a separate
	// ScanFinished): both endings stay in every run.
	last := j.sent == len(j.rows) && n < j.batchRows
	b := &messages.RowBatch{RequestId: j.key.RequestID, Attempt: j.key.Attempt, Seq: j.seq, Rows: rows, Server: s.id,
		ServerPid: s.self.wire(), RowCount: j.digest.Rows(), Checksum: j.digest.Sum()}
	if last {
		b.Finished, j.finalSent = s.finished(j, messages.ErrorCode_ERROR_CODE_UNSPECIFIED, ""), true
	}
	if w.mut.serverBatch != nil {
		w.mut.serverBatch(b) // a broken server: the batch no longer matches its checksum
	}
	if j.seq%2 == 0 {
		// The real server packs every batch (RowBatch.packed_rows); the
		// model packs every other one, so both encodings the client reads
		// are in every run.
		for _, r := range b.Rows {
			b.PackedRows = tablets.AppendPackedRow(b.PackedRows, r.Key, r.Value)
		}
		b.Rows = nil
	}
	if j.seq == 1 {
		w.s.cancel(j.notice) // the first batch's news implies it
		j.notice = nil
	}
	w.net.send(s.self, j.client, b)
	if j.seq == 1 && !last {
		w.net.send(s.self, j.tablet, &messages.ScanStarted{RequestId: j.key.RequestID, Attempt: j.key.Attempt, Server: s.id, FirstData: true,
			QueueLen: uint32(s.queue.Len())})
	}
	if last {
		s.finish(j, messages.ErrorCode_ERROR_CODE_UNSPECIFIED, "")
		return
	}
	s.readNext(j)
}

func (s *scanServer) onAck(m *messages.BatchAck) {
	j := s.running[scanserver.ScanKey{RequestID: m.GetRequestId(), Attempt: m.GetAttempt()}]
	if j == nil {
		return
	}
	j.acked = max(j.acked, m.GetSeq())
	if j.blocked && j.seq-j.acked < j.window {
		s.flush(j)
	}
}

func (s *scanServer) onCancel(m *messages.Cancel) {
	w := s.w()
	if m.GetRequestId() == "" || w.mut.ignoreCancel {
		return
	}
	key := scanserver.ScanKey{RequestID: m.GetRequestId(), Attempt: m.GetAttempt()}
	for _, k := range s.queue.Remove(key) {
		j := s.pending[k]
		delete(s.pending, k)
		if j != nil {
			w.net.send(s.self, j.tablet, &messages.ScanFinished{RequestId: k.RequestID, Attempt: k.Attempt, Server: s.id,
				Error: messages.ErrorCode_ERROR_CODE_CANCELLED, ErrorMessage: "cancelled while queued: " + m.GetReason(), Cancelled: true})
		}
	}
	for _, k := range sortedKeys(s.running) {
		j := s.running[k]
		if k.RequestID != key.RequestID || (key.Attempt != 0 && k.Attempt != key.Attempt) {
			continue
		}
		if m.GetUnlessStreaming() && j.seq > 0 {
			continue // the client may have accepted this stream: it decides
		}
		s.finish(j, messages.ErrorCode_ERROR_CODE_CANCELLED, "cancelled: "+m.GetReason())
	}
	s.armExpiry()
}

// finish ends a running job: ScanFinished to the client and the tablet
// actor, the worker goes to the next queued scan.
func (s *scanServer) finish(j *serverJob, code messages.ErrorCode, msg string) {
	w := s.w()
	if s.running[j.key] != j {
		return
	}
	delete(s.running, j.key)
	for _, e := range []*event{j.read, j.ackWait, j.deadline, j.notice} {
		w.s.cancel(e)
	}
	j.notice = nil // ScanFinished implies it
	fin := s.finished(j, code, msg)
	if !j.finalSent {
		w.net.send(s.self, j.client, fin)
	}
	w.net.send(s.self, j.tablet, fin)
	now := w.s.now
	next, ok, expired := s.queue.Done(now)
	for _, x := range expired {
		if q := s.pending[x.Key]; q != nil {
			delete(s.pending, x.Key)
			s.replyBusy(q)
		}
	}
	if ok {
		if q := s.pending[next.Key]; q != nil {
			delete(s.pending, next.Key)
			s.start(q)
		} else {
			w.violate("server %s: ServerQueue started %v, which is not queued", s.id, next.Key)
			s.queue.Done(now)
		}
	}
	s.armExpiry()
}

// finished is the job's ScanFinished as of now.
func (s *scanServer) finished(j *serverJob, code messages.ErrorCode, msg string) *messages.ScanFinished {
	fin := &messages.ScanFinished{RequestId: j.key.RequestID, Attempt: j.key.Attempt, Server: s.id, Error: code,
		Rows: j.digest.Rows(), Batches: j.seq, Checksum: j.digest.Sum(), LastKey: j.lastKey,
		Cancelled: code == messages.ErrorCode_ERROR_CODE_CANCELLED}
	if msg != "" {
		fin.ErrorMessage = fmt.Sprintf("scan server %s: %s", s.id, msg)
	}
	return fin
}

func (s *scanServer) replyBusy(j *serverJob) {
	w := s.w()
	s.busied[j.key] = true
	if bt := time.Duration(j.req.BusyTimeoutUs) * time.Microsecond; bt > 0 && w.s.now.Sub(j.received) > bt && !s.host.stopped(j.received) {
		w.violate("server %s answers Busy for %s/%d after %v, beyond its busy timeout %v", s.id, j.key.RequestID, j.key.Attempt,
			w.s.now.Sub(j.received), bt)
	}
	w.net.send(s.self, j.tablet, &messages.Busy{RequestId: j.key.RequestID, Attempt: j.key.Attempt, Server: s.id, Host: s.host.name,
		QueueLen: uint32(s.queue.Len()), WaitedUs: w.s.now.Sub(j.received).Microseconds()})
	for _, c := range w.coords {
		w.net.send(s.self, pid{c.addr, "busy-signals"}, &messages.LoadSignal{Host: s.host.name, Server: s.id, RequestId: j.key.RequestID,
			QueueLen: uint32(s.queue.Len()), AtUnixMs: w.s.now.UnixMilli(), Origin: s.id})
	}
}

func (s *scanServer) armExpiry() {
	w := s.w()
	w.s.cancel(s.expiry)
	s.expiry = nil
	at, ok := s.queue.NextDeadline()
	if !ok {
		return
	}
	s.expiry = s.host.proc.timer(at.Sub(w.s.now), "", "queue expiry", func() {
		s.expiry = nil
		for _, x := range s.queue.Expire(w.s.now) {
			if q := s.pending[x.Key]; q != nil {
				delete(s.pending, x.Key)
				s.replyBusy(q)
			}
		}
		s.armExpiry()
	})
}
