package client

import (
	"context"
	"net"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
	"github.com/scanplane/scanplane/api/scanplane/v1/scanplanev1connect"
)

// DefaultAPIAddrs are the HTTP addresses of the coordinators of the
// local cluster `scanctl up` starts with its default ports, comma
// separated: the addresses NewAPI uses when Config.API is empty.
const DefaultAPIAddrs = "127.0.0.1:8091,127.0.0.1:8093,127.0.0.1:8095"

// apiDiscoverEvery: an API client asks a coordinator that answered for
// the live coordinators' HTTP addresses at most this often.
const apiDiscoverEvery = 30 * time.Second

// apiEndpoints is the list of addresses an API client tries, in order:
// Config.API's, then those discovered (the live coordinators' HTTP
// addresses, from the last Status answer) that Config.API does not
// name. Immutable; the API replaces it as a whole.
type apiEndpoints struct {
	addrs      []string
	svc        []scanplanev1connect.ScanServiceClient // one per address
	configured int                                    // the first configured addrs are Config.API's
}

// index is the position of addr in the list, or -1.
func (e *apiEndpoints) index(addr string) int { return slices.Index(e.addrs, addr) }

// apiDiscovery asks coordinators for the others' HTTP addresses: after
// a call got an answer from one, at most every apiDiscoverEvery, in a
// goroutine of its own that Close ends.
type apiDiscovery struct {
	ctx    context.Context // ended by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	running bool
	last    time.Time // when the last discovery began
}

// newService is the Connect client of the API at addr.
func (a *API) newService(addr string) scanplanev1connect.ScanServiceClient {
	return scanplanev1connect.NewScanServiceClient(a.hc, a.scheme+addr, connect.WithGRPC(),
		connect.WithReadMaxBytes(apiMaxMessageBytes))
}

// Addrs returns the coordinators' HTTP addresses the client tries, in
// order: Config.API's (DefaultAPIAddrs when empty), then those it
// discovered.
func (a *API) Addrs() []string { return slices.Clone(a.eps.Load().addrs) }

// discovered replaces the discovered addresses with the HTTP addresses
// of coordinators st lists: those dialable (a host that is not a
// wildcard such as 0.0.0.0 or ::) and not configured.
func (a *API) discovered(st *scanplanev1.StatusResponse) {
	a.epsMu.Lock()
	defer a.epsMu.Unlock()
	old := a.eps.Load()
	next := &apiEndpoints{addrs: slices.Clone(old.addrs[:old.configured]), svc: slices.Clone(old.svc[:old.configured]),
		configured: old.configured}
	for _, c := range st.GetCoordinators() {
		addr := c.GetHttpAddress()
		if !dialable(addr) || next.index(addr) >= 0 {
			continue
		}
		next.addrs = append(next.addrs, addr)
		if i := old.index(addr); i >= 0 {
			next.svc = append(next.svc, old.svc[i])
		} else {
			next.svc = append(next.svc, a.newService(addr))
		}
	}
	a.disc.mu.Lock()
	a.disc.last = time.Now()
	a.disc.mu.Unlock()
	if !slices.Equal(next.addrs, old.addrs) {
		a.log.Debug("client: api: coordinators discovered", "addrs", next.addrs[next.configured:])
		a.eps.Store(next)
	}
}

// dialable reports whether addr is host:port with a host to dial: not
// empty, not a wildcard such as 0.0.0.0 or ::.
func dialable(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsUnspecified()
}

// discover asks svc, which just answered, for the live coordinators
// unless a discovery runs or began less than apiDiscoverEvery ago.
func (a *API) discover(svc scanplanev1connect.ScanServiceClient) {
	d := &a.disc
	d.mu.Lock()
	if d.running || !d.last.IsZero() && time.Since(d.last) < apiDiscoverEvery || d.ctx.Err() != nil {
		d.mu.Unlock()
		return
	}
	d.running, d.last = true, time.Now()
	d.wg.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.wg.Done()
		defer func() {
			d.mu.Lock()
			d.running = false
			d.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(d.ctx, a.cfg.RequestTimeout)
		defer cancel()
		res, err := svc.Status(ctx, connect.NewRequest(&scanplanev1.StatusRequest{}))
		if err != nil {
			a.log.Debug("client: api: discovering the coordinators", "err", err)
			return
		}
		a.discovered(res.Msg)
	}()
}

// closeDiscovery ends a discovery running and waits for it.
func (a *API) closeDiscovery() {
	a.disc.mu.Lock()
	a.disc.cancel()
	a.disc.mu.Unlock()
	a.disc.wg.Wait()
}
