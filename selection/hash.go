package selection

import (
	"encoding/binary"
	"math/bits"
	"slices"

	"github.com/spaolacci/murmur3"
)

// Rendezvous (highest-random-weight) hashing, bit for bit as Accumulo's
// RendezvousHasher (core/src/main/java/org/apache/accumulo/core/spi/scan/
// RendezvousHasher.java, method hash) computes it; docs/policies.md,
// rendezvous order. Every member gets Guava's Hashing.murmur3_128() (murmur3
// x64 128-bit, seed 0) of, in this order and with no length prefixes or
// separators:
//
//   - the tablet's end row bytes, or the single byte 5 when it has none;
//   - its prev end row bytes, or the single byte 7 when it has none;
//   - the table (UTF-8);
//   - the member's name (UTF-8);
//   - the salt (UTF-8), only when non-empty.
//
// An empty row is an open end (Tablet), so it is absent here: Accumulo's
// rows are never empty. Members are ordered by their hash's 16 bytes as
// Guava's HashCode.asBytes() gives them (h1 then h2, each little-endian)
// compared lexicographically as signed Java bytes (Arrays.compare), smallest
// first. The first N members form the tablet's subset of size N (Accumulo's
// SERVER mode); the same salt gives nested subsets as N grows; different
// salts give independent subsets; removing one of n members remaps only the
// tablets whose first member it was (≈1/n). Equal hashes (a 128-bit
// collision) order by member name; Accumulo keeps its set's iteration
// order.
//
// Internally a hash is kept as its order key (u128): each 8-byte half
// byte-reversed to big-endian with every byte's sign bit flipped, so that
// unsigned (hi, lo) order is the signed-byte lexicographic order.

type u128 struct{ hi, lo uint64 }

func (a u128) cmp(b u128) int {
	switch {
	case a.hi < b.hi:
		return -1
	case a.hi > b.hi:
		return 1
	case a.lo < b.lo:
		return -1
	case a.lo > b.lo:
		return 1
	}
	return 0
}

// signBits flips the sign bit of every byte: signed byte order becomes
// unsigned byte order.
const signBits = 0x8080808080808080

// orderKey turns murmur3's (h1, h2) into the order key of Guava's asBytes()
// (h1 then h2, little-endian) under signed lexicographic comparison.
func orderKey(h1, h2 uint64) u128 {
	return u128{bits.ReverseBytes64(h1) ^ signBits, bits.ReverseBytes64(h2) ^ signBits}
}

// bytes returns the Guava HashCode.asBytes() of the hash with order key k.
func (k u128) bytes() (out [16]byte) {
	binary.BigEndian.PutUint64(out[:8], k.hi^signBits)
	binary.BigEndian.PutUint64(out[8:], k.lo^signBits)
	return out
}

// Accumulo's stand-ins for an absent end row and prev end row.
const (
	absentEndRow     = 5
	absentPrevEndRow = 7
)

// appendTabletKey appends the tablet part of the hash input. Different
// tablets may give the same bytes (no length prefixes, as in Accumulo);
// they then have the same rendezvous orders.
func appendTabletKey(b []byte, t Tablet) []byte {
	if len(t.EndRow) > 0 {
		b = append(b, t.EndRow...)
	} else {
		b = append(b, absentEndRow)
	}
	if len(t.PrevEndRow) > 0 {
		b = append(b, t.PrevEndRow...)
	} else {
		b = append(b, absentPrevEndRow)
	}
	return append(b, t.Table...)
}

// hashMember hashes buf[:keyLen] (a tablet key) + member + salt and returns
// the hash's order key and the (possibly grown) buffer for reuse.
func hashMember(buf []byte, keyLen int, member, salt string) (u128, []byte) {
	b := append(buf[:keyLen], member...)
	if salt != "" {
		b = append(b, salt...)
	}
	h1, h2 := murmur3.Sum128(b)
	return orderKey(h1, h2), b
}

// RendezvousHash returns Accumulo's rendezvous hash of member (a server id
// or a host name) for tablet t and salt, as the 16 bytes of Guava's
// HashCode.asBytes(). Compare two with CompareRendezvousHashes.
func RendezvousHash(t Tablet, member, salt string) [16]byte {
	b := appendTabletKey(nil, t)
	h, _ := hashMember(b, len(b), member, salt)
	return h.bytes()
}

// CompareRendezvousHashes orders two rendezvous hashes as Accumulo does
// (Java's Arrays.compare(byte[], byte[]): lexicographic, signed bytes):
// -1, 0 or +1.
func CompareRendezvousHashes(a, b [16]byte) int {
	for i := range a {
		if x, y := int8(a[i]), int8(b[i]); x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// RendezvousOrder returns servers ordered by their rendezvous hash for t
// and salt, smallest first (a new slice; servers is not modified). Its
// first N elements are Accumulo's subset of size N.
func RendezvousOrder(t Tablet, servers []*ServerLoad, salt string) []*ServerLoad {
	buf := appendTabletKey(nil, t)
	kl := len(buf)
	type hs struct {
		h u128
		s *ServerLoad
	}
	tmp := make([]hs, 0, len(servers))
	for _, s := range servers {
		if s == nil {
			continue
		}
		var h u128
		h, buf = hashMember(buf, kl, string(s.ID), salt)
		tmp = append(tmp, hs{h, s})
	}
	slices.SortFunc(tmp, func(a, b hs) int {
		if c := a.h.cmp(b.h); c != 0 {
			return c
		}
		return cmpString(string(a.s.ID), string(b.s.ID))
	})
	out := make([]*ServerLoad, len(tmp))
	for i := range tmp {
		out[i] = tmp[i].s
	}
	return out
}

// HostOrder returns the hosts of group's live servers in view, ordered by
// the rendezvous hash of the host name for t (unsalted), smallest first.
// Every host is equally likely to come first whatever its server count.
// The first is HomeHost. (Accumulo has no such order: its host selector
// takes the distinct hosts of the server order, see accumulo-host.)
func HostOrder(t Tablet, view *LoadView, group string) []string {
	if view == nil {
		return nil
	}
	g := view.group(group)
	buf := appendTabletKey(nil, t)
	kl := len(buf)
	type hh struct {
		h    u128
		name string
	}
	tmp := make([]hh, len(g.hosts))
	for i := range g.hosts {
		tmp[i].name = g.hosts[i].name
		tmp[i].h, buf = hashMember(buf, kl, tmp[i].name, "")
	}
	slices.SortFunc(tmp, func(a, b hh) int {
		if c := a.h.cmp(b.h); c != 0 {
			return c
		}
		return cmpString(a.name, b.name)
	})
	out := make([]string, len(tmp))
	for i := range tmp {
		out[i] = tmp[i].name
	}
	return out
}

// HomeHost returns the tablet's home host among group's live servers in
// view: the host with the smallest rendezvous hash of its name (the first
// of HostOrder), or "" when the group has no live server. The adaptive
// policy sends a tablet's scans there while it is healthy so that the
// host's block cache holds the tablet's blocks.
func HomeHost(t Tablet, view *LoadView, group string) string {
	if order := HostOrder(t, view, group); len(order) > 0 {
		return order[0]
	}
	return ""
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
