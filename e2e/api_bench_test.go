package e2e

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
	"github.com/scanplane/scanplane/api/scanplane/v1/scanplanev1connect"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/tablets"
)

// BenchmarkWholeTableScanAPI scans a whole 200 000-row table (8 tablets,
// 3 hosts × 2 servers, one coordinator) in turns through the Go client
// library in this process and through the public API (gRPC over h2c, and
// Connect over HTTP/1.1) of the coordinator, whose in-process client
// verifies the rows, and through gRPC with the rows' proofs (not checked
// here: what they cost to send), and through gRPC with the rows packed
// (ScanRequest.packed_rows); every scan is checked row by row against
// the ground truth. It reports rows/s of each, api-grpc/go,
// api-connect/go, api-grpc-proofs/api-grpc and
// api-grpc-packed/api-grpc (the ratios of their
// rows/s), and the CPU the coordinator process and this process spent
// per row for each kind (/proc/PID/stat, 10 ms ticks).
func BenchmarkWholeTableScanAPI(b *testing.B) {
	f := startWith(b, 3, 2, 200000, 8)
	ctx := context.Background()
	url := "http://" + f.cl.HTTPAddr()
	grpcC := scanplanev1connect.NewScanServiceClient(h2c(), url, connect.WithGRPC())
	connectC := scanplanev1connect.NewScanServiceClient(&http.Client{}, url)
	check := func(i int, k, v []byte) {
		if i >= len(f.truth) || !bytes.Equal(k, f.truth[i].Key) || !bytes.Equal(v, f.truth[i].Value) {
			b.Fatalf("row %d is %q, not the ground truth's", i, k)
		}
	}
	goScan := func() {
		rows := f.c.Scan(ctx, table, client.Range{}, client.ScanOptions{})
		defer rows.Close()
		n := 0
		for rows.Next() {
			check(n, rows.Row().Key, rows.Row().Value)
			n++
		}
		if rows.Err() != nil || n != len(f.truth) {
			b.Fatalf("go client: %d rows, err %v", n, rows.Err())
		}
	}
	apiScan := func(c scanplanev1connect.ScanServiceClient, proofs, packed bool) func() {
		return func() {
			st, err := c.Scan(ctx, connect.NewRequest(&scanplanev1.ScanRequest{Table: table, Proofs: proofs, PackedRows: packed}))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			n, hint := 0, 0
			for st.Receive() {
				for _, r := range st.Msg().GetRows() {
					check(n, r.GetKey(), r.GetValue())
					n++
				}
				if p := st.Msg().GetPackedRows(); len(p) > 0 {
					rows, err := tablets.UnpackRows(p, hint)
					if err != nil {
						b.Fatal(err)
					}
					hint = len(rows)
					for _, r := range rows {
						check(n, r.Key, r.Value)
						n++
					}
				}
			}
			if st.Err() != nil || n != len(f.truth) {
				b.Fatalf("api: %d rows, err %v", n, st.Err())
			}
		}
	}
	kinds := []benchScan{{name: "go", scan: goScan}, {name: "api-grpc", scan: apiScan(grpcC, false, false)},
		{name: "api-connect", scan: apiScan(connectC, false, false)}, {name: "api-grpc-proofs", scan: apiScan(grpcC, true, false)},
		{name: "api-grpc-packed", scan: apiScan(grpcC, false, true)}}
	sideBySide(b, f.cl.Coordinator().PID(), len(f.truth), kinds)
	b.ReportMetric(kinds[0].t.Seconds()/kinds[1].t.Seconds(), "api-grpc/go")
	b.ReportMetric(kinds[0].t.Seconds()/kinds[2].t.Seconds(), "api-connect/go")
	b.ReportMetric(kinds[1].t.Seconds()/kinds[3].t.Seconds(), "api-grpc-proofs/api-grpc")
	b.ReportMetric(kinds[1].t.Seconds()/kinds[4].t.Seconds(), "api-grpc-packed/api-grpc")
}

// benchScan is one way of scanning a benchmark's table, and what it cost.
type benchScan struct {
	name              string
	scan              func()
	t                 time.Duration
	coordCPU, selfCPU float64
}

// sideBySide warms every kind of scan, then runs them in turn b.N times,
// each timed with the coordinator's (pid coord) and this process's CPU,
// and reports rows/s and CPU per row of each (rows per scan).
func sideBySide(b *testing.B, coord, rows int, kinds []benchScan) {
	coordPIDs, self := []int{coord}, []int{os.Getpid()}
	for i := range kinds {
		kinds[i].scan() // warm the tablet actors and the block caches
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range kinds {
			c0, s0 := cpuSeconds(b, coordPIDs), cpuSeconds(b, self)
			t0 := time.Now()
			kinds[k].scan()
			kinds[k].t += time.Since(t0)
			kinds[k].coordCPU += cpuSeconds(b, coordPIDs) - c0
			kinds[k].selfCPU += cpuSeconds(b, self) - s0
		}
	}
	b.StopTimer()
	n := float64(b.N * rows)
	for _, k := range kinds {
		b.ReportMetric(n/k.t.Seconds(), k.name+"-rows/s")
		b.ReportMetric(k.coordCPU*1e9/n, k.name+"-coordinator-cpu-ns/row")
		b.ReportMetric(k.selfCPU*1e9/n, k.name+"-caller-cpu-ns/row")
	}
}
