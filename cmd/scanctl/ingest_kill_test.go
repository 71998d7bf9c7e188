package main

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/tablets/rowfmt"
)

// A scanctl ingest SIGKILLed while it writes leaves the table's current
// generation current and scanning back exactly; the next ingest that
// succeeds removes every object and manifest the killed ones left.
func TestIngestKilledKeepsCurrentGeneration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 1, Hosts: 1, ServersPerHost: 1, Heartbeat: 200 * time.Millisecond})
	scanctl := clustertest.BuildTool(t, ctx, "scanctl")
	store, meta := clustertest.Stores(t, ctx, clustertest.Connect(t, ctx, cl.NATSURL(), nil))
	command := func(args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, scanctl, append(args, "--nats", cl.NATSURL(), "--timeout", "1m")...)
	}
	run := func(args ...string) []byte {
		t.Helper()
		var out, e bytes.Buffer
		c := command(args...)
		c.Stdout, c.Stderr = &out, &e
		if err := c.Run(); err != nil {
			t.Fatalf("scanctl %q: %v: %s", args, err, e.String())
		}
		return out.Bytes()
	}
	ingest := func(rows int) []string {
		return []string{"ingest", "--table", "k", "--generate", strconv.Itoa(rows), "--splits", "2", "--block-size", "256"}
	}
	// rowsOf: the rows of each published generation (--generate N).
	rowsOf := map[uint64]int{}
	checkCurrent := func(when string) uint64 {
		t.Helper()
		cur, err := meta.Current(ctx, "k")
		if err != nil || rowsOf[cur] == 0 {
			t.Fatalf("%s: current generation %d, %v; published: %v", when, cur, err, rowsOf)
		}
		if got, want := run("scan", "--table", "k"), writeRows(t, "", rowfmt.TSV, tablets.GenerateRows(rowsOf[cur])); !bytes.Equal(got, want) {
			t.Fatalf("%s: generation %d scans %d bytes, not its %d rows' %d bytes", when, cur, len(got), rowsOf[cur], len(want))
		}
		return cur
	}
	// keysAbove lists the table's objects of generations above cur (an
	// ingest writes its generation's objects before publishing it; one
	// that finds objects of killed ingests may sweep them and take a
	// higher generation). A listing of tens of thousands of keys can
	// outlast the store's OpTimeout while an ingest writes: false then.
	keysAbove := func(cur uint64) (map[string]bool, bool) {
		keys, err := store.TableKeys(ctx, "k")
		if err != nil {
			return nil, false
		}
		out := map[string]bool{}
		for _, k := range keys {
			rest, ok := strings.CutPrefix(k, "k.g")
			gen, _, _ := strings.Cut(rest, ".")
			if g, err := strconv.ParseUint(gen, 10, 64); ok && err == nil && g > cur {
				out[k] = true
			}
		}
		return out, true
	}
	listAbove := func(cur uint64) map[string]bool {
		t.Helper()
		var keys map[string]bool
		testutil.Eventually(t, 2*time.Minute, "a listing of the table's objects", func() bool {
			var ok bool
			keys, ok = keysAbove(cur)
			return ok
		})
		return keys
	}
	newKeys := func(keys, base map[string]bool) int {
		n := 0
		for k := range keys {
			if !base[k] {
				n++
			}
		}
		return n
	}

	run(ingest(20000)...)
	rowsOf[1] = 20000
	checkCurrent("first ingest")
	// Kill points: the ingest's first object stored, then later in its
	// writing (it writes about 14 000 objects).
	for _, after := range []int{1, 2000, 8000} {
		cur, err := meta.Current(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		base := listAbove(cur) // what earlier killed ingests left
		c := command(ingest(40000)...)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- c.Wait() }()
		var ended bool
		testutil.Eventually(t, 3*time.Minute, "the ingest writing or ending", func() bool {
			select {
			case err := <-exited:
				exited <- err
				ended = true
				return true
			default:
			}
			keys, ok := keysAbove(cur)
			return ok && newKeys(keys, base) >= after
		})
		if !ended {
			_ = c.Process.Kill()
		}
		err = <-exited
		now, _ := meta.Current(ctx, "k")
		if now != cur {
			rowsOf[now] = 40000 // it published before the kill landed
		}
		t.Logf("killed with %d new objects above generation %d stored, %d left by earlier ingests (%v); current generation %d",
			newKeys(listAbove(cur), base), cur, len(base), err, now)
		checkCurrent("killed after " + strconv.Itoa(after) + " objects")
	}

	res := run(ingest(30000)...)
	cur, err := meta.Current(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	rowsOf[cur] = 30000
	checkCurrent("the next ingest: " + string(bytes.TrimSpace(res)))
	named, namedManifests := map[string]bool{}, map[tablets.ManifestID]bool{}
	gens, err := meta.Generations(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gens {
		tm, err := meta.Get(ctx, "k", g)
		if err != nil {
			t.Fatal(err)
		}
		for _, tab := range tm.GetTablets() {
			for _, f := range tab.GetFiles() {
				named[tablets.IndexKey(f.GetId())] = true
				for b := range int(f.GetBlocks()) {
					named[tablets.BlockKey(f.GetId(), b)] = true
				}
			}
		}
		for _, id := range tablets.RecordManifests(tm) {
			namedManifests[id] = true
		}
	}
	keys, err := store.TableKeys(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !named[k] {
			t.Fatalf("object %s of a killed ingest is left after the next ingest (generations %v)", k, gens)
		}
	}
	ids, err := meta.Manifests(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if !namedManifests[id] {
			t.Fatalf("manifest %s of a killed ingest is left after the next ingest", tablets.ManifestName(id))
		}
	}
	if len(keys) != len(named) {
		t.Fatalf("%d objects stored, %d named by generations %v", len(keys), len(named), gens)
	}
}
