package tablets

import (
	"context"
	"fmt"
	"testing"

	"github.com/scanplane/scanplane/messages"
)

type mapFetcher map[string][]byte

func (m mapFetcher) FetchBlock(_ context.Context, key string) ([]byte, bool, error) {
	if d, ok := m[key]; ok {
		return d, false, nil
	}
	return nil, false, fmt.Errorf("%w: %s", ErrNotFound, key)
}

// TestProverWithoutRoots: files ingested without block roots get no
// proofs, and proving them never fails a scan.
func TestProverWithoutRoots(t *testing.T) {
	w := NewFileWriter("f", 64)
	for i := range 50 {
		if err := w.Add(fmt.Appendf(nil, "k%03d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	f, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	m := mapFetcher{IndexKey(f.ID): f.Index}
	for i, b := range f.Blocks {
		m[BlockKey(f.ID, i)] = b
	}
	ref := f.Ref()
	for _, name := range []string{"with roots", "without roots"} {
		if name == "without roots" {
			ref.BlockRoots = nil
		}
		p := NewProver(context.Background(), []*messages.FileRef{ref}, m, Range{Start: []byte("k010"), End: []byte("k020")}, nil)
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		if err := p.Rows(10); err != nil {
			t.Fatal(err)
		}
		if err := p.Finish(false); err != nil {
			t.Fatal(err)
		}
		if got := len(p.Take()); (got > 0) != (name == "with roots") {
			t.Errorf("%s: %d proofs", name, got)
		}
	}
}
