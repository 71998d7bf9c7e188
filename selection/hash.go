package selection

import (
	"encoding/binary"
	"slices"

	"github.com/spaolacci/murmur3"
)

// Rendezvous (highest-random-weight) hashing, as Accumulo's scan server
// selectors do it: every member gets a 128-bit murmur3 hash of (tablet end
// row, prev end row, table, member, salt if non-empty) and members are
// ordered by that hash, smallest first. The first N members form the
// tablet's subset of size N; the same salt gives nested subsets as N grows;
// different salts give independent subsets; removing one of n members
// remaps only the tablets whose first member it was (≈1/n).
//
// Encoding: every field is written as uvarint(len) followed by its bytes,
// so no two different (tablet, member, salt) tuples hash the same input.
// The hash is murmur3 x64 128-bit, seed 0; (h1, h2) compare as an unsigned
// 128-bit number, h1 most significant. Equal hashes order by member name.

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

// appendTabletKey appends the tablet part of the hash input.
func appendTabletKey(b []byte, t Tablet) []byte {
	b = binary.AppendUvarint(b, uint64(len(t.EndRow)))
	b = append(b, t.EndRow...)
	b = binary.AppendUvarint(b, uint64(len(t.PrevEndRow)))
	b = append(b, t.PrevEndRow...)
	b = binary.AppendUvarint(b, uint64(len(t.Table)))
	b = append(b, t.Table...)
	return b
}

// hashMember hashes buf[:keyLen] (a tablet key) + member + salt. It
// returns the (possibly grown) buffer for reuse.
func hashMember(buf []byte, keyLen int, member, salt string) (u128, []byte) {
	b := buf[:keyLen]
	b = binary.AppendUvarint(b, uint64(len(member)))
	b = append(b, member...)
	if salt != "" {
		b = binary.AppendUvarint(b, uint64(len(salt)))
		b = append(b, salt...)
	}
	h1, h2 := murmur3.Sum128(b)
	return u128{h1, h2}, b
}

// RendezvousHash returns the 128-bit rendezvous hash of member (a server
// id or a host name) for tablet t and salt.
func RendezvousHash(t Tablet, member, salt string) (hi, lo uint64) {
	b := appendTabletKey(nil, t)
	h, _ := hashMember(b, len(b), member, salt)
	return h.hi, h.lo
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
// The first is HomeHost.
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
