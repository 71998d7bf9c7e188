package e2e

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"os/exec"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
)

// writerProgram is a program of another module that writes a table
// through the public write API with the admin certificate: an Ingest
// with a duplicate key (refused, the table not created), a Writer that
// is aborted, then a Writer of rows in scrambled order, committed; it
// scans the table back and prints what it saw.
const writerProgram = `package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"log"
	"slices"
	"time"

	"github.com/scanplane/scanplane/client"
)

func main() {
	nats := flag.String("nats", client.DefaultNATSURLs, "NATS URLs")
	secrets := flag.String("secrets", "", "secrets directory")
	table := flag.String("table", "", "table")
	n := flag.Int("rows", 0, "rows")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tlsCfg, err := client.AdminTLSFromSecrets(*secrets)
	if err != nil {
		log.Fatal(err)
	}
	cfg := client.DefaultConfig()
	cfg.NATSURL = *nats
	cfg.TLS = tlsCfg
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	dups := slices.Values([]client.Row{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b")}, {Key: []byte("a"), Value: []byte("2")}})
	_, err = c.Ingest(ctx, *table, dups, client.WriteOptions{})
	fmt.Printf("duplicate: %v\n", err)

	w, err := c.NewWriter(ctx, *table, client.WriteOptions{})
	if err != nil {
		log.Fatal(err)
	}
	_ = w.Write([]byte("x"), []byte("y"))
	w.Abort()

	w, err = c.NewWriter(ctx, *table, client.WriteOptions{Tablets: 4, SortBuffer: 64 << 10})
	if err != nil {
		log.Fatal(err)
	}
	for i := 0; i < *n; i++ {
		j := (i * 7919) % *n // every row once, scrambled
		if err := w.Write([]byte(fmt.Sprintf("k%06d", j)), []byte(fmt.Sprintf("value of %d\t\n\x00", j))); err != nil {
			log.Fatal(err)
		}
	}
	gen, err := w.Commit()
	if err != nil {
		log.Fatal(err)
	}
	h := fnv.New64a()
	rows := 0
	for r, err := range c.All(ctx, *table, client.Range{}, client.ScanOptions{}) {
		if err != nil {
			log.Fatal(err)
		}
		h.Write(r.Key)
		h.Write([]byte{0})
		h.Write(r.Value)
		h.Write([]byte{0})
		rows++
	}
	_, err = c.NewWriter(ctx, "bad name", client.WriteOptions{})
	fmt.Printf("generation %d rows %d hash %x bad-name %v\n", gen, rows, h.Sum64(), err != nil && !errors.Is(err, client.ErrClosed))
}
`

// TestWriteFromAnotherModule: a program in a module of its own writes a
// table through the public write API (Ingest, NewWriter, Write, Abort,
// Commit) against a `scanctl up --secure` cluster with the admin
// certificate. A duplicate key is refused naming both rows and leaves no
// table; an aborted writer publishes nothing; the committed rows, written
// in scrambled order through a 64 KiB sort buffer (spilled runs), scan
// back exactly, as generation 1.
func TestWriteFromAnotherModule(t *testing.T) {
	clustertest.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := localcluster.SourceRoot()
	if err != nil {
		t.Fatal(err)
	}
	prog := buildUserProgram(t, ctx, root, writerProgram)
	bins := clustertest.Binaries(t, ctx)
	scanctl := clustertest.BuildTool(t, ctx, "scanctl")

	secrets, natsURL := startSecureUp(t, ctx, scanctl, bins)

	const n = 5000
	h := fnv.New64a()
	for j := range n {
		h.Write(fmt.Appendf(nil, "k%06d", j))
		h.Write([]byte{0})
		h.Write(fmt.Appendf(nil, "value of %d\t\n\x00", j))
		h.Write([]byte{0})
	}
	want := "duplicate: client: write users: tablets: ingest users: tablets: bad input: row 3 repeats key a of row 1\n" +
		fmt.Sprintf("generation 1 rows %d hash %x bad-name true\n", n, h.Sum64())
	run := exec.CommandContext(ctx, prog, "--nats", natsURL, "--secrets", secrets, "--table", "users", "--rows", fmt.Sprint(n))
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("the other module's program: %v\n%s", err, stderr.String())
	}
	if stdout.String() != want {
		t.Fatalf("the other module's program printed %q, want %q", stdout.String(), want)
	}
}
