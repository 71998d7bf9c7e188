// Package scanplanev1 is the generated Go code of scanplane's public API,
// version 1 (scan.proto, package scanplane.v1): its messages here, the
// Connect client and handler in scanplanev1connect. The generated files
// are committed, so a build needs no protoc. Messages are plain protobuf
// messages: safe to read concurrently, not to mutate concurrently.
package scanplanev1

//go:generate protoc -I../.. --go_out=../.. --go_opt=paths=source_relative --connect-go_out=../.. --connect-go_opt=paths=source_relative scanplane/v1/scan.proto
