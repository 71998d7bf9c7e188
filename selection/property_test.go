package selection

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/spaolacci/murmur3"
)

// Property tests of rendezvous hashing against simple references.

func serversN(n int) []*ServerLoad {
	out := make([]*ServerLoad, n)
	for i := range out {
		out[i] = srv(fmt.Sprintf("10.0.%d.%d:9997/0", i/250, i%250), fmt.Sprintf("10.0.%d.%d", i/250, i%250))
	}
	return out
}

// firstOf is the reference: the member with the smallest hash, by brute
// force over the exported RendezvousHash.
func firstOf(tab Tablet, ss []*ServerLoad, salt string) ServerID {
	var best ServerID
	var bh [16]byte
	for k, s := range ss {
		h := RendezvousHash(tab, string(s.ID), salt)
		if k == 0 || CompareRendezvousHashes(h, bh) < 0 {
			best, bh = s.ID, h
		}
	}
	return best
}

// The encoding itself is pinned against Accumulo's own hash in
// accumulo_hash_test.go; here: murmur3_128 of the concatenated fields.
func TestRendezvousHashIsMurmur3(t *testing.T) {
	tab := Tablet{Table: "tbl", PrevEndRow: []byte("a"), EndRow: []byte("b")}
	// end row, prev end row, table, member, salt; no length prefixes.
	h1, h2 := murmur3.Sum128([]byte("batblsrvsalt"))
	if got := RendezvousHash(tab, "srv", "salt"); got != orderKey(h1, h2).bytes() {
		t.Fatal("RendezvousHash is not murmur3_128 of the documented encoding")
	}
	// No salt: the salt field is omitted.
	h1, h2 = murmur3.Sum128([]byte("batblsrv"))
	if got := RendezvousHash(tab, "srv", ""); got != orderKey(h1, h2).bytes() {
		t.Fatal("unsalted encoding")
	}
	// Open ends are the bytes 5 (end row) and 7 (prev end row).
	h1, h2 = murmur3.Sum128([]byte("\x05\x07tblsrv"))
	if got := RendezvousHash(Tablet{Table: "tbl"}, "srv", ""); got != orderKey(h1, h2).bytes() {
		t.Fatal("open ends")
	}
}

func TestRendezvousOrderMatchesReference(t *testing.T) {
	ss := serversN(50)
	st := &TabletState{}
	v := view(ss...)
	for k := 0; k < 200; k++ {
		tab := tablet(k)
		order := RendezvousOrder(tab, ss, "s")
		if order[0].ID != firstOf(tab, ss, "s") {
			t.Fatalf("tablet %d: order[0] %s, reference %s", k, order[0].ID, firstOf(tab, ss, "s"))
		}
		for i := 1; i < len(order); i++ {
			a, b := order[i-1], order[i]
			if CompareRendezvousHashes(RendezvousHash(tab, string(a.ID), "s"), RendezvousHash(tab, string(b.ID), "s")) > 0 {
				t.Fatalf("not sorted at %d", i)
			}
		}
		// The cached per-state order is the same order.
		st.setTablet(tab)
		g := v.group("")
		cached := st.order(g, kindServers, "s", len(ss))
		if p := st.order(g, kindServers, "s", 3); len(p) < 3 || p[0] != cached[0] {
			t.Fatal("prefix")
		}
		for i, idx := range cached {
			if g.alive[idx].ID != order[i].ID {
				t.Fatalf("cached order differs at %d", i)
			}
		}
	}
}

// Removing one of n servers remaps only the tablets whose first server it
// was (≈ 1/n of them); adding one moves ≈ 1/(n+1), all to the new server.
func TestRendezvousMinimalRemap(t *testing.T) {
	const tablets = 20000
	for _, n := range []int{10, 50} {
		ss := serversN(n + 1)
		all, less := ss, ss[:n]
		gone := ss[n-1].ID
		moved, movedAdd := 0, 0
		for k := 0; k < tablets; k++ {
			tab := tablet(k)
			before := firstOf(tab, less, "")
			after := firstOf(tab, less[:n-1], "")
			if before != after {
				moved++
				if before != gone {
					t.Fatalf("n=%d tablet %d moved from %s, which did not leave", n, k, before)
				}
			}
			added := firstOf(tab, all, "")
			if added != before {
				movedAdd++
				if added != all[n].ID {
					t.Fatalf("n=%d: tablet moved to %s, not the new server", n, added)
				}
			}
		}
		exp := float64(tablets) / float64(n)
		if f := float64(moved); f < 0.85*exp || f > 1.15*exp {
			t.Errorf("n=%d: %d of %d tablets moved when one server left, want ≈ %.0f", n, moved, tablets, exp)
		}
		expAdd := float64(tablets) / float64(n+1)
		if f := float64(movedAdd); f < 0.85*expAdd || f > 1.15*expAdd {
			t.Errorf("n=%d: %d moved when one joined, want ≈ %.0f", n, movedAdd, expAdd)
		}
	}
}

// Tablets spread uniformly over 1000 servers: per-server counts are
// consistent with a uniform assignment (chi-square), their spread is that
// of ideal uniform hashing, and any 10% of the servers get 10% of the
// tablets within a few percent.
func TestRendezvousUniformSpread(t *testing.T) {
	const n = 1000
	tablets := 100000
	if raceEnabled || testing.Short() {
		tablets = 20000
	}
	ss := serversN(n)
	pos := map[ServerID]int{}
	for i, s := range ss {
		pos[s.ID] = i
	}
	counts := make([]int, n)
	buf := []byte{}
	for k := 0; k < tablets; k++ {
		buf = appendTabletKey(buf[:0], tablet(k))
		kl := len(buf)
		best, bh := -1, u128{}
		for i, s := range ss {
			var h u128
			h, buf = hashMember(buf, kl, string(s.ID), "")
			if best < 0 || h.cmp(bh) < 0 {
				best, bh = i, h
			}
		}
		counts[best]++
	}
	mean := float64(tablets) / n
	chi := 0.0
	for _, c := range counts {
		chi += (float64(c) - mean) * (float64(c) - mean) / mean
	}
	// df = 999: mean 999, sd ≈ 44.7; accept within 5 sd.
	if chi < 999-5*44.7 || chi > 999+5*44.7 {
		t.Errorf("chi-square %.0f not consistent with uniform (df 999)", chi)
	}
	sd := math.Sqrt(chi * mean / n) // sample sd of counts
	if ideal := math.Sqrt(mean); math.Abs(sd-ideal)/ideal > 0.1 {
		t.Errorf("sd of per-server counts %.2f, ideal uniform %.2f", sd, ideal)
	}
	for block := 0; block < 10; block++ {
		sum := 0
		for _, c := range counts[block*100 : (block+1)*100] {
			sum += c
		}
		if share := float64(sum) / float64(tablets); math.Abs(share-0.1) > 0.1*0.05 {
			t.Errorf("servers %d–%d got %.2f%% of tablets, want 10%% ± 5%%", block*100, block*100+99, share*100)
		}
	}
}

// Same salt: subsets are nested as N grows. Different salts: subsets are
// independent (overlap as for two random draws).
func TestRendezvousSubsets(t *testing.T) {
	const n = 100
	ss := serversN(n)
	v := view(ss...)
	p := profileFor(PolicyAccumulo)
	pol := mustPolicy(t, p)
	subset := func(tab Tablet, size int, salt string) []ServerID {
		p.AttemptPlans = []AttemptPlan{{Servers: ServerCount{N: size}, BusyTimeout: 1, Salt: salt}}
		d, err := pol.Select(&Input{Tablet: tab, Profile: p, View: v, Rand: rng(1), Explain: true, State: &TabletState{}})
		if err != nil {
			t.Fatal(err)
		}
		return d.Candidates
	}
	overlap := 0.0
	sameFirst := 0
	const tablets = 3000
	for k := 0; k < tablets; k++ {
		tab := tablet(k)
		prev := subset(tab, 1, "one")
		for _, size := range []int{2, 3, 5, 13, 50, 100} {
			cur := subset(tab, size, "one")
			if len(cur) != size {
				t.Fatalf("size %d: %d", size, len(cur))
			}
			for i := range prev {
				if prev[i] != cur[i] {
					t.Fatalf("tablet %d: subset of %d not a prefix of subset of %d", k, len(prev), size)
				}
			}
			prev = cur
		}
		a, b := subset(tab, 3, "one"), subset(tab, 3, "two")
		for _, x := range a {
			for _, y := range b {
				if x == y {
					overlap++
				}
			}
		}
		if a[0] == b[0] {
			sameFirst++
		}
	}
	// Independent 3-subsets of 100: expected overlap 3·3/100 = 0.09.
	if m := overlap / tablets; m < 0.06 || m > 0.12 {
		t.Errorf("different salts: mean overlap %.3f, want ≈ 0.09", m)
	}
	if f := float64(sameFirst) / tablets; f > 0.02 {
		t.Errorf("different salts: same first server for %.3f of tablets, want ≈ 0.01", f)
	}
}

// Every host is equally likely to be a tablet's home, whatever its number
// of servers (the adaptive policy's home host).
func TestHomeHostUniformOverHosts(t *testing.T) {
	var ss []*ServerLoad
	for h := 0; h < 10; h++ {
		per := 1 + 4*(h%2) // 1 or 5 servers
		for i := 0; i < per; i++ {
			ss = append(ss, srv(fmt.Sprintf("h%d:1/%d", h, i), fmt.Sprintf("h%d", h)))
		}
	}
	v := view(ss...)
	counts := map[string]int{}
	for k := 0; k < 20000; k++ {
		counts[HomeHost(tablet(k), v, "default")]++
	}
	for h, c := range counts {
		if c < 1800 || c > 2200 {
			t.Errorf("host %s home of %d/20000 tablets", h, c)
		}
	}
	if HomeHost(tablet(1), v, "nope") != "" || HomeHost(tablet(1), nil, "") != "" {
		t.Error("no hosts: empty home")
	}
}

// Cached prefixes and their extension agree with the full order.
func TestOrderPrefixCache(t *testing.T) {
	for _, n := range []int{1, 5, 64, 300} {
		ss := serversN(n)
		v := view(ss...)
		g := v.group("")
		for k := 0; k < 30; k++ {
			tab := tablet(k)
			want := RendezvousOrder(tab, ss, "x")
			st := &TabletState{}
			st.setTablet(tab)
			for _, need := range []int{1, 3, 13, n / 2, n, 2} {
				got := st.order(g, kindServers, "x", need)
				if len(got) < min(need, n) {
					t.Fatalf("n=%d need %d: got %d", n, need, len(got))
				}
				for j, i := range got {
					if g.alive[i].ID != want[j].ID {
						t.Fatalf("n=%d need %d: position %d differs", n, need, j)
					}
				}
			}
		}
	}
	// selectSmallest against a full sort.
	r := rng(1)
	for trial := 0; trial < 200; trial++ {
		n := 1 + r.IntN(200)
		p := make([]hashPair, n)
		for i := range p {
			p[i] = hashPair{u128{uint64(r.IntN(50)), r.Uint64()}, int32(i)}
		}
		full := append([]hashPair(nil), p...)
		slices.SortFunc(full, cmpPair)
		k := 1 + r.IntN(n)
		selectSmallest(p, k)
		slices.SortFunc(p[:k], cmpPair)
		if !slices.Equal(p[:k], full[:k]) {
			t.Fatalf("n=%d k=%d: selection differs", n, k)
		}
	}
}
