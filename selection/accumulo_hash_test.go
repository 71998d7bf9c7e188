package selection

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spaolacci/murmur3"
)

// The rendezvous hash against Accumulo's own: RendezvousHasherTest,
// ConfigurableScanServerSelectorTest.testBasic and
// ConfigurableScanServerHostSelectorTest (apache/accumulo,
// core/src/test/java/org/apache/accumulo/core/spi/scan/) ported, with
// their assertions kept as they are there, plus exact values.
//
// The exact values (hashes, subsets, counts, digests) were computed by
// Accumulo's RendezvousHasher.hash() and its SERVER/HOST selection copied
// verbatim into a Java program (a plain tablet record in place of
// TabletId, so that it runs without Hadoop) on Guava 31.1's
// Hashing.murmur3_128(); that program also reproduces every assertion of
// RendezvousHasherTest (min 7, max 18, average 12, 200 salt differences).
// Tablets are Accumulo's test tablets nti(tableId, endRow): table id, end
// row, no prev end row.

// nti is Accumulo's ConfigurableScanServerSelectorTest.nti(tableId, endRow).
func nti(table, endRow string) Tablet {
	return Tablet{Table: table, EndRow: []byte(endRow)}
}

// hostPort is a server named as Accumulo names scan servers, "host:port",
// on host "host".
func hostPort(name string) *ServerLoad {
	host, _, _ := strings.Cut(name, ":")
	return srv(name, host)
}

// accumuloRendezvous is RendezvousHasher.rendezvous(mode, group, tablet,
// salt, n) over the policies' own code: SERVER mode is the first n of the
// tablet's cached rendezvous order (the accumulo policy's subset), HOST
// mode the accumulo-host policy's plan hosts.
func accumuloRendezvous(t *testing.T, v *LoadView, hostMode bool, tab Tablet, salt string, n int) []string {
	t.Helper()
	p := profileFor(PolicyAccumulo)
	var c call
	if err := c.begin(&Input{Tablet: tab, Profile: p, View: v, Now: t0, Rand: rng(1), State: &TabletState{}}, p); err != nil {
		t.Fatal(err)
	}
	var out []string
	if hostMode {
		for _, h := range c.planHosts(AttemptPlan{Servers: ServerCount{N: n}, Salt: salt}) {
			out = append(out, c.g.hosts[h].name)
		}
		return out
	}
	size := min(n, len(c.g.alive))
	for _, i := range c.st.order(c.g, kindServers, salt, size)[:size] {
		out = append(out, string(c.g.alive[i].ID))
	}
	return out
}

func hexBytes(t *testing.T, s string) (out [16]byte) {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		t.Fatalf("bad hex %q", s)
	}
	copy(out[:], b)
	return out
}

// murmur3 x64 128 (seed 0) is Guava's Hashing.murmur3_128() and asBytes()
// is h1 then h2, little-endian: Guava's Murmur3Hash128Test.testKnownValues
// (its seed-0 cases, expected as toBytes(LITTLE_ENDIAN, h1, h2)), then
// values printed by Guava for tails of every length.
func TestGuavaMurmur3_128(t *testing.T) {
	guava := func(b []byte) [16]byte { h1, h2 := murmur3.Sum128(b); return orderKey(h1, h2).bytes() }
	for _, c := range []struct {
		in     string
		h1, h2 uint64
	}{
		{"hell", 0x629942693e10f867, 0x92db0b82baeb5347},
		{"The quick brown fox jumps over the lazy dog", 0xe34bbc7bbc071b6c, 0x7a433ca9c49a9347},
		{"The quick brown fox jumps over the lazy cog", 0x658ca970ff85269a, 0x43fee3eaa68e5c3e},
	} {
		var want [16]byte
		binary.LittleEndian.PutUint64(want[:8], c.h1)
		binary.LittleEndian.PutUint64(want[8:], c.h2)
		if got := guava([]byte(c.in)); got != want {
			t.Errorf("%q: %x, Guava %x", c.in, got, want)
		}
	}
	for in, want := range map[string]string{
		"":                  "00000000000000000000000000000000",
		"a":                 "897859f6655555855a890e51483ab5e6",
		"hello":             "029bbd41b3a7d8cb191dae486a901e5b",
		"0123456789abcdef":  "a7d14acf946de04bda08a7635c5bc387",
		"0123456789abcdef0": "75c0a58587ae24ebca283131b368fb73",
	} {
		if got := guava([]byte(in)); got != hexBytes(t, want) {
			t.Errorf("%q: %x, Guava %s", in, got, want)
		}
	}
	// Inputs of length n = 0..300, byte i = i×131 + n (bytes ≥ 0x80 in
	// every tail): the SHA-256 of Guava's 301 asBytes() concatenated.
	sweep := map[int]string{1: "16fe7483905cce7a85670e43e4678877", 7: "29e46af4e558ce5309c0c10cb30e3c81",
		8: "6279b2422a934ef2b4b4ec32a698addc", 15: "0b223b5ff6ab45f91953ce8b0837579d",
		16: "bf97f299a4d5c75d21c4be2e147cb27f", 17: "1e45a7417edbd4faa6f6e4866f9dd682",
		33: "742e4e7cf64aeae5aab496c96c216728"}
	d := sha256.New()
	for n := 0; n <= 300; n++ {
		in := make([]byte, n)
		for i := range in {
			in[i] = byte(i*131 + n)
		}
		h := guava(in)
		d.Write(h[:])
		if w, ok := sweep[n]; ok && h != hexBytes(t, w) {
			t.Errorf("length %d: %x, Guava %s", n, h, w)
		}
	}
	if got := hex.EncodeToString(d.Sum(nil)); got != "f5b9850d76ff13044c49631b39885cd1ed81e936f18dae7ce2f6aab9f3b304bf" {
		t.Errorf("length sweep digest %s differs from Guava's", got)
	}
}

// RendezvousHash is RendezvousHasher.hash(tablet, server, salt) byte for
// byte, and CompareRendezvousHashes is its ServerHash.compareTo.
func TestRendezvousHashIsAccumulos(t *testing.T) {
	for _, c := range []struct {
		table, end, prev, server, salt, want string
	}{
		{"1", "m", "", "ss1:1", "", "95fd473a8672386cb7d741e473f2fb01"},
		{"1", "", "", "ss1:1", "", "a92197ad27bcf057f9f24e7ef79fcfdf"},
		{"1", "0", "", "g1h0:1000", "s1", "361247ca31b632b23aa5d7346fdb6e8a"},
		{"1", "199", "", "g1h9:1004", "s2", "07915c13e46387d6a2fbcfb79d3272ae"},
		{"2b", "row0001", "row0000", "host1:2000", "salt", "11ced3425e6e12216f5f4f328f5cbcac"},
		{"tbl", "b", "a", "srv", "salt", "52bd0ed06c0f72a9ee8ae80f1918c94f"},
		{"tbl", "b", "a", "srv", "", "45b959937d7b80de41d94b6fb157688a"},
		{"tâble", "é", "", "hôst:9997", "sält✓", "33d4c87ea631a8b75ffe62886f6592f8"},
		// Absent rows are the bytes 5 and 7: a row of that one byte hashes
		// the same (Accumulo's ambiguity, kept).
		{"1", "\x05", "", "ss1:1", "", "a92197ad27bcf057f9f24e7ef79fcfdf"},
		{"1", "", "\x07", "x:1", "", "0467ecb845e06767bd76362ad01c9ed5"},
		{"t1", "row000008", "row000007", "10.0.0.7:9997/0", "", "086ad0de83722c74342111aa7235bf68"},
	} {
		tab := Tablet{Table: c.table, EndRow: []byte(c.end), PrevEndRow: []byte(c.prev)}
		if got := RendezvousHash(tab, c.server, c.salt); got != hexBytes(t, c.want) {
			t.Errorf("%+v: %x, Accumulo %s", c, got, c.want)
		}
	}
	// Signed bytes: 0x7f < 0x80 unsigned, but 127 > −128 signed.
	a, b := [16]byte{0x7f}, [16]byte{0x80}
	if CompareRendezvousHashes(a, b) != 1 || CompareRendezvousHashes(b, a) != -1 || CompareRendezvousHashes(a, a) != 0 {
		t.Error("not signed-byte order")
	}
	// The internal order key agrees with it on random hashes.
	r := rng(3)
	for i := 0; i < 10000; i++ {
		x, y := orderKey(r.Uint64(), r.Uint64()), orderKey(r.Uint64(), r.Uint64())
		if i%3 == 0 {
			y.hi = x.hi
		}
		if x.cmp(y) != CompareRendezvousHashes(x.bytes(), y.bytes()) {
			t.Fatalf("order key %x vs %x", x.bytes(), y.bytes())
		}
	}
}

// RendezvousHasherTest.testSameServerCountPerHost, every assertion, plus
// the exact subsets.
func TestAccumuloRendezvousSameServerCountPerHost(t *testing.T) {
	var g1 []*ServerLoad
	g1Servers := map[string]bool{}
	for h := 0; h < 10; h++ {
		for p := 1000; p < 1005; p++ {
			name := fmt.Sprintf("g1h%d:%d", h, p)
			g1 = append(g1, hostPort(name))
			g1Servers[name] = true
		}
	}
	g2Servers := map[string]bool{"g2h1:5000": true, "g2h1:5001": true, "g2h1:5002": true}
	var g2 []*ServerLoad
	for name := range g2Servers {
		g2 = append(g2, hostPort(name))
	}
	v1, v2 := view(g1...), view(g2...)
	subsetOf := func(sub []string, all map[string]bool) bool {
		for _, s := range sub {
			if !all[s] {
				return false
			}
		}
		return true
	}
	containsAll := func(a, b []string) bool {
		for _, x := range b {
			if !slices.Contains(a, x) {
				return false
			}
		}
		return true
	}
	hostOf := func(s string) string { h, _, _ := strings.Cut(s, ":"); return h }

	for i := 1; i < 5; i++ {
		g2rh := accumuloRendezvous(t, v2, false, nti("1", "e"), "s1", i)
		if len(g2rh) != min(i, 3) || !subsetOf(g2rh, g2Servers) {
			t.Fatalf("g2 servers %d: %v", i, g2rh)
		}
		if g2rh = accumuloRendezvous(t, v2, true, nti("1", "e"), "s1", i); !slices.Equal(g2rh, []string{"g2h1"}) {
			t.Fatalf("g2 hosts %d: %v", i, g2rh)
		}
	}

	// Exact subsets (hash order) of the first tablets: servers salted s1,
	// servers salted s2, hosts salted s1, 3 of each.
	exact := []struct{ endRow, s1, s2, hosts string }{
		{"0", "g1h9:1003 g1h1:1000 g1h4:1002", "g1h7:1000 g1h5:1000 g1h4:1002", "g1h9 g1h1 g1h4"},
		{"1", "g1h7:1004 g1h8:1004 g1h9:1001", "g1h1:1003 g1h3:1003 g1h5:1003", "g1h7 g1h8 g1h9"},
		{"2", "g1h8:1000 g1h1:1004 g1h8:1001", "g1h6:1000 g1h8:1001 g1h3:1002", "g1h8 g1h1 g1h4"},
		{"3", "g1h9:1001 g1h3:1003 g1h1:1000", "g1h6:1004 g1h8:1003 g1h1:1002", "g1h9 g1h3 g1h1"},
		{"4", "g1h2:1003 g1h4:1002 g1h8:1003", "g1h4:1000 g1h4:1001 g1h7:1003", "g1h2 g1h4 g1h8"},
		{"5", "g1h3:1004 g1h7:1003 g1h9:1004", "g1h3:1002 g1h6:1000 g1h9:1003", "g1h3 g1h7 g1h9"},
		{"6", "g1h1:1002 g1h7:1003 g1h2:1003", "g1h2:1004 g1h8:1002 g1h7:1001", "g1h1 g1h7 g1h2"},
		{"7", "g1h7:1002 g1h2:1001 g1h5:1001", "g1h5:1000 g1h4:1002 g1h5:1001", "g1h7 g1h2 g1h5"},
		{"8", "g1h8:1001 g1h4:1003 g1h0:1003", "g1h5:1001 g1h0:1001 g1h5:1002", "g1h8 g1h4 g1h0"},
		{"9", "g1h4:1004 g1h3:1001 g1h2:1000", "g1h5:1002 g1h7:1001 g1h9:1001", "g1h4 g1h3 g1h2"},
		{"10", "g1h3:1001 g1h7:1001 g1h2:1001", "g1h5:1002 g1h6:1000 g1h0:1002", "g1h3 g1h7 g1h2"},
		{"11", "g1h0:1003 g1h2:1000 g1h7:1004", "g1h9:1000 g1h1:1001 g1h9:1003", "g1h0 g1h2 g1h7"},
	}
	digest := sha256.New()
	diffCount := 0
	useCounts := map[string]int{}
	for tn := 0; tn < 200; tn++ {
		tab := nti("1", fmt.Sprint(tn))
		s1 := [4][]string{}
		h1 := [4][]string{}
		for n := 1; n <= 3; n++ {
			s1[n] = accumuloRendezvous(t, v1, false, tab, "s1", n)
			h1[n] = accumuloRendezvous(t, v1, true, tab, "s1", n)
			// the same tablet and salt hash to the same servers and hosts
			if again := accumuloRendezvous(t, v1, false, tab, "s1", n); !slices.Equal(again, s1[n]) {
				t.Fatalf("tablet %d: not repeatable", tn)
			}
			if again := accumuloRendezvous(t, v1, true, tab, "s1", n); !slices.Equal(again, h1[n]) {
				t.Fatalf("tablet %d: hosts not repeatable", tn)
			}
			if len(s1[n]) != n || len(h1[n]) != n || !subsetOf(s1[n], g1Servers) {
				t.Fatalf("tablet %d n=%d: %v %v", tn, n, s1[n], h1[n])
			}
			for _, h := range h1[n] {
				if strings.Contains(h, ":") {
					t.Fatalf("host %q has a port", h)
				}
			}
			// the hosts within the servers are a subset of the rendezvous hosts
			for _, s := range s1[n] {
				if !slices.Contains(h1[n], hostOf(s)) {
					t.Fatalf("tablet %d n=%d: host of %s not in %v", tn, n, s, h1[n])
				}
			}
		}
		// should contain the smaller set of servers
		if !containsAll(s1[2], s1[1]) || !containsAll(s1[3], s1[2]) || !containsAll(h1[2], h1[1]) || !containsAll(h1[3], h1[2]) {
			t.Fatalf("tablet %d: not nested: %v %v", tn, s1, h1)
		}
		if h1[1][0] != hostOf(s1[1][0]) {
			t.Fatalf("tablet %d: host %s, server %s", tn, h1[1][0], s1[1][0])
		}
		for _, s := range s1[3] {
			useCounts[s]++
		}
		// a different salt should usually result in different servers
		s2 := accumuloRendezvous(t, v1, false, tab, "s2", 3)
		if len(s2) != 3 || !subsetOf(s2, g1Servers) {
			t.Fatalf("tablet %d s2: %v", tn, s2)
		}
		a, b := slices.Clone(s1[3]), slices.Clone(s2)
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) {
			diffCount++
		}
		line := fmt.Sprintf("%d\t%s\t%s\t%s\n", tn, strings.Join(s1[3], " "), strings.Join(s2, " "), strings.Join(h1[3], " "))
		digest.Write([]byte(line))
		if tn < len(exact) {
			e := exact[tn]
			if got := fmt.Sprintf("%s\t%s\t%s\t%s\n", e.endRow, e.s1, e.s2, e.hosts); got != line {
				t.Errorf("tablet %d:\n got  %q\n want %q (Accumulo)", tn, line, got)
			}
		}
	}
	// Accumulo's assertions: count 50, average 12, min 7, max 18; 200.
	lo, hi, sum := 1<<30, 0, 0
	for _, c := range useCounts {
		lo, hi, sum = min(lo, c), max(hi, c), sum+c
	}
	if len(useCounts) != 50 || sum != 600 || lo != 7 || hi != 18 {
		t.Errorf("use counts: %d servers, sum %d, min %d, max %d; Accumulo expects 50, 600 (average 12), 7, 18", len(useCounts), sum, lo, hi)
	}
	if diffCount != 200 {
		t.Errorf("salt s2 differs for %d tablets, Accumulo expects 200", diffCount)
	}
	if got := hex.EncodeToString(digest.Sum(nil)); got != "60590588a77b18016f0bf6a2a12b7d8caa1a528bf29da7796b69a1bdc6deb455" {
		t.Errorf("subsets of the 200 tablets differ from Accumulo's (digest %s)", got)
	}
}

// RendezvousHasherTest.testDifferentServerCountPerHost: host mode gives
// hosts with fewer servers proportionally less use, with Accumulo's bounds
// and the exact per-host counts.
func TestAccumuloRendezvousDifferentServerCountPerHost(t *testing.T) {
	var ss []*ServerLoad
	for h := 0; h < 10; h++ {
		for p := 1000; p < 1010; p++ {
			ss = append(ss, hostPort(fmt.Sprintf("g1h%d:%d", h, p)))
		}
	}
	for _, h := range []string{"gh1a", "gh1b", "gh1c", "gh1d"} {
		ss = append(ss, hostPort(h+":1000"), hostPort(h+":1001"))
	}
	v := view(ss...)
	p := profileFor(PolicyAccumuloHost)
	var c call
	if err := c.begin(&Input{Tablet: nti("1", "0"), Profile: p, View: v, Now: t0, Rand: rng(1)}, p); err != nil {
		t.Fatal(err)
	}
	useCounts := map[string]int{}
	st := &TabletState{}
	for tn := 0; tn < 10000; tn++ {
		c.st = st
		st.setTablet(nti("1", fmt.Sprint(tn)))
		for _, h := range c.planHosts(AttemptPlan{Servers: ServerCount{N: 3}, Salt: "s1"}) {
			useCounts[c.g.hosts[h].name]++
		}
	}
	want := map[string]int{"g1h0": 2724, "g1h1": 2767, "g1h2": 2691, "g1h3": 2761, "g1h4": 2735, "g1h5": 2755,
		"g1h6": 2841, "g1h7": 2718, "g1h8": 2718, "g1h9": 2821, "gh1a": 641, "gh1b": 614, "gh1c": 618, "gh1d": 596}
	for h, w := range want {
		if useCounts[h] != w {
			t.Errorf("host %s used %d times, Accumulo %d", h, useCounts[h], w)
		}
	}
	type stats struct{ n, sum, lo, hi int }
	var big, small stats
	big.lo, small.lo = 1<<30, 1<<30
	for h, c := range useCounts {
		s := &big
		if strings.HasPrefix(h, "gh1") {
			s = &small
		}
		s.n, s.sum, s.lo, s.hi = s.n+1, s.sum+c, min(s.lo, c), max(s.hi, c)
	}
	within := func(s stats, mid int) bool {
		avg := float64(s.sum) / float64(s.n)
		return avg > float64(mid-100) && avg < float64(mid+100) && s.lo > mid-200 && s.hi < mid+200
	}
	if !within(big, 2777) || !within(small, 555) || big.sum+small.sum != 30000 {
		t.Errorf("10-server hosts %+v (≈2777 each), 2-server hosts %+v (≈555 each)", big, small)
	}
}

// ConfigurableScanServerSelectorTest.testBasic: 100 selections for one
// tablet with the default profile use 3 servers, Accumulo's exact 3.
func TestAccumuloSelectorBasic(t *testing.T) {
	var ss []*ServerLoad
	for i := 1; i <= 8; i++ {
		ss = append(ss, hostPort(fmt.Sprintf("ss%d:%d", i, i)))
	}
	v := view(ss...)
	p := profileFor(PolicyAccumulo) // Accumulo's default profile
	pol := mustPolicy(t, p)
	seen := map[ServerID]bool{}
	r := rng(5)
	for i := 0; i < 100; i++ {
		dec, err := pol.Select(&Input{Tablet: nti("1", "m"), Profile: p, View: v, Now: t0, Rand: r})
		if err != nil {
			t.Fatal(err)
		}
		seen[dec.Server] = true
	}
	if len(seen) != 3 || !seen["ss7:7"] || !seen["ss1:1"] || !seen["ss4:4"] {
		t.Errorf("servers %v; Accumulo's 3 are ss7:7, ss1:1, ss4:4", seen)
	}
}

// ConfigurableScanServerHostSelectorTest.test: with plans of 1, 2 and 3
// hosts, every server of the first host is tried (10 ms), then every
// server of a second host (20 ms), then of a third (30 ms); once all are
// exhausted any server of those 3 hosts. Accumulo's hosts for this tablet
// are host1, host2, host4, in that order.
func TestAccumuloHostSelectorExhaustsHostsInOrder(t *testing.T) {
	hostsServers := map[string][]string{
		"host1": {"host1:2000", "host1:2001", "host1:2002", "host1:2003"},
		"host2": {"host2:2000", "host2:2001", "host2:2002", "host2:2003"},
		"host3": {"host3:2000"},
		"host4": {"host4:2000", "host4:2001"},
	}
	var ss []*ServerLoad
	for _, list := range hostsServers {
		for _, s := range list {
			ss = append(ss, hostPort(s))
		}
	}
	v := view(ss...)
	p := profileFor(PolicyAccumuloHost)
	p.MaxBusyTimeout, p.BusyTimeoutMultiplier = 5*time.Minute, 4
	p.AttemptPlans = []AttemptPlan{
		{Servers: ServerCount{N: 1}, BusyTimeout: 10 * time.Millisecond},
		{Servers: ServerCount{N: 2}, BusyTimeout: 20 * time.Millisecond},
		{Servers: ServerCount{N: 3}, BusyTimeout: 30 * time.Millisecond},
	}
	pol := mustPolicy(t, p)
	tab := nti("1", "m")
	for seed := uint64(0); seed < 20; seed++ {
		r := rng(seed)
		var attempts []Attempt
		hostSeen := map[string]bool{}
		for k, want := range []string{"host1", "host2", "host4"} {
			remaining := map[string]bool{}
			for _, s := range hostsServers[want] {
				remaining[s] = true
			}
			for len(remaining) > 0 {
				d, err := pol.Select(&Input{Tablet: tab, Profile: p, Attempts: attempts, View: v, Now: t0, Rand: r})
				if err != nil {
					t.Fatal(err)
				}
				if d.Host != want || !remaining[string(d.Server)] || d.BusyTimeout != time.Duration(k+1)*10*time.Millisecond {
					t.Fatalf("seed %d: got %s on %s (%v), want an untried server of %s (%v)", seed, d.Server, d.Host, d.BusyTimeout, want, time.Duration(k+1)*10*time.Millisecond)
				}
				delete(remaining, string(d.Server))
				hostSeen[d.Host] = true
				attempts = append(attempts, att(d.Server, d.Host, Busy))
			}
		}
		// all servers exhausted: any server of one of the 3 hosts chosen before
		d, err := pol.Select(&Input{Tablet: tab, Profile: p, Attempts: attempts, View: v, Now: t0, Rand: r})
		if err != nil || len(hostSeen) != 3 || !hostSeen[d.Host] {
			t.Fatalf("seed %d: after exhaustion %s on %s (%v), hosts seen %v", seed, d.Server, d.Host, err, hostSeen)
		}
	}
}
