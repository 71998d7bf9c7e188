package natsserver_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/scanplane/scanplane/bus"
)

// BenchmarkClusterBlockGetMany: a client of one node of a three-node
// cluster (blocks bucket at replicas 3, every replica current) reads
// 48 KiB blocks 16 at a time (bus.BlockStore.GetMany, as a scan
// server's read-ahead does), with the nodes keeping direct gets on their
// own replica (ServerConfig.LocalDirectGets) or not. ns/op is per
// block, routed-B/op the bytes the node received over its routes per
// block, cpu-ns/op the process's CPU per block (the three nodes and the
// client).
func BenchmarkClusterBlockGetMany(b *testing.B) {
	for _, local := range []bool{false, true} {
		b.Run(fmt.Sprintf("local=%v", local), func(b *testing.B) {
			tc := newCluster(b, 3, func(_ int, addrs []string) []string { return addrs })
			if local {
				for i := range tc.cfgs {
					tc.cfgs[i].LocalDirectGets = []string{"KV_" + bus.DefaultConfig().BlocksBucket}
				}
			}
			tc.startAndWait(0, 3)
			writer := dial(b, tc.nodes[0], func(c *bus.Config) { c.Replicas = 3 })
			bs, err := writer.BlockStore(ctxFor(b, 30*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			const n = 256
			putRandomBlocks(b, bs, n, 5)
			keys := make([]string, 0, n)
			for i := range n {
				keys = append(keys, fmt.Sprintf("t.g1.t0.cafe.b%d", i))
			}
			reader := dial(b, tc.nodes[1], nil)
			rbs, err := reader.BlockStore(ctxFor(b, 30*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			waitDirectGets(b, tc)
			before := tc.nodes[1].RouteInBytes()
			cpu0 := processCPU()
			b.ResetTimer()
			for i := 0; i < b.N; i += 16 {
				j := (i / 16 * 16) % n
				if _, err := rbs.GetMany(ctxFor(b, 30*time.Second), keys[j:j+16]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(tc.nodes[1].RouteInBytes()-before)/float64(b.N), "routed-B/op")
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is this process's user and system CPU time in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
