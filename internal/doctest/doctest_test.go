package doctest

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"html"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's top directory, from this package's.
const root = "../.."

// maxReadmeLines bounds README.md: a guide, with the reference in docs/.
const maxReadmeLines = 200

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// linkedDocs are the files whose relative links must resolve.
func linkedDocs(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md", "CONTRIBUTING.md", "MEASUREMENTS.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, rel)
	}
	if len(files) < 8 {
		t.Fatalf("only %d documentation files: %v", len(files), files)
	}
	return files
}

// line is one line of a Markdown file outside fenced code blocks, with
// its inline code spans blanked.
type line struct {
	n    int
	text string
}

var codeSpan = regexp.MustCompile("`+[^`]*`+")

// prose returns the lines of md outside fenced code blocks, inline code
// blanked.
func prose(md string) []line {
	var out []line
	fenced := false
	for i, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line{i + 1, codeSpan.ReplaceAllString(l, "``")})
		}
	}
	return out
}

// fences returns the fenced code blocks of md whose info string is lang,
// each as its lines, with the line number of its first line.
func fences(md, lang string) [][]line {
	var blocks [][]line
	var cur []line
	in, want := false, false
	for i, l := range strings.Split(md, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "```") {
			if in {
				if want {
					blocks = append(blocks, cur)
				}
				in, cur = false, nil
				continue
			}
			in, want = true, strings.TrimPrefix(t, "```") == lang
			continue
		}
		if in && want {
			cur = append(cur, line{i + 1, l})
		}
	}
	return blocks
}

// slug is the anchor GitHub gives a heading's text: lower case, HTML
// entities decoded, everything but letters, digits, spaces, hyphens and
// underscores dropped, spaces turned into hyphens.
func slug(heading string) string {
	h := html.UnescapeString(strings.ReplaceAll(heading, "`", ""))
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// anchors returns the anchors of md's headings, with GitHub's -1, -2
// suffixes for repeated ones.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(l, "#"))
		s := slug(text)
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// brokenLinks returns a line for every relative link of the Markdown file
// at rel (text md) that names no existing file, or an anchor that is not
// a heading of the Markdown file it names. readFile reads a file by its
// path relative to the repository (nil: from disk).
func brokenLinks(rel, md string, exists func(string) bool, readFile func(string) (string, bool)) []string {
	var bad []string
	for _, l := range prose(md) {
		for _, m := range mdLink.FindAllStringSubmatch(l.text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := rel
			if path != "" {
				file = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(rel), path)))
				if strings.HasPrefix(file, "../") || !exists(file) {
					bad = append(bad, fmt.Sprintf("%s:%d: link %q: no file %s", rel, l.n, target, file))
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(file, ".md") {
				continue
			}
			text, ok := readFile(file)
			if !ok {
				bad = append(bad, fmt.Sprintf("%s:%d: link %q: cannot read %s", rel, l.n, target, file))
				continue
			}
			if !anchors(text)[anchor] {
				bad = append(bad, fmt.Sprintf("%s:%d: link %q: %s has no heading #%s", rel, l.n, target, file, anchor))
			}
		}
	}
	return bad
}

func onDisk(rel string) bool {
	_, err := os.Stat(filepath.Join(root, rel))
	return err == nil
}

func readDisk(rel string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(root, rel))
	return string(b), err == nil
}

// TestReadmeIsAGuide: README.md has at most maxReadmeLines lines.
func TestReadmeIsAGuide(t *testing.T) {
	n := strings.Count(read(t, "README.md"), "\n")
	if n > maxReadmeLines {
		t.Errorf("README.md has %d lines; at most %d (the reference belongs in docs/)", n, maxReadmeLines)
	}
}

// TestRelativeLinksResolve: every relative link of the documentation
// names an existing file, and every #anchor a heading of its file. The
// check must catch a broken path and a broken anchor.
func TestRelativeLinksResolve(t *testing.T) {
	fake := map[string]string{
		"README.md":     "# T\n\n## A cluster to play with\n",
		"docs/a.md":     "# A\n\n## Keep-alive: `ScanProgress`\n\n## clickhouse-&lt;mode&gt;\n\n## Same\n\n## Same\n",
		"deploy/README": "",
	}
	fexists := func(p string) bool { _, ok := fake[p]; return ok }
	fread := func(p string) (string, bool) { s, ok := fake[p]; return s, ok }
	for _, c := range []struct {
		md  string
		bad bool
	}{
		{"[x](../README.md#a-cluster-to-play-with)", false},
		{"[x](#keep-alive-scanprogress) [y](#clickhouse-mode) [z](#same-1)", false},
		{"[x](https://example.com/none) `[y](nowhere.md)`", false},
		{"```\n[y](nowhere.md)\n```", false},
		{"[x](../deploy/README)", false},
		{"[x](nowhere.md)", true},
		{"[x](../README.md#quick-start)", true},
		{"[x](#same-2)", true},
		{"[x](../../outside.md)", true},
	} {
		got := brokenLinks("docs/a.md", fake["docs/a.md"]+"\n"+c.md+"\n", fexists, fread)
		if (len(got) > 0) != c.bad {
			t.Errorf("links of %q: got %v, want broken=%v", c.md, got, c.bad)
		}
	}

	for _, rel := range linkedDocs(t) {
		for _, b := range brokenLinks(rel, read(t, rel), onDisk, readDisk) {
			t.Error(b)
		}
	}
}

// diary are phrases of history and lab notes: the README and docs/ say
// what the system does; history lives in git, figures in MEASUREMENTS.md.
var diary = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\bmeasured at\b`),
	regexp.MustCompile(`(?i)\bseen in CI\b`),
	regexp.MustCompile(`(?i)\bissue [0-9]+`),
	regexp.MustCompile(`(?i)\bbefore the fix\b`),
}

func diaryPhrases(rel, md string) []string {
	var found []string
	for i, l := range strings.Split(md, "\n") {
		for _, re := range diary {
			if m := re.FindString(l); m != "" {
				found = append(found, fmt.Sprintf("%s:%d: %q in %q", rel, i+1, m, strings.TrimSpace(l)))
			}
		}
	}
	return found
}

// TestNoDiaryInDocs: README.md and docs/*.md have no phrase of history
// (the patterns of diary).
func TestNoDiaryInDocs(t *testing.T) {
	for _, bad := range []string{"latency measured at 8b01a61", "Seen in CI twice", "since issue 11", "Before the fix it hung"} {
		if len(diaryPhrases("x", bad)) == 0 {
			t.Errorf("the check finds nothing in %q", bad)
		}
	}
	if f := diaryPhrases("x", "a tissue 3 layers thick; the lease is renewed"); len(f) > 0 {
		t.Errorf("the check refuses a plain sentence: %v", f)
	}
	for _, rel := range linkedDocs(t) {
		if rel == "MEASUREMENTS.md" || rel == "CONTRIBUTING.md" {
			continue
		}
		for _, f := range diaryPhrases(rel, read(t, rel)) {
			t.Error(f)
		}
	}
}

// scanctlCommands returns the subcommands of cmd/scanctl: the names in
// its commands table (a composite literal of {name, usage, help, run}).
func scanctlCommands(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(root, "cmd", "scanctl", "main.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Lhs) != 1 || len(as.Rhs) != 1 {
			return true
		}
		if id, ok := as.Lhs[0].(*ast.Ident); !ok || id.Name != "commands" {
			return true
		}
		lit, ok := as.Rhs[0].(*ast.CompositeLit)
		if !ok {
			return true
		}
		for _, e := range lit.Elts {
			cl, ok := e.(*ast.CompositeLit)
			if !ok || len(cl.Elts) == 0 {
				continue
			}
			if bl, ok := cl.Elts[0].(*ast.BasicLit); ok && bl.Kind == token.STRING {
				if s, err := strconv.Unquote(bl.Value); err == nil {
					names = append(names, s)
				}
			}
		}
		return false
	})
	if len(names) < 5 {
		t.Fatalf("found only %d scanctl commands in cmd/scanctl/main.go: %v", len(names), names)
	}
	return names
}

// binaries returns the programs under cmd/.
func binaries(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// makeTargets returns the Makefile's targets.
func makeTargets(t *testing.T) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(read(t, "Makefile")))
	target := regexp.MustCompile(`^([a-z][a-z0-9_-]*):`)
	for sc.Scan() {
		if m := target.FindStringSubmatch(sc.Text()); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// tools are the commands a shell block may run besides the programs of
// cmd/: the Go tool, make, and the shell's own.
var tools = []string{"go", "make", "cd", "export", "kill", "curl", "head", "grep", "echo"}

var cmdSep = regexp.MustCompile(`&&|\|\||[;|()]`)

// joinContinued joins each line that ends in a backslash with the next,
// keeping the first line's number.
func joinContinued(block []line) []line {
	var out []line
	cont := false
	for _, l := range block {
		t := strings.TrimSpace(l.text)
		next := strings.HasSuffix(t, "\\")
		t = strings.TrimSuffix(t, "\\")
		if cont {
			out[len(out)-1].text += " " + t
		} else {
			out = append(out, line{l.n, t})
		}
		cont = next
	}
	return out
}

// badCommands returns a line for every command of the sh blocks of md
// that names a program, scanctl subcommand, cmd/ directory or make target
// that does not exist.
func badCommands(rel, md string, bins, subs, targets []string) []string {
	var bad []string
	for _, block := range fences(md, "sh") {
		for _, l := range joinContinued(block) {
			text, _, _ := strings.Cut(l.text, "#")
			for _, c := range cmdSep.Split(text, -1) {
				w := strings.Fields(c)
				for len(w) > 0 && strings.Contains(w[0], "=") {
					w = w[1:] // VAR=value before a command
				}
				if len(w) == 0 {
					continue
				}
				prog, args := w[0], w[1:]
				if prog == "go" && len(args) >= 2 && args[0] == "run" && strings.HasPrefix(args[1], "./cmd/") {
					prog, args = strings.TrimPrefix(args[1], "./cmd/"), args[2:]
				}
				where := fmt.Sprintf("%s:%d: %q", rel, l.n, strings.TrimSpace(c))
				switch {
				case slices.Contains(tools, prog):
				case !slices.Contains(bins, prog):
					bad = append(bad, fmt.Sprintf("%s: no program %s (cmd/ has %v)", where, prog, bins))
					continue
				}
				for _, a := range args {
					if p, ok := strings.CutPrefix(a, "./cmd/"); ok && p != "..." && !slices.Contains(bins, strings.TrimSuffix(p, "/...")) {
						bad = append(bad, fmt.Sprintf("%s: no directory cmd/%s", where, p))
					}
				}
				if prog == "make" {
					for _, a := range args {
						if !strings.HasPrefix(a, "-") && !slices.Contains(targets, a) {
							bad = append(bad, fmt.Sprintf("%s: no make target %s", where, a))
						}
					}
				}
				if prog == "scanctl" {
					if len(args) == 0 || strings.HasPrefix(args[0], "-") || !slices.Contains(subs, args[0]) {
						bad = append(bad, fmt.Sprintf("%s: not a scanctl command (%v)", where, subs))
					}
				}
			}
		}
	}
	return bad
}

// TestReadmeCommandsExist: every command in the README's sh blocks names
// a program of cmd/ (or go, make, cd...), and every scanctl command one
// that cmd/scanctl has. The check must catch a missing program, a
// missing subcommand and a missing make target.
func TestReadmeCommandsExist(t *testing.T) {
	bins, subs, targets := binaries(t), scanctlCommands(t), makeTargets(t)
	for _, b := range []string{"scanctl", "coordinator", "scanserver"} {
		if !slices.Contains(bins, b) {
			t.Fatalf("cmd/ has no %s: %v", b, bins)
		}
	}
	for _, c := range []struct {
		sh  string
		bad bool
	}{
		{"go run ./cmd/scanctl demo     # the main job\ngo test -race ./...\ngo install ./cmd/...", false},
		{"scanctl up --port-base 14222   # comment\n(cd deploy && go test ./...)\nmake test", false},
		{"scanserver --nats n \\\n    --listen 0.0.0.0:8100 --insecure", false},
		{"scanctl scan \\\n  --table t\nscanctl \\\n  --table t", true},
		{"SCANPLANE_NATS=x scanctl scan --table t | head", false},
		{"scanctl serve --table t", true},
		{"go run ./cmd/scanctl launch", true},
		{"scanplane-ctl up", true},
		{"go run ./cmd/nothing", true},
		{"make everything", true},
		{"scanctl --table t", true},
	} {
		got := badCommands("x", "```sh\n"+c.sh+"\n```\n", bins, subs, targets)
		if (len(got) > 0) != c.bad {
			t.Errorf("commands of %q: got %v, want bad=%v", c.sh, got, c.bad)
		}
	}
	readme := read(t, "README.md")
	if len(fences(readme, "sh")) < 2 {
		t.Fatalf("README.md has %d sh blocks; the quick start and the cluster to play with need them", len(fences(readme, "sh")))
	}
	for _, b := range badCommands("README.md", readme, bins, subs, targets) {
		t.Error(b)
	}
}
