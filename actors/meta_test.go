package actors

import (
	"context"
	"testing"

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
