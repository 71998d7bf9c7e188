package deploytest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// stalePhrases are sentences that say security is missing or still to
// come. scanplane has TLS, authentication and per-role permissions
// (--secrets, nats-server-secure.conf), so no doc or --help may say
// otherwise; what is insecure (a plain-text listener, --insecure) is
// said without them ("plain text", "without TLS").
var stalePhrases = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\bno (tls|authentication)\b`),
	regexp.MustCompile(`(?i)\b(tls|authentication|auth)\b[^.;]*\b(yet|not implemented|to come|is planned|once .* lands?|until .* lands?)\b`),
	regexp.MustCompile(`(?i)\bnot\b[^.;]*\b(tls|authentication)\b[^.;]*\byet\b`),
	regexp.MustCompile(`(?i)\buntil (tls|authentication)\b`),
	regexp.MustCompile(`(?i)\bdoes not exist yet\b`),
}

// prose joins a text's lines into one, without comment markers and
// indentation, so that a sentence wrapped over lines (or over comment
// lines) is matched whole.
func prose(text string) string {
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		l = strings.TrimLeft(l, "#/ \t")
		b.WriteString(l)
		b.WriteByte(' ')
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// stale returns the stale sentences of text.
func stale(text string) []string {
	p := prose(text)
	var found []string
	for _, re := range stalePhrases {
		for _, loc := range re.FindAllStringIndex(p, -1) {
			from, to := max(0, loc[0]-40), min(len(p), loc[1]+20)
			found = append(found, fmt.Sprintf("%q in …%s…", p[loc[0]:loc[1]], p[from:to]))
		}
	}
	return found
}

// docFiles are README.md, docs/*.md and the text files under deploy/
// (not this module's Go files and module files).
func docFiles(t testing.TB) []string {
	t.Helper()
	files := []string{filepath.Join(repoRoot, "README.md")}
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, docs...)
	err = filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		switch filepath.Ext(p) {
		case ".go", ".sum", ".mod", ".png":
			return nil
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestNoStaleSecuritySentences: no doc (README.md, docs/, deploy/) and
// no command's --help (every command, every scanctl subcommand) says
// that TLS or authentication does not exist yet.
func TestNoStaleSecuritySentences(t *testing.T) {
	for _, bad := range []string{
		"# (0.0.0.0 here) without it. scanplane has no TLS or authentication\n# yet (README \"Security\")",
		"What does not exist yet (issue 9): TLS and users in the config.",
		"--secrets secures the actor remote; NATS has no TLS yet",
		"and TLS is not implemented yet for --http",
		"use it only on a private network until TLS and NATS accounts land",
	} {
		if len(stale(bad)) == 0 {
			t.Errorf("the check finds nothing in %q", bad)
		}
	}
	for _, good := range []string{
		"--insecure: listening on a network address without TLS or authentication",
		"plain text and unauthenticated: run this unit only on a private network you trust",
		"nats-server-secure.conf is the same cluster with TLS, client certificates and per-role permissions.",
	} {
		if s := stale(good); len(s) > 0 {
			t.Errorf("the check refuses a current sentence: %v", s)
		}
	}

	files := docFiles(t)
	if len(files) < 10 {
		t.Fatalf("only %d doc files: %v", len(files), files)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stale(string(data)) {
			t.Errorf("%s: %s", f, s)
		}
	}
	var helps []string
	for _, c := range commands {
		helps = append(helps, c)
	}
	for _, sub := range scanctlCommands(t) {
		helps = append(helps, "scanctl "+sub)
	}
	for _, h := range helps {
		bin, sub, _ := strings.Cut(h, " ")
		for _, s := range stale(helpOf(t, bin, sub).text) {
			t.Errorf("%s --help: %s", h, s)
		}
	}
	t.Logf("%d doc files and %d --help outputs checked", len(files), len(helps))
}
