package coordinator

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/testutil/servertest"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// downFetcher is a block store that does not answer.
type downFetcher struct{}

func (downFetcher) FetchBlock(ctx context.Context, key string) ([]byte, bool, error) {
	return nil, false, fmt.Errorf("bus: block get %s: %w: no answer within 10s", key, bus.ErrUnavailable)
}

// With the block store down every scan server answers STORAGE within
// milliseconds. The flow fails with STORAGE and the store's error once servers on
// FlowConfig.StorageHosts (3) hosts answered it (or one server twice).
func TestStoreDownFailsScanWithStorage(t *testing.T) {
	r := newRig(t, rigOpts{rows: 200, tablets: 1})
	for _, h := range []string{"h1", "h2", "h3", "h4"} {
		r.addServer(h, 0, servertest.Default(), downFetcher{})
	}
	s := r.scan(r.request(0))
	if s.err == nil || s.err.GetCode() != messages.ErrorCode_ERROR_CODE_STORAGE {
		t.Fatalf("scan ended with %v (finished %v), want a STORAGE error", s.err, s.fin)
	}
	if m := s.err.GetMessage(); !strings.Contains(m, "failed reading the block store") || !strings.Contains(m, "no answer within 10s") {
		t.Fatalf("STORAGE error %q does not say what failed", m)
	}
	if n := len(s.err.GetAttempts()); n < 2 || n > 3 {
		t.Fatalf("%d attempts, want 3 (three hosts), or 2 if the policy came back to the first server", n)
	}
	r.waitFor("the flow to end", func() bool { return r.co.counters.flows.Load() == 0 })
}

// holdFetcher holds every read of data block holdFrom or later (not the
// index) until open is closed; held is closed at the first such read.
type holdFetcher struct {
	inner    tablets.BlockFetcher
	holdFrom int
	open     chan struct{}
	held     chan struct{}
	once     sync.Once
}

func newHoldFetcher(inner tablets.BlockFetcher, holdFrom int) *holdFetcher {
	return &holdFetcher{inner: inner, holdFrom: holdFrom, open: make(chan struct{}), held: make(chan struct{})}
}

func (h *holdFetcher) FetchBlock(ctx context.Context, key string) ([]byte, bool, error) {
	// A block key ends in ".b<N>"; a file id is hex and may start with
	// "b" too (".b850ce….idx"), so the whole suffix must be the number.
	if i := strings.LastIndex(key, ".b"); i >= 0 {
		if b, err := strconv.Atoi(key[i+2:]); err == nil && b >= h.holdFrom {
			h.once.Do(func() { close(h.held) })
			select {
			case <-h.open:
			case <-ctx.Done():
				return nil, false, ctx.Err()
			}
		}
	}
	return h.inner.FetchBlock(ctx, key)
}

// replaceTwice ingests two newer generations of the rig's table: the
// second deletes generation 1 (ingest keeps two), metadata and blocks.
func (r *rig) replaceTwice() {
	r.t.Helper()
	for g := 2; g <= 3; g++ {
		if _, err := tablets.Ingest(context.Background(), r.store, r.meta, "t", tablets.GenerateRows(len(r.truth)+g), r.icfg); err != nil {
			r.t.Fatal(err)
		}
	}
	if _, err := r.meta.Get(context.Background(), "t", 1); !bus.IsNotFound(err) {
		r.t.Fatalf("generation 1 not deleted by two newer ingests: %v", err)
	}
}

// Storage follow-up: a block of a generation that later ingests deleted
// during the scan was reported as CORRUPT_BLOCK. The scan server, which
// can look up the current generation, answers STALE_GENERATION, and the
// client (reading that stream) gets it.
func TestGenerationDeletedDuringScanIsStale(t *testing.T) {
	r := newRig(t, rigOpts{rows: 2000, tablets: 1})
	hold := newHoldFetcher(tablets.StoreFetcher{Store: r.store}, 1)
	r.addServerGens("h1", 0, servertest.Default(), hold, r.meta)
	req := r.request(0)
	req.BatchRows = 1 // every row of block 0 is sent before block 1 is read
	s := r.start(req, false)
	r.waitFor("the scan to read past its first block", func() bool {
		select {
		case <-hold.held:
			return true
		case <-s.done:
			r.t.Fatalf("scan ended before reading block 1: %v %v", s.err, s.fin)
		}
		return false
	})
	r.replaceTwice()
	close(hold.open)
	r.waitFor("the scan to end", func() bool {
		select {
		case <-s.done:
			return true
		default:
			return false
		}
	})
	if s.fin == nil || s.fin.GetError() != messages.ErrorCode_ERROR_CODE_STALE_GENERATION || len(s.rows) == 0 {
		t.Fatalf("scan ended with %v, %d rows (error %v); want STALE_GENERATION after some rows", s.fin, len(s.rows), s.err)
	}
	if m := s.fin.GetErrorMessage(); !strings.Contains(m, "generation 1 was deleted by newer ingests") || !strings.Contains(m, "current generation 3") {
		t.Fatalf("message %q", m)
	}
	r.waitFor("the flow to end", func() bool { return r.co.counters.flows.Load() == 0 })
}

// The tablet actor's half: a server that cannot look up generations
// answers CORRUPT_BLOCK for the deleted block; the coordinator, whose
// metadata watch saw generation 3 become current, answers the client
// STALE_GENERATION instead.
func TestTabletActorNamesDeletedGenerationStale(t *testing.T) {
	r := newRig(t, rigOpts{rows: 2000, tablets: 1})
	hold := newHoldFetcher(tablets.StoreFetcher{Store: r.store}, 0)
	r.addServer("h1", 0, servertest.Default(), hold)
	s := r.start(r.request(0), false)
	r.waitFor("the scan to read its first block", func() bool {
		select {
		case <-hold.held:
			return true
		case <-s.done:
			r.t.Fatalf("scan ended before reading: %v %v", s.err, s.fin)
		}
		return false
	})
	r.replaceTwice()
	r.co.onCurrent("t", 3) // what the metadata watch reports
	close(hold.open)
	r.waitFor("the scan to end", func() bool {
		select {
		case <-s.done:
			return true
		default:
			return false
		}
	})
	if s.err == nil || s.err.GetCode() != messages.ErrorCode_ERROR_CODE_STALE_GENERATION {
		t.Fatalf("scan ended with %v (finished %v), want STALE_GENERATION", s.err, s.fin)
	}
	if m := s.err.GetMessage(); !strings.Contains(m, "generation 1 was deleted by newer ingests") || !strings.Contains(m, "missing from the block store") {
		t.Fatalf("message %q", m)
	}
	r.waitFor("the flow to end", func() bool { return r.co.counters.flows.Load() == 0 })
}
