package client

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/tabletstream"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// TestStreamErrors: the errors a tablet stream fails with reach the
// caller as the client's own: a *ScanError matching its code's sentinel
// and ErrScan, and the stream's sentinels as the client's, with the
// message unchanged.
func TestStreamErrors(t *testing.T) {
	n := 0
	cfg := tabletstream.StreamConfig{Client: &messages.Pid{Address: "127.0.0.1:1", Id: "c"}, Coordinators: []string{coordA},
		MaxRequestTime: time.Minute, StallTimeout: time.Minute, IdleTimeout: time.Minute, CoordinatorWait: time.Minute, MaxResumes: 3,
		RequestID: func() string { n++; return fmt.Sprintf("r%d", n) }}
	s := tabletstream.NewTabletStream(cfg, &messages.TabletRef{Table: "t", Generation: 1}, tablets.Range{})
	now := time.Unix(1_000_000, 0)
	s.Start(now)
	acts := s.OnMessage(now, &messages.ScanError{RequestId: "r1", Code: messages.ErrorCode_ERROR_CODE_NO_SERVERS, Message: "group batch has no servers",
		Attempts: []*messages.AttemptInfo{{Attempt: 1, Server: "s/0", Result: messages.AttemptResult_ATTEMPT_RESULT_BUSY, DurationUs: 1500, PlanIndex: 2, Hedge: true}}})
	if len(acts) == 0 || acts[len(acts)-1].Kind != tabletstream.ActFail {
		t.Fatalf("actions %v, want a failure", acts)
	}
	err := streamErr(acts[len(acts)-1].Err)
	var se *ScanError
	if !errors.As(err, &se) || !errors.Is(err, ErrNoServers) || !errors.Is(err, ErrScan) || se.Message != "group batch has no servers" ||
		se.Code != CodeNoServers || err.Error() != "client: scan failed: ERROR_CODE_NO_SERVERS: group batch has no servers" {
		t.Fatalf("ScanError of the coordinator: %v (%T)", err, err)
	}
	want := []AttemptInfo{{Attempt: 1, Server: "s/0", Result: "busy", Duration: 1500 * time.Microsecond, Plan: 2, Hedge: true}}
	if !slices.Equal(se.Attempts, want) {
		t.Fatalf("attempts %+v, want %+v", se.Attempts, want)
	}

	for _, tc := range []struct{ from, to error }{
		{tabletstream.ErrNoCoordinator, ErrNoCoordinator},
		{tabletstream.ErrStream, ErrStream},
	} {
		in := fmt.Errorf("%w: tablet t/g1/t0", tc.from)
		err := streamErr(in)
		if !errors.Is(err, tc.to) || err.Error() != in.Error() || !strings.HasPrefix(err.Error(), tc.to.Error()) {
			t.Fatalf("streamErr(%v) = %v, want it to match %v", in, err, tc.to)
		}
	}
}
