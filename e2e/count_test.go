package e2e

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// TestCountAndLimitAtTheServer: on real processes, with one of the two
// hosts answering every count-only scan with a count one block short
// (--fault-lie count), Client.Count of random ranges (edges inside
// blocks, whole tablets, the whole table) equals the ground truth, and
// for the whole table the honest host streams a few blocks per tablet;
// the lie is caught (the stream resumes on the other host). A scan with a limit
// yields exactly the first N rows, and the scan servers send no row
// past them.
func TestCountAndLimitAtTheServer(t *testing.T) {
	clustertest.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dataDir := t.TempDir()
	cl := clustertest.Start(t, ctx, localcluster.Config{Hosts: 2, ServersPerHost: 1, DataDir: dataDir,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second, LogLevel: os.Getenv("E2E_CHILD_LOG_LEVEL"), HostMetrics: true,
		HostArgs: func(i int) []string {
			if i == 0 {
				return []string{"--fault-lie", "count"}
			}
			return nil
		}})
	t.Cleanup(func() { logTails(t, dataDir) })
	truth := tablets.GenerateRows(60000)
	meta := ingest(t, cl.NATSURL(), truth, 8)
	if err := cl.WaitServers(ctx, 2, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	c := clustertest.Client(t, ctx, cl.NATSURL(), func(cfg *client.Config) { cfg.StallTimeout = time.Second })
	streamed := func() float64 {
		sum := 0.0
		for i := range cl.Hosts() {
			sum += metricSum(t, cl.HTTPClient(), "http://"+cl.Host(i).Ready.HTTP+"/metrics", "rows_streamed_total")
		}
		return sum
	}
	honestStreamed := func() float64 {
		return metricSum(t, cl.HTTPClient(), "http://"+cl.Host(1).Ready.HTTP+"/metrics", "rows_streamed_total")
	}
	keyOf := func(i int) []byte {
		if i >= len(truth) {
			return nil
		}
		return truth[i].Key
	}

	// liarScans: the scans the lying host started.
	liarScans := func() float64 {
		return metricSum(t, cl.HTTPClient(), "http://"+cl.Host(0).Ready.HTTP+"/metrics", "scanserver_scans_total")
	}
	within := func(rng client.Range) int {
		n := 0
		for _, e := range truth {
			if rng.Contains(e.Key) {
				n++
			}
		}
		return n
	}

	perBlock := 0 // the most rows of a block
	for _, tm := range meta.GetTablets() {
		for _, f := range tm.GetFiles() {
			perBlock = max(perBlock, int((f.GetEntries()+uint64(f.GetBlocks())-1)/uint64(f.GetBlocks())))
		}
	}

	t.Run("count", func(t *testing.T) {
		r := rand.New(rand.NewPCG(27, 3))
		before, liar := streamed(), liarScans()
		var counted uint64
		for i := range 40 {
			a := r.IntN(len(truth))
			b := a + 1 + r.IntN(len(truth)-a)
			rng := client.Range{Start: keyOf(a), End: keyOf(b)}
			if i%4 == 1 {
				// A lower bound between rows, inside a block.
				rng.Start = append(bytes.Clone(keyOf(a)), 0)
			}
			if i == 0 {
				rng = client.Range{}
			}
			at := honestStreamed()
			n, err := c.Count(ctx, table, rng, client.ScanOptions{Parallel: 1 + r.IntN(4)})
			if want := within(rng); err != nil || n != uint64(want) {
				t.Fatalf("count %d of %s: %d, %v; want %d", i, rng, n, err, want)
			}
			counted += n
			// The whole table: the honest host streams the first and the
			// last block of each tablet's stream it serves (a stream
			// resumed after the liar's first block included); one more
			// block per tablet leaves room for a stream resumed after a
			// stall.
			if sent := honestStreamed() - at; i == 0 && sent > float64(3*len(meta.GetTablets())*perBlock) {
				t.Errorf("a count of the whole table (%d rows, %d tablets, at most %d rows a block): the honest host streamed %.0f rows",
					n, len(meta.GetTablets()), perBlock, sent)
			}
		}
		t.Logf("40 counts of %d rows in all: the servers streamed %.0f rows; the liar started %.0f scans", counted, streamed()-before, liarScans()-liar)
	})

	t.Run("count catches the lie", func(t *testing.T) {
		// Every tablet counted on its own, several times: the liar gets
		// some of them, each long enough to lie about.
		liar := liarScans()
		for round := range 4 {
			for i, tm := range meta.GetTablets() {
				rng := client.Range{Start: tm.GetRef().GetPrevEndRow(), End: tm.GetRef().GetEndRow()}
				n, err := c.Count(ctx, table, rng, client.ScanOptions{})
				if want := within(rng); err != nil || n != uint64(want) {
					t.Fatalf("round %d tablet %d: count %d, %v; want %d", round, i, n, err, want)
				}
			}
		}
		if d := liarScans() - liar; d == 0 {
			t.Error("the lying host started no count scan")
		} else {
			t.Logf("the lying host started %.0f of the count scans", d)
		}
	})

	t.Run("limit", func(t *testing.T) {
		r := rand.New(rand.NewPCG(27, 4))
		for i := range 20 {
			a := r.IntN(len(truth))
			limit := 1 + r.IntN(3000)
			before := streamed()
			rows := c.Scan(ctx, table, client.Range{Start: keyOf(a)}, client.ScanOptions{Limit: uint64(limit), Parallel: 1 + r.IntN(8)})
			got := 0
			for rows.Next() {
				if !bytes.Equal(rows.Row().Key, truth[a+got].Key) {
					t.Fatalf("scan %d: row %d is %q, want %q", i, got, rows.Row().Key, truth[a+got].Key)
				}
				got++
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			rows.Close()
			want := min(limit, len(truth)-a)
			if got != want {
				t.Fatalf("scan %d: %d rows, want %d", i, got, want)
			}
			if sent := streamed() - before; sent > float64(want) {
				t.Fatalf("scan %d with limit %d: the servers streamed %.0f rows", i, limit, sent)
			}
		}
	})
}
