package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/messages"
)

// How `scanctl scan` reaches the rows (--via).
const (
	// viaAPI: through a coordinator's public API on its HTTP port; the
	// command only dials (the default).
	viaAPI = "api"
	// viaActor: through the actor remote; the scan servers dial the
	// command's own actor endpoint to stream rows.
	viaActor = "actor"
)

// Where the API path takes the block roots it checks rows against
// (--meta).
const (
	// metaNATS: the table's metadata, read from the cluster's NATS (end
	// to end: a lying coordinator is caught).
	metaNATS = "nats"
	// metaCoordinator: the table record the coordinator sends (no NATS
	// needed with --api).
	metaCoordinator = "coordinator"
)

// apiDiscoverWait bounds how long the API path waits for the
// coordinators to answer on NATS with their HTTP addresses, as the actor
// client waits to learn of a first coordinator.
const apiDiscoverWait = 10 * time.Second

// viaFlags are the flags that pick and configure the path of a scan.
type viaFlags struct {
	via  string
	api  string
	meta string
	// addrs: --api's addresses (or $SCANPLANE_API's), set by check; nil
	// when neither names any.
	addrs []string
}

func (v *viaFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&v.via, "via", viaAPI, "`PATH` of the rows: api (through a coordinator's HTTP port; opens no listening socket) or actor (the scan servers dial this process back: in-cluster only)")
	fs.StringVar(&v.api, "api", "", "coordinators' HTTP `ADDRS` (host:port), comma-separated, for --via api (default $"+client.APIEnv+", else the addresses the coordinators announce on NATS; with --coordinator, theirs)")
	fs.StringVar(&v.meta, "meta", metaNATS, "`SOURCE` of the block roots --via api checks every row against: nats (the table's metadata from NATS, end to end) or coordinator (the record the coordinator sends: no NATS needed with --api, a lying coordinator goes unnoticed)")
}

// check validates the flags (fs says which were set); parallel is
// --parallel's value.
func (v *viaFlags) check(fs *flag.FlagSet, parallel int) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch v.via {
	case viaAPI:
	case viaActor:
		for _, name := range []string{"api", "meta"} {
			if set[name] {
				return usageError{fmt.Errorf("--%s applies to --via api, not --via actor", name)}
			}
		}
		return nil
	default:
		return usageError{fmt.Errorf("--via %q: want api or actor", v.via)}
	}
	if v.meta != metaNATS && v.meta != metaCoordinator {
		return usageError{fmt.Errorf("--meta %q: want nats or coordinator", v.meta)}
	}
	if parallel != 0 {
		return usageError{fmt.Errorf("--parallel %d applies to --via actor (through the API the coordinator reads with its own)", parallel)}
	}
	if v.api == "" {
		v.api = strings.TrimSpace(os.Getenv(client.APIEnv))
	}
	if v.api != "" {
		addrs, err := client.ParseAPIAddrs(v.api)
		if err != nil {
			return usageError{fmt.Errorf("--api %q: %w", v.api, err)}
		}
		v.addrs = addrs
	}
	return nil
}

// withAPI runs fn with an API client for the globals' cluster under the
// globals' timeout: the addresses of --api, else those the coordinators
// announce on NATS (apiAddrs); the client certificate of --secrets; the
// block roots from NATS unless --meta coordinator. Nothing it opens
// listens.
func withAPI(ctx context.Context, g *globals, v *viaFlags, errOut io.Writer, fn func(context.Context, *client.API) error) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	cfg, err := clientConfig(g, errOut)
	if err != nil {
		return err
	}
	// --coordinator's actor addresses: apiAddrs maps them to HTTP ones.
	want := cfg.Coordinators
	cfg.Coordinators = nil
	cfg.API = v.addrs
	cfg.APIReadMeta = v.meta == metaNATS
	if len(cfg.API) == 0 || cfg.APIReadMeta {
		// Connect to NATS first, as the actor path does: a NATS that
		// cannot be reached (or wants TLS) is named in one line.
		bc := bus.DefaultConfig()
		bc.URL, bc.Name, bc.TLS, bc.ReadOnly = cfg.NATSURL, "scanctl-scan", cfg.TLS, true
		conn, err := bus.Connect(ctx, bc)
		if err != nil {
			return natsError(ctx, g, fmt.Errorf("client: connect to NATS %s: %w", cfg.NATSURL, err))
		}
		if len(cfg.API) == 0 {
			cfg.API, err = apiAddrs(ctx, conn, cfg.NATSURL, want)
		}
		conn.Close()
		if err != nil {
			return err
		}
	}
	a, err := client.NewAPI(cfg)
	if err != nil {
		return usageError{fmt.Errorf("--api or --secrets: %w", err)}
	}
	defer a.Close()
	return fn(ctx, a)
}

// apiAddrs asks the coordinators on NATS natsURL (bus.Discover) for
// their HTTP addresses, those whose actor address want names
// (--coordinator) in its order when it is set, until it has them or
// apiDiscoverWait passed. An address with a wildcard host (--http
// 0.0.0.0:8091) is left out: it names no host to dial.
func apiAddrs(ctx context.Context, conn *bus.Conn, natsURL string, want []string) ([]string, error) {
	start := time.Now()
	var lastErr error
	for {
		live, err := conn.Discover(ctx, time.Second)
		if err != nil {
			lastErr = err
		} else if addrs, missing, unusable := httpAddrs(live, want); len(addrs) > 0 {
			return addrs, nil
		} else if len(live) > 0 {
			lastErr = fmt.Errorf("%s %s", missing, unusable)
		}
		if ctx.Err() != nil || time.Since(start) >= apiDiscoverWait {
			waited := time.Since(start).Round(100 * time.Millisecond)
			err := fmt.Errorf("%w: none answered on NATS %s with an HTTP address to scan through within %v (is a coordinator running? or name one's HTTP address with --api)",
				client.ErrNoCoordinator, natsURL, waited)
			if len(want) > 0 {
				err = fmt.Errorf("%w: coordinator %s did not answer on NATS %s with its HTTP address within %v (is it running? or name its HTTP address with --api)",
					client.ErrNoCoordinator, strings.Join(want, ", "), natsURL, waited)
			}
			if ctx.Err() != nil {
				err = fmt.Errorf("%w: %w", err, ctx.Err())
			}
			if lastErr != nil {
				err = fmt.Errorf("%w: %v", err, lastErr)
			}
			return nil, err
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// httpAddrs are the dialable HTTP addresses of the coordinators live
// lists (those whose actor address want names, in want's order, when
// want is set); missing and unusable say, when there are none, why.
func httpAddrs(live []*messages.ClusterInfo, want []string) (addrs []string, missing, unusable string) {
	byActor := map[string]string{}
	var order []string
	var bad []string
	for _, ci := range live {
		h := ci.GetHttpAddress()
		host, _, err := net.SplitHostPort(h)
		if err != nil || host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
			bad = append(bad, fmt.Sprintf("%s serves HTTP at %q", ci.GetCoordinatorAddress(), h))
			continue
		}
		byActor[ci.GetCoordinatorAddress()] = h
		order = append(order, ci.GetCoordinatorAddress())
	}
	if len(want) > 0 {
		order = want
	}
	for _, a := range order {
		if h, ok := byActor[a]; ok && !slices.Contains(addrs, h) {
			addrs = append(addrs, h)
		}
	}
	if len(addrs) > 0 {
		return addrs, "", ""
	}
	var seen []string
	for _, ci := range live {
		seen = append(seen, ci.GetCoordinatorAddress())
	}
	if len(want) > 0 {
		missing = fmt.Sprintf("the live coordinators are %s;", strings.Join(seen, ", "))
	}
	if len(bad) > 0 {
		unusable = "no dialable HTTP address: " + strings.Join(bad, ", ")
	}
	return nil, missing, unusable
}
