package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
)

// scanctl up starts its scanservers with metrics on (HostMetrics) and
// prints each host's metrics URL: on a real cluster (ephemeral ports),
// every printed URL serves that process's metrics, the
// scanplane_build_info gauge among them, and a restarted host serves them
// again on its new port.
func TestUpPrintsMetricsURLs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 1, Hosts: 2, ServersPerHost: 1,
		Heartbeat: 200 * time.Millisecond, HostMetrics: true})
	defer http.DefaultClient.CloseIdleConnections()
	var out bytes.Buffer
	printReady(&out, cl, "data")
	for i := 0; i < cl.Hosts(); i++ {
		name := localcluster.HostName(i)
		m := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(name) + `\s+\S+\s+(http://\S+/metrics)\s+pid \d+$`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("no metrics URL for %s in:\n%s", name, out.String())
		}
		body := get(t, ctx, m[1])
		if !strings.Contains(body, `scanplane_scanserver_workers{host="`+name+`"`) {
			t.Errorf("%s (%s) does not serve %s's scan-server metrics:\n%.400s", m[1], name, name, body)
		}
		checkBuildInfo(t, m[1], body)
	}
	m := regexp.MustCompile(`http://(\S+)/metrics  pid`).FindStringSubmatch(out.String())
	if m == nil || m[1] != cl.HTTPAddr(0) {
		t.Fatalf("coordinator metrics URL %v, want http://%s/metrics in:\n%s", m, cl.HTTPAddr(0), out.String())
	}
	body := get(t, ctx, "http://"+m[1]+"/metrics")
	if !strings.Contains(body, "scanplane_coordinator_live_servers") {
		t.Errorf("the coordinator's metrics URL serves no coordinator metrics")
	}
	checkBuildInfo(t, m[1], body)

	// A restarted host serves its metrics on a new port.
	old := cl.Host(0).Ready.HTTP
	if err := cl.Kill(0); err != nil {
		t.Fatal(err)
	}
	if err := cl.Restart(ctx, 0); err != nil {
		t.Fatal(err)
	}
	addr := cl.Host(0).Ready.HTTP
	if addr == "" || !strings.Contains(get(t, ctx, "http://"+addr+"/metrics"), "scanplane_scanserver_workers") {
		t.Errorf("restarted host: metrics at %q (was %q)", addr, old)
	}
}

// buildInfoSeries is the scanplane_build_info series of /metrics.
var buildInfoSeries = regexp.MustCompile(`(?m)^scanplane_build_info\{commit="(?:[0-9a-f]{40}(?:-dirty)?|unknown)",goversion="go\d[^"]*",version="[^"]+"\} 1$`)

// checkBuildInfo fails t unless the metrics body of url has the
// scanplane_build_info gauge with its three labels.
func checkBuildInfo(t *testing.T, url, body string) {
	t.Helper()
	if !buildInfoSeries.MatchString(body) {
		t.Errorf("%s has no series matching %s", url, buildInfoSeries)
	}
}

func get(t *testing.T, ctx context.Context, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, res.Status, err)
	}
	return string(b)
}
