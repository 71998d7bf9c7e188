package grants

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

var (
	// ErrBadGrant is wrapped by every error of a grant that does not
	// parse.
	ErrBadGrant = errors.New("bad grant")
	// ErrDenied is matched by the error of Check for a table the grant
	// does not allow.
	ErrDenied = errors.New("permission denied")
)

// DeniedError is Check's error: Principal may not scan Table; Granted
// are the tables it may scan.
type DeniedError struct {
	Principal, Table string
	Granted          []string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("principal %q may not scan table %q (its certificate grants tables %s)", e.Principal, e.Table, strings.Join(e.Granted, ","))
}

// Is makes errors.Is(err, ErrDenied) true.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

const (
	// Scheme and Host of a grant URI: scanplane://principal/NAME?tables=...
	Scheme = "scanplane"
	Host   = "principal"
	// MaxNameLen bounds a principal's name and a table pattern.
	MaxNameLen = 64
	// MaxTables bounds the patterns of one grant.
	MaxTables = 256
)

// Grant is what a credential may scan. The zero Grant may scan nothing.
type Grant struct {
	principal string
	all       bool
	patterns  []string // exact names, or a prefix followed by "*"
}

// All is the grant of a credential that names no tables: every table.
// principal may be "" (an unnamed credential).
func All(principal string) Grant { return Grant{principal: principal, all: true} }

// New returns principal's grant of tables, each a table name or a
// "prefix*" pattern ("*" alone is every table). principal is 1 to
// MaxNameLen characters of [A-Za-z0-9_-]; a table pattern is 1 to
// MaxNameLen characters of [A-Za-z0-9_-] (a table name's), optionally
// followed by "*". At least one table is needed.
func New(principal string, tables []string) (Grant, error) {
	if err := checkPrincipal(principal); err != nil {
		return Grant{}, err
	}
	if len(tables) == 0 {
		return Grant{}, fmt.Errorf("%w: principal %q: no tables (want T1,T2 or prefix*)", ErrBadGrant, principal)
	}
	if len(tables) > MaxTables {
		return Grant{}, fmt.Errorf("%w: principal %q: %d tables, at most %d", ErrBadGrant, principal, len(tables), MaxTables)
	}
	g := Grant{principal: principal}
	for _, t := range tables {
		if err := checkPattern(t); err != nil {
			return Grant{}, err
		}
		if t == "*" {
			g.all = true
		}
		if !slices.Contains(g.patterns, t) {
			g.patterns = append(g.patterns, t)
		}
	}
	if g.all {
		g.patterns = nil
	}
	return g, nil
}

// Parse is New with the tables as one comma-separated list (the value of
// scanctl's --tables).
func Parse(principal, tables string) (Grant, error) {
	if strings.TrimSpace(tables) == "" {
		return New(principal, nil)
	}
	ts := strings.Split(tables, ",")
	for i := range ts {
		ts[i] = strings.TrimSpace(ts[i])
	}
	return New(principal, ts)
}

// Principal is the name the grant was issued to ("" for an unnamed
// credential).
func (g Grant) Principal() string { return g.principal }

// Restricted reports whether the grant leaves out some table.
func (g Grant) Restricted() bool { return !g.all }

// Tables are the grant's patterns in the order given; nil for every table.
func (g Grant) Tables() []string { return slices.Clone(g.patterns) }

// Allows reports whether the grant lets its holder scan table.
func (g Grant) Allows(table string) bool {
	if g.all {
		return true
	}
	for _, p := range g.patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(table, prefix) {
				return true
			}
		} else if p == table {
			return true
		}
	}
	return false
}

// Check is nil when the grant allows table, else a *DeniedError naming
// the principal, the table and the granted tables: what every entry
// point answers a scan it refuses.
func (g Grant) Check(table string) error {
	if g.Allows(table) {
		return nil
	}
	return &DeniedError{Principal: g.principal, Table: table, Granted: g.Tables()}
}

// String names the principal and what it may scan, for errors and logs:
// `"alice" (tables demo,logs-*)`.
func (g Grant) String() string {
	what := "every table"
	if !g.all {
		what = "tables " + strings.Join(g.patterns, ",")
	}
	return fmt.Sprintf("%q (%s)", g.principal, what)
}

// URI is the grant as a certificate carries it:
// scanplane://principal/NAME?tables=T1,T2 (tables=* for every table).
func (g Grant) URI() *url.URL {
	tables := "*"
	if !g.all {
		tables = strings.Join(g.patterns, ",")
	}
	return &url.URL{Scheme: Scheme, Host: Host, Path: "/" + g.principal, RawQuery: "tables=" + tables}
}

// ParseURI reads a grant URI (URI). Errors name the value.
func ParseURI(s string) (Grant, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Grant{}, fmt.Errorf("%w: URI %q: %v", ErrBadGrant, s, err)
	}
	return fromURL(u)
}

func fromURL(u *url.URL) (Grant, error) {
	if u.Scheme != Scheme || u.Host != Host || u.User != nil || u.Fragment != "" {
		return Grant{}, fmt.Errorf("%w: URI %q: want %s://%s/NAME?tables=T1,T2", ErrBadGrant, u.String(), Scheme, Host)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Grant{}, fmt.Errorf("%w: URI %q: %v", ErrBadGrant, u.String(), err)
	}
	ts, ok := q["tables"]
	if !ok || len(q) != 1 || len(ts) != 1 {
		return Grant{}, fmt.Errorf("%w: URI %q: want exactly one query parameter, tables=T1,T2", ErrBadGrant, u.String())
	}
	g, err := Parse(strings.TrimPrefix(u.Path, "/"), ts[0])
	if err != nil {
		return Grant{}, fmt.Errorf("URI %q: %w", u.String(), err)
	}
	return g, nil
}

// FromCertificate reads the grant of a certificate: the one URI subject
// alternative name of scheme Scheme, or All("") when it has none. Two
// such names, or one that does not parse, is an error naming it.
func FromCertificate(cert *x509.Certificate) (Grant, error) {
	var found *url.URL
	for _, u := range cert.URIs {
		if u.Scheme != Scheme {
			continue
		}
		if found != nil {
			return Grant{}, fmt.Errorf("%w: certificate %q has two grant URIs, %q and %q", ErrBadGrant, cert.Subject.String(), found.String(), u.String())
		}
		found = u
	}
	if found == nil {
		return All(""), nil
	}
	g, err := fromURL(found)
	if err != nil {
		return Grant{}, fmt.Errorf("certificate %q: %w", cert.Subject.String(), err)
	}
	return g, nil
}

func checkPrincipal(p string) error {
	if p == "" {
		return fmt.Errorf("%w: empty principal name", ErrBadGrant)
	}
	if len(p) > MaxNameLen {
		return fmt.Errorf("%w: principal %.20q... is %d bytes, at most %d", ErrBadGrant, p, len(p), MaxNameLen)
	}
	for i := 0; i < len(p); i++ {
		if !nameChar(p[i]) {
			return fmt.Errorf("%w: principal %q: character %q at offset %d not allowed (only A-Z a-z 0-9 _ -)", ErrBadGrant, p, p[i], i)
		}
	}
	return nil
}

func checkPattern(t string) error {
	if t == "" {
		return fmt.Errorf("%w: empty table in the list", ErrBadGrant)
	}
	if len(t) > MaxNameLen+1 {
		return fmt.Errorf("%w: table %.20q... is %d bytes, at most %d", ErrBadGrant, t, len(t), MaxNameLen)
	}
	body := strings.TrimSuffix(t, "*")
	for i := 0; i < len(body); i++ {
		if !nameChar(body[i]) {
			return fmt.Errorf("%w: table %q: character %q at offset %d not allowed (a table name's A-Z a-z 0-9 _ -, optionally ending in *)", ErrBadGrant, t, body[i], i)
		}
	}
	if len(body) > MaxNameLen {
		return fmt.Errorf("%w: table %.20q... is %d bytes, at most %d", ErrBadGrant, t, len(body), MaxNameLen)
	}
	return nil
}

func nameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
