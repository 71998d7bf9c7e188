package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/scanplane/scanplane/internal/cliutil"
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
		{"--log-format", "xml", "--check-config"},
		{"extra-arg"},
		{"--heartbeat-misses", "0", "--nats", "nats://127.0.0.1:1"},
		{"--listen", "nope", "--nats", "nats://127.0.0.1:1"},
		{"--nats-listen", "nope"},
		{"--replicas", "0"},
		{"--replicas", "6"},
		{"--nats-cluster", "nope"},
		{"--nats-cluster", "127.0.0.1:70000", "--nats-routes", "nats-route://127.0.0.1:6222"},
		{"--nats-cluster", "127.0.0.1:0"}, // no routes
		{"--nats-cluster", "127.0.0.1:0", "--nats-routes", "http://127.0.0.1:6222"},
		{"--nats-cluster", "127.0.0.1:0", "--nats-routes", "nats-route://127.0.0.1"},
		{"--nats-cluster", "127.0.0.1:0", "--nats-routes", "nats-route://127.0.0.1:6222", "--nats-listen", "127.0.0.1:0"}, // random port, no name
		{"--nats-cluster", "127.0.0.1:0", "--nats-routes", "nats-route://127.0.0.1:6222", "--nats-name", "two words"},
		{"--nats-routes", "nats-route://127.0.0.1:6222"},
		{"--nats", "nats://127.0.0.1:1", "--nats-cluster", "127.0.0.1:0"},
		{"--nats", "nats://127.0.0.1:1", "--nats-name", "n1"},
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

// TestNATSSetup: the embedded server's cluster settings, the default
// replica count, and whether the nodes keep the blocks' direct gets on
// their own replica (only when every node holds one) follow the flags.
func TestNATSSetup(t *testing.T) {
	base := options{natsListen: "127.0.0.1:4222", data: "d"}
	three := "nats-route://127.0.0.1:6222,nats-route://127.0.0.1:6223,nats-route://127.0.0.1:6224"
	for _, tc := range []struct {
		name     string
		mod      func(*options)
		set      bool
		replicas int
		cluster  bool
		local    bool
	}{
		{"standalone", func(*options) {}, false, 1, false, false},
		{"standalone, --replicas 2", func(o *options) { o.replicas = 2 }, true, 2, false, false},
		{"external", func(o *options) { o.natsURL = "nats://a:4222,nats://b:4222" }, false, 1, false, false},
		{"external, --replicas 3", func(o *options) { o.natsURL = "nats://a:4222"; o.replicas = 3 }, true, 3, false, false},
		{"three nodes, all routes", func(o *options) { o.natsCluster, o.natsRoutes = "127.0.0.1:6222", three }, false, 3, true, true},
		{"three nodes, the other two", func(o *options) {
			o.natsCluster, o.natsRoutes = "127.0.0.1:6222", "nats-route://127.0.0.1:6223, nats-route://127.0.0.1:6224"
		}, false, 3, true, true},
		{"two nodes", func(o *options) {
			o.natsCluster, o.natsRoutes = "127.0.0.1:6222", "nats-route://127.0.0.1:6222,nats-route://127.0.0.1:6223"
		}, false, 1, true, false},
		{"two nodes, --replicas 2", func(o *options) {
			o.natsCluster, o.natsRoutes, o.replicas = "127.0.0.1:6222", "nats-route://127.0.0.1:6222,nats-route://127.0.0.1:6223", 2
		}, true, 2, true, true},
		{"three nodes, --replicas 1", func(o *options) { o.natsCluster, o.natsRoutes, o.replicas = "127.0.0.1:6222", three, 1 }, true, 1, true, false},
		{"three nodes, --replicas 2", func(o *options) { o.natsCluster, o.natsRoutes, o.replicas = "127.0.0.1:6222", three, 2 }, true, 2, true, false},
	} {
		o := base
		tc.mod(&o)
		sc, replicas, err := natsSetup(o, tc.set)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if replicas != tc.replicas {
			t.Errorf("%s: replicas %d, want %d", tc.name, replicas, tc.replicas)
		}
		if (o.natsURL == "") != (sc != nil) {
			t.Errorf("%s: embedded server config %v with --nats %q", tc.name, sc, o.natsURL)
		}
		if sc != nil && sc.Clustered() != tc.cluster {
			t.Errorf("%s: clustered %v, want %v", tc.name, sc.Clustered(), tc.cluster)
		}
		if local := sc != nil && slices.Equal(sc.LocalDirectGets, []string{"KV_scanplane-blocks"}); local != tc.local {
			t.Errorf("%s: LocalDirectGets %v, want them kept local: %v", tc.name, sc.LocalDirectGets, tc.local)
		}
	}
}

// TestNATSFlagErrorsNameTheFlag: a bad cluster flag's error names it.
func TestNATSFlagErrorsNameTheFlag(t *testing.T) {
	base := options{natsListen: "127.0.0.1:4222", data: "d", natsCluster: "127.0.0.1:6222", natsRoutes: "nats-route://127.0.0.1:6223"}
	for flagName, mod := range map[string]func(*options){
		"--nats-cluster": func(o *options) { o.natsCluster = "6222" },
		"--nats-routes":  func(o *options) { o.natsRoutes = "nats-route://127.0.0.1:6223,tcp://x:1" },
		"--nats-name":    func(o *options) { o.natsName = "a b" },
	} {
		o := base
		mod(&o)
		_, _, err := natsSetup(o, false)
		if err == nil || !strings.Contains(err.Error(), flagName) {
			t.Errorf("%s: error %v does not name the flag", flagName, err)
		}
	}
}

// TestUsage: every flag renders with a one-word argument name and states
// its default once.
func TestUsage(t *testing.T) {
	var b strings.Builder
	cliutil.PrintHelp(&b, "coordinator [flags]", about, newFlagSet(&options{}))
	for _, p := range cliutil.UsageProblems(b.String()) {
		t.Error(p)
	}
}
