package selection

// TEMPORARY: policies still being written. NewPolicy rejects them.

type chMode int

type clickhousePolicy struct {
	p    *Profile
	mode chMode
}
type bookkeeperPolicy struct{ p *Profile }
type ribbonPolicy struct{ p *Profile }
type adaptivePolicy struct{ p *Profile }

func (clickhousePolicy) Select(*Input) (Decision, error) { return Decision{}, ErrNoServer }
func (bookkeeperPolicy) Select(*Input) (Decision, error) { return Decision{}, ErrNoServer }
func (ribbonPolicy) Select(*Input) (Decision, error)     { return Decision{}, ErrNoServer }
func (adaptivePolicy) Select(*Input) (Decision, error)   { return Decision{}, ErrNoServer }

func notYet(name string) bool {
	switch name {
	case PolicyAccumulo, PolicyAccumuloHost, PolicyRandom, PolicyRoundRobin, "":
		return false
	}
	return true
}
