package policysim

import (
	"github.com/scanplane/scanplane/selection"
)

// LeastOutstanding names the least-outstanding baseline: the replica with
// the fewest requests outstanding from this coordinator
// (ServerLoad.InFlight), ties broken at random.
const LeastOutstanding = "least-outstanding"

// leastOutstanding wraps a plan-less policy of the selection package
// (random in the profiles ProfilesJSON writes) for its busy-timeout
// escalation and delays, and replaces its server with the live one of
// fewest InFlight, avoiding servers this scan already tried or has in
// flight while another remains.
type leastOutstanding struct{ inner selection.Policy }

func (p leastOutstanding) Select(in *selection.Input) (selection.Decision, error) {
	d, err := p.inner.Select(in)
	if err != nil {
		return d, err
	}
	tried := func(id selection.ServerID) bool {
		for _, a := range in.Attempts {
			if a.Server == id && (a.Result.Failed() || a.End.IsZero()) {
				return true
			}
		}
		return false
	}
	var best *selection.ServerLoad
	ties := 0
	for _, s := range in.View.Servers {
		if !s.Alive || tried(s.ID) {
			continue
		}
		switch {
		case best == nil || s.InFlight < best.InFlight:
			best, ties = s, 1
		case s.InFlight == best.InFlight:
			ties++
			if in.Rand.IntN(ties) == 0 {
				best = s
			}
		}
	}
	if best == nil {
		if in.Hedge {
			return selection.Decision{}, selection.ErrNoHedge
		}
		return d, nil // every server tried: the inner policy's choice
	}
	d.Server, d.Host = best.ID, best.Host
	return d, nil
}
