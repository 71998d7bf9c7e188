package sim

import (
	"maps"
	"testing"
	"time"

	"github.com/scanplane/scanplane/tablets"
)

// TestMessagesPerOneRowScan counts the messages of one-row scans through
// the real coordinator and scan server. A scan whose row is read at once
// sends four: ScanRequest, StartScan, one RowBatch carrying the
// ScanFinished (not acknowledged), the ScanFinished to the tablet actor
// (which ends the flow: the client sends no ScanDone). A scan whose read
// outlasts scanserver.AcceptNoticeDelay also sends the accept notice
// (ScanStarted). (ScanRouted, which tells a client that asked its tablet
// actor's PID, is not counted.)
func TestMessagesPerOneRowScan(t *testing.T) {
	four := map[string]int{"ScanRequest": 1, "StartScan": 1, "RowBatch": 1, "ScanFinished": 1}
	five := maps.Clone(four)
	five["ScanStarted"] = 1
	for _, tc := range []struct {
		name  string
		cold  float64
		delay time.Duration
		want  map[string]int
	}{{"cached", 0, 0, four}, {"slow read", 1, 5 * time.Millisecond, five}} {
		t.Run(tc.name, func(t *testing.T) {
			scans := 0
			for seed := uint64(1); seed <= 20; seed++ {
				cfg := calmConfig(seed)
				cfg.Hints = []string{""}
				cfg.Coordinators, cfg.Clients, cfg.ScansPerClient, cfg.ScanStartMax = 1, 1, 3, 10*time.Second
				cfg.Server.ColdRead, cfg.Server.ColdReadMin, cfg.Server.ColdReadMax = tc.cold, tc.delay, tc.delay
				count := map[string]map[string]int{}
				oneRow := map[int]bool{}
				var drawn []*scanRun
				mut := mutations{count: count, shape: func(w *world, sr *scanRun) {
					drawn = append(drawn, sr)
					sr.limit, sr.abandonAfter, sr.hint = 0, 0, "" // the default profile, no hedging
					for _, r := range w.truth.rows {
						if w.truth.tabletRange(sr.tablet).Contains(r.Key) {
							sr.rng = tablets.Range{Start: r.Key, End: append(append([]byte(nil), r.Key...), 0)}
							oneRow[sr.n] = true
							return
						}
					}
				}}
				res, err := run(cfg, false, mut)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range res.Problems {
					t.Errorf("seed %d: %s", seed, p)
				}
				for _, sr := range drawn {
					if !oneRow[sr.n] {
						continue
					}
					if sr.err != nil || len(sr.got) != 1 || len(sr.requests) != 1 {
						t.Errorf("seed %d scan-%d: %d rows, %d requests, err %v", seed, sr.n, len(sr.got), len(sr.requests), sr.err)
						continue
					}
					scans++
					got := count[sr.requests[0]]
					delete(got, "ScanRouted")
					if !maps.Equal(got, tc.want) {
						t.Errorf("seed %d scan-%d: messages %v, want %v", seed, sr.n, got, tc.want)
					}
				}
			}
			if scans < 30 {
				t.Fatalf("only %d one-row scans ran", scans)
			}
			t.Logf("%d one-row scans, each %v", scans, tc.want)
		})
	}
}
