package bus

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"testing"
)

// GetMany returns the stored values of the keys it is asked for, by key,
// and leaves out keys never stored and deleted ones.
func TestBlockStoreGetMany(t *testing.T) {
	ctx := testCtx(t)
	bs := blockStore(t, connect(t, startServer(t)))
	want := map[string][]byte{}
	for i := range 5 {
		k := fmt.Sprintf("f/0001.b%d", i)
		want[k] = bytes.Repeat([]byte{byte(i)}, 1000+i)
		if err := bs.Put(ctx, k, want[k]); err != nil {
			t.Fatal(err)
		}
	}
	if err := bs.Delete(ctx, "f/0001.b3"); err != nil {
		t.Fatal(err)
	}
	delete(want, "f/0001.b3")
	got, err := bs.GetMany(ctx, []string{"f/0001.b4", "f/0001.b0", "f/0001.b3", "f/0001.nope", "f/0001.b1", "f/0001.b2", "f/0001.b0"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("got %d keys, want %d", len(got), len(want))
	}
	for k, v := range want {
		if !bytes.Equal(got[k], v) {
			t.Errorf("%s: %d bytes, want %d", k, len(got[k]), len(v))
		}
	}
	got, err = bs.GetMany(ctx, []string{"none.b1", "none.b2"})
	if err != nil || len(got) != 0 {
		t.Errorf("keys never stored: %v, %v", got, err)
	}
	if _, err := bs.GetMany(ctx, make([]string, MaxGetMany+1)); err == nil {
		t.Errorf("GetMany of %d keys: no error", MaxGetMany+1)
	}
}

// BenchmarkBlockGet reads 64 KiB blocks one request each (Get) and
// eight to a request (GetMany).
func BenchmarkBlockGet(b *testing.B) {
	ctx := context.Background()
	c := connect(b, startServer(b))
	bs, err := c.BlockStore(ctx)
	if err != nil {
		b.Fatal(err)
	}
	const n = 256
	keys := make([]string, n)
	data := make([]byte, 64<<10)
	for i := range keys {
		keys[i] = fmt.Sprintf("f/0001.b%d", i)
		_, _ = rand.Read(data)
		if err := bs.Put(ctx, keys[i], data); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("one", func(b *testing.B) {
		b.SetBytes(64 << 10)
		for i := 0; b.Loop(); i++ {
			if _, err := bs.Get(ctx, keys[i%n]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("eight", func(b *testing.B) {
		b.SetBytes(8 * 64 << 10)
		for i := 0; b.Loop(); i++ {
			j := (i * 8) % n
			got, err := bs.GetMany(ctx, keys[j:j+8])
			if err != nil || len(got) != 8 {
				b.Fatal(len(got), err)
			}
		}
	})
}
