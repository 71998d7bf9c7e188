package deploytest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// repoRoot is the main module's directory, relative to this package's.
var repoRoot = filepath.Join("..", "..")

// bins is the directory every command of the main module is built into
// once per test run (binaries), removed by TestMain.
var bins struct {
	once sync.Once
	dir  string
	err  error
}

// commands are the main module's commands: ./cmd/NAME.
var commands = []string{"coordinator", "scanserver", "scanctl", "loadtest", "churnsoak"}

// TestMain fails the package's tests when a goroutine outlives them, and
// removes the binaries the tests built.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "deploytest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.dir = dir
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		// protoactor-go's dead-letter throttle (see e2e/main_leak_test.go).
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// binaries builds every command of the main module (the first call of a
// run; the others wait for it) and returns their directory.
func binaries(t testing.TB) string {
	t.Helper()
	bins.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		args := []string{"build", "-o", bins.dir + string(filepath.Separator)}
		for _, c := range commands {
			args = append(args, "./cmd/"+c)
		}
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			bins.err = fmt.Errorf("go build in %s: %v\n%s", repoRoot, err, out)
		}
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return bins.dir
}

// help is one command's --help output (a scanctl subcommand's when sub
// is not empty, e.g. "ingest" or "secrets init") and the flags it lists.
type help struct {
	text  string
	flags map[string]bool
}

var helps struct {
	sync.Mutex
	m map[string]help
}

// flagLine is a flag in Go's flag.PrintDefaults output: "  -name type".
var flagLine = regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9_.-]*)(?:\s|$)`)

// helpOf runs `BIN [SUB...] --help` (once per run) and returns its output
// and flags. A command that lists no flag fails t (its help format
// changed, or SUB is not a subcommand).
func helpOf(t testing.TB, bin, sub string) help {
	t.Helper()
	key := strings.TrimSpace(bin + " " + sub)
	helps.Lock()
	defer helps.Unlock()
	if h, ok := helps.m[key]; ok {
		return h
	}
	if !slices.Contains(commands, bin) {
		t.Fatalf("%s is not a command of the main module %v", bin, commands)
	}
	args := append(strings.Fields(sub), "--help")
	dir := binaries(t) // built before the command's own time starts
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(dir, bin), args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: %v", bin, strings.Join(args, " "), ctx.Err())
	}
	// --help exits 0 or 2 (flag.ErrHelp), as the command decides.
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 2) {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
	}
	h := help{text: string(out), flags: map[string]bool{"help": true, "h": true}}
	for _, m := range flagLine.FindAllStringSubmatch(h.text, -1) {
		h.flags[m[1]] = true
	}
	if len(h.flags) == 2 && !(bin == "scanctl" && (sub == "" || sub == "version")) {
		t.Fatalf("%s %s lists no flag:\n%s", bin, strings.Join(args, " "), out)
	}
	if helps.m == nil {
		helps.m = map[string]help{}
	}
	helps.m[key] = h
	return h
}

// scanctlCommands returns the subcommands `scanctl --help` lists, with
// secrets as "secrets init" (its only one).
func scanctlCommands(t testing.TB) []string {
	t.Helper()
	text := helpOf(t, "scanctl", "").text
	_, after, ok := strings.Cut(text, "\ncommands:\n")
	if !ok {
		t.Fatalf("scanctl --help has no commands: section:\n%s", text)
	}
	var subs []string
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z]+) `).FindAllStringSubmatch(after, -1) {
		if m[1] == "secrets" {
			m[1] = "secrets init"
		}
		subs = append(subs, m[1])
	}
	if len(subs) < 5 {
		t.Fatalf("scanctl --help lists the commands %v", subs)
	}
	return subs
}
