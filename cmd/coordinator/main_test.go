package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(good, []byte(`[{"isDefault":true,"policy":"accumulo-host","attemptPlans":[{"servers":"3","busyTimeout":"33ms"}]}]`), 0o644)
	os.WriteFile(bad, []byte(`[{"isDefault":true,"attemptPlans":[{"servers":"3","busyTimeout":"1.5s"}]}]`), 0o644)
	if code := run([]string{"--profiles", good, "--check-config"}); code != 0 {
		t.Fatalf("good config: exit %d", code)
	}
	if code := run([]string{"--profiles", bad, "--check-config"}); code != 2 {
		t.Fatalf("bad config: exit %d", code)
	}
	if code := run([]string{"--profiles", filepath.Join(dir, "missing.json"), "--check-config"}); code != 2 {
		t.Fatalf("missing file: exit %d", code)
	}
	if code := run([]string{"--check-config"}); code != 0 {
		t.Fatalf("default profiles: exit %d", code)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--nosuch"},
		{"--log-level", "loud", "--check-config"},
		{"extra-arg"},
		{"--heartbeat-misses", "0", "--nats", "nats://127.0.0.1:1"},
		{"--listen", "nope", "--nats", "nats://127.0.0.1:1"},
		{"--nats-listen", "nope"},
	} {
		if code := run(args); code != 2 {
			t.Errorf("coordinator %v: exit %d, want 2", args, code)
		}
	}
}

// TestCheckConfigWarnings: an Accumulo document with single quotes and an
// unknown field passes --check-config, which prints a warning naming the
// field.
func TestCheckConfigWarnings(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lenient.json")
	os.WriteFile(path, []byte(`[{'isDefault':'true','color':'red','attemptPlans':[{'servers':3,'busyTimeout':'33ms','salt':7}]}]`), 0o644)
	out, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = out
	code := run([]string{"--profiles", path, "--check-config"})
	os.Stdout = saved
	out.Close()
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	text, _ := os.ReadFile(out.Name())
	if !strings.Contains(string(text), "warning: ") || !strings.Contains(string(text), `field "color"`) {
		t.Errorf("--check-config output lacks the warning for \"color\":\n%s", text)
	}
	if !strings.Contains(string(text), "plans=[3/33ms/7]") {
		t.Errorf("--check-config output lacks the plan with salt 7:\n%s", text)
	}
}
