// Package doctest holds tests of the repository's documentation: the
// README stays a short guide, every relative link in README.md,
// CONTRIBUTING.md, MEASUREMENTS.md and docs/*.md resolves to a file (and
// an anchor to a heading), the README and docs/ state behaviour without
// history, and the README's shell blocks name only commands that exist.
// It has no code of its own.
package doctest
