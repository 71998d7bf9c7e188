package selection

import (
	"fmt"
	"strings"
	"time"
)

// defaultPlans are the attempt plans of Accumulo's default profile.
var defaultPlans = []AttemptPlan{
	{Servers: ServerCount{N: 3}, BusyTimeout: 33 * time.Millisecond, Salt: "one"},
	{Servers: ServerCount{N: 13}, BusyTimeout: 33 * time.Millisecond, Salt: "two"},
	{Servers: ServerCount{Percent: 100}, BusyTimeout: 33 * time.Millisecond},
}

// DefaultProfilesJSON is Accumulo's default profiles document (docs/policies.md,
// accumulo). DefaultProfiles is this document with policy "accumulo-host".
const DefaultProfilesJSON = `[{"isDefault":true,"maxBusyTimeout":"5m","busyTimeoutMultiplier":8,"scanTypeActivations":[],
  "attemptPlans":[{"servers":"3","busyTimeout":"33ms","salt":"one"},
                  {"servers":"13","busyTimeout":"33ms","salt":"two"},
                  {"servers":"100%","busyTimeout":"33ms"}]}]`

// DefaultProfiles returns Accumulo's default profile (docs/policies.md, accumulo) with
// policy "accumulo-host": the coordinator's default.
func DefaultProfiles() *Profiles {
	p := &Profile{
		Name: "default", IsDefault: true, ScanTypeActivations: []string{}, Group: DefaultGroup,
		TimeToWaitForScanServers: 36500 * 24 * time.Hour, MaxBusyTimeout: 5 * time.Minute,
		BusyTimeoutMultiplier: 8, Policy: PolicyAccumuloHost,
		AttemptPlans: append([]AttemptPlan(nil), defaultPlans...),
		Options:      DefaultOptions(PolicyAccumuloHost),
	}
	ps, err := buildProfiles([]*Profile{p})
	if err != nil {
		// Unreachable: the default profile is valid (tested).
		return &Profiles{List: []*Profile{p}, def: p, byType: map[string]*Profile{},
			policies: map[*Profile]Policy{p: accumuloHostPolicy{p: p}}, decays: []DecayParams{DefaultDecay}}
	}
	return ps
}

// buildProfiles checks cross-profile rules and builds every policy.
func buildProfiles(list []*Profile) (*Profiles, error) {
	ps := &Profiles{List: list, byType: map[string]*Profile{}, policies: make(map[*Profile]Policy, len(list))}
	// Names are scanplane's labels, not Accumulo's: only names given in
	// "name" must be unique. A generated name ("default", the first scan
	// type, "profile<i>") that collides is made unique instead, since
	// Accumulo accepts e.g. a non-default profile activated by scan type
	// "default".
	names := map[string]int{}
	for i, p := range list {
		if p.explicitName {
			if j, ok := names[p.Name]; ok {
				pe := &profileErr{idx: i, name: p.Name}
				return nil, pe.fieldf("name", "duplicate profile name (profile %d has it too)", j)
			}
			names[p.Name] = i
		}
	}
	// The default profile's generated name first, so it keeps "default".
	order := make([]int, 0, len(list))
	for i, p := range list {
		if p.IsDefault {
			order = append([]int{i}, order...)
		} else {
			order = append(order, i)
		}
	}
	for _, i := range order {
		p := list[i]
		if p.explicitName {
			continue
		}
		if _, taken := names[p.Name]; taken {
			base := fmt.Sprintf("profile%d", i)
			p.Name = base
			for k := 2; ; k++ {
				if _, taken := names[p.Name]; !taken {
					break
				}
				p.Name = fmt.Sprintf("%s-%d", base, k)
			}
		}
		names[p.Name] = i
	}
	for i, p := range list {
		pe := &profileErr{idx: i, name: p.Name}
		if p.IsDefault {
			if ps.def != nil {
				return nil, pe.fieldf("isDefault", "multiple default profiles (%q is default too)", ps.def.Name)
			}
			ps.def = p
		}
		for _, st := range p.ScanTypeActivations {
			if q, ok := ps.byType[st]; ok {
				if q == p {
					return nil, pe.fieldf("scanTypeActivations", "scan type %q listed twice", st)
				}
				return nil, pe.fieldf("scanTypeActivations", "scan type %q is also activated by profile %q", st, q.Name)
			}
			ps.byType[st] = p
		}
		pol, err := NewPolicy(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: field \"policy\": %w", ErrBadConfig, pe.label(), err)
		}
		ps.policies[p] = pol
	}
	if ps.def == nil {
		return nil, fmt.Errorf("%w: no default profile (exactly one profile needs \"isDefault\": true)", ErrBadConfig)
	}
	ps.decays = []DecayParams{DefaultDecay}
	for _, p := range list {
		if !usesDecay(p.Policy) {
			continue
		}
		d := p.Decay()
		seen := false
		for _, e := range ps.decays {
			seen = seen || e == d
		}
		if !seen {
			ps.decays = append(ps.decays, d)
		}
	}
	return ps, nil
}

// NewPolicy builds the policy p names (p.Policy; "" = "accumulo").
func NewPolicy(p *Profile) (Policy, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil profile", ErrBadConfig)
	}
	name := p.Policy
	if name == "" {
		name = PolicyAccumulo
	}
	switch name {
	case PolicyAccumulo:
		return accumuloPolicy{p: p}, nil
	case PolicyAccumuloHost:
		return accumuloHostPolicy{p: p}, nil
	case PolicyRandom:
		return randomPolicy{p: p}, nil
	case PolicyRoundRobin:
		return roundRobinPolicy{p: p}, nil
	case PolicyBookKeeper:
		return bookkeeperPolicy{p: p}, nil
	case PolicyRibbonZone:
		return ribbonPolicy{p: p}, nil
	case PolicyAdaptive:
		return adaptivePolicy{p: p}, nil
	case PolicyPeakEWMA:
		return newPeakEWMAPolicy(p), nil
	case PolicyC3:
		return c3Policy{p: p}, nil
	case PolicyPrequal:
		return newPrequalPolicy(p), nil
	}
	if mode, ok := strings.CutPrefix(name, clickhousePrefix); ok {
		for i, m := range clickhouseModes {
			if m == mode {
				return newClickHousePolicy(p, chMode(i)), nil
			}
		}
	}
	return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownPolicy, name, strings.Join(PolicyNames(), ", "))
}

// ForHints returns the profile whose scanTypeActivations holds
// hints["scan_type"], else the default profile.
func (ps *Profiles) ForHints(hints map[string]string) *Profile {
	if ps == nil {
		return nil
	}
	if st, ok := hints["scan_type"]; ok {
		if p, ok := ps.byType[st]; ok {
			return p
		}
	}
	if ps.def != nil {
		return ps.def
	}
	if len(ps.List) > 0 {
		return ps.List[0]
	}
	return nil
}

// Default returns the default profile.
func (ps *Profiles) Default() *Profile { return ps.ForHints(nil) }

// Decays lists the distinct decay parameters the profiles' policies read
// (LoadView.Decays should be this): DefaultDecay first, then the others in
// profile order.
func (ps *Profiles) Decays() []DecayParams {
	if ps == nil || len(ps.decays) == 0 {
		return []DecayParams{DefaultDecay}
	}
	return append([]DecayParams(nil), ps.decays...)
}

// Policy returns p's policy, built at parse time. For a profile that does
// not belong to ps it builds one, falling back to the default profile's
// policy if p names no valid policy.
func (ps *Profiles) Policy(p *Profile) Policy {
	if ps != nil {
		if pol, ok := ps.policies[p]; ok {
			return pol
		}
	}
	if p != nil {
		if pol, err := NewPolicy(p); err == nil {
			return pol
		}
	}
	if ps != nil && ps.def != nil {
		return ps.policies[ps.def]
	}
	return accumuloHostPolicy{}
}

// Summary returns one line per profile: name, policy, group, scan types,
// plans, busy-timeout settings and the options set explicitly (plus
// "hedge" for policies that hedge), e.g.
//
//	default: policy=accumulo-host group=default isDefault scanTypes=[] plans=[3/33ms/one 13/33ms/two 100%/33ms] maxBusyTimeout=5m busyTimeoutMultiplier=8 timeToWait=36500d
func (ps *Profiles) Summary() []string {
	if ps == nil {
		return nil
	}
	out := make([]string, 0, len(ps.List))
	for _, p := range ps.List {
		var b strings.Builder
		fmt.Fprintf(&b, "%s: policy=%s group=%s", p.Name, p.Policy, p.Group)
		if p.IsDefault {
			b.WriteString(" isDefault")
		}
		fmt.Fprintf(&b, " scanTypes=[%s] plans=[", strings.Join(p.ScanTypeActivations, ","))
		for i, ap := range p.AttemptPlans {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s/%s", ap.Servers, FormatDuration(ap.BusyTimeout))
			if ap.Salt != "" {
				fmt.Fprintf(&b, "/%s", ap.Salt)
			}
		}
		maxBusy := "none"
		if p.MaxBusyTimeout > 0 {
			maxBusy = FormatDuration(p.MaxBusyTimeout)
		}
		fmt.Fprintf(&b, "] maxBusyTimeout=%s busyTimeoutMultiplier=%d timeToWait=%s",
			maxBusy, p.BusyTimeoutMultiplier, FormatDuration(p.TimeToWaitForScanServers))
		shown := map[string]bool{}
		if s := findOption("hedge"); s.appliesTo(p.Policy) {
			fmt.Fprintf(&b, " hedge=%t", p.Options.Hedge)
			shown["hedge"] = true
		}
		for _, name := range p.Explicit {
			if shown[name] {
				continue
			}
			fmt.Fprintf(&b, " %s=%s", name, findOption(name).get(&p.Options))
		}
		out = append(out, b.String())
	}
	return out
}
