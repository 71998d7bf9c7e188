package coordinator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

func TestMetaCacheGetAndForget(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, err := tablets.NewDirStore(dir + "/blocks")
	if err != nil {
		t.Fatal(err)
	}
	meta, err := tablets.NewDirMetaStore(dir + "/meta")
	if err != nil {
		t.Fatal(err)
	}
	cfg := tablets.DefaultIngestConfig()
	rows := tablets.GenerateRows(10)
	for i := 0; i < 2; i++ {
		if _, err := tablets.Ingest(ctx, store, meta, "t", rows, cfg); err != nil {
			t.Fatal(err)
		}
	}
	m := newMetaCache(meta)
	for _, gen := range []uint64{1, 2} {
		if tm, _, err := m.get(ctx, "t", gen); err != nil || tm.GetGeneration() != gen {
			t.Fatalf("gen %d: %v %v", gen, tm, err)
		}
	}
	if _, code, err := m.get(ctx, "nope", 1); err == nil || code != messages.ErrorCode_ERROR_CODE_NO_SUCH_TABLE {
		t.Fatalf("unknown table: %v %v", code, err)
	}
	m.forget("t", 2)
	if m.cached("t", 1) != nil || m.cached("t", 2) == nil {
		t.Fatal("forget must drop older generations only")
	}
	m.forget("t", ^uint64(0))
	if m.cached("t", 2) != nil {
		t.Fatal("a removed table must be forgotten")
	}
}

// unavailableMeta answers Get with bus.ErrUnavailable for its first fails
// calls (JetStream electing a leader after a node died), then reads.
type unavailableMeta struct {
	MetaSource
	fails int
	calls int
}

func (u *unavailableMeta) Get(ctx context.Context, table string, gen uint64) (*messages.TableMeta, error) {
	u.calls++
	if u.calls <= u.fails {
		return nil, fmt.Errorf("bus: get table %q: %w: nats: no responders available for request", table, bus.ErrUnavailable)
	}
	return u.MetaSource.Get(ctx, table, gen)
}

// A metadata bucket unavailable for a moment is read again until it
// answers; one unavailable longer than the caller's context gives the
// error, as INTERNAL.
func TestMetaCacheRetriesUnavailable(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, err := tablets.NewDirStore(dir + "/blocks")
	if err != nil {
		t.Fatal(err)
	}
	meta, err := tablets.NewDirMetaStore(dir + "/meta")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tablets.Ingest(ctx, store, meta, "t", tablets.GenerateRows(10), tablets.DefaultIngestConfig()); err != nil {
		t.Fatal(err)
	}
	src := &unavailableMeta{MetaSource: meta, fails: 3}
	m := newMetaCache(src)
	if tm, _, err := m.get(ctx, "t", 1); err != nil || tm.GetGeneration() != 1 || src.calls != 4 {
		t.Fatalf("after 3 unavailable answers: %v, %v after %d calls; want generation 1 after 4", tm, err, src.calls)
	}
	src = &unavailableMeta{MetaSource: meta, fails: 1 << 30}
	m = newMetaCache(src)
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, code, err := m.get(sctx, "t", 1); !errors.Is(err, bus.ErrUnavailable) || code != messages.ErrorCode_ERROR_CODE_INTERNAL {
		t.Fatalf("unavailable for good: %v, %v; want INTERNAL wrapping bus.ErrUnavailable", code, err)
	}
	if src.calls < 2 {
		t.Fatalf("%d reads while unavailable; want retries", src.calls)
	}
}
