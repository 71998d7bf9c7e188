package policysim

import (
	"bytes"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.txt from this build")

// goldenCases are small settings that reach every path of the model: the
// policies that read load views, probe, hedge and keep per-coordinator
// state, a slow host, a hung server (timeouts, stalls, lost servers),
// skewed keys, views of every server (Replication 0) and many servers
// and coordinators.
func goldenCases(t testing.TB) []Config {
	base := small(t)
	base.Requests, base.Warmup = 3000, 100*time.Millisecond
	with := func(name string, f func(*Config)) Config {
		c := base
		c.Setting = name
		f(&c)
		return c
	}
	return []Config{
		with("small", func(*Config) {}),
		with("small-slowhost", func(c *Config) { c.Fault, c.ServersPerHost = FaultSlowHost, 2 }),
		with("small-hung", func(c *Config) { c.Fault, c.Heartbeat = FaultHung, 20*time.Millisecond }),
		with("small-skew", func(c *Config) { c.Skew, c.Utilization = 0.9, 0.7 }),
		with("small-all", func(c *Config) { c.Replication, c.Servers, c.Keys = 0, 8, 16 }),
		with("scale-200", func(c *Config) {
			c.Clients, c.Servers, c.Keys, c.Utilization, c.Requests, c.Warmup = 150, 200, 200, 0.7, 3000, 30*time.Millisecond
		}),
	}
}

var goldenPolicies = []string{"adaptive", "adaptive:spillCost=0", "c3", LeastOutstanding, "round-robin", "random",
	"bookkeeper", "peak-ewma", "prequal"}

// digest is one line naming everything a run counted and a hash of every
// latency it recorded.
func digest(r *Result) string {
	h := fnv.New64a()
	for _, l := range r.Latencies {
		fmt.Fprintf(h, "%d,", l)
	}
	row := r.Row()
	return fmt.Sprintf("%s %s p50=%g p99=%g p999=%g req=%d ok=%d failed=%d arrivals=%d disp=%d hedges=%d busy=%d timeouts=%d events=%d lat=%016x\n",
		r.Config.Setting, r.Policy, row.P50ms, row.P99ms, row.P999ms, r.Requests, r.Completed, r.Failed, r.Arrivals,
		r.Dispatches, r.Hedges, r.Busy, r.Timeouts, r.Events, h.Sum64())
}

// TestGolden: the simulator's results for fixed seeds are those of
// testdata/golden.txt, byte for byte. A change meant to make the
// simulator or the policies faster must leave them as they are; a change
// of the model rewrites the file with -update (and says why).
func TestGolden(t *testing.T) {
	var out bytes.Buffer
	for _, cfg := range goldenCases(t) {
		for _, p := range goldenPolicies {
			out.WriteString(digest(run(t, cfg, p)))
		}
	}
	path := filepath.Join("testdata", "golden.txt")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		got := bytes.Split(out.Bytes(), []byte("\n"))
		for i, w := range bytes.Split(want, []byte("\n")) {
			if i >= len(got) || !bytes.Equal(got[i], w) {
				var g []byte
				if i < len(got) {
					g = got[i]
				}
				t.Errorf("line %d:\n got %s\nwant %s", i+1, g, w)
			}
		}
		if len(got) != len(bytes.Split(want, []byte("\n"))) {
			t.Errorf("%d lines, want %d", len(got), len(bytes.Split(want, []byte("\n"))))
		}
	}
}
