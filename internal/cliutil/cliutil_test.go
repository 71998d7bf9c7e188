package cliutil

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestParseBytes(t *testing.T) {
	good := map[string]int64{"0": 0, "1048576": 1 << 20, "64KiB": 64 << 10, "256MiB": 256 << 20, "1GiB": 1 << 30, "2GB": 2 << 30, "3M": 3 << 20, "5B": 5, "1 MiB": 1 << 20}
	for s, want := range good {
		if got, err := ParseBytes(s); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "lots", "-1", "1.5GiB", "1XB", "MiB"} {
		if _, err := ParseBytes(s); err == nil {
			t.Errorf("ParseBytes(%q) accepted", s)
		}
	}
}

func TestLogger(t *testing.T) {
	if _, err := Logger(os.Stderr, "debug"); err != nil {
		t.Fatal(err)
	}
	if _, err := Logger(os.Stderr, "loud"); err == nil {
		t.Fatal("bad level accepted")
	}
}

func TestWriteReadyFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ready.json")
	if err := WriteReadyFile(p, Ready{NATS: "nats://x", PID: 7}); err != nil {
		t.Fatal(err)
	}
	var r Ready
	data, _ := os.ReadFile(p)
	if err := json.Unmarshal(data, &r); err != nil || r.NATS != "nats://x" || r.PID != 7 {
		t.Fatalf("%s %v", data, err)
	}
	if err := WriteReadyFile("", r); err != nil {
		t.Fatal(err)
	}
}
