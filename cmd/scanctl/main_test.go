package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

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
		{[]string{"ingest", "--table", "t"}, 2, "exactly one of FILE"},
		{[]string{"ingest", "--table", "bad name", "--generate", "5"}, 2, "bad"},
		{[]string{"ingest", "--table", "t", "--generate", "5", "somefile"}, 2, "exactly one"},
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

// TestNoClusterIsAClearError: commands fail with exit 1 and a hint when
// nothing listens (a port nobody uses on loopback).
func TestNoClusterIsAClearError(t *testing.T) {
	code, _, errOut := runCapture("tables", "--nats", "nats://127.0.0.1:1", "--timeout", "5s")
	if code != 1 || !strings.Contains(errOut, "scanctl tables:") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
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
