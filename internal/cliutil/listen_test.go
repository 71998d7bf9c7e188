package cliutil

import (
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
)

// TestCheckListen: loopback addresses pass, every-interface and network
// addresses are refused with one line naming --insecure unless insecure,
// and bad input is an error naming the flag either way.
func TestCheckListen(t *testing.T) {
	hosts := map[string][]net.IP{
		"loopy":   {net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		"db1":     {net.ParseIP("10.0.0.7")},
		"mixed":   {net.ParseIP("127.0.0.1"), net.ParseIP("192.168.1.2")},
		"nothing": {},
	}
	lookup := func(h string) ([]net.IP, error) {
		ips, ok := hosts[h]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: h, IsNotFound: true}
		}
		return ips, nil
	}
	const (
		ok      = iota // accepted with or without --insecure
		refused        // refused without --insecure, accepted with it
		bad            // malformed: refused either way
	)
	for _, tc := range []struct {
		addr string
		want int
		in   string // in the error
	}{
		{"", ok, ""}, // listener off
		{"127.0.0.1:0", ok, ""},
		{"127.8.9.10:4222", ok, ""},
		{"localhost:1", ok, ""},
		{"LOCALHOST.:1", ok, ""},
		{"node.localhost:1", ok, ""},
		{"[::1]:0", ok, ""},
		{"[::ffff:127.0.0.1]:0", ok, ""},
		{"loopy:8090", ok, ""},
		{"0.0.0.0:0", refused, "every interface"},
		{":0", refused, "every interface"},
		{":8090", refused, "every interface"},
		{"[::]:0", refused, "every interface"},
		{"10.0.0.1:1", refused, "a network address"},
		{"[2001:db8::1]:1", refused, "a network address"},
		{"[::ffff:10.0.0.1]:1", refused, "a network address"},
		{"db1:8090", refused, "db1 is 10.0.0.7"},
		{"mixed:8090", refused, "mixed is 192.168.1.2"},
		{"nope", bad, "want host:port"},
		{"127.0.0.1", bad, "want host:port"},
		{"127.0.0.1:", bad, "missing port"},
		{"[::1:0", bad, "want host:port"},
		{"nosuch.example:1", bad, "no such host"},
		{"nothing:1", bad, "resolves to no address"},
	} {
		for _, insecure := range []bool{false, true} {
			err := CheckListen("listen", tc.addr, insecure, lookup)
			wantErr := tc.want == bad || (tc.want == refused && !insecure)
			if (err != nil) != wantErr {
				t.Errorf("CheckListen(%q, insecure=%v) = %v; want error %v", tc.addr, insecure, err, wantErr)
				continue
			}
			if err == nil {
				continue
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "--listen ") || strings.Contains(msg, "\n") || !strings.Contains(msg, tc.in) {
				t.Errorf("CheckListen(%q, insecure=%v) = %q; want one line naming --listen and %q", tc.addr, insecure, msg, tc.in)
			}
			if isRefusal := errors.Is(err, ErrInsecureListen); isRefusal != (tc.want == refused) {
				t.Errorf("CheckListen(%q): errors.Is(ErrInsecureListen) = %v", tc.addr, isRefusal)
			}
			if tc.want == refused && !strings.Contains(msg, "pass --insecure") {
				t.Errorf("CheckListen(%q) = %q does not name --insecure", tc.addr, msg)
			}
		}
	}
	// A host name without a resolver cannot be checked.
	if err := CheckListen("http", "db1:1", false, nil); err == nil || !strings.Contains(err.Error(), "--http") {
		t.Errorf("no resolver: %v", err)
	}
}

// TestCheckListensSecured: a listener secured by --secrets may listen on
// the network without --insecure; unsecured, its refusal names what
// would secure it; one with nothing to secure it names only --insecure.
func TestCheckListensSecured(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	if err := CheckListens(log, false, nil, Listen{Flag: "listen", Addr: "0.0.0.0:0", Secured: true, SecureWith: "--secrets DIR"}); err != nil {
		t.Fatalf("secured listener refused: %v", err)
	}
	if err := CheckListens(log, false, nil, Listen{Flag: "listen", Addr: "bad", Secured: true}); err == nil {
		t.Fatal("malformed secured address accepted")
	}
	err := CheckListens(log, false, nil, Listen{Flag: "listen", Addr: "0.0.0.0:0", SecureWith: "--secrets DIR"})
	if !errors.Is(err, ErrInsecureListen) || !strings.Contains(err.Error(), "pass --secrets DIR to secure it with mutual TLS, or pass --insecure") {
		t.Fatalf("unsecured listener: %v", err)
	}
	err = CheckListens(log, false, nil, Listen{Flag: "listen", Addr: "0.0.0.0:0", Secured: true}, Listen{Flag: "http", Addr: ":0"})
	if !errors.Is(err, ErrInsecureListen) || !strings.Contains(err.Error(), "--http :0 listens on every interface, not loopback only, without TLS") || strings.Contains(err.Error(), "--secrets") {
		t.Fatalf("http next to a secured listener: %v", err)
	}
}
