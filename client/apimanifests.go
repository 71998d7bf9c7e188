package client

import (
	"errors"
	"fmt"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/tablets"
)

// ProofManifests returns the manifests of tablet tablet of the table
// generation the scan reads (ProofTable), as the metadata store holds
// them and in the record's order, except those whose SHA-256 held
// reports (nil: none), which it does not fetch: the public API's
// ScanResponse.manifests, which a client checking proofs against the
// record needs for a tablet whose files the record keeps outside
// itself, less those the client said it holds. It returns nil for a
// tablet whose files are in the record, and before Next found the
// table; a manifest gone from the store is an error wrapping
// ErrStaleGeneration.
func (r *Rows) ProofManifests(tablet uint32, held func(sha256 [32]byte) bool) ([][]byte, error) {
	if r.meta == nil {
		return nil, nil
	}
	if int(tablet) >= len(r.meta.GetTablets()) {
		return nil, fmt.Errorf("%w: table %q generation %d has %d tablets, no tablet %d", ErrStream, r.table, r.meta.GetGeneration(), len(r.meta.GetTablets()), tablet)
	}
	var out [][]byte
	for _, m := range r.meta.GetTablets()[tablet].GetManifests() {
		id := tablets.ManifestOf(r.meta.GetGeneration(), m)
		if held != nil && held(id.Digest) {
			continue
		}
		data, err := r.c.manifest(r.ctx, r.table, id)
		if errors.Is(err, bus.ErrNotFound) {
			// The record names it: its generation was removed.
			err = fmt.Errorf("%w: %w", ErrStaleGeneration, err)
		}
		if err != nil {
			return nil, fmt.Errorf("client: table %q generation %d tablet %d manifest %s: %w", r.table, r.meta.GetGeneration(), tablet, tablets.ManifestName(id), err)
		}
		out = append(out, data)
	}
	return out, nil
}
