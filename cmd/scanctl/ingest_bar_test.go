package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestIngestBar: on a terminal the progress line shows the stage, the
// rows, the MB/s and the time left (from the input's bytes while
// reading, from the rows of the total while writing), redrawn in place
// at most every 200 ms, and is erased at the end; on anything else
// (a pipe, a file) nothing is drawn.
func TestIngestBar(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if b := newIngestBar(w, 100, nil, 0); b != nil {
		t.Fatal("a progress bar on a pipe")
	}
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		in := &countingReader{}
		b := &ingestBar{out: &out, size: 4e6, in: in}
		b.update("read", 0, -1)
		time.Sleep(time.Second)
		in.n.Store(1e6)
		b.update("read", 1000, -1)
		b.update("read", 1001, -1) // within 200 ms: not drawn
		time.Sleep(time.Second)
		b.update("write", 0, 4000)
		time.Sleep(2 * time.Second)
		b.update("write", 1000, 4000)
		b.finish()
		lines := strings.Split(out.String(), "\r\x1b[K")
		want := []string{"", "read: 0 rows", "read: 1000 rows, 1.0 MB/s, ETA 3s", "write: 0/4000 rows", "write: 1000/4000 rows, 0.5 MB/s, ETA 6s", ""}
		if strings.Join(lines, "|") != strings.Join(want, "|") {
			t.Fatalf("drew %q, want %q", lines, want)
		}
	})
}
