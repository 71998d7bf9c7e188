// Package messages holds scanplane's wire messages: the .proto files, the
// generated Go code (committed, so a build needs no protoc) and the wire
// error-code enum. It imports nothing of ours. Generated types are plain
// protobuf messages: safe to read concurrently, not to mutate concurrently.
package messages

//go:generate protoc --go_out=. --go_opt=paths=source_relative scanplane.proto
