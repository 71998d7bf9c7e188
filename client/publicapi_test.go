package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/messages"
)

// TestErrorCodesHaveSentinels: every error code the cluster answers
// matches, under errors.Is and through wrapping, ErrScan and exactly one
// sentinel; DEADLINE_EXCEEDED matches context.DeadlineExceeded like a
// deadline the client's context ends.
func TestErrorCodesHaveSentinels(t *testing.T) {
	all := map[error]string{}
	for _, s := range codeErrors {
		all[s] = s.Error()
	}
	for v, name := range messages.ErrorCode_name {
		code := ErrorCode(v)
		if code == CodeUnspecified {
			continue
		}
		want := codeErrors[code]
		if want == nil {
			t.Errorf("%s has no sentinel error", name)
			continue
		}
		err := fmt.Errorf("scan of t: %w", &ScanError{Code: code, Message: "m"})
		if !errors.Is(err, ErrScan) || !errors.Is(err, want) {
			t.Errorf("%s: errors.Is(%v, ErrScan / %v) false", name, err, want)
		}
		for s := range all {
			if s != want && errors.Is(err, s) {
				t.Errorf("%s matches %v too", name, s)
			}
		}
	}
	err := fmt.Errorf("x: %w", &ScanError{Code: CodeDeadlineExceeded})
	if !errors.Is(err, context.DeadlineExceeded) || ErrDeadlineExceeded != context.DeadlineExceeded {
		t.Error("DEADLINE_EXCEEDED does not match context.DeadlineExceeded")
	}
	if errors.Is(&ScanError{Code: CodeUnspecified}, nil) {
		t.Error("a ScanError matches nil")
	}
}

// TestRangeConstructors: KeyRange, Prefix and SingleKey hold exactly the
// keys they name.
func TestRangeConstructors(t *testing.T) {
	keys := []string{"", "\x00", "a", "ab", "ab\x00", "ab\xff", "ab\xff\xff", "ac", "b", "\xff", "\xff\xff", "\xff\xff\x01"}
	for _, tc := range []struct {
		name string
		r    Range
		want func(string) bool
	}{
		{"KeyRange(a, b)", KeyRange([]byte("a"), []byte("b")), func(k string) bool { return k >= "a" && k < "b" }},
		{"KeyRange(nil, nil)", KeyRange(nil, nil), func(string) bool { return true }},
		{"KeyRange(ab, nil)", KeyRange([]byte("ab"), nil), func(k string) bool { return k >= "ab" }},
		{"Prefix(ab)", Prefix([]byte("ab")), func(k string) bool { return strings.HasPrefix(k, "ab") }},
		{"Prefix(ab\\xff)", Prefix([]byte("ab\xff")), func(k string) bool { return strings.HasPrefix(k, "ab\xff") }},
		{"Prefix(\\xff\\xff)", Prefix([]byte("\xff\xff")), func(k string) bool { return strings.HasPrefix(k, "\xff\xff") }},
		{"Prefix(nil)", Prefix(nil), func(string) bool { return true }},
		{"SingleKey(ab)", SingleKey([]byte("ab")), func(k string) bool { return k == "ab" }},
		{"SingleKey(\\xff)", SingleKey([]byte("\xff")), func(k string) bool { return k == "\xff" }},
	} {
		if err := tc.r.Validate(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		for _, k := range keys {
			if got := tc.r.Contains([]byte(k)); got != tc.want(k) {
				t.Errorf("%s = %s: Contains(%q) = %v", tc.name, tc.r, k, got)
			}
		}
	}
	p := []byte("ab")
	r := Prefix(p)
	p[0] = 'z'
	if string(r.Start) != "ab" {
		t.Error("Prefix aliases its argument")
	}
}

// TestTLSFromSecrets: the client's TLS comes from a secrets directory's
// client certificate and passes Config.Validate; a directory a process
// must refuse is refused in one line that names the directory and the
// file, and no command-line flag.
func TestTLSFromSecrets(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	if _, err := TLSFromSecrets(dir); err == nil || !strings.HasPrefix(err.Error(), "secrets directory "+dir+": ") {
		t.Fatalf("missing directory: %v", err)
	}
	if err := secrets.Init(dir, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	tc, err := TLSFromSecrets(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(tc.Certificates) != 1 || tc.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("TLS config %+v", tc)
	}
	leaf := tc.Certificates[0].Leaf
	if leaf == nil || !strings.Contains(leaf.Subject.String(), "client") {
		t.Fatalf("certificate %v, want the client role's", leaf)
	}
	cfg := DefaultConfig()
	cfg.TLS = tc
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	caKey := filepath.Join(dir, "ca.key")
	if err := os.WriteFile(caKey, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = TLSFromSecrets(dir)
	if err == nil || !strings.HasPrefix(err.Error(), "secrets directory "+dir+": ") || !strings.Contains(err.Error(), caKey) ||
		strings.Contains(err.Error(), "--secrets") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("with %s: %v", caKey, err)
	}
}

// TestDialFailsClosed: Dial refuses a bad config before any IO and
// reports a cluster it cannot reach, leaving nothing running (TestMain
// checks for goroutines).
func TestDialFailsClosed(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Window = 0
	if c, err := Dial(context.Background(), cfg); c != nil || err == nil || !strings.Contains(err.Error(), "Window") {
		t.Fatalf("Dial with Window 0: %v, %v", c, err)
	}
	cfg = DefaultConfig()
	cfg.NATSURL = "nats://127.0.0.1:1"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, cfg)
	if c != nil || err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("Dial of a NATS nobody listens on: %v, %v", c, err)
	}
}

// TestErrorCodeNames: each ErrorCode constant is the wire's code of its
// name, and the client's codes cover the wire's.
func TestErrorCodeNames(t *testing.T) {
	codes := []struct {
		code ErrorCode
		name string
	}{
		{CodeUnspecified, "UNSPECIFIED"}, {CodeBadRequest, "BAD_REQUEST"}, {CodeNoSuchTable, "NO_SUCH_TABLE"},
		{CodeStaleGeneration, "STALE_GENERATION"}, {CodeNoServers, "NO_SERVERS"}, {CodeDeadlineExceeded, "DEADLINE_EXCEEDED"},
		{CodeStorage, "STORAGE"}, {CodeCorruptBlock, "CORRUPT_BLOCK"}, {CodeCancelled, "CANCELLED"}, {CodeInternal, "INTERNAL"},
		{CodeShuttingDown, "SHUTTING_DOWN"}, {CodeNoSuchTablet, "NO_SUCH_TABLET"}, {CodeResumeLimit, "RESUME_LIMIT"},
		{CodeOverloaded, "OVERLOADED"}, {CodeNoCoordinator, "NO_COORDINATOR"}, {CodePermissionDenied, "PERMISSION_DENIED"},
	}
	for _, c := range codes {
		if wire := messages.ErrorCode_value["ERROR_CODE_"+c.name]; int(wire) != int(c.code) || c.code.String() != "ERROR_CODE_"+c.name {
			t.Errorf("%s: code %d (%s), the wire's %d", c.name, c.code, c.code, wire)
		}
	}
	if len(codes) != len(messages.ErrorCode_name) {
		t.Errorf("%d client codes, %d on the wire", len(codes), len(messages.ErrorCode_name))
	}
}
