package protosim

import (
	"cmp"
	"maps"
	"slices"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/scanserver"
)

func pidOf(p *messages.Pid) pid { return pid{p.GetAddress(), p.GetId()} }

func (p pid) wire() *messages.Pid { return &messages.Pid{Address: p.addr, Id: p.id} }

// sortedKeys returns a map's keys in order: the simulation never ranges
// over a map where the order could change what happens.
func sortedKeys[V any](m map[scanserver.ScanKey]V) []scanserver.ScanKey {
	return slices.SortedFunc(maps.Keys(m), func(a, b scanserver.ScanKey) int {
		return cmp.Or(cmp.Compare(a.RequestID, b.RequestID), cmp.Compare(a.Attempt, b.Attempt))
	})
}
