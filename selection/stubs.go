package selection

// TEMPORARY: minimal declarations so dependents compile while the policy
// set is written. The selection owner replaces this file.

import (
	"time"
)

// TabletState is per-tablet mutable policy state (owned by one tablet actor).
type TabletState struct {
	RoundRobin uint64
}

// DefaultProfiles returns Accumulo's default profile set (REFERENCE.md §A)
// with policy "accumulo-host".
func DefaultProfiles() *Profiles {
	p := &Profile{Name: "default", IsDefault: true, Group: "default", MaxBusyTimeout: 5 * time.Minute,
		BusyTimeoutMultiplier: 8, Policy: "accumulo-host",
		AttemptPlans: []AttemptPlan{
			{Servers: ServerCount{N: 3}, BusyTimeout: 33 * time.Millisecond, Salt: "one"},
			{Servers: ServerCount{N: 13}, BusyTimeout: 33 * time.Millisecond, Salt: "two"},
			{Servers: ServerCount{Percent: 100}, BusyTimeout: 33 * time.Millisecond},
		}}
	return &Profiles{List: []*Profile{p}}
}

// ParseProfiles parses and validates a profiles JSON document.
func ParseProfiles(data []byte) (*Profiles, error) { return nil, ErrBadConfig }

// ForHints returns the profile for a scan's hints (scan_type), else the default.
func (ps *Profiles) ForHints(hints map[string]string) *Profile {
	for _, p := range ps.List {
		if p.IsDefault {
			return p
		}
	}
	return ps.List[0]
}

// Decays lists the decay parameters the profiles' policies read.
func (ps *Profiles) Decays() []DecayParams { return []DecayParams{DefaultDecay} }

// Policy returns the built policy of p (p must belong to ps).
func (ps *Profiles) Policy(p *Profile) Policy { return randomPolicy{} }

// Summary returns one line per profile.
func (ps *Profiles) Summary() []string { return []string{"default: accumulo-host"} }

type randomPolicy struct{}

func (randomPolicy) Select(in *Input) (Decision, error) {
	var live []*ServerLoad
	for _, s := range in.View.Servers {
		if s.Alive && s.Group == in.Profile.Group {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return Decision{}, ErrNoServer
	}
	s := live[in.Rand.IntN(len(live))]
	return Decision{Server: s.ID, Host: s.Host, BusyTimeout: 33 * time.Millisecond}, nil
}
