package cliutil

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// ParseFlags parses args with fs and prints nothing itself (fs's output
// and Usage are replaced): -h or --help returns flag.ErrHelp for the
// caller to print help where it belongs (PrintHelp, on stdout); any
// other bad flag returns a one-line error naming it, with the closest
// defined flag for an unknown one ("unknown flag --tabel (did you mean
// --table?)").
func ParseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return flagError(fs, err)
}

var (
	undefinedFlag = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	missingValue  = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
	singleDash    = regexp.MustCompile(`(for (?:flag )?)-([A-Za-z0-9][\w-]*)`)
)

// flagError rewrites an error of flag.FlagSet.Parse in the --name
// spelling the commands document.
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if m := undefinedFlag.FindStringSubmatch(msg); m != nil {
		if s := closestFlag(fs, m[1]); s != "" {
			return fmt.Errorf("unknown flag --%s (did you mean --%s?)", m[1], s)
		}
		return fmt.Errorf("unknown flag --%s", m[1])
	}
	if m := missingValue.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("--%s needs a value", m[1])
	}
	return errors.New(singleDash.ReplaceAllString(msg, "$1--$2"))
}

// closestFlag returns the defined flag nearest to name (edit distance at
// most 2, or a prefix of it), "" if none is.
func closestFlag(fs *flag.FlagSet, name string) string {
	best, bestD := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(name, f.Name)
		if strings.HasPrefix(f.Name, name) && len(name) >= 3 {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = f.Name, d
		}
	})
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// PrintHelp writes a command's help to w: "usage: " and the usage line,
// the description (if any), and fs's flags as flag.PrintDefaults prints
// them.
func PrintHelp(w io.Writer, usageLine, about string, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s\n", usageLine)
	if about != "" {
		fmt.Fprintf(w, "\n%s\n", about)
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprintln(w, "\nflags:")
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}
