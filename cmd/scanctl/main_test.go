package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
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
