// Package gateway owns scanplane's public API server: the scanplane.v1
// ScanService (api/scanplane/v1) served with connect-go as gRPC,
// gRPC-Web and Connect's HTTP/JSON from one net/http handler, with gRPC
// server reflection. A coordinator mounts it on its HTTP port. Scans run
// through the Go client library in the coordinator's process, so every
// row is verified against the table's ingest digests before it is sent;
// a caller that asks gets the rows' proofs too, to verify them again.
//
// Concurrency: a Server serves any number of concurrent calls; each Scan
// runs the client's iterator in a goroutine of its own and sends from
// the handler's goroutine. Config is read-only after New.
package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
	"github.com/scanplane/scanplane/api/scanplane/v1/scanplanev1connect"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/tablets"
)

// Config configures a Server.
type Config struct {
	// Client returns the client the server scans and lists tables with,
	// or nil while none is ready (calls then fail with UNAVAILABLE).
	// Required.
	Client func() *client.Client
	// Status answers the Status RPC; nil = UNIMPLEMENTED.
	Status func(ctx context.Context) (*scanplanev1.StatusResponse, error)
	// MayScan decides whether principal may scan table: nil = every
	// principal may scan every table; an error is answered as
	// PERMISSION_DENIED with its text. Called on every Scan, before any
	// row is read.
	MayScan func(p Principal, table string) error
	// MaxBatchBytes: a ScanResponse is sent once its rows' keys and
	// values reach this many bytes (a larger row travels alone); in
	// [MinBatchBytes, MaxMessageBytes]; default 256 KiB.
	MaxBatchBytes int
	// FlushDelay: rows wait at most this long for their batch to fill
	// before they are sent; default 10ms.
	FlushDelay time.Duration
	// MaxScans: scans (and counts) this server runs at once; one more is refused
	// with RESOURCE_EXHAUSTED. Each holds up to the client's
	// ScanOptions.MaxBufferBytes of rows plus two batches. Default 64.
	MaxScans int
	// Logger; nil = discard.
	Logger *slog.Logger
}

// Bounds of Config.MaxBatchBytes: MaxMessageBytes stays under the 4 MiB
// a gRPC client accepts by default.
const (
	MinBatchBytes   = 1 << 10
	MaxMessageBytes = 3 << 20
)

// maxRequestBytes bounds a request message: a ScanRequest holds a table
// name, two keys and a few hints.
const maxRequestBytes = 1 << 20

// DefaultConfig returns the documented defaults (Client still to set).
func DefaultConfig() Config {
	return Config{MaxBatchBytes: 256 << 10, FlushDelay: 10 * time.Millisecond, MaxScans: 64}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("gateway: Client is nil")
	case c.MaxBatchBytes < MinBatchBytes || c.MaxBatchBytes > MaxMessageBytes:
		return fmt.Errorf("gateway: MaxBatchBytes %d must be in [%d, %d]", c.MaxBatchBytes, MinBatchBytes, MaxMessageBytes)
	case c.FlushDelay <= 0:
		return fmt.Errorf("gateway: FlushDelay %v must be > 0", c.FlushDelay)
	case c.MaxScans < 1:
		return fmt.Errorf("gateway: MaxScans %d must be >= 1", c.MaxScans)
	}
	return nil
}

// Server serves the scanplane.v1 API.
type Server struct {
	cfg   Config
	log   *slog.Logger
	slots chan struct{} // one per running scan, MaxScans in all
}

var _ scanplanev1connect.ScanServiceHandler = (*Server)(nil)

// New checks cfg; it does no IO.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, log: log, slots: make(chan struct{}, cfg.MaxScans)}, nil
}

// Register mounts the service and gRPC server reflection (v1 and
// v1alpha) on mux under their gRPC paths (/scanplane.v1.ScanService/,
// /grpc.reflection.v1.ServerReflection/, ...). Each request's principal
// is taken from its verified client certificate or bearer token
// (PrincipalOf); authentication itself is the HTTP endpoint's.
func (s *Server) Register(mux *http.ServeMux) {
	// Responses go uncompressed: rows are mostly incompressible and
	// gzip would cost the coordinator more CPU than the scan itself.
	// Compressed requests are still read.
	path, h := scanplanev1connect.NewScanServiceHandler(s, connect.WithReadMaxBytes(maxRequestBytes),
		connect.WithCompressMinBytes(MaxMessageBytes+maxRequestBytes))
	mux.Handle(path, withPrincipal(h))
	reflector := grpcreflect.NewStaticReflector(scanplanev1connect.ScanServiceName)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
}

// client is the current client, or UNAVAILABLE.
func (s *Server) client() (*client.Client, error) {
	if c := s.cfg.Client(); c != nil {
		return c, nil
	}
	return nil, toStatus(fmt.Errorf("gateway: the coordinator is (re)starting; try again (%w)", client.ErrNoCoordinator))
}

// mayScan is the table-scoped permission check every Scan passes before
// it reads a row: Config.MayScan, or everyone may scan everything.
func (s *Server) mayScan(p Principal, table string) error {
	if s.cfg.MayScan == nil {
		return nil
	}
	if err := s.cfg.MayScan(p, table); err != nil {
		return withReason(connect.NewError(connect.CodePermissionDenied, err), client.APIErrorReason(client.ErrPermissionDenied))
	}
	return nil
}

// admit runs the checks a scan or a count passes after its request's
// values and before it reads a row: a free scan slot (one more is
// refused with RESOURCE_EXHAUSTED), the principal's grant of table, a
// started client. The caller calls release once done.
func (s *Server) admit(ctx context.Context, table string) (c *client.Client, release func(), err error) {
	select {
	case s.slots <- struct{}{}:
	default:
		return nil, nil, toStatus(fmt.Errorf("%w: %d scans running, the most this coordinator serves at once (gateway MaxScans); retry later",
			client.ErrOverloaded, s.cfg.MaxScans))
	}
	defer func() {
		if err != nil {
			<-s.slots
		}
	}()
	if err = s.mayScan(PrincipalOf(ctx), table); err != nil {
		return nil, nil, err
	}
	if c, err = s.client(); err != nil {
		return nil, nil, err
	}
	return c, func() { <-s.slots }, nil
}

// checkRange validates what a scan and a count share: one line naming
// the bad value.
func checkRange(table string, start, end []byte, limit int64) error {
	if err := tablets.ValidateTableName(table); err != nil {
		return err
	}
	if err := (tablets.Range{Start: start, End: end}).Validate(); err != nil {
		return err
	}
	if limit < 0 {
		return fmt.Errorf("%w: limit %d must be >= 0 (0 = every row of the range)", client.ErrBadRequest, limit)
	}
	return nil
}

// checkScan validates a scan request: one line naming the bad value.
func checkScan(m *scanplanev1.ScanRequest) error {
	if err := checkRange(m.GetTable(), m.GetStart(), m.GetEnd(), m.GetLimit()); err != nil {
		return err
	}
	if n := len(m.GetHeldManifests()); n > MaxHeldManifests {
		return fmt.Errorf("%w: held_manifests lists %d manifests, more than %d", client.ErrBadRequest, n, MaxHeldManifests)
	}
	for i, d := range m.GetHeldManifests() {
		if len(d) != sha256.Size {
			return fmt.Errorf("%w: held_manifests[%d] has %d bytes, want a SHA-256 (%d)", client.ErrBadRequest, i, len(d), sha256.Size)
		}
	}
	return nil
}

// MaxHeldManifests bounds ScanRequest.held_manifests.
const MaxHeldManifests = 4096

// heldSet is the set of ScanRequest.held_manifests, as ProofManifests
// asks (nil when the request lists none).
func heldSet(m *scanplanev1.ScanRequest) func([sha256.Size]byte) bool {
	if len(m.GetHeldManifests()) == 0 {
		return nil
	}
	set := make(map[[sha256.Size]byte]bool, len(m.GetHeldManifests()))
	for _, d := range m.GetHeldManifests() {
		set[[sha256.Size]byte(d)] = true
	}
	return func(d [sha256.Size]byte) bool { return set[d] }
}

// Scan streams the rows of the range, verified, in batches of at most
// about MaxBatchBytes (as Row messages, or packed with
// ScanRequest.packed_rows); with ScanRequest.proofs, with the proofs the
// coordinator's client checked them with, for the caller to check again
// against the table's metadata: the generation, and unless
// own_metadata, the table's record and the manifests of the tablets the
// proofs are of, each before the first proof of its tablet, less those
// the request says the caller holds (held_manifests), which are neither
// fetched nor sent.
func (s *Server) Scan(ctx context.Context, req *connect.Request[scanplanev1.ScanRequest], stream *connect.ServerStream[scanplanev1.ScanResponse]) error {
	m := req.Msg
	if err := checkScan(m); err != nil {
		return toStatus(err)
	}
	c, release, err := s.admit(ctx, m.GetTable())
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	proofs := m.GetProofs()
	metadata := proofs && !m.GetOwnMetadata() // send table_record and manifests
	rows := c.Scan(ctx, m.GetTable(), client.KeyRange(m.GetStart(), m.GetEnd()),
		client.ScanOptions{Hints: m.GetHints(), Limit: uint64(m.GetLimit()), Proofs: proofs})
	held := heldSet(m)
	b := newBatcher(s.cfg.MaxBatchBytes, m.GetPackedRows())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer rows.Close()
		first := true
		sent := map[uint32]bool{} // tablets whose manifests were sent
		// forward hands the proofs taken to the batcher, after the
		// manifests of tablets they are the first of.
		forward := func() bool {
			ps := rows.TakeProofs()
			for _, p := range ps {
				if !metadata || sent[p.GetTablet()] {
					continue
				}
				sent[p.GetTablet()] = true
				ms, err := rows.ProofManifests(p.GetTablet(), held)
				if err != nil {
					b.finish(err)
					return false
				}
				if !b.manifests(ctx, ms) {
					return false
				}
			}
			b.proof(ps)
			return true
		}
		for {
			ok := rows.Next()
			if proofs && first {
				if gen, rec := rows.ProofTable(); gen > 0 {
					if !metadata {
						rec = nil
					}
					b.setTable(gen, rec)
				}
				first = false
			}
			if !ok {
				break
			}
			r := rows.Row()
			if !b.add(ctx, r.Key, r.Value) || !forward() {
				return
			}
		}
		if forward() {
			b.finish(rows.Err())
		}
	}()
	defer func() { cancel(); <-done }()
	t := time.NewTimer(s.cfg.FlushDelay)
	defer t.Stop()
	for {
		select {
		case <-b.ready:
		case <-t.C:
		case <-ctx.Done():
			return toStatus(ctx.Err())
		}
		msg, fin, scanErr := b.take()
		if msg != nil {
			if err := stream.Send(msg); err != nil {
				return err
			}
		}
		if fin {
			if scanErr != nil {
				s.log.Debug("gateway: scan failed", "table", m.GetTable(), "err", scanErr)
				return toStatus(scanErr)
			}
			return nil
		}
		t.Reset(s.cfg.FlushDelay)
	}
}

// Count counts the rows of the range at the scan servers through the
// coordinator's client (which verifies the counts), after the checks a
// Scan passes: the request's values, a free scan slot (a count holds
// one), the principal's table grant.
func (s *Server) Count(ctx context.Context, req *connect.Request[scanplanev1.CountRequest]) (*connect.Response[scanplanev1.CountResponse], error) {
	m := req.Msg
	if err := checkRange(m.GetTable(), m.GetStart(), m.GetEnd(), m.GetLimit()); err != nil {
		return nil, toStatus(err)
	}
	c, release, err := s.admit(ctx, m.GetTable())
	if err != nil {
		return nil, err
	}
	defer release()
	n, err := c.Count(ctx, m.GetTable(), client.KeyRange(m.GetStart(), m.GetEnd()),
		client.ScanOptions{Hints: m.GetHints(), Limit: uint64(m.GetLimit())})
	if err != nil {
		s.log.Debug("gateway: count failed", "table", m.GetTable(), "err", err)
		return nil, toStatus(err)
	}
	return connect.NewResponse(&scanplanev1.CountResponse{Rows: n}), nil
}

// ListTables lists the tables with their current generation.
func (s *Server) ListTables(ctx context.Context, _ *connect.Request[scanplanev1.ListTablesRequest]) (*connect.Response[scanplanev1.ListTablesResponse], error) {
	c, err := s.client()
	if err != nil {
		return nil, err
	}
	names, err := c.Tables(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	slices.Sort(names)
	out := &scanplanev1.ListTablesResponse{}
	for _, n := range names {
		tm, err := c.Table(ctx, n)
		if errors.Is(err, client.ErrNoTable) {
			continue // removed since it was listed
		}
		if err != nil {
			return nil, toStatus(err)
		}
		out.Tables = append(out.Tables, &scanplanev1.Table{Name: n, Generation: tm.Generation, Rows: tm.Rows,
			Bytes: tm.Bytes, Tablets: uint32(tm.Tablets)})
	}
	return connect.NewResponse(out), nil
}

// Status answers with Config.Status.
func (s *Server) Status(ctx context.Context, _ *connect.Request[scanplanev1.StatusRequest]) (*connect.Response[scanplanev1.StatusResponse], error) {
	if s.cfg.Status == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("gateway: this server has no status"))
	}
	st, err := s.cfg.Status(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return connect.NewResponse(st), nil
}
