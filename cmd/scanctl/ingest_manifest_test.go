package main

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/tablets/rowfmt"
)

// A one-tablet table of 256-byte blocks whose file lists would make a
// record of over 4 MiB ingests with a record of a few KiB (the lists in
// manifests) and scans back exactly, every row checked against its block
// root: the scan requests name the manifests, which the scan server
// loads, since the tablet's file list exceeds what a request can carry.
func TestIngestSmallBlocksKeepsRecordSmall(t *testing.T) {
	const n = 450000
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 1, Hosts: 1, ServersPerHost: 1, Heartbeat: 200 * time.Millisecond})
	scanctl := clustertest.BuildTool(t, ctx, "scanctl")
	run := func(args ...string) []byte {
		t.Helper()
		var out, e bytes.Buffer
		c := exec.CommandContext(ctx, scanctl, append(args, "--nats", cl.NATSURL(), "--timeout", "5m")...)
		c.Stdout, c.Stderr = &out, &e
		if err := c.Run(); err != nil {
			t.Fatalf("scanctl %q: %v: %s", args, err, e.String())
		}
		return out.Bytes()
	}
	run("ingest", "--table", "small", "--generate", strconv.Itoa(n), "--splits", "1", "--block-size", "256")
	if got, want := run("scan", "--table", "small"), writeRows(t, "", rowfmt.TSV, tablets.GenerateRows(n)); !bytes.Equal(got, want) {
		t.Fatalf("scan returned %d bytes, not the %d bytes of the ingested rows", len(got), len(want))
	}

	_, meta := clustertest.Stores(t, ctx, clustertest.Connect(t, ctx, cl.NATSURL(), nil))
	loaded, err := meta.Get(ctx, "small", 1)
	if err != nil {
		t.Fatal(err)
	}
	record := proto.Clone(loaded).(*messages.TableMeta)
	var blocks int
	for _, tab := range record.GetTablets() {
		for _, f := range tab.GetFiles() {
			blocks += int(f.GetBlocks())
		}
		if len(tab.GetManifests()) > 0 {
			tab.Files = nil
		}
	}
	inline, stored := proto.Size(loaded), proto.Size(record)
	t.Logf("%d rows, %d blocks: record %d bytes; with the file lists inline %d", n, blocks, stored, inline)
	if record.GetMetaFormat() != tablets.MetaFormatManifests || stored > 16<<10 || inline < 4<<20 {
		t.Fatalf("record of format %d is %d bytes (file lists inline: %d); want format %d, at most 16 KiB against over 4 MiB",
			record.GetMetaFormat(), stored, inline, tablets.MetaFormatManifests)
	}
}
