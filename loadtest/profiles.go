package loadtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/scanplane/scanplane/selection"
)

// ProfilesJSON is the profiles document the harness loads for a policy: one
// default profile with that policy and attempt plans that start at the
// tablet's home (accumulo-host: 1 host, then 2, then all; accumulo: one
// host's worth of servers, then two, then all; other policies use the plans
// only for the busy-timeout escalation), Accumulo's 33ms busy timeouts,
// multiplier 8 and 5m cap, and "hedge" for the policies that have it.
func ProfilesJSON(ps PolicySpec, serversPerHost int) ([]byte, error) {
	const busyTimeout = "33ms"
	plans := []map[string]string{{"servers": "1", "busyTimeout": busyTimeout}, {"servers": "2", "busyTimeout": busyTimeout}, {"servers": "100%", "busyTimeout": busyTimeout}}
	if ps.Policy == selection.PolicyAccumulo {
		plans[0]["servers"] = fmt.Sprint(max(serversPerHost, 1))
		plans[1]["servers"] = fmt.Sprint(2 * max(serversPerHost, 1))
	}
	prof := map[string]any{
		"name": "default", "isDefault": true, "scanTypeActivations": []string{}, "policy": ps.Policy,
		"maxBusyTimeout": "5m", "busyTimeoutMultiplier": 8, "attemptPlans": plans,
	}
	if hedgeable(ps.Policy) {
		prof["hedge"] = ps.Hedge
	}
	if ps.Options != "" {
		if err := selection.SetProfileOptions(prof, ps.Options); err != nil {
			return nil, fmt.Errorf("loadtest: policy %s: %w", ps.Label, err)
		}
	}
	data, err := json.MarshalIndent([]any{prof}, "", "  ")
	if err != nil {
		return nil, err
	}
	profs, err := selection.ParseProfiles(data)
	if err != nil {
		return nil, fmt.Errorf("loadtest: profiles for %s: %w", ps.Label, err)
	}
	if w := profs.Warnings(); len(w) > 0 {
		// An option the policy does not read is a typo here.
		return nil, fmt.Errorf("loadtest: profiles for %s: %s", ps.Label, strings.Join(w, "; "))
	}
	return append(data, '\n'), nil
}

// writeFileAtomic replaces path with data (write to a temp file, rename).
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// summaryHasPolicy reports whether a coordinator's profiles summary
// mentions policy.
func summaryHasPolicy(summary, policy string) bool {
	return strings.Contains(summary, "policy="+policy+" ") || strings.HasSuffix(summary, "policy="+policy)
}
