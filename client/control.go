package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// request asks the coordinators, those up first, until one answers, within
// RequestTimeout each and within ctx.
func (c *Client) request(ctx context.Context, msg any) (any, error) {
	if c.sys == nil || c.rx == nil {
		return nil, ErrClosed
	}
	c.mu.Lock()
	var order, lost []string
	whyLost := maps.Clone(c.coord.lost)
	for _, a := range c.coord.list {
		if _, l := whyLost[a]; l {
			lost = append(lost, a)
		} else {
			order = append(order, a)
		}
	}
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	order = append(order, lost...)
	if len(order) == 0 {
		return nil, fmt.Errorf("%w: no coordinator address known", ErrNoCoordinator)
	}
	var fails []string
	for _, addr := range order {
		if ctxErr(ctx) != nil {
			break
		}
		timeout := c.cfg.RequestTimeout
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
			// ctx ends first: let it (a margin keeps the future from
			// timing out a hair before ctx reports its deadline).
			timeout = time.Until(dl) + 100*time.Millisecond
		}
		res, err := c.ask(ctx, c.routerPID(addr), msg, timeout)
		if errors.Is(err, ErrClosed) {
			return nil, ErrClosed
		}
		if err == nil {
			return res, nil
		}
		f := addr + " did not answer"
		switch {
		case errors.Is(err, actor.ErrDeadLetter):
			// The future ended early: the request could not be delivered.
			f = addr + " is unreachable (the request could not be delivered)"
		case ctxErr(ctx) == nil:
			f += fmt.Sprintf(" within %v (%v)", timeout.Round(time.Millisecond), err)
		}
		if why := whyLost[addr]; why != "" {
			f += " and was lost: " + why
		}
		fails = append(fails, f)
	}
	if err := ctxErr(ctx); err != nil {
		if len(fails) == 0 {
			fails = append(fails, "none asked")
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrNoCoordinator, strings.Join(fails, "; "), err)
	}
	return nil, fmt.Errorf("%w: %s", ErrNoCoordinator, strings.Join(fails, "; "))
}

// ctxErr is ctx.Err(), or context.DeadlineExceeded once ctx's deadline
// has passed even if ctx's timer has not fired yet (a loaded machine runs
// it late), so that a call that ran out of time says so.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// Status asks a coordinator for the cluster's status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	res, err := c.request(ctx, &messages.StatusRequest{})
	if err != nil {
		return nil, err
	}
	r, ok := res.(*messages.StatusReply)
	if !ok {
		return nil, fmt.Errorf("client: unexpected status answer %T", res)
	}
	st := statusFrom(r)
	return &st, nil
}

// StatusOf asks the coordinator at addr for its own status (within
// RequestTimeout and ctx), not trying another.
func (c *Client) StatusOf(ctx context.Context, addr string) (*Status, error) {
	if c.sys == nil || c.rx == nil {
		return nil, ErrClosed
	}
	timeout := c.cfg.RequestTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl) + 100*time.Millisecond
	}
	res, err := c.ask(ctx, c.routerPID(addr), &messages.StatusRequest{}, timeout)
	if errors.Is(err, ErrClosed) {
		return nil, ErrClosed
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s did not answer a status request: %w", ErrNoCoordinator, addr, err)
	}
	r, ok := res.(*messages.StatusReply)
	if !ok {
		return nil, fmt.Errorf("client: unexpected status answer %T from %s", res, addr)
	}
	st := statusFrom(r)
	return &st, nil
}

// CoordinatorLeases returns the coordinators' live leases on NATS, sorted
// by member id (bus.LeaseStore.List). While the lease bucket cannot be
// read (the client has not bound it yet, or JetStream is electing a
// leader) it returns what a coordinator answers over core NATS
// (bus.Conn.Discover) instead.
func (c *Client) CoordinatorLeases(ctx context.Context) ([]CoordinatorLease, error) {
	live, err := c.coordinatorLeases(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]CoordinatorLease, 0, len(live))
	for _, l := range live {
		out = append(out, CoordinatorLease{MemberID: l.GetMemberId(), Address: l.GetCoordinatorAddress(), HTTPAddress: l.GetHttpAddress(),
			Version: l.GetVersion(), Incarnation: l.GetIncarnation(), Started: time.UnixMilli(l.GetStartedUnixMs()),
			Renewed: time.UnixMilli(l.GetRenewedUnixMs()), NATSNode: l.GetNatsNode(), NATSURL: l.GetNatsUrl(), TabletActors: int(l.GetTabletActors())})
	}
	return out, nil
}

// coordinatorLeases is CoordinatorLeases as the leases store them.
func (c *Client) coordinatorLeases(ctx context.Context) ([]*messages.ClusterInfo, error) {
	c.mu.Lock()
	leases := c.leases
	c.mu.Unlock()
	var err error
	if leases != nil {
		var live []*messages.ClusterInfo
		if live, err = leases.List(ctx); err == nil || !errors.Is(err, bus.ErrUnavailable) {
			return live, err
		}
	}
	if c.conn == nil {
		return nil, ErrClosed
	}
	live, derr := c.conn.Discover(ctx, c.cfg.RequestTimeout)
	if derr != nil {
		return nil, fmt.Errorf("client: coordinator leases: %w", errors.Join(err, derr))
	}
	sort.Slice(live, func(i, j int) bool { return live[i].GetMemberId() < live[j].GetMemberId() })
	return live, nil
}

// CoordinatorLease is a coordinator's lease in NATS: the coordinator is
// alive while it renews it.
type CoordinatorLease struct {
	MemberID     string    // unique per coordinator start
	Address      string    // its actor remote (host:port)
	HTTPAddress  string    // its HTTP port (metrics, public API); "" without one
	Version      string    // its build version
	Incarnation  string    // random per start: a change means a restart
	Started      time.Time // when it started (its clock)
	Renewed      time.Time // when it last renewed the lease (its clock; informative only)
	NATSNode     string    // name of its embedded NATS server; "" with an external NATS
	NATSURL      string    // client URL of its embedded NATS server; "" with an external NATS
	TabletActors int       // tablet actors active on it at the last renewal
}

// RouteQuery names the row whose route Route asks for.
type RouteQuery struct {
	Table string
	Row   []byte
	// Hints as a scan would carry them ("scan_type" picks the profile).
	Hints map[string]string
	// Attempts are the results of earlier attempts at the row's tablet,
	// in order, each "busy", "error", "timeout" or "stalled": Route then
	// answers what a retry after them would do.
	Attempts []string
}

// Route is where a coordinator would send a scan of a row's tablet, and
// why.
type Route struct {
	Tablet     Tablet
	Profile    string    // the profile the hints select
	Policy     string    // its selection policy ("" = the default, accumulo)
	PlanIndex  int       // the step of the profile's plan the attempts reached
	Tried      []string  // the earlier attempts as the policy saw them, "server=result"
	Candidates []string  // the scan servers the policy chose among
	Scores     []float64 // per candidate, lower is better (scoring policies; else nil)
	Choice     string    // the scan server it would pick
	// BusyTimeout: how long the choice may take to start before the
	// attempt counts as busy; Delay: the wait before dispatching; after
	// HedgeDelay without data a second attempt is sent (0 = none).
	BusyTimeout, Delay, HedgeDelay time.Duration
}

// Tablet names one tablet of a table generation and its key range.
type Tablet struct {
	Table      string
	Generation uint64
	Index      uint32
	Range      Range
}

// Route asks where a scan of q.Row's tablet would go (scanctl route).
func (c *Client) Route(ctx context.Context, q RouteQuery) (*Route, error) {
	req := &messages.RouteRequest{Table: q.Table, Row: q.Row, Hints: q.Hints}
	for _, a := range q.Attempts {
		v, ok := messages.AttemptResult_value["ATTEMPT_RESULT_"+strings.ToUpper(a)]
		if !ok || !slices.Contains([]string{"busy", "error", "timeout", "stalled"}, a) {
			return nil, fmt.Errorf("client: route: attempt result %q: want busy, error, timeout or stalled", a)
		}
		req.Attempts = append(req.Attempts, messages.AttemptResult(v))
	}
	res, err := c.request(ctx, req)
	if err != nil {
		return nil, err
	}
	r, ok := res.(*messages.RouteReply)
	if !ok {
		return nil, fmt.Errorf("client: unexpected route answer %T", res)
	}
	if r.GetError() != "" {
		return nil, fmt.Errorf("client: route of table %q row %s: %s", q.Table, tablets.FormatKey(q.Row), r.GetError())
	}
	t := r.GetTablet()
	return &Route{
		Tablet: Tablet{Table: t.GetTable(), Generation: t.GetGeneration(), Index: t.GetIndex(),
			Range: Range{Start: t.GetPrevEndRow(), End: t.GetEndRow()}},
		Profile: r.GetProfile(), Policy: r.GetPolicy(), PlanIndex: int(r.GetPlanIndex()), Tried: r.GetTried(),
		Candidates: r.GetCandidates(), Scores: r.GetScores(), Choice: r.GetChoice(),
		BusyTimeout: time.Duration(r.GetBusyTimeoutUs()) * time.Microsecond,
		Delay:       time.Duration(r.GetDelayUs()) * time.Microsecond,
		HedgeDelay:  time.Duration(r.GetHedgeDelayUs()) * time.Microsecond,
	}, nil
}

// ReloadResult is one coordinator's answer to ReloadAll.
type ReloadResult struct {
	Coordinator string // actor address
	Message     string // what it reloaded (the profiles in force)
	Err         error  // why it did not reload (its old profiles stay)
}

// ReloadAll asks every leased coordinator to re-read its profiles file,
// all at once, and returns each one's answer, by address. A coordinator
// that does not answer is asked again until it answers or its lease ends
// (a coordinator that is gone no longer holds profiles, and its successor
// reads the file when it starts); one that still holds its lease without
// answering within twice RequestTimeout (or before ctx ends) has
// ErrNoCoordinator in its result.
func (c *Client) ReloadAll(ctx context.Context) ([]ReloadResult, error) {
	if c.sys == nil || c.rx == nil {
		return nil, ErrClosed
	}
	timeout := c.cfg.RequestTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	until := time.Now().Add(2 * timeout)
	addrs := c.leasedCoordinators(ctx, timeout)
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: none known", ErrNoCoordinator)
	}
	results := map[string]ReloadResult{}
	for pending := addrs; len(pending) > 0; {
		for _, r := range c.reloadEach(ctx, pending, timeout) {
			results[r.Coordinator] = r
		}
		pending = pending[:0:0]
		for a, r := range results {
			if errors.Is(r.Err, ErrNoCoordinator) {
				pending = append(pending, a)
			}
		}
		if len(pending) == 0 || ctx.Err() != nil || time.Now().After(until) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(reloadRetryEvery):
		}
		current := c.leasedCoordinators(ctx, timeout)
		pending = slices.DeleteFunc(pending, func(a string) bool {
			if !slices.Contains(current, a) {
				delete(results, a) // its lease ended: not running
				return true
			}
			return false
		})
	}
	out := make([]ReloadResult, 0, len(results))
	for _, r := range results {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Coordinator < out[j].Coordinator })
	return out, nil
}

// reloadRetryEvery spaces ReloadAll's tries of a coordinator that did not
// answer.
const reloadRetryEvery = 250 * time.Millisecond

// leasedCoordinators returns the addresses of the coordinators that hold
// a lease now, read from the lease bucket (or, while JetStream cannot
// answer, from a discovery answer; failing both, the client's own list).
// A client given a fixed list of coordinators gets that list.
func (c *Client) leasedCoordinators(ctx context.Context, timeout time.Duration) []string {
	c.mu.Lock()
	leases, discover := c.leases, c.coord.discover
	c.mu.Unlock()
	if !discover {
		addrs, _ := c.Coordinators()
		return addrs
	}
	var live []*messages.ClusterInfo
	var err error
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if leases != nil {
		live, err = leases.List(lctx)
	}
	if leases == nil || err != nil {
		live, err = c.conn.Discover(lctx, timeout)
	}
	if err != nil {
		addrs, _ := c.Coordinators()
		return addrs
	}
	var addrs []string
	for _, ci := range live {
		if a := ci.GetCoordinatorAddress(); !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// reloadEach sends ReloadProfiles to each of addrs at once and returns
// their answers.
func (c *Client) reloadEach(ctx context.Context, addrs []string, timeout time.Duration) []ReloadResult {
	out := make([]ReloadResult, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].Coordinator = a
			res, err := c.ask(ctx, c.routerPID(a), &messages.ReloadProfiles{}, timeout)
			r, ok := res.(*messages.ReloadReply)
			switch {
			case err != nil:
				out[i].Err = fmt.Errorf("%w: %s did not answer: %w", ErrNoCoordinator, a, err)
			case !ok:
				out[i].Err = fmt.Errorf("client: %s answered a reload with %T", a, res)
			case !r.GetOk():
				out[i].Err = fmt.Errorf("refused, old profiles kept: %s", r.GetMessage())
			default:
				out[i].Message = r.GetMessage()
			}
		}()
	}
	wg.Wait()
	return out
}

// Reload asks one coordinator to re-read its profiles file (ReloadAll
// asks every one) and returns what it reloaded (the profiles in force).
// A coordinator that refuses the file keeps its old profiles; the error
// gives its reason.
func (c *Client) Reload(ctx context.Context) (string, error) {
	res, err := c.request(ctx, &messages.ReloadProfiles{})
	if err != nil {
		return "", err
	}
	r, ok := res.(*messages.ReloadReply)
	switch {
	case !ok:
		return "", fmt.Errorf("client: unexpected reload answer %T", res)
	case !r.GetOk():
		return "", fmt.Errorf("client: reload refused, old profiles kept: %s", r.GetMessage())
	}
	return r.GetMessage(), nil
}
