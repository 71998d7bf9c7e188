package scanserver

import (
	"time"
)

// ScanKey identifies one attempt of one scan request.
type ScanKey struct {
	RequestID string
	Attempt   uint32
}

// Admission is ServerQueue's answer to an offered scan.
type Admission int

const (
	// AdmitStart: a worker is free, run it now.
	AdmitStart Admission = iota + 1
	// AdmitQueued: it waits for a worker until its busy deadline.
	AdmitQueued
	// AdmitBusy: the queue is full; answer Busy now and never run it.
	AdmitBusy
)

// Waiting is a queued scan.
type Waiting struct {
	Key      ScanKey
	Deadline time.Time // zero = waits forever
	Enqueued time.Time
}

// ServerQueue is the pure admission state machine of one scan server: a
// bounded number of workers and a bounded FIFO queue. A queued scan that
// cannot start before its busy deadline is expired (answered Busy, never
// run). Not safe for concurrent use; the owning actor serialises calls.
type ServerQueue struct {
	workers  int
	maxQueue int
	active   int
	waiting  []Waiting
}

// NewServerQueue returns a queue with the given worker count (>= 1) and
// queue bound (>= 0).
func NewServerQueue(workers, maxQueue int) *ServerQueue {
	if workers < 1 {
		workers = 1
	}
	if maxQueue < 0 {
		maxQueue = 0
	}
	return &ServerQueue{workers: workers, maxQueue: maxQueue}
}

// Active is the number of running scans.
func (q *ServerQueue) Active() int { return q.active }

// Len is the number of queued scans.
func (q *ServerQueue) Len() int { return len(q.waiting) }

// Offer admits a scan that must start within busyTimeout (<= 0: forever).
func (q *ServerQueue) Offer(now time.Time, key ScanKey, busyTimeout time.Duration) Admission {
	if q.active < q.workers && len(q.waiting) == 0 {
		q.active++
		return AdmitStart
	}
	if len(q.waiting) >= q.maxQueue {
		return AdmitBusy
	}
	w := Waiting{Key: key, Enqueued: now}
	if busyTimeout > 0 {
		w.Deadline = now.Add(busyTimeout)
	}
	q.waiting = append(q.waiting, w)
	return AdmitQueued
}

// Expire removes and returns every queued scan whose deadline is at or
// before now.
func (q *ServerQueue) Expire(now time.Time) []Waiting {
	var expired []Waiting
	kept := q.waiting[:0]
	for _, w := range q.waiting {
		if !w.Deadline.IsZero() && !w.Deadline.After(now) {
			expired = append(expired, w)
			continue
		}
		kept = append(kept, w)
	}
	clear(q.waiting[len(kept):])
	q.waiting = kept
	return expired
}

// Done releases a worker. It returns the queued scans that expired and, if
// one is left, the next scan to start (its worker is already taken).
func (q *ServerQueue) Done(now time.Time) (next Waiting, ok bool, expired []Waiting) {
	if q.active > 0 {
		q.active--
	}
	expired = q.Expire(now)
	if len(q.waiting) > 0 && q.active < q.workers {
		next = q.waiting[0]
		q.waiting = q.waiting[1:]
		q.active++
		return next, true, expired
	}
	return Waiting{}, false, expired
}

// Remove drops a queued scan (cancelled before it started). Attempt 0
// matches every attempt of the request. It returns the removed keys.
func (q *ServerQueue) Remove(key ScanKey) []ScanKey {
	var removed []ScanKey
	kept := q.waiting[:0]
	for _, w := range q.waiting {
		if w.Key.RequestID == key.RequestID && (key.Attempt == 0 || w.Key.Attempt == key.Attempt) {
			removed = append(removed, w.Key)
			continue
		}
		kept = append(kept, w)
	}
	clear(q.waiting[len(kept):])
	q.waiting = kept
	return removed
}

// NextDeadline is the earliest busy deadline among queued scans.
func (q *ServerQueue) NextDeadline() (time.Time, bool) {
	var min time.Time
	for _, w := range q.waiting {
		if w.Deadline.IsZero() {
			continue
		}
		if min.IsZero() || w.Deadline.Before(min) {
			min = w.Deadline
		}
	}
	return min, !min.IsZero()
}
