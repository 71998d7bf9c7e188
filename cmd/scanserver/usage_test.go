package main

import (
	"strings"
	"testing"

	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/scanserver"
)

// TestUsage: every flag renders with a one-word argument name and states
// its default once.
func TestUsage(t *testing.T) {
	var b strings.Builder
	cfg := scanserver.DefaultHostAgentConfig()
	cliutil.PrintHelp(&b, "scanserver [flags]", about, newFlagSet(&cfg, &options{}))
	for _, p := range cliutil.UsageProblems(b.String()) {
		t.Error(p)
	}
}
