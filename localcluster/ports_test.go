package localcluster

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
)

func TestPortAddrs(t *testing.T) {
	// The default base keeps the well-known ports.
	want := CoordinatorAddrs{NATS: "127.0.0.1:4224", Routes: "127.0.0.1:6224", Actor: "127.0.0.1:8094", HTTP: "127.0.0.1:8095"}
	if got := PortAddrs(DefaultPortBase, 2); got != want || WellKnownAddrs(2) != want {
		t.Errorf("PortAddrs(4222, 2) = %+v, want %+v", got, want)
	}
	want = CoordinatorAddrs{NATS: "127.0.0.1:10001", Routes: "127.0.0.1:12001", Actor: "127.0.0.1:13870", HTTP: "127.0.0.1:13871"}
	if got := PortAddrs(10000, 1); got != want {
		t.Errorf("PortAddrs(10000, 1) = %+v, want %+v", got, want)
	}
	if got := PortAddrs(MaxPortBase, 8).HTTP; got != "127.0.0.1:65535" {
		t.Errorf("the last port of MaxPortBase is %s, want 127.0.0.1:65535", got)
	}
	if got := PortNATSURLs(10000, 2); got != "nats://127.0.0.1:10000,nats://127.0.0.1:10001" {
		t.Errorf("PortNATSURLs(10000, 2) = %s", got)
	}
}

// TestCheckPorts: a port another process holds is ErrPortInUse naming
// it once, with the count of the others; Start refuses such a cluster
// before it starts (or builds) anything.
func TestCheckPorts(t *testing.T) {
	var ls []net.Listener
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ls = append(ls, l)
	}
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	cfg := Config{Coordinators: 2, Addrs: []CoordinatorAddrs{
		{NATS: free(), Actor: ls[0].Addr().String()},
		{NATS: ls[1].Addr().String(), HTTP: ls[2].Addr().String()},
	}}
	err := CheckPorts(cfg)
	want := "localcluster: port in use: " + ls[0].Addr().String() + " (actors of coordinator1) and 2 more of the cluster's ports"
	if !errors.Is(err, ErrPortInUse) || err.Error() != want {
		t.Fatalf("CheckPorts = %v, want %q", err, want)
	}
	// An external NATS: the NATS ports are not the cluster's.
	cfg.NATSURL = "nats://127.0.0.1:1"
	cfg.Addrs[0].Actor = free()
	if err := CheckPorts(cfg); err == nil || !strings.HasSuffix(err.Error(), ls[2].Addr().String()+" (HTTP of coordinator2)") {
		t.Fatalf("CheckPorts with NATSURL = %v, want only the HTTP port", err)
	}
	cfg.NATSURL = ""
	cfg.DataDir, cfg.BinDir = t.TempDir(), "/nonexistent"
	if _, err := Start(context.Background(), cfg); !errors.Is(err, ErrPortInUse) {
		t.Fatalf("Start = %v, want ErrPortInUse before looking for binaries", err)
	}
}

func TestFirstOf(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	if err := firstOf([]error{nil, nil}, "logs"); err != nil {
		t.Errorf("no errors: %v", err)
	}
	if err := firstOf([]error{nil, a}, "logs"); err != a {
		t.Errorf("one error: %v", err)
	}
	if err := firstOf([]error{a, nil, b, b}, "L"); !errors.Is(err, a) || err.Error() != "a (and 2 more coordinators failed to start; logs in L)" {
		t.Errorf("three errors: %v", err)
	}
}
