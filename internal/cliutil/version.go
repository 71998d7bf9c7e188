package cliutil

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Build describes the running binary, as --version, `scanctl version` and
// the scanplane_build_info metric report it.
type Build struct {
	// Version is the version set at link time (-ldflags "-X
	// main.version=v1.2.3"), else the module version Go recorded (a
	// tagged `go install ...@v1.2.3`, or a pseudo-version), else "devel".
	Version string
	// Commit is the VCS revision the binary was built from, with "-dirty"
	// appended when the work tree had changes; "unknown" when the build
	// recorded none (go run, go test, -buildvcs=false).
	Commit string
	// GoVersion is the Go toolchain that built the binary (go1.26.1).
	GoVersion string
}

// Version returns the running binary's Build; linked is the version set
// at link time ("" for none).
func Version(linked string) Build { return VersionOf(linked, debug.ReadBuildInfo) }

// VersionOf is Version with the build information's source injected
// (tests).
func VersionOf(linked string, read func() (*debug.BuildInfo, bool)) Build {
	b := Build{Version: linked, Commit: "unknown", GoVersion: runtime.Version()}
	bi, ok := read()
	if !ok {
		if b.Version == "" {
			b.Version = "devel"
		}
		return b
	}
	if bi.GoVersion != "" {
		b.GoVersion = bi.GoVersion
	}
	if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		b.Version = bi.Main.Version
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		b.Commit = rev
		if modified == "true" {
			b.Commit += "-dirty"
		}
	}
	return b
}

// String is the line --version prints after the program's name:
// "v1.2.3 (commit 0123abcd...-dirty, go1.26.1)".
func (b Build) String() string {
	return fmt.Sprintf("%s (commit %s, %s)", b.Version, b.Commit, b.GoVersion)
}

// VersionUsage is the usage text of a --version flag.
const VersionUsage = "print the version, commit and Go version, and exit"

// BuildInfoCollector is the scanplane_build_info gauge: always 1, with
// the binary's version, commit and Go version as labels (the Prometheus
// convention for joining build information onto other series).
func BuildInfoCollector(b Build) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "scanplane_build_info",
		Help:        "Always 1; the labels say which build this process runs.",
		ConstLabels: prometheus.Labels{"version": b.Version, "commit": b.Commit, "goversion": b.GoVersion},
	})
	g.Set(1)
	return g
}
