package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/scanplane/scanplane/client"
)

// Scan a key range of the table "demo" on the cluster `scanctl up` runs,
// the default way: through a coordinator's HTTP port (DefaultAPIAddrs),
// opening no listening socket.
func Example() {
	ctx := context.Background()
	a, err := client.NewAPI(client.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	rows := a.Scan(ctx, "demo", client.KeyRange([]byte("row000000100"), []byte("row000000200")), client.ScanOptions{})
	defer rows.Close()
	for rows.Next() {
		r := rows.Row()
		fmt.Printf("%s\t%s\n", r.Key, r.Value)
	}
	if err := rows.Err(); err != nil {
		log.Fatal(err)
	}
}

// Hints pick the profile the coordinator schedules a scan with; Limit
// stops it early. All is Scan as a range-over-func iterator.
func ExampleClient_All_hints() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	opts := client.ScanOptions{Hints: map[string]string{"scan_type": "batch"}, Limit: 1000}
	n := 0
	for _, err := range c.All(ctx, "demo", client.Prefix([]byte("row0000")), opts) {
		if err != nil {
			log.Fatal(err)
		}
		n++
	}
	fmt.Println(n, "rows")
}

// A whole-table scan reads Parallel tablets at once and still yields its
// rows in key order, holding at most about MaxBufferBytes of them ahead
// of the caller. Close stops it early.
func ExampleScanOptions_parallel() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	opts := client.ScanOptions{Parallel: 8, MaxBufferBytes: 64 << 20}
	rows := c.Scan(ctx, "demo", client.Range{}, opts)
	defer rows.Close()
	var n, bytes int
	for rows.Next() {
		r := rows.Row()
		n++
		bytes += len(r.Key) + len(r.Value)
	}
	if err := rows.Err(); err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, "rows,", bytes, "bytes,", rows.Stats().Tablets, "tablets")
}

// BatchScan reads the union of many ranges, each exactly once; each
// tablet's rows come in key order, the tablets interleaved.
func ExampleClient_BatchScan() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ranges := []client.Range{
		client.Prefix([]byte("row00001")),
		client.Prefix([]byte("row00009")),
		client.SingleKey([]byte("row000050000")),
		client.KeyRange([]byte("row000010500"), []byte("row000011500")), // overlaps the first: merged
	}
	rows := c.BatchScan(ctx, "demo", ranges, client.ScanOptions{})
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++ // rows.Row(): a row of one of the ranges
	}
	if err := rows.Err(); err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, "rows")
}

// Connect to a secured cluster (`scanctl up --secure`, or every process
// started with --secrets DIR) with the client certificate of its secrets
// directory.
func ExampleTLSFromSecrets() {
	tlsCfg, err := client.TLSFromSecrets("./data/secrets")
	if err != nil {
		log.Fatal(err)
	}
	cfg := client.DefaultConfig()
	cfg.TLS = tlsCfg
	c, err := client.Dial(context.Background(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	tables, err := c.Tables(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(tables)
}

// Tell failures apart with errors.Is: what is worth retrying, and what is
// not.
func ExampleScanError() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.DefaultConfig())
	if err != nil {
		log.Fatal(err) // errors.Is(err, client.ErrNoCoordinator): no coordinator runs
	}
	defer c.Close()
	rows := c.Scan(ctx, "demo", client.SingleKey([]byte("row000000042")), client.ScanOptions{})
	defer rows.Close()
	for rows.Next() {
		fmt.Printf("%s\n", rows.Row().Value)
	}
	switch err := rows.Err(); {
	case err == nil:
	case errors.Is(err, client.ErrNoTable):
		fmt.Println("no table demo: ingest it first")
	case errors.Is(err, client.ErrDeadlineExceeded):
		fmt.Println("took longer than 5s:", err)
	case errors.Is(err, client.ErrOverloaded), errors.Is(err, client.ErrNoServers), errors.Is(err, client.ErrNoCoordinator):
		fmt.Println("the cluster cannot take it now; retry later:", err)
	default:
		var se *client.ScanError
		if errors.As(err, &se) {
			fmt.Println("the cluster answered", se.Code, se.Message)
		} else {
			fmt.Println(err)
		}
	}
}

// Ranges are half-open: Start inclusive, End exclusive; an empty End is
// the table's end.
func ExamplePrefix() {
	fmt.Println(client.Prefix([]byte("user42/")))
	fmt.Println(client.SingleKey([]byte("k")))
	fmt.Println(client.KeyRange([]byte("a"), nil))
	// Output:
	// [user42/, user420)
	// [k, k\x00)
	// [a, +inf)
}
