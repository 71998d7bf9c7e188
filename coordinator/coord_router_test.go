package coordinator

import (
	"strings"
	"testing"

	"github.com/scanplane/scanplane/internal/testutil/servertest"
	"github.com/scanplane/scanplane/messages"
)

// The example profiles of docs/policies.md: scan_type=batch goes to group "batch".
const batchProfiles = `[{"isDefault": true, "policy": "adaptive",
  "attemptPlans": [{"servers": "1", "busyTimeout": "33ms", "salt": "one"}, {"servers": "100%", "busyTimeout": "100ms"}]},
 {"scanTypeActivations": ["batch"], "group": "batch", "policy": "clickhouse-random", "hedge": true, %WAIT%
  "attemptPlans": [{"servers": "100%", "busyTimeout": "1s"}]}]`

// A scan whose profile routes to a group without servers
// fails once timeToWaitForScanServers has passed (at once for 0s) with
// NO_SERVERS naming the profile and the group; with the default wait (100
// years) it fails at its deadline, saying what it waited for.
func TestScanForGroupWithoutServersFails(t *testing.T) {
	for _, tc := range []struct {
		name, wait string
		code       messages.ErrorCode
	}{
		{"wait 0s", `"timeToWaitForScanServers": "0s",`, messages.ErrorCode_ERROR_CODE_NO_SERVERS},
		{"wait 200ms", `"timeToWaitForScanServers": "200ms",`, messages.ErrorCode_ERROR_CODE_NO_SERVERS},
		{"default wait, request deadline", ``, messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOpts{rows: 100, tablets: 1, profiles: strings.Replace(batchProfiles, "%WAIT%", tc.wait, 1)})
			r.addServer("h1", 0, servertest.Default(), nil) // group "default"
			req := r.request(0)
			req.Hints = map[string]string{"scan_type": "batch"}
			req.TimeoutMs = 1500
			s := r.scan(req)
			if s.err == nil || s.err.GetCode() != tc.code {
				t.Fatalf("scan ended with %v (fin %v), want %v", s.err, s.fin, tc.code)
			}
			if tc.code == messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED {
				// While it waited, the client heard why, naming the group.
				if len(s.progress) == 0 || !strings.Contains(s.progress[0].GetState(), `group "batch"`) {
					t.Fatalf("progress while waiting for a server: %v", s.progress)
				}
			}
			for _, want := range []string{`group "batch"`, `profile "batch"`, "timeToWaitForScanServers"} {
				if !strings.Contains(s.err.GetMessage(), want) {
					t.Errorf("message %q does not name %s", s.err.GetMessage(), want)
				}
			}
			t.Logf("%v: %s", s.err.GetCode(), s.err.GetMessage())
			// The default group still serves.
			r.checkRows(r.scan(r.request(0)), 0)
		})
	}
}
