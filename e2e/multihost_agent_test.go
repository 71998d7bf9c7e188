//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// The client agent of TestMultiHost: the test binary re-executed inside
// the client's network namespace (so its traffic, like every process's of
// the test, stays on the namespaces' bridge), serving requests from the
// test (mhReq lines on stdin, mhResp lines on stdout) with the client
// library: scans checked row by row against the ground truth, routes,
// /status, leases, JetStream stream info. It exits when stdin closes.
func init() {
	if os.Getenv(mhAgentEnv) == "1" {
		os.Exit(runAgent())
	}
}

type agent struct {
	f      *fixture
	nats   string
	loadMu sync.Mutex
	load   *mhLoadReport
	stop   context.CancelFunc
	loadWG sync.WaitGroup
}

func runAgent() int {
	a := &agent{}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		var req mhReq
		var resp mhResp
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			resp.Err = err.Error()
		} else {
			resp = a.handle(req)
		}
		fmt.Fprintf(os.Stderr, "%s %s %dms err=%q wrong=%q errs=%d\n", time.Now().UTC().Format("15:04:05.000"), req.Op, resp.Millis, resp.Err, resp.Wrong, len(resp.Errs))
		data, _ := json.Marshal(resp)
		out.WriteString(mhRespPrefix)
		out.Write(data)
		out.WriteByte('\n')
		out.Flush()
	}
	if a.stop != nil {
		a.stop()
		a.loadWG.Wait()
	}
	if a.f != nil {
		a.f.c.Close()
	}
	return 0
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (a *agent) handle(req mhReq) (resp mhResp) {
	t0 := time.Now()
	defer func() { resp.Millis = time.Since(t0).Milliseconds() }()
	timeout := time.Duration(req.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if req.Op != "connect" && req.Op != "waitServers" && req.Op != "streams" && req.Op != "jsReady" && a.f == nil {
		return mhResp{Err: "not connected"}
	}
	switch req.Op {
	case "connect":
		cfg := client.DefaultConfig()
		cfg.NATSURL, cfg.Listen, cfg.StallTimeout = req.NATS, req.Listen, time.Second
		c, err := client.New(cfg)
		if err != nil {
			return mhResp{Err: err.Error()}
		}
		if err := c.Start(ctx); err != nil {
			return mhResp{Err: err.Error()}
		}
		a.f, a.nats = &fixture{c: c, truth: tablets.GenerateRows(req.Rows)}, req.NATS
	case "scan":
		wrong, failed := a.f.checkScan(ctx, req.A, req.B)
		return mhResp{Wrong: errString(wrong), Err: errString(failed)}
	case "run":
		r := rand.New(rand.NewPCG(req.Seed, 2))
		for range req.N {
			lo, hi := randomRange(r, len(a.f.truth))
			wrong, failed := a.f.checkScan(ctx, lo, hi)
			if wrong != nil {
				resp.Wrong = wrong.Error()
			}
			if failed != nil {
				resp.Errs = append(resp.Errs, failed.Error())
			}
		}
	case "route":
		r, err := a.f.c.Route(ctx, client.RouteQuery{Table: table, Row: a.f.truth[req.Row].Key,
			Hints: map[string]string{"scan_type": req.Hint}})
		if err != nil {
			return mhResp{Err: err.Error()}
		}
		data, err := json.Marshal(r)
		if err != nil {
			return mhResp{Err: err.Error()}
		}
		resp.JSON = append(resp.JSON, data)
	case "status":
		for _, h := range req.HTTP {
			st, err := localcluster.FetchStatus(ctx, h)
			if err != nil {
				return mhResp{Err: fmt.Sprintf("%s: %v", h, err)}
			}
			data, err := protojson.Marshal(st)
			if err != nil {
				return mhResp{Err: err.Error()}
			}
			resp.JSON = append(resp.JSON, data)
		}
	case "waitServers":
		// Every coordinator at req.HTTP answers /status and sees req.N
		// live servers.
		var last error
		for {
			last = nil
			for _, h := range req.HTTP {
				st, err := localcluster.FetchStatus(ctx, h)
				if err == nil {
					live := 0
					for _, s := range st.Servers {
						if s.Alive {
							live++
						}
					}
					if live != req.N {
						err = fmt.Errorf("%s sees %d live servers, want %d", h, live, req.N)
					}
				}
				if err != nil {
					last = err
					break
				}
			}
			if last == nil {
				return resp
			}
			select {
			case <-ctx.Done():
				return mhResp{Err: fmt.Sprintf("after %v: %v", timeout, last)}
			case <-time.After(100 * time.Millisecond):
			}
		}
	case "coordinator":
		addrs, lost := a.f.c.Coordinators()
		resp.Strs = append([]string{a.f.c.Coordinator()}, addrs...)
		resp.Errs = lost
	case "leases":
		ls, err := a.f.c.CoordinatorLeases(ctx)
		if err != nil {
			return mhResp{Err: err.Error()}
		}
		for _, l := range ls {
			data, err := json.Marshal(l)
			if err != nil {
				return mhResp{Err: err.Error()}
			}
			resp.JSON = append(resp.JSON, data)
		}
	case "jsReady":
		// Every NATS node of req.NATS (comma-separated), asked alone,
		// answers a JetStream account info request: the cluster has a
		// JetStream leader and each node takes clients.
		var last error
		for {
			last = nil
			for _, u := range strings.Split(req.NATS, ",") {
				if err := jsAnswers(ctx, u); err != nil {
					last = fmt.Errorf("%s: %w", u, err)
					break
				}
			}
			if last == nil {
				return resp
			}
			select {
			case <-ctx.Done():
				return mhResp{Err: fmt.Sprintf("after %v: %v", timeout, last)}
			case <-time.After(200 * time.Millisecond):
			}
		}
	case "streams":
		// Every scanplane KV stream's replicas, and whether all of them
		// are current (the "ints" map: STREAM -> replicas, STREAM/current
		// -> 1 when every replica is current; Strs: the peers).
		nc, err := nats.Connect(req.NATS, nats.Timeout(5*time.Second))
		if err != nil {
			return mhResp{Err: err.Error()}
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return mhResp{Err: err.Error()}
		}
		resp.Ints = map[string]int64{}
		for _, name := range []string{"KV_scanplane-meta", "KV_scanplane-blocks"} {
			s, err := js.Stream(ctx, name)
			if err != nil {
				return mhResp{Err: fmt.Sprintf("%s: %v", name, err)}
			}
			info, err := s.Info(ctx)
			if err != nil {
				return mhResp{Err: fmt.Sprintf("%s: %v", name, err)}
			}
			resp.Ints[name] = int64(info.Config.Replicas)
			current := int64(0)
			if ci := info.Cluster; ci != nil && ci.Leader != "" {
				current = 1
				peers := ci.Leader + "(leader)"
				for _, p := range ci.Replicas {
					peers += " " + p.Name
					if !p.Current || p.Offline {
						current = 0
						peers += "(behind)"
					}
				}
				if len(ci.Replicas)+1 != info.Config.Replicas {
					current = 0
				}
				resp.Strs = append(resp.Strs, name+": "+peers)
			}
			resp.Ints[name+"/current"] = current
		}
	case "loadStart":
		lctx, stop := context.WithCancel(context.Background())
		a.stop = stop
		a.load = &mhLoadReport{}
		for w := range req.Workers {
			a.loadWG.Add(1)
			go func() {
				defer a.loadWG.Done()
				r := rand.New(rand.NewPCG(req.Seed, uint64(w)))
				for lctx.Err() == nil {
					lo, hi := randomRange(r, len(a.f.truth))
					sctx, cancel := context.WithTimeout(lctx, 30*time.Second)
					wrong, failed := a.f.checkScan(sctx, lo, hi)
					cancel()
					if lctx.Err() != nil && wrong == nil {
						return // stopped mid-scan
					}
					a.record(wrong, failed)
				}
			}()
		}
	case "loadStop":
		if a.stop == nil {
			return mhResp{Err: "no load running"}
		}
		a.stop()
		a.loadWG.Wait()
		a.stop = nil
		a.loadMu.Lock()
		resp.Load = a.load
		a.loadMu.Unlock()
	default:
		return mhResp{Err: "unknown op " + req.Op}
	}
	return resp
}

func jsAnswers(ctx context.Context, url string) error {
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second), nats.MaxReconnects(0))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(actx)
	return err
}

func (a *agent) record(wrong, failed error) {
	a.loadMu.Lock()
	defer a.loadMu.Unlock()
	l := a.load
	now := time.Now().UnixMilli()
	switch {
	case wrong != nil:
		l.Wrong++
		l.Samples = append(l.Samples, "WRONG: "+wrong.Error())
	case failed != nil:
		l.Failed++
		if l.FirstFailMs == 0 {
			l.FirstFailMs = now
		}
		l.LastFailMs = now
		if len(l.Samples) < 10 {
			l.Samples = append(l.Samples, time.UnixMilli(now).UTC().Format("15:04:05.000")+" failed: "+failed.Error())
		}
	default:
		l.OK++
	}
}
