package cliutil

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestUsageProblems(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("nats", "nats://a", "NATS URLs (default: the nodes `scanctl up` starts)")
	fs.String("table", "", "table name")
	fs.String("data", "./data", "data `DIR`")
	fs.String("zone", "default", "availability `ZONE`")
	fs.String("mode", "quick", "`MODE`: quick, or full (the default)")
	fs.Duration("timeout", time.Second, "give up after this long")
	fs.Bool("v", false, "verbose")
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	got := strings.Join(UsageProblems(b.String()), "\n")
	for _, want := range []string{`-nats: argument name "scanctl up" is not one word`, `-table: argument name "string" says nothing`, `-mode: states its default twice`} {
		if !strings.Contains(got, want) {
			t.Errorf("problems do not include %q:\n%s", want, got)
		}
	}
	for _, ok := range []string{"-data", "-zone", "-timeout", "-v:"} {
		if strings.Contains(got, ok) {
			t.Errorf("problems name %s, which renders well:\n%s", ok, got)
		}
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tabel", "x"}, "unknown flag --tabel (did you mean --table?)"},
		{[]string{"-tab", "x"}, "unknown flag --tab (did you mean --table?)"},
		{[]string{"--frobnicate"}, "unknown flag --frobnicate"},
		{[]string{"--table"}, "--table needs a value"},
		{[]string{"--timeout", "soon"}, `invalid value "soon" for flag --timeout: parse error`},
		{[]string{"--count=maybe"}, `invalid boolean value "maybe" for --count: parse error`},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.String("table", "", "table `NAME`")
		fs.Duration("timeout", time.Second, "give up after this long")
		fs.Bool("count", false, "count")
		var out strings.Builder
		fs.SetOutput(&out)
		err := ParseFlags(fs, tc.args)
		if err == nil || err.Error() != tc.want || out.Len() > 0 {
			t.Errorf("ParseFlags(%q) = %v, printed %q; want %q and nothing printed", tc.args, err, out.String(), tc.want)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("table", "", "table `NAME`")
	if err := ParseFlags(fs, []string{"--help"}); err != flag.ErrHelp {
		t.Errorf("--help: %v, want flag.ErrHelp", err)
	}
	var help strings.Builder
	PrintHelp(&help, "t --table NAME", "does t", fs)
	if want := "usage: t --table NAME\n\ndoes t\n\nflags:\n  -table NAME\n    \ttable NAME\n"; help.String() != want {
		t.Errorf("PrintHelp:\n%q\nwant\n%q", help.String(), want)
	}
}
