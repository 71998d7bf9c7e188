package testutil

import (
	"slices"
	"strings"
	"sync"
	"testing"
)

// Writers on several goroutines lose no byte (run with -race).
func TestSyncBuffer(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("x", 800) {
		t.Fatalf("%d bytes, want 800", len(got))
	}
}

func TestSyncBufferLines(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"a\n", []string{"a\n"}},
		{"a\nb\n", []string{"a\n", "b\n"}},
		{"a\nb", []string{"a\n", "b"}},
		{"\n\n", []string{"\n", "\n"}},
	} {
		var b SyncBuffer
		_, _ = b.Write([]byte(tc.in))
		if got := b.Lines(); !slices.Equal(got, tc.want) {
			t.Errorf("Lines of %q = %q, want %q", tc.in, got, tc.want)
		}
	}
}
