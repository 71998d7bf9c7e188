package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/natsserver"

	"github.com/scanplane/scanplane/internal/cliutil"
)

func runCapture(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"scan"}, 2, "--table is required"},
		{[]string{"scan", "--table", "t", "--start", "b", "--end", "a"}, 2, "bad range"},
		{[]string{"scan", "--table", "t", "--start", `\xZZ`}, 2, "bad key"},
		{[]string{"scan", "--table", "t", "--via", "foo"}, 2, `--via "foo": want api or actor`},
		{[]string{"scan", "--table", "t", "--meta", "disk"}, 2, `--meta "disk": want nats or coordinator`},
		{[]string{"scan", "--table", "t", "--parallel", "2"}, 2, "--parallel 2 applies to --via actor"},
		{[]string{"scan", "--table", "t", "--via", "actor", "--api", "h:1"}, 2, "--api applies to --via api"},
		{[]string{"scan", "--table", "t", "--api", "h:1,nope"}, 2, `"nope" is not host:port`},
		{[]string{"ingest", "--table", "t"}, 2, "no input: give a FILE (- for stdin) or --generate ROWS"},
		{[]string{"ingest", "--table", "bad name", "--generate", "5"}, 2, "bad"},
		{[]string{"ingest", "--table", "t", "--generate", "5", "somefile"}, 2, `give FILE "somefile" or --generate 5, not both`},
		{[]string{"ingest", "--table", "t", "--generate", "-5"}, 2, "--generate -5: want a number of rows >= 1"},
		{[]string{"ingest", "--table", "t", "--generate", "0"}, 2, "--generate 0: want a number of rows >= 1"},
		{[]string{"ingest", "--table", "t", "a", "b"}, 2, `one FILE at most, got 2: ["a" "b"]`},
		{[]string{"ingest", "f", "--table", "t", "--generate", "5"}, 2, `give FILE "f" or --generate 5, not both`},
		{[]string{"ingest", "--table", "t", "--", "--generate"}, 1, "open --generate: no such file"},
		{[]string{"ingest", "--table", "t", "--splits", "0", "f"}, 2, "--splits 0: want 1..65536 tablets"},
		{[]string{"ingest", "--table", "t", "--block-size", "-1", "f"}, 2, "--block-size -1: want 1..524288 bytes"},
		{[]string{"ingest", "--table", "t", "--generate", "5", "--replicas", "6"}, 2, "--replicas"},
		{[]string{"route", "--table", "t"}, 2, "--row are required"},
		{[]string{"route", "--table", "t", "--row", "a", "--attempts", "busy,wat"}, 2, "--attempts"},
		{[]string{"scan", "--table", "t", "--hint", "novalue"}, 2, "key=value"},
		{[]string{"up", "--hosts", "0"}, 2, "--hosts"},
		{[]string{"demo", "--servers-per-host", "0"}, 2, "--hosts"},
		{[]string{"demo", "--rows", "0"}, 2, "--rows"},
		{[]string{"scan", "--nosuchflag"}, 2, "nosuchflag"},
	}
	for _, c := range cases {
		code, out, errOut := runCapture(c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("scanctl %v: exit %d, output %q %q; want exit %d mentioning %q", c.args, code, out, errOut, c.code, c.want)
		}
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := runCapture("help")
	if code != 0 || !strings.Contains(out, "ingest") || !strings.Contains(out, "route") {
		t.Fatalf("help: %d %q", code, out)
	}
}

// TestNoClusterIsAClearError: commands fail with exit 1 and a hint to
// start a cluster when nothing listens (a port nobody uses on loopback),
// naming the URL once.
func TestNoClusterIsAClearError(t *testing.T) {
	for _, args := range [][]string{{"tables"}, {"ingest", "--table", "t", "--generate", "5"}} {
		code, _, errOut := runCapture(append(args, "--nats", "nats://127.0.0.1:1", "--timeout", "5s")...)
		want := "scanctl " + args[0] + ": no NATS server answered at nats://127.0.0.1:1: is a cluster running? (start one with 'scanctl up'"
		if code != 1 || !strings.HasPrefix(errOut, want) || strings.Count(errOut, "\n") != 1 || strings.Count(errOut, "127.0.0.1:1") != 1 {
			t.Errorf("scanctl %s: exit %d, stderr %q; want exit 1 and one line starting %q", args[0], code, errOut, want)
		}
	}
}

// TestTimeoutWhileConnecting: a --timeout that runs out while connecting
// to a cluster that is up says so, without suggesting to start one.
func TestTimeoutWhileConnecting(t *testing.T) {
	sc := natsserver.DefaultServerConfig()
	sc.Port, sc.StoreDir = -1, t.TempDir()
	srv, err := natsserver.StartServer(sc)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, args := range [][]string{{"tables"}, {"ingest", "--table", "t", "--generate", "5"}} {
		code, _, errOut := runCapture(append(args, "--nats", srv.ClientURL(), "--timeout", "1ns")...)
		want := "scanctl " + args[0] + ": --timeout 1ns ran out while connecting to the cluster (NATS at " + srv.ClientURL() + ")\n"
		if code != 1 || errOut != want {
			t.Errorf("scanctl %s --timeout 1ns: exit %d, stderr %q; want exit 1 and %q", args[0], code, errOut, want)
		}
	}
}

// TestNATSError: each way of failing to reach NATS is one short line
// naming the URLs once; other errors pass unchanged.
func TestNATSError(t *testing.T) {
	urls := "nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224"
	g := &globals{nats: urls, timeout: 5 * time.Second}
	ctx := context.Background()
	wrap := func(err error) error {
		return fmt.Errorf("client: connect to NATS %s: bus: connect %s: %w", urls, urls, err)
	}
	other := errors.New("something else")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{wrap(fmt.Errorf("%w (nats: tls error: x509: certificate signed by unknown authority)", bus.ErrTLSRequired)),
			"NATS at " + urls + " requires TLS and a client certificate: pass --secrets DIR or set SCANPLANE_SECRETS"},
		{wrap(context.DeadlineExceeded), "--timeout 5s ran out while connecting to the cluster (NATS at " + urls + ")"},
		{wrap(nats.ErrNoServers), "no NATS server answered at " + urls + ": is a cluster running? (start one with 'scanctl up', or name it with --nats or $SCANPLANE_NATS)"},
		{wrap(errors.New("tls: bad certificate")), "NATS at " + urls + " refused the TLS handshake (tls: bad certificate): is --secrets a secrets directory of this cluster, its certificates current?"},
		{other, "something else"},
	} {
		err := natsError(ctx, g, tc.err)
		if err.Error() != tc.want || !errors.Is(err, errors.Unwrap(tc.err)) && tc.err != other {
			t.Errorf("natsError(%q) = %q, want %q (wrapping the cause)", tc.err, err, tc.want)
		}
	}
}

// TestCommandUsage: `scanctl help CMD` and `scanctl CMD --help` print the
// same help to stdout with exit 0: the command's usage line, what it
// does, and its flags, each with a one-word argument name and its default
// stated once.
func TestCommandUsage(t *testing.T) {
	for _, c := range commands {
		code, out, errOut := runCapture("help", c.name)
		if code != 0 || errOut != "" || !strings.HasPrefix(out, "usage: scanctl "+c.name) || !strings.Contains(out, c.help) {
			t.Errorf("scanctl help %s: exit %d, stderr %q, out:\n%s", c.name, code, errOut, out)
			continue
		}
		code, out2, _ := runCapture(c.name, "--help")
		if code != 0 || out2 != out {
			t.Errorf("scanctl %s --help: exit %d, out differs from scanctl help %s:\n%s", c.name, code, c.name, out2)
		}
		for _, p := range cliutil.UsageProblems(out) {
			t.Errorf("scanctl %s: %s", c.name, p)
		}
	}
	_, out, _ := runCapture("help", "status")
	for _, want := range []string{"\n  -nats URLS\n", "\n  -secrets DIR\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("scanctl help status does not show %q:\n%s", want, out)
		}
	}
}

// TestFlagErrors: a bad flag is one line naming it (with the nearest
// flag for a misspelt one) and a line pointing at the command's help,
// not the whole flag list; exit 2.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"scan", "--tabel", "demo"}, "scanctl scan: unknown flag --tabel (did you mean --table?)\nrun 'scanctl help scan'\n"},
		{[]string{"status", "--watch", "--interval", "soon"}, "scanctl status: invalid value \"soon\" for flag --interval: parse error\nrun 'scanctl help status'\n"},
		{[]string{"ingest", "--table"}, "scanctl ingest: --table needs a value\nrun 'scanctl help ingest'\n"},
		{[]string{"secrets", "init", "--dri", "x"}, "scanctl secrets: unknown flag --dri (did you mean --dir?)\nrun 'scanctl help secrets'\n"},
		{[]string{"sacn"}, "scanctl: unknown command \"sacn\" (did you mean scan?); run 'scanctl help'\n"},
		{[]string{"help", "nosuch"}, "scanctl: unknown command \"nosuch\"; run 'scanctl help'\n"},
	} {
		code, out, errOut := runCapture(tc.args...)
		if code != 2 || out != "" || errOut != tc.want {
			t.Errorf("scanctl %q: exit %d, out %q, stderr %q; want exit 2 and stderr %q", tc.args, code, out, errOut, tc.want)
		}
	}
}
