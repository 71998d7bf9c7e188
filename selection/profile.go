package selection

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Profile is one entry of the profiles JSON (Accumulo's
// ConfigurableScanServerSelector format, extended with "name", "policy" and
// per-policy options). See docs/policies.md and doc.go for every field and
// option with its default. Profiles returned by ParseProfiles and
// DefaultProfiles are immutable: never modify one.
type Profile struct {
	// Name is the profile's display name: the "name" field if given, else
	// "default" for the default profile, else its first scan type unless
	// that is empty, else "profile<i>" (made unique among the profiles).
	Name                     string
	IsDefault                bool
	ScanTypeActivations      []string
	Group                    string
	TimeToWaitForScanServers time.Duration
	MaxBusyTimeout           time.Duration
	BusyTimeoutMultiplier    int
	AttemptPlans             []AttemptPlan
	// Policy names the selection policy; default "accumulo".
	Policy string
	// Options are the policy's options, defaults filled in (see
	// DefaultOptions). A hand-built profile should start from
	// DefaultOptions(policy).
	Options Options
	// Explicit lists the option names the JSON set explicitly, in the
	// order of the options table (Summary prints them).
	Explicit []string

	// explicitName is set when Name came from the "name" field; other
	// names are generated and renamed on a collision.
	explicitName bool
}

// Decay returns the decay parameters of the profile's error and slowdown
// counters in the load view (errorHalfLife, errorCap). Profiles whose
// policy reads no counters return DefaultDecay; clickhouse-* profiles read
// plain tallies (HalfLife 0, Cap 0) and apply errorHalfLife and errorCap
// on ClickHouse's per-pool clock themselves (docs/policies.md, clickhouse).
func (p *Profile) Decay() DecayParams {
	if p == nil || !usesDecay(p.Policy) {
		return DefaultDecay
	}
	if strings.HasPrefix(p.Policy, clickhousePrefix) {
		// Tallies: the policy halves them on ClickHouse's pool clock.
		return clickhouseTally
	}
	return DecayParams{HalfLife: p.Options.ErrorHalfLife, Cap: p.Options.ErrorCap}
}

// ServerCount is an attemptPlans[].servers value: N or P%.
type ServerCount struct {
	N       int     // > 0 when absolute
	Percent float64 // in (0, 100] when a percentage
}

// Count returns how many of total members the plan uses: min(total, N) for
// "N", max(1, round(P/100.0 × total)) for "P%", computed in float64 as
// Accumulo does (Java's Math.round, halves up: 29% of 50 is 14 because
// 0.29 × 50 = 14.499999999999998); 0 when total is 0.
func (c ServerCount) Count(total int) int {
	if total <= 0 {
		return 0
	}
	if c.Percent > 0 {
		n := int(math.Round(c.Percent / 100.0 * float64(total)))
		if n < 1 {
			n = 1
		}
		if n > total {
			n = total
		}
		return n
	}
	if c.N <= 0 || c.N > total {
		return total
	}
	return c.N
}

// String returns the JSON form: "N" or "P%".
func (c ServerCount) String() string {
	if c.Percent > 0 {
		return strconv.FormatFloat(c.Percent, 'g', -1, 64) + "%"
	}
	return strconv.Itoa(c.N)
}

// AttemptPlan is one attemptPlans[] entry.
type AttemptPlan struct {
	Servers     ServerCount
	BusyTimeout time.Duration
	Salt        string
}

// Profiles is a validated, immutable set of profiles, safe for concurrent
// use. Build one with ParseProfiles or DefaultProfiles.
type Profiles struct {
	List []*Profile

	def      *Profile
	byType   map[string]*Profile
	policies map[*Profile]Policy
	decays   []DecayParams
	warnings []string
}

// Warnings lists what the parser accepted but ignored, as Accumulo does:
// unknown fields and keys given twice (the last value is used). Each
// names the profile and the field. coordinator --check-config prints them.
func (ps *Profiles) Warnings() []string {
	if ps == nil {
		return nil
	}
	return append([]string(nil), ps.warnings...)
}
