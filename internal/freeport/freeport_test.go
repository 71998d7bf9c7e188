package freeport_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/scanplane/scanplane/internal/freeport"
)

func TestPickBelowEphemeralRange(t *testing.T) {
	lo := freeport.EphemeralStart()
	addrs, err := freeport.PickN("127.0.0.1", 8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("PickN returned %s twice", a)
		}
		seen[a] = true
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if lo > freeport.Floor+1 && (port < freeport.Floor || port >= lo) {
			t.Errorf("port %d is outside [%d, %d)", port, freeport.Floor, lo)
		}
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("picked %s, then could not listen on it: %v", a, err)
		}
		_ = l.Close()
	}
}
