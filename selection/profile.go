package selection

import "time"

// Profile is one entry of the profiles JSON (Accumulo's
// ConfigurableScanServerSelector format, extended with "policy" and
// per-policy options). See REFERENCE.md §A and the README.
//
// TODO(selection owner): complete fields and parsing; the coordinator uses
// only what is declared in this file.
type Profile struct {
	// Name is the profile's display name: the "name" field if given, else
	// "default" for the default profile, else its first scan type.
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
}

// ServerCount is an attemptPlans[].servers value: N or P%.
type ServerCount struct {
	N       int // > 0 when absolute
	Percent int // 1..100 when a percentage
}

// AttemptPlan is one attemptPlans[] entry.
type AttemptPlan struct {
	Servers     ServerCount
	BusyTimeout time.Duration
	Salt        string
}

// Profiles is a validated, immutable set of profiles.
type Profiles struct {
	List []*Profile
}
