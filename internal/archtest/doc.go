// Package archtest checks scanplane's architecture rules (docs/architecture.md, packages):
// which of our packages may import which, and that the pure packages stay
// free of actors, NATS and clocks. It has no non-test code.
package archtest
