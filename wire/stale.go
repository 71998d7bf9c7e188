package wire

import (
	"context"
	"fmt"
)

// GenerationSource tells a table's current generation, 0 if the table is
// gone (bus.MetaStore, tablets.DirMetaStore).
type GenerationSource interface {
	Current(ctx context.Context, table string) (uint64, error)
}

// Stale reports whether generation gen of table was deleted by newer
// ingests: its current generation is more than one ahead (ingest keeps the
// current and the previous generation readable). It returns the current
// generation; a failed look-up is not stale.
func Stale(ctx context.Context, gens GenerationSource, table string, gen uint64) (uint64, bool) {
	if gens == nil {
		return 0, false
	}
	cur, err := gens.Current(ctx, table)
	return cur, err == nil && cur > gen+1
}

// staleMessage is the error message of a scan of a deleted generation.
func StaleMessage(table string, gen, cur uint64) string {
	return fmt.Sprintf("table %q generation %d was deleted by newer ingests during the scan (current generation %d); scan the current generation",
		table, gen, cur)
}
