package placementsim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/asynkron/protoactor-go/cluster"

	"github.com/scanplane/scanplane/tablets"
)

// ErrBadInput: a bad argument (a count out of range, an unknown
// addressing scheme, a member missing from a placement).
var ErrBadInput = errors.New("placementsim: bad input")

// ErrNoOwner: the rendezvous returned no owner, or one that is not a
// member, for a tablet.
var ErrNoOwner = errors.New("placementsim: tablet without an owner")

// Kind is the cluster kind of tablet grains.
const Kind = "tablet"

// grainIdentity is the grain identity of tablet index of a table's generation
// (tablets.Identity):
// "<table>/g<generation>/t<index>", e.g. "demo/g3/t17". Table names have
// no '/' (tablets.ValidateTableName), so the identity is unambiguous.
func grainIdentity(table string, generation uint64, index uint32) string {
	return tablets.Identity(table, generation, index)
}

// Tablets returns the cluster identities of tables × perTable tablets:
// tables "table0".."table<tables-1>", generation 1, kind Kind.
func Tablets(tables, perTable int) ([]*cluster.ClusterIdentity, error) {
	if tables < 1 || perTable < 1 {
		return nil, fmt.Errorf("%w: tables %d and perTable %d must be ≥ 1", ErrBadInput, tables, perTable)
	}
	ids := make([]*cluster.ClusterIdentity, 0, tables*perTable)
	for t := 0; t < tables; t++ {
		name := "table" + strconv.Itoa(t)
		for i := 0; i < perTable; i++ {
			ids = append(ids, &cluster.ClusterIdentity{Kind: Kind, Identity: grainIdentity(name, 1, uint32(i))})
		}
	}
	return ids, nil
}

// Addressing is how simulated coordinators get their remote addresses
// (protoactor's rendezvous hashes "host:port", Member.Address).
type Addressing string

const (
	// PortsOnOneHost: 127.0.0.1:8090, :8091, ... (several coordinators on
	// one machine with consecutive ports; 8090 is coordinator --listen's
	// default port).
	PortsOnOneHost Addressing = "ports"
	// EphemeralPorts: 127.0.0.1 with distinct ports drawn from Linux's
	// ephemeral range 32768–60999 (coordinators started with port 0).
	EphemeralPorts Addressing = "ephemeral"
	// HostsOnePort: 10.0.0.1:8090, 10.0.0.2:8090, ... (one coordinator per
	// machine, consecutive IPs, the default port).
	HostsOnePort Addressing = "hosts"
)

// Addressings lists every scheme, in report order.
func Addressings() []Addressing {
	return []Addressing{PortsOnOneHost, EphemeralPorts, HostsOnePort}
}

// Members returns n coordinators of kind Kind addressed by a, with Ids
// "coord-<i>". Members(n+1, a, seed) is Members(n, a, seed) plus one
// member, so the two model a join (and, read backwards, a leave). seed
// drives EphemeralPorts only.
func Members(n int, a Addressing, seed uint64) (cluster.Members, error) {
	if n < 1 || n > 28000 {
		return nil, fmt.Errorf("%w: members %d must be in [1, 28000]", ErrBadInput, n)
	}
	var ports []int32
	switch a {
	case PortsOnOneHost, HostsOnePort:
	case EphemeralPorts:
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		seen := map[int32]bool{}
		for len(ports) < n {
			p := int32(32768 + r.IntN(60999-32768+1))
			if !seen[p] {
				seen[p] = true
				ports = append(ports, p)
			}
		}
	default:
		return nil, fmt.Errorf("%w: addressing %q (want one of %v)", ErrBadInput, a, Addressings())
	}
	ms := make(cluster.Members, n)
	for i := range ms {
		m := &cluster.Member{Id: "coord-" + strconv.Itoa(i), Kinds: []string{Kind}}
		switch a {
		case PortsOnOneHost:
			m.Host, m.Port = "127.0.0.1", int32(8090+i)
		case EphemeralPorts:
			m.Host, m.Port = "127.0.0.1", ports[i]
		case HostsOnePort:
			m.Host, m.Port = fmt.Sprintf("10.0.%d.%d", (i+1)/256, (i+1)%256), 8090
		}
		ms[i] = m
	}
	return ms, nil
}

// Placement is the owner of every tablet under one member list.
type Placement struct {
	// Members is the member list placed over.
	Members cluster.Members
	// Owner[i] is the index in Members of tablet i's owner.
	Owner []int
}

// Place computes the owner of every tablet as disthash does
// (identitylookup/disthash Manager.Get: a Rendezvous updated with the
// topology's members, then GetByClusterIdentity per identity). An empty
// or unknown owner is ErrNoOwner.
func Place(members cluster.Members, ids []*cluster.ClusterIdentity) (Placement, error) {
	rdv := cluster.NewRendezvous()
	rdv.UpdateMembers(members)
	byAddr := make(map[string]int, len(members))
	for i, m := range members {
		byAddr[m.Address()] = i
	}
	p := Placement{Members: members, Owner: make([]int, len(ids))}
	for i, id := range ids {
		addr := rdv.GetByClusterIdentity(id)
		o, ok := byAddr[addr]
		if !ok {
			return Placement{}, fmt.Errorf("%w: %s/%s got owner %q", ErrNoOwner, id.Kind, id.Identity, addr)
		}
		p.Owner[i] = o
	}
	return p, nil
}

// PlaceOwner is the placement coordinators use: tablets.Owner
// (rendezvous, xxHash64 of identity, 0, address) over the members'
// addresses. Place is protoactor's cluster.Rendezvous, the reference it
// replaced.
func PlaceOwner(members cluster.Members, ids []*cluster.ClusterIdentity) Placement {
	addrs := make([]string, len(members))
	index := make(map[string]int, len(members))
	for i, m := range members {
		addrs[i] = m.Address()
		index[addrs[i]] = i
	}
	p := Placement{Members: members, Owner: make([]int, len(ids))}
	for i, id := range ids {
		p.Owner[i] = index[tablets.Owner(addrs, id.Identity)]
	}
	return p
}

// Spread is how evenly grains spread over members.
type Spread struct {
	Members, Tablets int
	// Min, Max: grains of the least and most loaded member (members with
	// none count as 0).
	Min, Max int
	// Mean = Tablets/Members; MaxOverMean = Max/Mean; CV = population
	// standard deviation / Mean.
	Mean, MaxOverMean, CV float64
}

// SpreadOf computes the spread of p.
func SpreadOf(p Placement) Spread {
	counts := make([]int, len(p.Members))
	for _, o := range p.Owner {
		counts[o]++
	}
	s := Spread{Members: len(counts), Tablets: len(p.Owner), Min: math.MaxInt}
	if s.Members == 0 {
		return Spread{}
	}
	for _, c := range counts {
		s.Min, s.Max = min(s.Min, c), max(s.Max, c)
	}
	s.Mean = float64(s.Tablets) / float64(s.Members)
	var ss float64
	for _, c := range counts {
		d := float64(c) - s.Mean
		ss += d * d
	}
	if s.Mean > 0 {
		s.MaxOverMean = float64(s.Max) / s.Mean
		s.CV = math.Sqrt(ss/float64(s.Members)) / s.Mean
	}
	return s
}

// Movement is what changed between two placements of the same tablets
// when one member joined or left.
type Movement struct {
	// Moved tablets (owner address differs); Fraction = Moved/tablets.
	Moved    int
	Fraction float64
	// Changed is the address of the member that joined or left; Owned
	// is how many tablets it owns after the join (before the leave), Share
	// = Owned/tablets.
	Changed string
	Owned   int
	Share   float64
	// Stray counts moved tablets that did not move to the joining member
	// (join) or from the leaving member (leave). Rendezvous hashing
	// promises 0.
	Stray int
}

// Compare compares before and after, where exactly one member joined
// (after has one more) or left (after has one fewer) and the others kept
// their addresses.
func Compare(before, after Placement) (Movement, error) {
	if len(before.Owner) != len(after.Owner) {
		return Movement{}, fmt.Errorf("%w: placements of %d and %d tablets", ErrBadInput, len(before.Owner), len(after.Owner))
	}
	bAddr, aAddr := addresses(before.Members), addresses(after.Members)
	join := len(aAddr) == len(bAddr)+1
	if !join && len(aAddr)+1 != len(bAddr) {
		return Movement{}, fmt.Errorf("%w: %d members before, %d after: not one join or leave", ErrBadInput, len(bAddr), len(aAddr))
	}
	small, big := bAddr, aAddr
	if !join {
		small, big = aAddr, bAddr
	}
	in := make(map[string]bool, len(small))
	for _, a := range small {
		in[a] = true
	}
	changed := -1 // index in big
	for i, a := range big {
		if !in[a] {
			if changed >= 0 {
				return Movement{}, fmt.Errorf("%w: members %q and %q both changed", ErrBadInput, big[changed], a)
			}
			changed = i
		}
	}
	if changed < 0 || len(in) != len(small) {
		return Movement{}, fmt.Errorf("%w: member lists do not differ by one address", ErrBadInput)
	}
	mv := Movement{Changed: big[changed]}
	for i := range before.Owner {
		from, to := bAddr[before.Owner[i]], aAddr[after.Owner[i]]
		if join && to == mv.Changed || !join && from == mv.Changed {
			mv.Owned++
		}
		if from == to {
			continue
		}
		mv.Moved++
		if join && to != mv.Changed || !join && from != mv.Changed {
			mv.Stray++
		}
	}
	if n := len(before.Owner); n > 0 {
		mv.Fraction = float64(mv.Moved) / float64(n)
		mv.Share = float64(mv.Owned) / float64(n)
	}
	return mv, nil
}

func addresses(ms cluster.Members) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Address()
	}
	return out
}
