package bus

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestTimedReadRetriesALostRequest: a read try that gets no answer within
// its bound (Config.ReadTry, doubled per try) is tried again within
// OpTimeout, so one lost request costs ReadTry, not OpTimeout; a store
// that never answers is ErrUnavailable after OpTimeout; an answer, even an
// error, ends the read at once; ReadTry 0 is one try.
func TestTimedReadRetriesALostRequest(t *testing.T) {
	c := &Conn{cfg: Config{OpTimeout: 5 * time.Second, ReadTry: 50 * time.Millisecond}}
	ctx := context.Background()

	var bounds []time.Duration
	lostOnce := func(octx context.Context) (string, error) {
		d, _ := octx.Deadline()
		bounds = append(bounds, time.Until(d))
		if len(bounds) == 1 {
			<-octx.Done() // the request vanished
			return "", octx.Err()
		}
		return "block", nil
	}
	v, err := timedRead(c, ctx, lostOnce)
	if err != nil || v != "block" || len(bounds) != 2 {
		t.Fatalf("lost once: %q, %v after %d tries, want the block after 2", v, err, len(bounds))
	}
	if bounds[0] > 50*time.Millisecond || bounds[1] > 100*time.Millisecond {
		t.Fatalf("try bounds %v, want at most 50ms then 100ms", bounds)
	}

	c.cfg.OpTimeout = 400 * time.Millisecond
	tries := 0
	never := func(octx context.Context) (string, error) {
		tries++
		<-octx.Done()
		return "", octx.Err()
	}
	if _, err := timedRead(c, ctx, never); !errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || tries < 2 {
		t.Fatalf("never answered: %v after %d tries, want ErrUnavailable (not a deadline) after 2 or more", err, tries)
	}

	refused := errors.New("refused")
	tries = 0
	if _, err := timedRead(c, ctx, func(context.Context) (string, error) { tries++; return "", refused }); err != refused || tries != 1 {
		t.Fatalf("an answer: %v after %d tries, want it after 1", err, tries)
	}

	c.cfg.ReadTry = 0
	tries = 0
	if _, err := timedRead(c, ctx, never); !errors.Is(err, ErrUnavailable) || tries != 1 {
		t.Fatalf("ReadTry 0: %v after %d tries, want ErrUnavailable after 1", err, tries)
	}

	// The caller's own deadline is the caller's error, not a lost try.
	c.cfg.ReadTry = time.Second
	dctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	tries = 0
	if _, err := timedRead(c, dctx, never); !errors.Is(err, context.DeadlineExceeded) || tries != 1 {
		t.Fatalf("caller's deadline: %v after %d tries, want context.DeadlineExceeded after 1", err, tries)
	}
}
