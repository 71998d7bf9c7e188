package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/cache"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// BenchmarkFullTabletScan100k: one tablet of 100 000 rows scanned in full
// through the whole system (client → coordinator → scan server process →
// rows streamed back), on 1 host × 1 server. The first scan warms the
// host cache; the timed scans read from it. Each round scans the table
// verified (its rows proven against the block roots) and then the same
// files published as a second table without block roots (scanned with
// AllowUnverified: no proofs sent, none checked), so that both see the
// same machine. Reported: rows/s of the verified scans,
// unverified-rows/s, their ratio verified/unverified and, in the same
// run, reader-rows/s: the tablets reader alone over the same tablet's
// files, copied from the block store into memory and read through a host
// cache (cache.Fetcher) warmed by one scan, which is the same path the
// scan server reads through, without the actors and the network. Its
// timer is separate (b.N scans after the system's). Also reported, for
// each kind of scan: the CPU time (user + system, from /proc/PID/stat,
// 10 ms ticks) the client (this test process) and the scan-server
// process spent per row, client-cpu-ns/row and server-cpu-ns/row (and
// unverified-…); steadier than rows/s on a shared machine, and the two
// run in parallel, so rows/s is bounded by the larger. And
// median-round-verified/unverified: the median over the rounds of the
// round's unverified scan time over its verified scan time, which a
// burst of other load during a few scans moves less than the ratio of
// the totals.
func BenchmarkFullTabletScan100k(b *testing.B) {
	f := startWith(b, 1, 1, 100000, 1)
	ctx := context.Background()
	if err := f.scan(ctx, 0, len(f.truth)); err != nil {
		b.Fatal(err)
	}
	const unverified = "e2e-unverified"
	publishWithoutRoots(b, f.cl.NATSURL(), unverified)
	reader := localReader(b, f.cl.NATSURL())
	clientPID, serverPIDs := []int{os.Getpid()}, []int{f.cl.Host(0).PID()}
	type totals struct {
		elapsed              time.Duration
		clientCPU, serverCPU float64
		last                 time.Duration // of the round's scan
	}
	var ver, unv totals
	scan := func(name string, opts client.ScanOptions, t *totals) {
		c0, s0 := cpuSeconds(b, clientPID), cpuSeconds(b, serverPIDs)
		start := time.Now()
		rows := f.c.Scan(ctx, name, tablets.Range{}, opts)
		n := 0
		for rows.Next() {
			n++
		}
		if rows.Err() != nil || n != len(f.truth) {
			b.Fatalf("%s: %d rows, err %v", name, n, rows.Err())
		}
		if t != nil {
			t.last = time.Since(start)
			t.elapsed += t.last
			t.clientCPU += cpuSeconds(b, clientPID) - c0
			t.serverCPU += cpuSeconds(b, serverPIDs) - s0
		}
	}
	scan(unverified, client.ScanOptions{AllowUnverified: true}, nil) // warm its tablet actor
	// Each round's unverified scan time over its verified scan time.
	rounds := make([]float64, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		scan(table, client.ScanOptions{}, &ver)
		scan(unverified, client.ScanOptions{AllowUnverified: true}, &unv)
		rounds = append(rounds, unv.last.Seconds()/ver.last.Seconds())
	}
	b.StopTimer()
	sort.Float64s(rounds)
	b.ReportMetric(rounds[len(rounds)/2], "median-round-verified/unverified")
	n := float64(b.N * len(f.truth))
	b.ReportMetric(n/ver.elapsed.Seconds(), "rows/s")
	b.ReportMetric(ver.clientCPU*1e9/n, "client-cpu-ns/row")
	b.ReportMetric(ver.serverCPU*1e9/n, "server-cpu-ns/row")
	b.ReportMetric(n/unv.elapsed.Seconds(), "unverified-rows/s")
	b.ReportMetric(unv.clientCPU*1e9/n, "unverified-client-cpu-ns/row")
	b.ReportMetric(unv.serverCPU*1e9/n, "unverified-server-cpu-ns/row")
	b.ReportMetric(unv.elapsed.Seconds()/ver.elapsed.Seconds(), "verified/unverified")

	scanLocal := func() {
		it := reader.Scan(ctx, tablets.Range{}, nil)
		n := 0
		for it.Next() {
			n++
		}
		if it.Err() != nil || n != len(f.truth) {
			b.Fatalf("reader: %d rows, err %v", n, it.Err())
		}
	}
	scanLocal() // warm the cache
	start := time.Now()
	for i := 0; i < b.N; i++ {
		scanLocal()
	}
	b.ReportMetric(float64(b.N*len(f.truth))/time.Since(start).Seconds(), "reader-rows/s")
}

// publishWithoutRoots publishes the current generation of the e2e table
// again as table name, its files' block roots left out: a table whose
// rows no client can verify, over the same files.
func publishWithoutRoots(b *testing.B, natsURL, name string) {
	b.Helper()
	ctx := context.Background()
	_, meta := clustertest.Stores(b, ctx, clustertest.Connect(b, ctx, natsURL, nil))
	gen, err := meta.Current(ctx, table)
	if err != nil {
		b.Fatal(err)
	}
	tm, err := meta.Get(ctx, table, gen)
	if err != nil {
		b.Fatal(err)
	}
	tm = proto.Clone(tm).(*messages.TableMeta)
	tm.Name, tm.Generation = name, 1
	for _, t := range tm.GetTablets() {
		t.GetRef().Table, t.GetRef().Generation = name, 1
		for _, f := range t.GetFiles() {
			f.BlockRoots = nil
		}
	}
	if err := meta.Publish(ctx, tm, 0); err != nil {
		b.Fatal(err)
	}
}

// localReader copies the files of the table's only tablet (current
// generation) from the cluster's block store into memory and returns a
// reader over them through a fresh host cache.
func localReader(b *testing.B, natsURL string) *tablets.TabletReader {
	b.Helper()
	ctx := context.Background()
	store, meta := clustertest.Stores(b, ctx, clustertest.Connect(b, ctx, natsURL, nil))
	gen, err := meta.Current(ctx, table)
	if err != nil {
		b.Fatal(err)
	}
	tm, err := meta.Get(ctx, table, gen)
	if err != nil {
		b.Fatal(err)
	}
	if len(tm.GetTablets()) != 1 {
		b.Fatalf("%d tablets, want 1", len(tm.GetTablets()))
	}
	files := tm.GetTablets()[0].GetFiles()
	local := memStore{}
	for _, ref := range files {
		keys := []string{tablets.IndexKey(ref.GetId())}
		for i := 0; i < int(ref.GetBlocks()); i++ {
			keys = append(keys, tablets.BlockKey(ref.GetId(), i))
		}
		for _, k := range keys {
			data, err := store.Get(ctx, k)
			if err != nil {
				b.Fatal(err)
			}
			local[k] = data
		}
	}
	c, err := cache.New(cache.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return tablets.NewTabletReader(files, c.Fetcher(local))
}

// memStore is a read-only in-memory tablets.BlockStore.
type memStore map[string][]byte

func (m memStore) Put(context.Context, string, []byte) error {
	return errors.New("memStore is read-only")
}
func (m memStore) Delete(context.Context, string) error { return errors.New("memStore is read-only") }
func (m memStore) Get(_ context.Context, key string) ([]byte, error) {
	if d, ok := m[key]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("%w: %s", tablets.ErrNotFound, key)
}

// BenchmarkOneRowScan: a one-row scan's round trip through the coordinator
// (client → tablet actor → scan server → client; the client learnt the
// tablet actors during the warm-up, reported as direct-frac: the share of
// all the coordinator's scans, warm-up included, that skipped the router;
// client.Config.RouterOnly would send them all through it), on 3 hosts × 2
// servers with 100 000 rows over 8 tablets (every row a timed scan reads
// was scanned once before the timer starts), and, in the same run on the
// same processes, its floor: a bare remote request/response between the
// client and the echo actor of a scan-server process (client.Ping).
// Scans and pings alternate in blocks of 100, so both see the same
// machine. Reported: p50-µs and p99-µs of the scans, rtt-p50-µs and
// rtt-p99-µs of the pings, and the CPU time (user + system, from
// /proc/PID/stat, 10 ms ticks summed over the scan blocks only) that the
// coordinator process and the scan-server processes spent per scan:
// coord-cpu-µs/scan, server-cpu-µs/scan (their heartbeats and other
// background work included). Run with -benchtime=3000x or more.
func BenchmarkOneRowScan(b *testing.B) {
	f := start(b)
	ctx := context.Background()
	// key is the row the i-th timed scan reads.
	key := func(i int) int { return (i * 7919) % len(f.truth) }
	// Warm connections, tablet actors and caches: every row the timed
	// scans read is read once first, so that they measure scans the
	// servers have served before, not the first scan of a region of a
	// tablet, which is slower.
	for i := 0; i < max(b.N, 200); i++ {
		if err := f.scan(ctx, key(i), key(i)+1); err != nil {
			b.Fatal(err)
		}
	}
	hosts := make([]string, f.cl.Hosts())
	for i := range hosts {
		hosts[i] = f.cl.Host(i).Ready.Actor
		for j := 0; j < 20; j++ { // warm the client's endpoint to each host
			if _, err := f.c.Ping(ctx, hosts[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	coordPIDs := []int{f.cl.Coordinator().PID()}
	var serverPIDs []int
	for i := 0; i < f.cl.Hosts(); i++ {
		serverPIDs = append(serverPIDs, f.cl.Host(i).PID())
	}
	lat := make([]time.Duration, 0, b.N)
	rtt := make([]time.Duration, 0, b.N)
	var coordCPU, serverCPU float64
	const block = 100
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(block, b.N-done)
		c0, s0 := cpuSeconds(b, coordPIDs), cpuSeconds(b, serverPIDs)
		for i := done; i < done+n; i++ {
			k := key(i)
			t := time.Now()
			rows := f.c.Scan(ctx, table, tablets.Range{Start: f.truth[k].Key, End: append(f.truth[k].Key[:len(f.truth[k].Key):len(f.truth[k].Key)], 0)}, client.ScanOptions{})
			got := 0
			for rows.Next() {
				got++
			}
			if rows.Err() != nil || got != 1 {
				b.Fatalf("%d rows, err %v", got, rows.Err())
			}
			lat = append(lat, time.Since(t))
		}
		coordCPU += cpuSeconds(b, coordPIDs) - c0
		serverCPU += cpuSeconds(b, serverPIDs) - s0
		for i := done; i < done+n; i++ {
			d, err := f.c.Ping(ctx, hosts[i%len(hosts)])
			if err != nil {
				b.Fatal(err)
			}
			rtt = append(rtt, d)
		}
		done += n
	}
	b.StopTimer()
	b.ReportMetric(quantileMicros(lat, 0.50), "p50-µs")
	b.ReportMetric(quantileMicros(lat, 0.99), "p99-µs")
	b.ReportMetric(quantileMicros(rtt, 0.50), "rtt-p50-µs")
	b.ReportMetric(quantileMicros(rtt, 0.99), "rtt-p99-µs")
	b.ReportMetric(coordCPU*1e6/float64(b.N), "coord-cpu-µs/scan")
	b.ReportMetric(serverCPU*1e6/float64(b.N), "server-cpu-µs/scan")
	if st, err := f.c.Status(ctx); err == nil && st.ScansStarted > 0 {
		// Scans that skipped the router (the client knew the tablet actor).
		b.ReportMetric(float64(st.DirectRequests)/float64(st.ScansStarted), "direct-frac")
	}
}

// quantileMicros is the q-quantile of ds in µs (ds is sorted in place).
func quantileMicros(ds []time.Duration, q float64) float64 {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return float64(ds[int(q*float64(len(ds)-1))].Nanoseconds()) / 1e3
}

// cpuSeconds is the user + system CPU time the processes have used.
func cpuSeconds(b *testing.B, pids []int) float64 {
	var sum float64
	for _, pid := range pids {
		p, err := procfs.NewProc(pid)
		if err != nil {
			b.Fatal(err)
		}
		st, err := p.Stat()
		if err != nil {
			b.Fatal(err)
		}
		sum += st.CPUTime()
	}
	return sum
}

// The floors of this machine beside which MEASUREMENTS.md puts a whole
// tablet scan's per-row costs, per 107-byte row (a generated row: 12-byte
// key, 93-byte value, packed): copying it, hashing it with SHA-256 (the
// CPU's SHA extensions where it has them; crypto/sha256 picks them), and
// moving it through a gRPC stream of 64 KiB messages over loopback.
const floorRow = 107

// BenchmarkFloorMemcpy: copying a 256 KiB batch (the scan server's
// default batch size).
func BenchmarkFloorMemcpy(b *testing.B) {
	src, dst := make([]byte, 256<<10), make([]byte, 256<<10)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		copy(dst, src)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(src)/floorRow), "ns/row")
}

// BenchmarkFloorSHA256: SHA-256 of one 100-byte row (row: one call per
// row, the former leaf) and of a 16-row chunk in one call (chunk: a
// leaf of the row digest tree), per row.
func BenchmarkFloorSHA256(b *testing.B) {
	for _, tc := range []struct {
		name string
		rows int
		size int
	}{{"row", 1, 100}, {"chunk", tablets.ChunkRows, tablets.ChunkRows * floorRow}} {
		b.Run(tc.name, func(b *testing.B) {
			buf := make([]byte, tc.size)
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				_ = sha256.Sum256(buf)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tc.rows), "ns/row")
		})
	}
}

// BenchmarkFloorBLAKE3Block: whole(blk) of a block of the default size
// (tablets.MerkleHasher.Whole, BLAKE3 in one pass): what a client hashes
// to prove a scan's whole blocks, per row.
func BenchmarkFloorBLAKE3Block(b *testing.B) {
	buf := make([]byte, tablets.DefaultBlockSize)
	var m tablets.MerkleHasher
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		_ = m.Whole(buf)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(len(buf)/floorRow)), "ns/row")
}

// BenchmarkFloorGRPCStream64KiB: a server-streaming gRPC call over
// loopback TCP that sends b.N messages of 64 KiB, received and copied
// out by the client.
func BenchmarkFloorGRPCStream64KiB(b *testing.B) {
	const size = 64 << 10
	desc := grpc.ServiceDesc{ServiceName: "floor.Floor", HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Pull", ServerStreams: true, Handler: func(_ any, s grpc.ServerStream) error {
			var req rawMsg
			if err := s.RecvMsg(&req); err != nil {
				return err
			}
			n := binary.LittleEndian.Uint64(req)
			msg := rawMsg(make([]byte, size))
			for range n {
				if err := s.SendMsg(&msg); err != nil {
					return err
				}
			}
			return nil
		}}}}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
	srv.RegisterService(&desc, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	pull := func(n int) {
		s, err := conn.NewStream(context.Background(), &desc.Streams[0], "/floor.Floor/Pull")
		if err != nil {
			b.Fatal(err)
		}
		req := rawMsg(binary.LittleEndian.AppendUint64(nil, uint64(n)))
		if err := s.SendMsg(&req); err != nil {
			b.Fatal(err)
		}
		if err := s.CloseSend(); err != nil {
			b.Fatal(err)
		}
		got := 0
		for {
			var m rawMsg
			if err := s.RecvMsg(&m); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
			if len(m) != size {
				b.Fatalf("message of %d bytes", len(m))
			}
			got++
		}
		if got != n {
			b.Fatalf("%d messages, want %d", got, n)
		}
	}
	pull(10) // connect
	b.SetBytes(size)
	b.ResetTimer()
	pull(b.N)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(size/floorRow), "ns/row")
}

// rawMsg is a gRPC message of raw bytes (rawCodec).
type rawMsg []byte

// rawCodec passes rawMsg bytes through: the receiver gets its own copy.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*rawMsg), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*rawMsg) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "raw" }
