package main

import "testing"

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--nosuch"},
		{"--servers", "0"},
		{"--workers", "0"},
		{"--queue", "-1"},
		{"--host", "bad host"},
		{"--cache-size", "lots"},
		{"--fault-pause", "150ms"},
		{"--fault-pause", "1s/500ms"},
		{"--fault-slow", "0.5"},
		{"--fault-server", "5"},
		{"--fault-lie", "forge,truth"},
		{"--heartbeat", "1ms"},
		{"--listen", "nope"},
		{"--listen", "0.0.0.0:0"}, // not loopback, no --insecure
		{"--http", ":0"},
		{"--log-level", "loud"},
		{"--log-format", "xml"},
		{"--http", "nope"},
		{"extra"},
	} {
		if code := run(args); code != 2 {
			t.Errorf("scanserver %v: exit %d, want 2", args, code)
		}
	}
}
