package selection

import (
	"errors"
	"math/rand/v2"
	"time"
)

// ServerID identifies one scan server: "<advertised host:port>/<index>".
type ServerID string

// Tablet is what rendezvous hashing hashes: Accumulo's (table, end row,
// prev end row). Empty rows are open ends.
type Tablet struct {
	Table      string
	PrevEndRow []byte
	EndRow     []byte
}

// AttemptResult is the outcome of one dispatch of this scan.
type AttemptResult uint8

const (
	// Pending: sent, no answer yet (a hedge is being considered).
	Pending AttemptResult = iota + 1
	// Started: the server started the scan.
	Started
	// Busy: the server answered busy within the busy timeout.
	Busy
	// Error: the server failed the scan or could not be reached.
	Error
	// Timeout: no answer within the busy timeout.
	Timeout
	// Slow: a hedge was launched because this attempt gave no data in time;
	// the attempt keeps running.
	Slow
	// Cancelled: another attempt won.
	Cancelled
	// Stalled: the client saw the stream stop mid-way and resumed elsewhere.
	Stalled
)

var resultNames = [...]string{"", "pending", "started", "busy", "error", "timeout", "slow", "cancelled", "stalled"}

func (r AttemptResult) String() string {
	if int(r) < len(resultNames) && r != 0 {
		return resultNames[r]
	}
	return "unknown"
}

// ParseAttemptResult parses the String form of an AttemptResult.
func ParseAttemptResult(s string) (AttemptResult, error) {
	for i, n := range resultNames {
		if i > 0 && n == s {
			return AttemptResult(i), nil
		}
	}
	return 0, errors.New("selection: unknown attempt result " + `"` + s + `"`)
}

// Failed reports whether the result counts as a failed attempt for plan
// escalation (Accumulo counts BUSY and ERROR; timeouts and stalls are busy
// and error by another name).
func (r AttemptResult) Failed() bool {
	return r == Busy || r == Error || r == Timeout || r == Stalled
}

// IsError reports whether the result counts as an error (as opposed to
// busy) for error delays and error accounting.
func (r AttemptResult) IsError() bool { return r == Error || r == Stalled }

// Attempt is one dispatch of this scan, oldest first in Input.Attempts.
type Attempt struct {
	Server    ServerID
	Host      string
	Result    AttemptResult
	Start     time.Time
	End       time.Time // zero while pending
	PlanIndex int
	Hedge     bool // dispatched as a hedge / speculative read
}

// Input is everything a policy may look at.
type Input struct {
	Tablet   Tablet
	Profile  *Profile
	Attempts []Attempt
	// Hedge is true when the caller asks for an additional, parallel
	// dispatch while earlier attempts are still pending or slow.
	Hedge bool
	View  *LoadView
	Now   time.Time
	Rand  *rand.Rand
	// State is per-tablet mutable state owned by the caller (one per tablet
	// actor); policies keep round-robin counters, subsets, etc. in it.
	State *TabletState
	// LocalHost is the coordinator's hostname (ClickHouse nearest_hostname).
	LocalHost string
	// Explain asks the policy to fill Decision.Candidates (scanctl route).
	Explain bool
}

// Decision is what a policy returns.
type Decision struct {
	Server    ServerID
	Host      string
	PlanIndex int
	// BusyTimeout: the server must start the scan within it or answer
	// busy; <= 0 means wait indefinitely.
	BusyTimeout time.Duration
	// Delay before sending (error backoff).
	Delay time.Duration
	// HedgeDelay: if the attempt has not been accepted (ScanStarted) by
	// then, ask the policy for a hedge. 0 = no hedge.
	HedgeDelay time.Duration
	// DataTimeout: if no first data by then, ask for a hedge. 0 = none.
	DataTimeout time.Duration
	// Placement: home or away from the tablet's home host, for policies
	// that rank hosts from a home (adaptive); the caller records the
	// scan's time per block under it (BlockTimes).
	Placement Placement
	// Candidates in the order the policy considered them (Explain only).
	Candidates []ServerID
	// Scores of the candidates, lower is better, when the policy scores
	// (adaptive; Explain only).
	Scores []float64
}

// Policy picks the server for the next attempt of a scan.
type Policy interface {
	Select(in *Input) (Decision, error)
}

var (
	// ErrNoServer: no server of the profile's group is available.
	ErrNoServer = errors.New("selection: no scan server available")
	// ErrNoHedge: a hedge was asked for but the policy declines (budget,
	// no other server, hedging off).
	ErrNoHedge = errors.New("selection: no hedge")
	// ErrBadConfig: the profiles configuration is invalid.
	ErrBadConfig = errors.New("selection: bad configuration")
	// ErrUnknownPolicy: a profile names a policy that does not exist.
	ErrUnknownPolicy = errors.New("selection: unknown policy")
)
