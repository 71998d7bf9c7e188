package cliutil

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
)

// ErrInsecureListen is wrapped by CheckListen's error for an address that
// would accept connections from the network without --insecure.
var ErrInsecureListen = errors.New("not secured")

// InsecureUsage is the usage text of the --insecure flag.
const InsecureUsage = "allow listening on non-loopback addresses without TLS or authentication (--secrets secures every listener: the actor remote, --http and an embedded NATS server; see docs/security.md)"

// LookupIP resolves a host name to its addresses (SystemLookupIP, i.e.
// net.LookupIP, in production; tests inject a table).
type LookupIP func(host string) ([]net.IP, error)

// CheckListen is the rule of every listening flag (CockroachDB's: a
// network address needs security or an explicit opt-out): addr
// (host:port, the value of --flag) must listen on loopback only unless
// insecure (--insecure) is set. The host is loopback when it is a
// loopback IP (127.0.0.0/8, ::1), "localhost" or a name under
// ".localhost" (RFC 6761 §6.3: always loopback), or a name every address
// of which (by lookup) is loopback. An empty host, 0.0.0.0 and :: mean
// every interface and are refused. An empty addr (the listener is off)
// passes. A malformed addr is an error naming the flag whatever insecure
// says; a network address without insecure is a one-line error naming
// --insecure that wraps ErrInsecureListen.
//
// CheckListens names what secures the listener (Listen.SecureWith).
func CheckListen(flag, addr string, insecure bool, lookup LookupIP) error {
	return checkListen(Listen{Flag: flag, Addr: addr}, insecure, lookup)
}

func checkListen(l Listen, insecure bool, lookup LookupIP) error {
	flag, addr := l.Flag, l.Addr
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--%s %q: want host:port (port 0 = ephemeral): %v", flag, addr, err)
	}
	if port == "" {
		return fmt.Errorf("--%s %q: want host:port (port 0 = ephemeral): missing port", flag, addr)
	}
	what, err := listenScope(host, lookup)
	if err != nil {
		return fmt.Errorf("--%s %q: %w", flag, addr, err)
	}
	if what == "" || insecure || l.Secured {
		return nil
	}
	if l.SecureWith != "" {
		return fmt.Errorf("--%s %s listens on %s, not loopback only, without TLS: %w; pass %s to secure it with mutual TLS, or pass --insecure to listen on a network address without it", flag, addr, what, ErrInsecureListen, l.SecureWith)
	}
	return fmt.Errorf("--%s %s listens on %s, not loopback only, without TLS: %w; pass --insecure to listen on a network address without it", flag, addr, what, ErrInsecureListen)
}

// listenScope returns "" for a loopback-only host, else what the host
// exposes (for the error).
func listenScope(host string, lookup LookupIP) (string, error) {
	if host == "" {
		return "every interface", nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		switch {
		case ip.IsUnspecified():
			return "every interface", nil
		case ip.Unmap().IsLoopback():
			return "", nil
		}
		return "a network address", nil
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return "", nil
	}
	if lookup == nil {
		return "", fmt.Errorf("host %q: no resolver to check that it is loopback", host)
	}
	ips, err := lookup(host)
	if err != nil {
		return "", fmt.Errorf("host %q: %w", host, err)
	}
	if len(ips) == 0 {
		return "", fmt.Errorf("host %q: resolves to no address", host)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return fmt.Sprintf("a network address (%s is %s)", host, ip), nil
		}
	}
	return "", nil
}

// SystemLookupIP is LookupIP through the system resolver.
func SystemLookupIP(host string) ([]net.IP, error) { return net.LookupIP(host) }

// Listen is one listening flag and its value.
type Listen struct {
	Flag, Addr string
	// Secured: the listener has TLS with client authentication (the
	// actor remote with --secrets), so it may listen on the network.
	Secured bool
	// SecureWith names what would secure the listener (e.g. "--secrets
	// DIR"), for the refusal; empty = the refusal names only --insecure.
	SecureWith string
}

// CheckListens applies CheckListen's rule to each listening flag of a
// command, letting a Secured listener through, and, with insecure, logs a
// warning for each network address it lets through unsecured.
func CheckListens(log *slog.Logger, insecure bool, lookup LookupIP, listens ...Listen) error {
	for _, l := range listens {
		if err := checkListen(l, insecure, lookup); err != nil {
			return err
		}
		if insecure && checkListen(l, false, lookup) != nil {
			log.Warn("--insecure: listening on a network address without TLS or authentication", "flag", "--"+l.Flag, "addr", l.Addr)
		}
	}
	return nil
}
