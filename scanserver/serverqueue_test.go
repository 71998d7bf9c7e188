package scanserver

import (
	"testing"
	"time"
)

func TestServerQueueAdmission(t *testing.T) {
	t0 := time.Unix(1000, 0)
	q := NewServerQueue(2, 2)
	k := func(i uint32) ScanKey { return ScanKey{RequestID: "r", Attempt: i} }
	if a := q.Offer(t0, k(1), 10*time.Millisecond); a != AdmitStart {
		t.Fatalf("1st: %v", a)
	}
	if a := q.Offer(t0, k(2), 10*time.Millisecond); a != AdmitStart {
		t.Fatalf("2nd: %v", a)
	}
	if a := q.Offer(t0, k(3), 10*time.Millisecond); a != AdmitQueued {
		t.Fatalf("3rd: %v", a)
	}
	if a := q.Offer(t0, k(4), 0); a != AdmitQueued {
		t.Fatalf("4th: %v", a)
	}
	if a := q.Offer(t0, k(5), time.Second); a != AdmitBusy {
		t.Fatalf("5th over queue bound: %v", a)
	}
	if d, ok := q.NextDeadline(); !ok || !d.Equal(t0.Add(10*time.Millisecond)) {
		t.Fatalf("deadline %v %v", d, ok)
	}
	// Nothing expires before the deadline.
	if e := q.Expire(t0.Add(9 * time.Millisecond)); len(e) != 0 {
		t.Fatalf("early expiry %v", e)
	}
	// At the deadline k(3) expires: it is answered busy and never runs;
	// k(4) waits forever.
	e := q.Expire(t0.Add(10 * time.Millisecond))
	if len(e) != 1 || e[0].Key != k(3) {
		t.Fatalf("expired %v", e)
	}
	if _, ok := q.NextDeadline(); ok {
		t.Fatal("no deadline left expected")
	}
	next, ok, exp := q.Done(t0.Add(time.Hour))
	if !ok || next.Key != k(4) || len(exp) != 0 {
		t.Fatalf("done: %v %v %v", next, ok, exp)
	}
	if q.Active() != 2 || q.Len() != 0 {
		t.Fatalf("active %d len %d", q.Active(), q.Len())
	}
	q.Done(t0)
	q.Done(t0)
	if q.Active() != 0 {
		t.Fatalf("active %d", q.Active())
	}
	// Extra Done never goes negative.
	q.Done(t0)
	if q.Active() != 0 {
		t.Fatalf("active %d", q.Active())
	}
}

func TestServerQueueDoneSkipsExpired(t *testing.T) {
	t0 := time.Unix(1000, 0)
	q := NewServerQueue(1, 10)
	q.Offer(t0, ScanKey{"a", 1}, time.Second)
	q.Offer(t0, ScanKey{"b", 1}, 5*time.Millisecond)
	q.Offer(t0, ScanKey{"c", 1}, time.Second)
	next, ok, exp := q.Done(t0.Add(6 * time.Millisecond))
	if !ok || next.Key.RequestID != "c" {
		t.Fatalf("next %v %v", next, ok)
	}
	if len(exp) != 1 || exp[0].Key.RequestID != "b" {
		t.Fatalf("expired %v", exp)
	}
}

func TestServerQueueFIFOAndRemove(t *testing.T) {
	t0 := time.Unix(1000, 0)
	q := NewServerQueue(1, 10)
	q.Offer(t0, ScanKey{"x", 1}, 0)
	for _, id := range []string{"a", "b", "c"} {
		q.Offer(t0, ScanKey{id, 1}, 0)
	}
	q.Offer(t0, ScanKey{"b", 2}, 0)
	if r := q.Remove(ScanKey{"b", 0}); len(r) != 2 {
		t.Fatalf("removed %v", r)
	}
	if r := q.Remove(ScanKey{"zz", 0}); len(r) != 0 {
		t.Fatalf("removed %v", r)
	}
	var order []string
	for {
		next, ok, _ := q.Done(t0)
		if !ok {
			break
		}
		order = append(order, next.Key.RequestID)
	}
	if len(order) != 2 || order[0] != "a" || order[1] != "c" {
		t.Fatalf("order %v", order)
	}
}

func TestServerQueueZeroQueueIsBusyWhenFull(t *testing.T) {
	q := NewServerQueue(1, 0)
	t0 := time.Unix(0, 0)
	if q.Offer(t0, ScanKey{"a", 1}, 0) != AdmitStart {
		t.Fatal("start")
	}
	if q.Offer(t0, ScanKey{"b", 1}, 0) != AdmitBusy {
		t.Fatal("busy")
	}
}
