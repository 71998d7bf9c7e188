package grants

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestAllows(t *testing.T) {
	g, err := Parse("alice", "demo, logs-*")
	if err != nil {
		t.Fatal(err)
	}
	for table, want := range map[string]bool{
		"demo": true, "demo2": false, "dem": false, "logs-": true, "logs-2026": true,
		"logs": false, "other": false, "": false,
	} {
		if got := g.Allows(table); got != want {
			t.Errorf("%v.Allows(%q) = %v, want %v", g, table, got, want)
		}
	}
	if !g.Restricted() || g.Principal() != "alice" {
		t.Errorf("grant %v: Restricted %v, Principal %q", g, g.Restricted(), g.Principal())
	}
	if every, _ := Parse("bob", "x,*"); every.Restricted() || !every.Allows("anything") {
		t.Errorf("tables x,* must allow every table: %v", every)
	}
	if !All("").Allows("t") || All("").Restricted() {
		t.Error("All must allow every table")
	}
	if (Grant{}).Allows("t") {
		t.Error("the zero Grant must allow nothing")
	}
	if err := g.Check("demo"); err != nil {
		t.Errorf("Check(demo) = %v", err)
	}
	err = g.Check("other")
	want := `principal "alice" may not scan table "other" (its certificate grants tables demo,logs-*)`
	if !errors.Is(err, ErrDenied) || err.Error() != want {
		t.Errorf("Check(other) = %v; want %q matching ErrDenied", err, want)
	}
}

func TestURIRoundTrip(t *testing.T) {
	for _, tables := range []string{"demo", "demo,logs-*", "*"} {
		g, err := Parse("alice", tables)
		if err != nil {
			t.Fatal(err)
		}
		u := g.URI().String()
		back, err := ParseURI(u)
		if err != nil {
			t.Fatalf("ParseURI(%q): %v", u, err)
		}
		if back.String() != g.String() {
			t.Errorf("round trip of %q: %v, want %v", u, back, g)
		}
	}
	if got := mustParse(t, "alice", "demo,logs-*").URI().String(); got != "scanplane://principal/alice?tables=demo,logs-*" {
		t.Errorf("URI = %q", got)
	}
}

func mustParse(t *testing.T, p, tables string) Grant {
	t.Helper()
	g, err := Parse(p, tables)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Bad grants are refused with one line naming the bad value.
func TestParseRejects(t *testing.T) {
	for _, c := range []struct{ principal, tables, want string }{
		{"", "demo", "empty principal"},
		{"al ice", "demo", `principal "al ice": character ' '`},
		{"a/b", "demo", `principal "a/b"`},
		{"alice", "", `principal "alice": no tables`},
		{"alice", "demo,,x", "empty table"},
		{"alice", "de.mo", `table "de.mo": character '.'`},
		{"alice", "*demo", `table "*demo": character '*'`},
		{"alice", "de*mo", `table "de*mo": character '*'`},
		{"alice", "demo**", `table "demo**": character '*'`},
		{"alice", strings.Repeat("t", MaxNameLen+1), "at most 64"},
		{strings.Repeat("p", MaxNameLen+1), "demo", "at most 64"},
	} {
		_, err := Parse(c.principal, c.tables)
		if err == nil || !errors.Is(err, ErrBadGrant) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Parse(%q, %q) = %v; want one line with %q", c.principal, c.tables, err, c.want)
		}
	}
	for _, c := range []struct{ uri, want string }{
		{"https://principal/alice?tables=demo", `"https://principal/alice?tables=demo": want scanplane://principal/NAME`},
		{"scanplane://other/alice?tables=demo", `"scanplane://other/alice?tables=demo"`},
		{"scanplane://principal/alice", "tables=T1,T2"},
		{"scanplane://principal/alice?tables=a&tables=b", "exactly one"},
		{"scanplane://principal/alice?tables=a&x=1", "exactly one"},
		{"scanplane://principal/?tables=demo", "empty principal"},
		{"scanplane://principal/alice?tables=de%20mo", `table "de mo"`},
		{"scanplane://principal/a/b?tables=demo", `principal "a/b"`},
	} {
		_, err := ParseURI(c.uri)
		if err == nil || !errors.Is(err, ErrBadGrant) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseURI(%q) = %v; want an error with %q", c.uri, err, c.want)
		}
	}
}

func TestFromCertificate(t *testing.T) {
	uri := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	cert := func(uris ...*url.URL) *x509.Certificate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "c", OrganizationalUnit: []string{"client"}},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), URIs: uris}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	g, err := FromCertificate(cert())
	if err != nil || g.Restricted() {
		t.Fatalf("no grant URI: %v, %v; want every table", g, err)
	}
	g, err = FromCertificate(cert(uri("spiffe://example.org/x"), mustParse(t, "alice", "demo").URI()))
	if err != nil || !g.Allows("demo") || g.Allows("other") || g.Principal() != "alice" {
		t.Fatalf("alice's certificate: %v, %v", g, err)
	}
	if _, err := FromCertificate(cert(mustParse(t, "a", "x").URI(), mustParse(t, "b", "y").URI())); err == nil || !strings.Contains(err.Error(), "two grant URIs") {
		t.Errorf("two grant URIs: %v", err)
	}
	if _, err := FromCertificate(cert(uri("scanplane://principal/alice?tables=a.b"))); err == nil || !strings.Contains(err.Error(), `table "a.b"`) {
		t.Errorf("bad grant URI: %v", err)
	}
}
