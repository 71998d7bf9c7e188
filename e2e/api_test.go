package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
	"github.com/scanplane/scanplane/api/scanplane/v1/scanplanev1connect"
	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/grants"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// grpcurlPkg is the grpcurl the tests build from its Go module.
const grpcurlPkg = "github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4"

// apiRange is a scan of truth[a:b] through the public API: keys from
// truth[a] to truth[b] (b = len(truth): to the table's end).
type apiRange struct{ a, b int }

func (r apiRange) keys(truth []tablets.Entry) (start, end []byte) {
	start = truth[r.a].Key
	if r.b < len(truth) {
		end = truth[r.b].Key
	}
	return start, end
}

// apiRanges: the whole table, one spanning tablets, one row, an empty range.
func apiRanges(n int) []apiRange {
	return []apiRange{{0, n}, {137, n/2 + 321}, {n - 7, n - 6}, {500, 500}}
}

// sameRows is nil when got is exactly want: same rows, same order.
func sameRows(got []tablets.Entry, want []tablets.Entry) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d rows, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) {
			return fmt.Errorf("row %d is %q=%.20q, want %q=%.20q", i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
		}
	}
	return nil
}

// apiScan scans through c and returns the rows and the number of messages.
func apiScan(ctx context.Context, c scanplanev1connect.ScanServiceClient, req *scanplanev1.ScanRequest) ([]tablets.Entry, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	st, err := c.Scan(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, 0, err
	}
	defer st.Close()
	var rows []tablets.Entry
	msgs := 0
	for st.Receive() {
		msgs++
		for _, r := range st.Msg().GetRows() {
			rows = append(rows, tablets.Entry{Key: r.GetKey(), Value: r.GetValue()})
		}
	}
	return rows, msgs, st.Err()
}

// h2c is an HTTP client that speaks HTTP/2 over plain TCP (prior
// knowledge), as gRPC clients do with -plaintext.
func h2c() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// TestPublicAPI scans ranges through the scanplane.v1 API of a real
// coordinator (its HTTP port) with a connect-go client generated from
// the proto (gRPC and Connect protocols), grpcurl, curl and a Python
// grpcio client, and compares every row with the ground truth.
func TestPublicAPI(t *testing.T) {
	f := startWith(t, 2, 2, 20000, 4)
	ctx := context.Background()
	addr := f.cl.HTTPAddr()
	url := "http://" + addr
	clients := map[string]scanplanev1connect.ScanServiceClient{
		"grpc":    scanplanev1connect.NewScanServiceClient(h2c(), url, connect.WithGRPC()),
		"connect": scanplanev1connect.NewScanServiceClient(http.DefaultClient, url),
	}
	for name, c := range clients {
		t.Run(name, func(t *testing.T) {
			for _, r := range apiRanges(len(f.truth)) {
				start, end := r.keys(f.truth)
				got, msgs, err := apiScan(ctx, c, &scanplanev1.ScanRequest{Table: table, Start: start, End: end})
				if err != nil {
					t.Fatalf("scan [%d, %d): %v", r.a, r.b, err)
				}
				if err := sameRows(got, f.truth[r.a:r.b]); err != nil {
					t.Fatalf("scan [%d, %d): %v", r.a, r.b, err)
				}
				t.Logf("scan [%d, %d): %d rows in %d messages", r.a, r.b, len(got), msgs)
			}
			got, _, err := apiScan(ctx, c, &scanplanev1.ScanRequest{Table: table, Start: f.truth[10].Key, Limit: 25,
				Hints: map[string]string{"scan_type": "interactive"}})
			if err == nil {
				err = sameRows(got, f.truth[10:35])
			}
			if err != nil {
				t.Fatalf("scan with limit 25: %v", err)
			}
		})
	}

	t.Run("errors", func(t *testing.T) {
		c := clients["grpc"]
		for _, tc := range []struct {
			req  *scanplanev1.ScanRequest
			code connect.Code
			says string
		}{
			{&scanplanev1.ScanRequest{Table: "nosuchtable"}, connect.CodeNotFound, `"nosuchtable"`},
			{&scanplanev1.ScanRequest{Table: "bad name"}, connect.CodeInvalidArgument, `"bad name"`},
			{&scanplanev1.ScanRequest{Table: table, Start: []byte("b"), End: []byte("a")}, connect.CodeInvalidArgument, "start b is after end a"},
			{&scanplanev1.ScanRequest{Table: table, Limit: -3}, connect.CodeInvalidArgument, "limit -3"},
		} {
			_, _, err := apiScan(ctx, c, tc.req)
			if connect.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), "\n") {
				t.Errorf("scan %v: %v; want one line with code %v naming %s", tc.req, err, tc.code, tc.says)
			}
		}
	})

	t.Run("ListTables and Status", func(t *testing.T) {
		c := clients["connect"]
		lt, err := c.ListTables(ctx, connect.NewRequest(&scanplanev1.ListTablesRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if tbs := lt.Msg.GetTables(); len(tbs) != 1 || tbs[0].GetName() != table || tbs[0].GetRows() != uint64(len(f.truth)) || tbs[0].GetTablets() != 4 {
			t.Fatalf("ListTables: %v; want %s with %d rows in 4 tablets", tbs, table, len(f.truth))
		}
		st, err := c.Status(ctx, connect.NewRequest(&scanplanev1.StatusRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Msg.GetServers()) != 4 || len(st.Msg.GetCoordinators()) != 1 || st.Msg.GetCoordinators()[0].GetHttpAddress() != addr {
			t.Fatalf("Status: %v; want 4 servers and this coordinator", st.Msg)
		}
	})

	t.Run("grpcurl", func(t *testing.T) {
		grpcurl := buildGrpcurl(t)
		out := run(t, exec.Command(grpcurl, "-plaintext", addr, "list"))
		if !strings.Contains(out, "scanplane.v1.ScanService") {
			t.Fatalf("grpcurl list (server reflection): %q lacks scanplane.v1.ScanService", out)
		}
		for _, r := range apiRanges(len(f.truth)) {
			start, end := r.keys(f.truth)
			req := fmt.Sprintf(`{"table":%q,"start":%q,"end":%q}`, table, base64.StdEncoding.EncodeToString(start), base64.StdEncoding.EncodeToString(end))
			got, err := jsonRows(strings.NewReader(run(t, exec.Command(grpcurl, "-plaintext", "-d", req, addr, "scanplane.v1.ScanService/Scan"))))
			if err == nil {
				err = sameRows(got, f.truth[r.a:r.b])
			}
			if err != nil {
				t.Fatalf("grpcurl scan [%d, %d): %v", r.a, r.b, err)
			}
		}
	})

	t.Run("curl", func(t *testing.T) {
		for _, tool := range []string{"curl", "perl", "base64"} {
			if _, err := exec.LookPath(tool); err != nil {
				t.Skipf("api/examples/curl-scan.sh needs %s, which is not on PATH", tool)
			}
		}
		script := filepath.Join(sourceRoot(t), "api", "examples", "curl-scan.sh")
		r := apiRange{137, len(f.truth)/2 + 321}
		out := run(t, exec.Command("sh", script, addr, table, string(f.truth[r.a].Key), string(f.truth[r.b].Key)))
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if last := lines[len(lines)-1]; last != "{}" {
			t.Fatalf("curl scan ended with %q, want {} (the end of a stream without error)", last)
		}
		got, err := jsonRows(strings.NewReader(strings.Join(lines[:len(lines)-1], "\n")))
		if err == nil {
			err = sameRows(got, f.truth[r.a:r.b])
		}
		if err != nil {
			t.Fatalf("curl scan [%d, %d): %v", r.a, r.b, err)
		}
		out = run(t, exec.Command("sh", script, addr, "nosuchtable", "", ""))
		if !strings.Contains(out, `"code":"not_found"`) {
			t.Fatalf("curl scan of a missing table: %q, want code not_found", out)
		}
	})

	t.Run("python", func(t *testing.T) {
		python := pythonWithGRPC(t)
		root := sourceRoot(t)
		stubs := t.TempDir()
		run(t, exec.Command(python, "-m", "grpc_tools.protoc", "-I"+filepath.Join(root, "api"), "--python_out="+stubs, "--grpc_python_out="+stubs,
			filepath.Join(root, "api", "scanplane", "v1", "scan.proto")))
		for _, r := range apiRanges(len(f.truth)) {
			start, end := r.keys(f.truth)
			cmd := exec.Command(python, filepath.Join(root, "api", "examples", "scan.py"), addr, table, string(start), string(end))
			cmd.Env = append(os.Environ(), "PYTHONPATH="+stubs)
			var got []tablets.Entry
			sc := bufio.NewScanner(strings.NewReader(run(t, cmd)))
			for sc.Scan() {
				k, v, ok := bytes.Cut(sc.Bytes(), []byte("\t"))
				if !ok {
					t.Fatalf("python scan printed %q, want key TAB value", sc.Text())
				}
				got = append(got, tablets.Entry{Key: bytes.Clone(k), Value: bytes.Clone(v)})
			}
			if err := sameRows(got, f.truth[r.a:r.b]); err != nil {
				t.Fatalf("python scan [%d, %d): %v", r.a, r.b, err)
			}
		}
		cmd := exec.Command(python, filepath.Join(root, "api", "examples", "scan.py"), addr, "nosuchtable", "", "")
		cmd.Env = append(os.Environ(), "PYTHONPATH="+stubs)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "NOT_FOUND") {
			t.Fatalf("python scan of a missing table: %v, %q; want NOT_FOUND", err, out)
		}
	})
}

// TestPublicAPISecured: on a secured cluster the API is served over TLS
// with the HTTP port's authentication: a client certificate of the
// cluster scans exactly the rows; a client without one is refused.
func TestPublicAPISecured(t *testing.T) {
	clustertest.SkipShort(t)
	ctx := context.Background()
	secDir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(secDir, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	cl := clustertest.Start(t, ctx, localcluster.Config{Hosts: 1, ServersPerHost: 2, DataDir: dataDir,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second, Secrets: secDir})
	t.Cleanup(func() { logTails(t, dataDir) })
	admin, err := cliutil.RemoteTLS(secDir, "admin")
	if err != nil {
		t.Fatal(err)
	}
	truth := tablets.GenerateRows(5000)
	clustertest.Ingest(t, ctx, cl.NATSURL(), admin, table, truth, 3)
	hc, err := secrets.HTTPClient(secDir, "client")
	if err != nil {
		t.Fatal(err)
	}
	certTLS := hc.Transport.(*http.Transport).TLSClientConfig
	https := func(cfg *tls.Config) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}}
	}
	url := "https://" + cl.HTTPAddr()
	c := scanplanev1connect.NewScanServiceClient(https(certTLS), url, connect.WithGRPC())
	for _, r := range apiRanges(len(truth)) {
		start, end := r.keys(truth)
		got, _, err := apiScan(ctx, c, &scanplanev1.ScanRequest{Table: table, Start: start, End: end})
		if err == nil {
			err = sameRows(got, truth[r.a:r.b])
		}
		if err != nil {
			t.Fatalf("scan [%d, %d) with a client certificate: %v", r.a, r.b, err)
		}
	}
	// A certificate whose grant names other tables is refused before
	// any row, as on the actor path.
	if err := secrets.IssueClient(secDir, mustGrant(t, "alice", "other-*"), secrets.ClientOptions{}); err != nil {
		t.Fatal(err)
	}
	alice, err := tls.LoadX509KeyPair(filepath.Join(secDir, "alice.crt"), filepath.Join(secDir, "alice.key"))
	if err != nil {
		t.Fatal(err)
	}
	aliceTLS := certTLS.Clone()
	aliceTLS.Certificates = []tls.Certificate{alice}
	rows, _, err := apiScan(ctx, scanplanev1connect.NewScanServiceClient(https(aliceTLS), url, connect.WithGRPC()), &scanplanev1.ScanRequest{Table: table})
	if connect.CodeOf(err) != connect.CodePermissionDenied || len(rows) != 0 || !strings.Contains(err.Error(), `"alice"`) {
		t.Fatalf("scan of %q granted only other-*: %d rows, %v; want permission denied naming alice", table, len(rows), err)
	}
	noCert := certTLS.Clone()
	noCert.Certificates = nil
	_, _, err = apiScan(ctx, scanplanev1connect.NewScanServiceClient(https(noCert), url, connect.WithGRPC()), &scanplanev1.ScanRequest{Table: table})
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("scan without a client certificate: %v; want code unauthenticated", err)
	}
}

// jsonRows decodes a sequence of ScanResponse JSON objects (protojson:
// keys and values base64).
func jsonRows(r io.Reader) ([]tablets.Entry, error) {
	var rows []tablets.Entry
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Rows []struct{ Key, Value []byte }
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return rows, nil
		} else if err != nil {
			return nil, fmt.Errorf("decoding the JSON responses: %w", err)
		}
		for _, r := range m.Rows {
			rows = append(rows, tablets.Entry{Key: r.Key, Value: r.Value})
		}
	}
}

// run runs cmd (bounded) and returns its standard output; a failure
// fails t with the output.
func run(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s: %v\nstdout: %.2000s\nstderr: %.2000s", strings.Join(cmd.Args, " "), err, out.String(), errOut.String())
	}
	return out.String()
}

func sourceRoot(t *testing.T) string {
	t.Helper()
	root, err := localcluster.SourceRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// buildGrpcurl builds grpcurlPkg into a temporary directory, or skips t
// when it cannot be built here (no module proxy, no cached module).
func buildGrpcurl(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", grpcurlPkg)
	cmd.Env = append(os.Environ(), "GOBIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("grpcurl cannot be built here (go install %s: %v; offline without it in the module cache?):\n%.2000s", grpcurlPkg, err, out)
	}
	return filepath.Join(dir, "grpcurl")
}

// pythonWithGRPC is a python3 that imports grpc and grpc_tools (Debian's
// python3-grpcio and python3-grpc-tools), or skips t.
func pythonWithGRPC(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if err := exec.Command(p, "-c", "import grpc, grpc_tools.protoc").Run(); err == nil {
			return p
		}
	}
	t.Skip("no python3 with grpc and grpc_tools (Debian: apt-get install python3-grpcio python3-grpc-tools); .ci/run installs them")
	return ""
}

func mustGrant(t *testing.T, principal string, tables ...string) grants.Grant {
	t.Helper()
	g, err := grants.New(principal, tables)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
