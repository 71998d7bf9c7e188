package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/scanplane/scanplane/internal/cliutil"
)

// TestUsage: --help prints to stdout, exit 0, every flag with a one-word
// argument name and its default once; a bad flag is one line naming it
// and a line pointing at --help.
func TestUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, &out, &errb); code != 0 || errb.Len() > 0 || out.Len() == 0 {
		t.Fatalf("--help: exit %d, stderr %q, stdout %d bytes", code, errb.String(), out.Len())
	}
	for _, p := range cliutil.UsageProblems(out.String()) {
		t.Error(p)
	}
	out.Reset()
	want := "churnsoak: unknown flag --durration (did you mean --duration?)\nrun 'churnsoak --help'\n"
	if code := run(context.Background(), []string{"--durration", "1m"}, &out, &errb); code != 2 || errb.String() != want {
		t.Errorf("--durration: exit %d, stderr %q; want 2 and %q", code, errb.String(), want)
	}
}
