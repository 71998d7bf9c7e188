package client

import (
	"context"

	"connectrpc.com/connect"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
	"github.com/scanplane/scanplane/api/scanplane/v1/scanplanev1connect"
)

// Count returns how many rows [rng.Start, rng.End) of table holds, at
// most opts.Limit when set, counted at the scan servers like
// Client.Count: whole blocks count by their proven row counts and no
// rows travel. The coordinator's client verifies the counts against the
// table's block roots; unlike Scan's rows, the number cannot be checked
// here (scan the range to check it end to end). Of opts it uses Hints
// and Limit. A coordinator found down goes to the next address, as for
// a scan; each attempt is bounded by ctx's deadline, else
// MaxRequestTime.
func (a *API) Count(ctx context.Context, table string, rng Range, opts ScanOptions) (uint64, error) {
	if err := checkScan(table, rng, opts); err != nil {
		return 0, err
	}
	req := &scanplanev1.CountRequest{Table: table, Start: rng.Start, End: rng.End, Limit: int64(opts.Limit), Hints: opts.Hints}
	var n uint64
	err := a.unaryWithin(ctx, "Count", a.cfg.MaxRequestTime, func(ctx context.Context, s scanplanev1connect.ScanServiceClient) error {
		res, err := s.Count(ctx, connect.NewRequest(req))
		if err == nil {
			n = res.Msg.GetRows()
		}
		return err
	})
	return n, err
}
