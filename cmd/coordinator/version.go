package main

import "runtime/debug"

// version is the build version, set at link time with
// -ldflags "-X main.version=v1.2.3"; empty = the module version Go
// recorded in the binary (a tagged `go install ...@v1.2.3`, or a
// pseudo-version from the VCS stamp), else "devel".
var version string

// buildVersion returns the version /status reports.
func buildVersion() string {
	return versionOf(version, debug.ReadBuildInfo)
}

// versionOf is buildVersion with its inputs injected (tests).
func versionOf(ldflags string, read func() (*debug.BuildInfo, bool)) string {
	if ldflags != "" {
		return ldflags
	}
	if bi, ok := read(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
