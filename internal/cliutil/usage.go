package cliutil

import (
	"regexp"
	"strings"
)

// flagHeader is the first line flag.PrintDefaults prints for a flag:
// two spaces, the name, and the argument name if the flag takes one.
var flagHeader = regexp.MustCompile(`^  -([^ \t]+)(?: (.*))?$`)

// printedDefault is the "(default X)" flag.PrintDefaults appends to a
// flag's usage when its default is not the zero value.
var printedDefault = regexp.MustCompile(`\(default (?:"(?:[^"\\]|\\.)*"|[^()]*)\)\s*$`)

// wordDefault finds "default" as a word.
var wordDefault = regexp.MustCompile(`(?i)\bdefault\b`)

// argName is a well-formed argument name: one word, as flag.UnquoteUsage
// takes it from the usage's back-quoted word or the flag's type.
var argName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.,=\[\]|/-]*$`)

// UsageProblems checks the flag list flag.PrintDefaults printed (text)
// and returns one line per flag that renders badly: an argument name
// that is not one word (a back-quoted phrase in the usage string becomes
// the argument name, e.g. "-nats scanctl up") or is flag's generic
// "string" or "value" instead of what to give (URL, DIR), or a default
// stated twice
// (the usage says "default" and flag appends "(default X)" too). The commands' tests
// run it over every flag set.
func UsageProblems(text string) []string {
	var problems []string
	var name, block string
	flush := func() {
		usage := strings.TrimSpace(block)
		if loc := printedDefault.FindStringIndex(usage); name != "" && loc != nil && wordDefault.MatchString(usage[:loc[0]]) {
			problems = append(problems, "-"+name+": states its default twice: "+strings.Join(strings.Fields(usage), " "))
		}
	}
	for _, line := range strings.Split(text, "\n") {
		m := flagHeader.FindStringSubmatch(line)
		if m == nil {
			block += " " + line
			continue
		}
		flush()
		name, block = m[1], ""
		// A one-letter flag without an argument: the usage follows a tab.
		if n, usage, ok := strings.Cut(m[1], "\t"); ok {
			name, block = n, usage
			continue
		}
		switch {
		case m[2] == "string" || m[2] == "value":
			problems = append(problems, "-"+name+": argument name "+`"`+m[2]+`"`+" says nothing (back-quote a name in its usage, e.g. \"data `DIR`\")")
		case m[2] != "" && !argName.MatchString(m[2]):
			problems = append(problems, "-"+name+": argument name "+`"`+m[2]+`"`+" is not one word (a back-quoted phrase in its usage?)")
		}
	}
	flush()
	return problems
}
