package scanserver

import (
	"bytes"
	"testing"
	"time"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// TestShortVerifiedScanReadsEachBlockOnce: a verified scan of a few rows
// inside one block, through a fetcher that keeps nothing (a host cache
// that admitted none of its blocks), reads each block from the store once
// for its reader and its prover together, and still returns its rows
// exactly with their proofs.
func TestShortVerifiedScanReadsEachBlockOnce(t *testing.T) {
	r := newRig(t, rigOpts{rows: 2000, tablets: 2})
	gc := &getCounter{BlockStore: r.store, gets: map[string]int{}}
	srv := r.addServer("h1", 0, DefaultScanServerConfig(), tablets.StoreFetcher{Store: gc})
	tm := r.table.GetTablets()[0]
	if n := len(tm.GetFiles()); n != 1 || tm.GetFiles()[0].GetBlocks() < 3 || len(tm.GetFiles()[0].GetBlockRoots()) == 0 {
		t.Fatalf("tablet 0 has %d files (%v), want one of 3 or more blocks with block roots", n, tm.GetFiles())
	}
	// Rows 20..22 of the tablet's second block: inside it, away from its
	// first and last chunks.
	ix, err := tablets.DecodeIndex(mustGet(t, r.store, tablets.IndexKey(tm.GetFiles()[0].GetId())))
	if err != nil {
		t.Fatal(err)
	}
	truth := r.truthOf(0)
	first := int(ix.Blocks[0].Entries) + 20
	if int(ix.Blocks[1].Entries) < 40 {
		t.Fatalf("block 1 holds %d rows, want 40 or more", ix.Blocks[1].Entries)
	}
	want := truth[first : first+3]
	p := r.newProbe()
	r.as.Root.Send(srv, &messages.StartScan{RequestId: "short", Attempt: 1, Client: wire.FromPID(p.pid), TabletActor: wire.FromPID(p.pid),
		Tablet: tm.GetRef(), Files: tm.GetFiles(), Range: &messages.KeyRange{Start: want[0].Key, End: truth[first+3].Key},
		BusyTimeoutUs: time.Minute.Microseconds()})
	batches, fin := r.drain(p, srv, "short")
	if fin.GetError() != messages.ErrorCode_ERROR_CODE_UNSPECIFIED {
		t.Fatalf("scan failed: %v", fin)
	}
	var got []tablets.Entry
	proofs := len(fin.GetProofs())
	for _, b := range batches {
		got = append(got, rowsOf(b)...)
		proofs += len(b.GetProofs())
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) {
			t.Fatalf("row %d: %q, want %q", i, got[i].Key, want[i].Key)
		}
	}
	if proofs == 0 {
		t.Fatal("no block proof sent for a verified scan")
	}
	gets := gc.snapshot()
	ref := tm.GetFiles()[0]
	for b := range int(ref.GetBlocks()) {
		if k := tablets.BlockKey(ref.GetId(), b); gets[k] > 1 {
			t.Errorf("block %s read from the store %d times by one scan, want once", k, gets[k])
		}
	}
}

func mustGet(t *testing.T, s tablets.BlockStore, key string) []byte {
	t.Helper()
	b, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// snapshot is a copy of the Gets by key.
func (g *getCounter) snapshot() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]int, len(g.gets))
	for k, n := range g.gets {
		out[k] = n
	}
	return out
}
