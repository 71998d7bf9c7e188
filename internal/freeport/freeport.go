// Package freeport picks a TCP port for a process that must know its
// address before it listens (a NATS route port every node of a cluster is
// told in advance).
//
// A port taken from the kernel's ephemeral range and closed again can
// become the source port of any outgoing connection before its owner
// binds it, and stays taken while that connection lives. Pick returns a
// port below that range, checked free a moment ago; it is safe for
// concurrent use.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Floor is the lowest port Pick returns below the ephemeral range.
const Floor = 20000

// tries is how many random ports below the ephemeral range Pick tries
// before it falls back to one the kernel chooses.
const tries = 64

// Pick returns host:port with a port that was free a moment ago: below
// the kernel's ephemeral range when there is room, else one the kernel
// chose.
func Pick(host string) (string, error) {
	if lo := EphemeralStart(); lo > Floor+1 {
		for range tries {
			p := Floor + rand.IntN(lo-Floor)
			if l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p))); err == nil {
				a := l.Addr().String()
				_ = l.Close()
				return a, nil
			}
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("freeport: pick a free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// PickN returns n distinct addresses on host, as Pick does.
func PickN(host string, n int) ([]string, error) {
	seen := make(map[string]bool, n)
	out := make([]string, 0, n)
	for len(out) < n {
		a, err := Pick(host)
		if err != nil {
			return nil, err
		}
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out, nil
}

// EphemeralStart is the first port of the kernel's ephemeral range
// (Linux /proc/sys/net/ipv4/ip_local_port_range); 0 when unknown.
func EphemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}
