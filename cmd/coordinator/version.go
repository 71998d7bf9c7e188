package main

import "github.com/scanplane/scanplane/internal/cliutil"

// version is the build version, set at link time with
// -ldflags "-X main.version=v1.2.3"; empty = what cliutil.Version finds.
var version string

// buildVersion returns the version /status reports.
func buildVersion() string { return cliutil.Version(version).Version }
