package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
)

// TestReloadReachesEveryCoordinator: three coordinators read one profiles
// file; after it changes, one reload through a client reaches all three,
// each answers with the new profiles, and each one's status shows them.
func TestReloadReachesEveryCoordinator(t *testing.T) {
	clustertest.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	profiles := filepath.Join(t.TempDir(), "profiles.json")
	write := func(policy string) {
		t.Helper()
		data := `[{"isDefault": true, "policy": "` + policy + `", "attemptPlans": [{"servers": "100%", "busyTimeout": "33ms"}]}]`
		if err := os.WriteFile(profiles, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("adaptive")
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 3, Hosts: 1, ServersPerHost: 1, Profiles: profiles,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 90 * time.Second})
	c := clustertest.Client(t, ctx, cl.NATSURL(), func(cfg *client.Config) { cfg.Coordinators = cl.CoordinatorAddrs() })
	write("bookkeeper")
	results, err := c.ReloadAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 3 {
		t.Fatalf("reload answered by %d coordinators, want 3: %v", len(results), results)
	}
	for _, r := range results {
		if r.Err != nil || !strings.Contains(r.Message, "bookkeeper") {
			t.Fatalf("%s: %q, %v; want the new profiles", r.Coordinator, r.Message, r.Err)
		}
	}
	for i := range 3 {
		st, err := cl.StatusOf(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(st.GetProfilesSummary(), "bookkeeper") {
			t.Fatalf("coordinator %d's profiles after the reload: %q", i, st.GetProfilesSummary())
		}
	}
}
