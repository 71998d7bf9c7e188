package readyfile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ready.json")
	want := Ready{NATS: "nats://x", Servers: []string{"a/0", "a/1"}, PID: 7}
	if err := Write(p, want); err != nil {
		t.Fatal(err)
	}
	var r Ready
	data, _ := os.ReadFile(p)
	if err := json.Unmarshal(data, &r); err != nil || r.NATS != want.NATS || r.PID != want.PID || !slices.Equal(r.Servers, want.Servers) {
		t.Fatalf("%s %v", data, err)
	}
	if err := Write("", r); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("left %d files in the directory, want only ready.json", len(ents))
	}
}
