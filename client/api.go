package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
	"github.com/scanplane/scanplane/api/scanplane/v1/scanplanev1connect"
	"github.com/scanplane/scanplane/tablets"
)

// API scans through the public API (scanplane.v1.ScanService, gRPC) that
// every coordinator serves on its HTTP port. It only dials: it runs no
// actor system, connects to no NATS (unless Config.APIReadMeta) and
// opens no listening socket, so it works wherever a coordinator's HTTP
// port is reachable (behind NAT, outside the cluster's network). Rows are verified by the coordinator's
// own client before they leave the cluster, and the API client asks for
// their proofs and checks every row again before it hands it over:
// against the block roots of the table's metadata it reads from NATS
// with Config.APIReadMeta (a lying coordinator is caught), else against
// the metadata the coordinator sends (damage on the way is caught, a
// lying coordinator is not). ScanOptions.AllowUnverified asks for rows
// without proofs.
//
// Build one with NewAPI from a Config whose API lists coordinators'
// HTTP addresses (empty: DefaultAPIAddrs). Once a coordinator answered,
// the client asks it for the live coordinators (Status) and adds their
// HTTP addresses after the configured ones (Addrs), again at most every
// 30s, so one reachable address is enough to find the others. A call
// that finds a coordinator down, before any row arrived, goes to the
// next address; a scan whose coordinator is lost after rows arrived
// resumes after the last key it handed over on the next address (a
// range is read in key order, so this is exact).
//
// An API is safe for concurrent use; each APIRows belongs to one
// goroutine. NewAPI does no IO; Close closes idle connections and the
// NATS connection.
type API struct {
	cfg    Config
	log    *slog.Logger
	tr     *http.Transport
	hc     *http.Client
	scheme string
	epsMu  sync.Mutex                   // held while eps is replaced
	eps    atomic.Pointer[apiEndpoints] // the addresses tried, in order
	pref   atomic.Pointer[string]       // the address that answered last
	disc   apiDiscovery
	meta   *apiMeta // Config.APIReadMeta: the metadata store, on first use
	held   apiHeld  // manifests received, listed in later requests
}

// apiMaxMessageBytes bounds a message the API client reads: the
// coordinator sends messages of at most 3 MiB.
const apiMaxMessageBytes = 4 << 20

// NewAPI returns a client of the public API of the coordinators
// cfg.API names (empty: DefaultAPIAddrs, the local cluster of `scanctl
// up`) and of those they report. The fields it uses: API, APIToken, TLS (nil: gRPC over
// h2c, for a plain cluster; else TLS: it presents TLS's certificate, if
// any, and verifies the coordinator's against RootCAs),
// StallTimeout (a connection silent that long is pinged), IdleTimeout
// (an unanswered ping closes it), CoordinatorWait, MaxResumes,
// MaxRequestTime, RequestTimeout, APIReadMeta (with NATSURL; the NATS
// connection is made on first use) and Logger; the actor path's fields
// are ignored. It does no IO.
func NewAPI(cfg Config) (*API, error) {
	if len(cfg.API) == 0 {
		cfg.API = strings.Split(DefaultAPIAddrs, ",")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.checkAPI(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var protos http.Protocols
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: cfg.RequestTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: cfg.RequestTimeout,
		HTTP2:               &http.HTTP2Config{SendPingTimeout: cfg.StallTimeout, PingTimeout: cfg.IdleTimeout},
		Protocols:           &protos,
	}
	scheme := "http://"
	if cfg.TLS != nil {
		scheme = "https://"
		tr.TLSClientConfig = cfg.TLS.Clone()
		if tr.TLSClientConfig.MinVersion == 0 {
			tr.TLSClientConfig.MinVersion = tls.VersionTLS12
		}
		protos.SetHTTP2(true)
	} else {
		protos.SetUnencryptedHTTP2(true)
	}
	var rt http.RoundTripper = tr
	if cfg.APIToken != "" {
		rt = bearerTransport{rt: tr, header: "Bearer " + cfg.APIToken}
	}
	a := &API{cfg: cfg, log: log, tr: tr, hc: &http.Client{Transport: rt}, scheme: scheme, meta: &apiMeta{cfg: cfg}}
	a.disc.ctx, a.disc.cancel = context.WithCancel(context.Background())
	eps := &apiEndpoints{addrs: slices.Clone(cfg.API), configured: len(cfg.API)}
	for _, addr := range cfg.API {
		eps.svc = append(eps.svc, a.newService(addr))
	}
	a.eps.Store(eps)
	return a, nil
}

// checkAPI checks the fields only NewAPI uses.
func (c Config) checkAPI() error {
	switch {
	case c.APIToken != "" && c.TLS == nil:
		return errors.New("client: Config.APIToken needs Config.TLS (the cluster CA, TLSFromCA): a bearer token is never sent in plain text")
	case strings.ContainsAny(c.APIToken, " \t\r\n"):
		return errors.New("client: Config.APIToken holds white space (read the token file without its newline)")
	}
	return nil
}

// bearerTransport adds the bearer token to every request.
type bearerTransport struct {
	rt     http.RoundTripper
	header string
}

func (b bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", b.header)
	return b.rt.RoundTrip(req)
}

// Close closes the API client's idle connections and its NATS
// connection (APIReadMeta) and ends its discovery of coordinators;
// calls still running go on until they end, except that those still to
// read metadata fail with ErrClosed.
func (a *API) Close() error {
	a.closeDiscovery()
	a.tr.CloseIdleConnections()
	a.meta.close()
	return nil
}

// failover walks the addresses for one call: it starts at the one that
// answered last, moves to the next after a failure (in the list as it
// is then: discovery may have changed it), and once every address
// failed in a row waits (backing off) until one answers or
// CoordinatorWait passed since the run of failures began.
type failover struct {
	a       *API
	eps     *apiEndpoints // the list idx is in
	idx     int
	failed  int       // failures in a row since the last progress
	since   time.Time // when every address had failed, zero before
	backoff time.Duration
}

func (a *API) newFailover() *failover {
	f := &failover{a: a, eps: a.eps.Load()}
	if p := a.pref.Load(); p != nil {
		f.idx = max(0, f.eps.index(*p))
	}
	return f
}

func (f *failover) addr() string { return f.eps.addrs[f.idx] }

// svc is the current address's client.
func (f *failover) svc() scanplanev1connect.ScanServiceClient { return f.eps.svc[f.idx] }

// progress records that the current address delivered: the run of
// failures ends, later calls start with it, and the client asks it for
// the live coordinators if it has not lately.
func (f *failover) progress() {
	f.failed, f.since, f.backoff = 0, time.Time{}, 0
	addr := f.addr()
	f.a.pref.Store(&addr)
	f.a.discover(f.svc())
}

// next records a retryable failure err of the current address and moves
// to the next one, waiting first when every address has failed in a row.
// It returns the error that ends the call instead when ctx ended or
// CoordinatorWait passed.
func (f *failover) next(ctx context.Context, err error) error {
	f.a.log.Debug("client: api call failed, trying the next coordinator", "addr", f.addr(), "err", err)
	f.failed++
	cur := f.addr()
	f.eps = f.a.eps.Load()
	f.idx = (f.eps.index(cur) + 1) % len(f.eps.addrs) // index -1 (gone from the list): the first
	if f.failed < len(f.eps.addrs) {
		return nil
	}
	now := time.Now()
	if f.since.IsZero() {
		f.since = now
	}
	if now.Sub(f.since) >= f.a.cfg.CoordinatorWait {
		return fmt.Errorf("%w: none of %s answered within %v (CoordinatorWait): %w", ErrNoCoordinator, strings.Join(f.eps.addrs, ", "), f.a.cfg.CoordinatorWait, err)
	}
	f.backoff = min(max(2*f.backoff, 50*time.Millisecond), time.Second)
	t := time.NewTimer(f.backoff)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("client: api: %w (last error: %v)", ctx.Err(), err)
	}
}

// ListTables lists the tables with their current generation, by name.
func (a *API) ListTables(ctx context.Context) ([]*scanplanev1.Table, error) {
	var out []*scanplanev1.Table
	err := a.unary(ctx, "ListTables", func(ctx context.Context, s scanplanev1connect.ScanServiceClient) error {
		res, err := s.ListTables(ctx, connect.NewRequest(&scanplanev1.ListTablesRequest{}))
		if err == nil {
			out = res.Msg.GetTables()
		}
		return err
	})
	return out, err
}

// Status describes the coordinator that answers, the live coordinators
// (with their HTTP addresses) and the scan servers it sees.
func (a *API) Status(ctx context.Context) (*scanplanev1.StatusResponse, error) {
	var out *scanplanev1.StatusResponse
	err := a.unary(ctx, "Status", func(ctx context.Context, s scanplanev1connect.ScanServiceClient) error {
		res, err := s.Status(ctx, connect.NewRequest(&scanplanev1.StatusRequest{}))
		if err == nil {
			out = res.Msg
			a.discovered(out)
		}
		return err
	})
	return out, err
}

// unary runs call on the addresses in failover order, each attempt
// bounded by RequestTimeout.
func (a *API) unary(ctx context.Context, name string, call func(context.Context, scanplanev1connect.ScanServiceClient) error) error {
	return a.unaryWithin(ctx, name, a.cfg.RequestTimeout, call)
}

// unaryWithin is unary with each attempt bounded by timeout.
func (a *API) unaryWithin(ctx context.Context, name string, timeout time.Duration, call func(context.Context, scanplanev1connect.ScanServiceClient) error) error {
	f := a.newFailover()
	for {
		actx, cancel := context.WithTimeout(ctx, timeout)
		err := call(actx, f.svc())
		cancel()
		if err == nil {
			f.progress()
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("client: api %s: %w", name, ctx.Err())
		}
		e := apiErr(f.addr(), err)
		if !e.retry() {
			return fmt.Errorf("client: api %s: %w", name, e)
		}
		if err := f.next(ctx, e); err != nil {
			return fmt.Errorf("client: api %s: %w", name, err)
		}
	}
}

// APIRows iterates over the rows of an API scan, in key order. Use
// Next/Row/Err, and Close when stopping early.
type APIRows struct {
	a      *API
	ctx    context.Context
	cancel context.CancelFunc
	table  string
	rng    Range
	opts   ScanOptions
	fo     *failover
	st     *connect.ServerStreamForClient[scanplanev1.ScanResponse]
	got    bool       // the current request delivered a row
	pv     *apiProofs // nil: AllowUnverified, no proofs asked
	batch  []tablets.Entry
	hint   int // rows of the last response
	bi     int
	row    Row
	last   []byte // the last key handed over; nil before the first
	err    error
	done   bool
	stats  ScanStats
}

// Scan scans [rng.Start, rng.End) of table through the public API. Of
// opts it uses Hints, Limit (the coordinator's client reads with its
// own Parallel and buffers) and AllowUnverified: without it the scan
// asks for the rows' proofs and hands over a row only once its proof
// checked out against the table's block roots (Config.APIReadMeta says
// where they come from); with it the rows come without proofs, verified
// by the coordinator only. It does no IO until Next.
func (a *API) Scan(ctx context.Context, table string, rng Range, opts ScanOptions) *APIRows {
	r := &APIRows{a: a, table: table, rng: rng, opts: opts, err: checkScan(table, rng, opts)}
	if !opts.AllowUnverified {
		r.pv = &apiProofs{a: a, table: table}
	}
	if r.err != nil {
		r.done = true
		return r
	}
	if _, ok := ctx.Deadline(); !ok {
		ctx, r.cancel = context.WithTimeout(ctx, a.cfg.MaxRequestTime)
	} else {
		ctx, r.cancel = context.WithCancel(ctx)
	}
	r.ctx = ctx
	r.fo = a.newFailover()
	return r
}

// All is Scan as a range-over-func iterator; iteration stops at the first
// error, which is yielded.
func (a *API) All(ctx context.Context, table string, rng Range, opts ScanOptions) iter.Seq2[Row, error] {
	return allRows(func() rowIterator { return a.Scan(ctx, table, rng, opts) })
}

// Row returns the current row; its slices belong to the caller.
func (r *APIRows) Row() Row { return r.row }

// Err returns the error that ended the scan, if any.
func (r *APIRows) Err() error { return r.err }

// Stats returns what the scan did so far: Requests (calls, failovers
// included), Resumes (streams lost after they delivered rows, each
// continued after the last key on the next address), Batches (messages)
// and Rows.
func (r *APIRows) Stats() ScanStats { return r.stats }

// Close stops the scan; safe to call more than once.
func (r *APIRows) Close() error {
	if r.st != nil {
		_ = r.st.Close()
		r.st = nil
	}
	if r.cancel != nil {
		r.cancel()
	}
	r.done = true
	return nil
}

func (r *APIRows) fail(err error) {
	r.err = fmt.Errorf("client: api scan of %q %s: %w", r.table, r.rng, err)
	r.Close()
}

// Next advances to the next row.
func (r *APIRows) Next() bool {
	for !r.done {
		if r.opts.Limit > 0 && r.stats.Rows >= r.opts.Limit {
			r.Close()
			return false
		}
		if r.bi < len(r.batch) {
			m := r.batch[r.bi]
			r.bi++
			k := m.Key
			if r.last != nil && bytes.Compare(k, r.last) <= 0 {
				r.fail(fmt.Errorf("%w: %s sent key %s after %s (out of order)", ErrStream, r.fo.addr(), tablets.FormatKey(k), tablets.FormatKey(r.last)))
				return false
			}
			if !r.rng.Contains(k) {
				r.fail(fmt.Errorf("%w: %s sent key %s, outside the range", ErrStream, r.fo.addr(), tablets.FormatKey(k)))
				return false
			}
			r.last = k
			r.row = Row{Key: k, Value: m.Value}
			r.stats.Rows++
			if !r.got {
				r.got = true
				r.fo.progress()
			}
			return true
		}
		r.batch, r.bi = nil, 0
		if r.st == nil {
			r.open()
			continue
		}
		if r.st.Receive() {
			r.stats.Batches++
			if r.pv == nil {
				b, err := responseRows(r.st.Msg(), r.hint)
				if err != nil {
					r.fail(fmt.Errorf("from %s: %w", r.fo.addr(), err))
					return false
				}
				r.batch, r.hint = b, len(b)
				continue
			}
			b, err := r.pv.message(r.ctx, r.st.Msg())
			if errors.Is(err, errCoordinatorBehind) {
				_ = r.st.Close()
				r.st = nil
				r.retry(err)
				continue
			}
			if err != nil {
				r.fail(fmt.Errorf("from %s: %w", r.fo.addr(), err))
				return false
			}
			r.batch = b
			continue
		}
		err := r.st.Err()
		_ = r.st.Close()
		r.st = nil
		if err == nil && r.pv != nil {
			if err := r.pv.end(); err != nil {
				r.fail(fmt.Errorf("from %s: %w", r.fo.addr(), err))
				return false
			}
		}
		if err == nil {
			r.Close()
			return false
		}
		r.retry(err)
	}
	return false
}

// open sends the scan request for what is still wanted (after the last
// key handed over, up to the rows still wanted) to the current address.
func (r *APIRows) open() {
	req := &scanplanev1.ScanRequest{Table: r.table, Start: r.rng.Start, End: r.rng.End, Hints: r.opts.Hints, Proofs: r.pv != nil,
		OwnMetadata: r.pv != nil && r.a.cfg.APIReadMeta, PackedRows: true}
	if r.last != nil {
		req.Start = append(bytes.Clone(r.last), 0) // the smallest key after last
	}
	if r.opts.Limit > 0 {
		req.Limit = int64(r.opts.Limit - r.stats.Rows)
	}
	if r.pv != nil {
		if err := r.pv.begin(r.ctx, tablets.Range{Start: req.Start, End: req.End}, uint64(req.Limit)); err != nil {
			r.fail(err)
			return
		}
		for d := range r.pv.held {
			req.HeldManifests = append(req.HeldManifests, d[:])
		}
	}
	r.stats.Requests++
	r.got = false
	st, err := r.fo.svc().Scan(r.ctx, connect.NewRequest(req))
	if err != nil {
		r.retry(err)
		return
	}
	r.st = st
}

// retry handles a failed request: a retryable error moves the scan to
// the next address (resuming after the last key), within MaxResumes
// resumes and CoordinatorWait without any address answering; any other
// error ends it.
func (r *APIRows) retry(err error) {
	if r.ctx.Err() != nil {
		r.fail(context.Cause(r.ctx))
		return
	}
	e := apiErr(r.fo.addr(), err)
	if !e.retry() {
		r.fail(e)
		return
	}
	if r.got {
		if r.stats.Resumes >= r.a.cfg.MaxResumes {
			r.fail(fmt.Errorf("%w: the stream broke after %d resumes (MaxResumes): %w", ErrResumeLimit, r.stats.Resumes, e))
			return
		}
		r.stats.Resumes++
	}
	if err := r.fo.next(r.ctx, e); err != nil {
		r.fail(err)
	}
}

// responseRows returns a response's rows from either encoding:
// packed_rows (their keys and values alias it; hint: the rows expected,
// as UnpackRows takes it) or rows. A response with
// both, or with packed rows that do not decode, is an error wrapping
// ErrStream.
func responseRows(m *scanplanev1.ScanResponse, hint int) ([]tablets.Entry, error) {
	if p := m.GetPackedRows(); len(p) > 0 {
		if len(m.GetRows()) > 0 {
			return nil, fmt.Errorf("%w: a response with both rows (%d) and packed_rows", ErrStream, len(m.GetRows()))
		}
		rows, err := tablets.UnpackRows(p, hint)
		if err != nil {
			return nil, fmt.Errorf("%w: packed_rows: %w", ErrStream, err)
		}
		return rows, nil
	}
	rows := make([]tablets.Entry, len(m.GetRows()))
	for i, r := range m.GetRows() {
		rows[i] = tablets.Entry{Key: r.GetKey(), Value: r.GetValue()}
	}
	return rows, nil
}
