# Convenience targets; every one is a plain go command underneath.
.PHONY: demo test loadtest build proto

demo:      ## the main job: local cluster + sample data + verified scans + status
	go run ./cmd/scanctl demo

test:      ## the whole test suite of both modules (main and deploy/), as CI runs it
	.ci/run

loadtest:  ## policy comparison under faults (several minutes; docs/loadtest.md)
	go run ./cmd/loadtest

build:     ## binaries into ./bin
	go build -o bin/ ./cmd/...

proto:     ## regenerate messages/ (needs protoc and protoc-gen-go)
	go generate ./messages
