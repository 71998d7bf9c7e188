package testutil

import "context"

// BlockFetcher is tablets.BlockFetcher's method set (testutil imports
// nothing of the module).
type BlockFetcher interface {
	FetchBlock(ctx context.Context, key string) ([]byte, bool, error)
}

// GatedFetcher blocks every block read until Open is closed (or the
// read's context ends), then reads through Inner.
type GatedFetcher struct {
	Inner BlockFetcher
	Open  chan struct{}
}

// NewGatedFetcher returns a closed gate in front of inner.
func NewGatedFetcher(inner BlockFetcher) *GatedFetcher {
	return &GatedFetcher{Inner: inner, Open: make(chan struct{})}
}

// FetchBlock implements tablets.BlockFetcher.
func (g *GatedFetcher) FetchBlock(ctx context.Context, key string) ([]byte, bool, error) {
	select {
	case <-g.Open:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	return g.Inner.FetchBlock(ctx, key)
}
