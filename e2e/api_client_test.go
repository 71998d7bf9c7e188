package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// apiClientRows is the table size of the API client's tests.
const apiClientRows = 200000

// apiUserProgram is a program of another module that scans a whole
// table with the Go client: through the public API (client.NewAPI with
// DefaultConfig, --api, TLS from --secrets), or with --nats through the
// actor remote (client.Dial) as the control. After --pause rows it
// prints "paused" and waits for a line on its standard input, so that
// its sockets can be inspected mid-scan. It prints the rows' count and
// content hash, and with --other whether a scan of that table was
// refused with ErrPermissionDenied.
const apiUserProgram = `package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"iter"
	"log"
	"os"
	"strings"
	"time"

	"github.com/scanplane/scanplane/client"
)

func main() {
	api := flag.String("api", "", "the coordinators' HTTP addresses, comma separated")
	nats := flag.String("nats", "", "scan through the actor remote with this NATS instead")
	secrets := flag.String("secrets", "", "secrets directory (ca.crt, client.crt, client.key)")
	table := flag.String("table", "demo", "table to scan")
	other := flag.String("other", "", "a table the certificate may not scan")
	pause := flag.Int("pause", 0, "rows after which to wait for a line on stdin")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := client.DefaultConfig()
	if *secrets != "" {
		tlsCfg, err := client.TLSFromSecrets(*secrets)
		if err != nil {
			log.Fatal(err)
		}
		cfg.TLS = tlsCfg
	}
	var all func(context.Context, string, client.Range, client.ScanOptions) iter.Seq2[client.Row, error]
	if *nats != "" {
		cfg.NATSURL = *nats
		c, err := client.Dial(ctx, cfg)
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		all = c.All
	} else {
		cfg.API = strings.Split(*api, ",")
		a, err := client.NewAPI(cfg)
		if err != nil {
			log.Fatal(err)
		}
		defer a.Close()
		all = a.All
	}
	in := bufio.NewReader(os.Stdin)
	h := fnv.New64a()
	n := 0
	for row, err := range all(ctx, *table, client.Range{}, client.ScanOptions{}) {
		if err != nil {
			log.Fatalf("after %d rows: %v", n, err)
		}
		h.Write(row.Key)
		h.Write([]byte{0})
		h.Write(row.Value)
		h.Write([]byte{0})
		n++
		if n == *pause {
			fmt.Println("paused")
			if _, err := in.ReadString('\n'); err != nil {
				log.Fatal(err)
			}
		}
	}
	fmt.Printf("rows %d hash %x\n", n, h.Sum64())
	if *other != "" {
		for _, err := range all(ctx, *other, client.Range{}, client.ScanOptions{}) {
			fmt.Printf("other denied %v: %v\n", errors.Is(err, client.ErrPermissionDenied), err)
			break
		}
	}
}
`

// rowsHash is the apiUserProgram's content hash of rows.
func rowsHash(rows []tablets.Entry) uint64 {
	h := fnv.New64a()
	for _, e := range rows {
		h.Write(e.Key)
		h.Write([]byte{0})
		h.Write(e.Value)
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// tcpSockets counts the TCP sockets process pid holds: those in LISTEN
// state (st 0A in /proc/PID/net/tcp and tcp6) and all of them. A
// socket is the process's when its inode is one of its file
// descriptors (/proc/PID/fd/N -> socket:[INODE]); the net files list
// every socket of the network namespace.
func tcpSockets(pid int) (listening, all int, err error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, 0, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	for _, f := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			return 0, 0, err
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		for _, line := range lines[1:] { // a header line first
			fields := strings.Fields(line)
			if len(fields) < 10 || !inodes[fields[9]] {
				continue
			}
			all++
			if fields[3] == "0A" {
				listening++
			}
		}
	}
	return listening, all, nil
}

// runPaused runs the program prog with args, waits for it to print
// "paused", counts its TCP sockets, lets it go on and returns the
// counts and what it printed after.
func runPaused(t *testing.T, ctx context.Context, prog string, args ...string) (listening, all int, out string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, prog, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	if err != nil || line != "paused\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("%s %q printed %q (%v) before pausing; stderr:\n%s", filepath.Base(prog), args, line, err, stderr.String())
	}
	listening, all, err = tcpSockets(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(r)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s %q: %v; stderr:\n%s", filepath.Base(prog), args, err, stderr.String())
	}
	return listening, all, string(rest)
}

// TestAPIClientPlain: on a plain cluster of real processes, a program of
// another module using client.NewAPI with DefaultConfig scans a 200 000
// row table exactly (count and content hash against the ground truth)
// while it holds no listening socket, only connections, mid-scan; the
// same program on the actor path (client.Dial), the control, listens.
func TestAPIClientPlain(t *testing.T) {
	clustertest.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root := sourceRoot(t)
	prog := buildUserProgram(t, ctx, root, apiUserProgram)
	cl := clustertest.Start(t, ctx, localcluster.Config{Hosts: 2, ServersPerHost: 2,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second})
	truth := tablets.GenerateRows(apiClientRows)
	clustertest.Ingest(t, ctx, cl.NATSURL(), nil, "demo", truth, 8)
	if err := cl.WaitServers(ctx, 4, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("rows %d hash %x\n", len(truth), rowsHash(truth))

	listening, all, out := runPaused(t, ctx, prog, "--api", cl.HTTPAddr(), "--pause", strconv.Itoa(len(truth)/2))
	t.Logf("API client mid-scan: %d listening TCP sockets of %d; %s", listening, all, strings.TrimSpace(out))
	if out != want {
		t.Fatalf("API client printed %q, want %q", out, want)
	}
	if listening != 0 || all == 0 {
		t.Fatalf("API client mid-scan: %d listening TCP sockets of %d; want none listening (and its connection)", listening, all)
	}

	listening, all, out = runPaused(t, ctx, prog, "--nats", cl.NATSURL(), "--pause", strconv.Itoa(len(truth)/2))
	t.Logf("actor-path client mid-scan (control): %d listening TCP sockets of %d", listening, all)
	if out != want {
		t.Fatalf("actor-path client printed %q, want %q", out, want)
	}
	if listening == 0 {
		t.Fatalf("actor-path client mid-scan: no listening socket; the count does not see its actor endpoint")
	}
}

// TestAPIClientSecured: on a secured cluster, the same program with a
// certificate from `scanctl secrets client alice --dir DIR --tables
// demo` (copied into a directory as client.crt and client.key beside
// ca.crt) scans the 200 000 rows of demo exactly without a listening
// socket and is refused another table with ErrPermissionDenied; an API
// client with the bearer token and the CA only scans too.
func TestAPIClientSecured(t *testing.T) {
	clustertest.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root := sourceRoot(t)
	prog := buildUserProgram(t, ctx, root, apiUserProgram)
	scanctl := clustertest.BuildTool(t, ctx, "scanctl")
	secDir, aliceDir := aliceSecrets(t, ctx, scanctl)
	dataDir := t.TempDir()
	cl := clustertest.Start(t, ctx, localcluster.Config{Hosts: 2, ServersPerHost: 2, DataDir: dataDir,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second, Secrets: secDir})
	t.Cleanup(func() { logTails(t, dataDir) })
	admin, err := cliutil.RemoteTLS(secDir, "admin")
	if err != nil {
		t.Fatal(err)
	}
	truth := tablets.GenerateRows(apiClientRows)
	clustertest.Ingest(t, ctx, cl.NATSURL(), admin, "demo", truth, 8)
	clustertest.Ingest(t, ctx, cl.NATSURL(), admin, "other", tablets.GenerateRows(1000), 2)
	if err := cl.WaitServers(ctx, 4, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	listening, all, out := runPaused(t, ctx, prog, "--api", cl.HTTPAddr(), "--secrets", aliceDir, "--other", "other",
		"--pause", strconv.Itoa(len(truth)/2))
	t.Logf("API client as alice mid-scan: %d listening TCP sockets of %d; %s", listening, all, strings.TrimSpace(out))
	lines := strings.SplitN(out, "\n", 2)
	if want := fmt.Sprintf("rows %d hash %x", len(truth), rowsHash(truth)); lines[0] != want {
		t.Fatalf("API client as alice printed %q, want %q", lines[0], want)
	}
	if len(lines) < 2 || !strings.HasPrefix(lines[1], "other denied true: ") || !strings.Contains(lines[1], `"alice"`) {
		t.Fatalf("alice's scan of other: %q; want ErrPermissionDenied naming alice", out)
	}
	if listening != 0 || all == 0 {
		t.Fatalf("API client mid-scan: %d listening TCP sockets of %d; want none listening (and its connection)", listening, all)
	}

	// The bearer token, with the CA only.
	token, err := os.ReadFile(filepath.Join(secDir, "http.token"))
	if err != nil {
		t.Fatal(err)
	}
	caTLS, err := client.TLSFromCA(filepath.Join(secDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := client.DefaultConfig()
	cfg.API, cfg.TLS, cfg.APIToken = []string{cl.HTTPAddr()}, caTLS, strings.TrimSpace(string(token))
	a, err := client.NewAPI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := checkAPIScan(ctx, a, "demo", truth, 1000, 61000); err != nil {
		t.Fatalf("with the bearer token: %v", err)
	}
	cfg.APIToken = "wrong"
	if b, err := client.NewAPI(cfg); err != nil {
		t.Fatal(err)
	} else {
		defer b.Close()
		if err := checkAPIScan(ctx, b, "demo", truth, 0, 10); !errors.Is(err, client.ErrUnauthenticated) {
			t.Fatalf("with a wrong bearer token: %v; want ErrUnauthenticated", err)
		}
	}
}

// checkAPIScan scans truth[a:b] of table through the API client and
// returns an error unless it got exactly those rows, in order.
func checkAPIScan(ctx context.Context, api *client.API, table string, truth []tablets.Entry, a, b int) error {
	rows, err := scanAPI(ctx, api, table, truth, a, b)
	if err != nil {
		return err
	}
	return sameRows(rows, truth[a:b])
}

func scanAPI(ctx context.Context, api *client.API, table string, truth []tablets.Entry, a, b int) ([]tablets.Entry, error) {
	rng := client.Range{Start: truth[a].Key}
	if b < len(truth) {
		rng.End = truth[b].Key
	}
	var got []tablets.Entry
	for row, err := range api.All(ctx, table, rng, client.ScanOptions{}) {
		if err != nil {
			return got, fmt.Errorf("after %d rows: %w", len(got), err)
		}
		got = append(got, tablets.Entry{Key: row.Key, Value: row.Value})
	}
	return got, nil
}

// TestAPIClientFailover: three coordinators; an API client given the
// HTTP address of one of them learns the other two from it, scans
// 200 000 rows, and the coordinator serving the scan is SIGKILLed
// mid-scan: the scan resumes on a discovered one after the last key
// received and returns exactly the table's rows.
func TestAPIClientFailover(t *testing.T) {
	clustertest.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dataDir := t.TempDir()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 3, Hosts: 2, ServersPerHost: 2, DataDir: dataDir,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 90 * time.Second})
	t.Cleanup(func() { logTails(t, dataDir) })
	truth := tablets.GenerateRows(apiClientRows)
	clustertest.Ingest(t, ctx, cl.NATSURL(), nil, table, truth, 8)
	if err := cl.WaitServers(ctx, 4, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	cfg := client.DefaultConfig()
	cfg.API = []string{cl.HTTPAddr(0)}
	// The survivor's own client may wait for the tablet actors the
	// killed coordinator held to move: a bound for a loaded machine.
	cfg.CoordinatorWait = time.Minute
	a, err := client.NewAPI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	want := []string{cl.HTTPAddr(0), cl.HTTPAddr(1), cl.HTTPAddr(2)}
	if err := testutil.PollErr(2*time.Minute, func() error {
		if _, err := a.ListTables(ctx); err != nil {
			return err
		}
		got := a.Addrs()
		slices.Sort(got[1:])
		slices.Sort(want[1:])
		if !slices.Equal(got, want) {
			return fmt.Errorf("addresses %v, want %v", got, want)
		}
		return nil
	}); err != nil {
		t.Fatalf("discovering the coordinators: %v", err)
	}
	sctx, scancel := context.WithTimeout(ctx, 4*time.Minute)
	defer scancel()
	rows := a.Scan(sctx, table, client.Range{}, client.ScanOptions{})
	defer rows.Close()
	var got []tablets.Entry
	for rows.Next() {
		got = append(got, tablets.Entry{Key: rows.Row().Key, Value: rows.Row().Value})
		if len(got) == len(truth)/4 {
			if err := cl.KillCoordinator(0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("after %d rows: %v", len(got), err)
	}
	if err := sameRows(got, truth); err != nil {
		t.Fatal(err)
	}
	st := rows.Stats()
	t.Logf("scan with coordinator 0 killed after %d rows: %+v", len(truth)/4, st)
	if st.Resumes < 1 {
		t.Fatalf("stats %+v: no resume, so the scan did not lose its coordinator mid-stream", st)
	}
	// Later calls go to the survivor.
	tbs, err := a.ListTables(ctx)
	if err != nil || len(tbs) != 1 || tbs[0].GetRows() != uint64(len(truth)) {
		t.Fatalf("ListTables after the kill: %v, %v", tbs, err)
	}
}

// BenchmarkAPIClientScan scans a whole 200 000-row table (8 tablets, 3
// hosts × 2 servers, one coordinator) in turns through the Go client on
// the actor path and through its API client (client.NewAPI, gRPC over
// h2c to the coordinator's HTTP port): with proofs checked against the
// coordinator's record (api, the default), against roots read from NATS
// (api-nats, APIReadMeta), and without proofs (api-plain,
// AllowUnverified); every row checked against the ground truth. It
// reports rows/s of each, api/go, api/api-plain and api-nats/api-plain
// (ratios of their rows/s) and the CPU the coordinator and this process
// spent per row.
func BenchmarkAPIClientScan(b *testing.B) {
	f := startWith(b, 3, 2, apiClientRows, 8)
	ctx := context.Background()
	newAPI := func(readMeta bool) *client.API {
		cfg := client.DefaultConfig()
		cfg.API, cfg.NATSURL, cfg.APIReadMeta = []string{f.cl.HTTPAddr()}, f.cl.NATSURL(), readMeta
		a, err := client.NewAPI(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return a
	}
	api, apiNATS := newAPI(false), newAPI(true)
	defer api.Close()
	defer apiNATS.Close()
	scan := func(name string, rows interface {
		Next() bool
		Row() client.Row
		Err() error
		Close() error
	}) {
		defer rows.Close()
		n := 0
		for rows.Next() {
			r := rows.Row()
			if n >= len(f.truth) || !bytes.Equal(r.Key, f.truth[n].Key) || !bytes.Equal(r.Value, f.truth[n].Value) {
				b.Fatalf("%s: row %d is %q, not the ground truth's", name, n, r.Key)
			}
			n++
		}
		if rows.Err() != nil || n != len(f.truth) {
			b.Fatalf("%s: %d rows, err %v", name, n, rows.Err())
		}
	}
	kinds := []benchScan{
		{name: "go", scan: func() { scan("go", f.c.Scan(ctx, table, client.Range{}, client.ScanOptions{})) }},
		{name: "api", scan: func() { scan("api", api.Scan(ctx, table, client.Range{}, client.ScanOptions{})) }},
		{name: "api-nats", scan: func() { scan("api-nats", apiNATS.Scan(ctx, table, client.Range{}, client.ScanOptions{})) }},
		{name: "api-plain", scan: func() {
			scan("api-plain", api.Scan(ctx, table, client.Range{}, client.ScanOptions{AllowUnverified: true}))
		}},
	}
	sideBySide(b, f.cl.Coordinator().PID(), len(f.truth), kinds)
	b.ReportMetric(kinds[0].t.Seconds()/kinds[1].t.Seconds(), "api/go")
	b.ReportMetric(kinds[3].t.Seconds()/kinds[1].t.Seconds(), "api/api-plain")
	b.ReportMetric(kinds[3].t.Seconds()/kinds[2].t.Seconds(), "api-nats/api-plain")
}

// aliceSecrets makes a cluster's secrets with scanctl (secrets init) and
// a client certificate for alice that may scan only the table demo, and
// copies alice's certificate, key and the CA into a directory of their
// own as client.crt, client.key and ca.crt, as a user given them would.
func aliceSecrets(t *testing.T, ctx context.Context, scanctl string) (secDir, aliceDir string) {
	t.Helper()
	secDir = filepath.Join(t.TempDir(), "secrets")
	for _, args := range [][]string{{"secrets", "init", "--dir", secDir}, {"secrets", "client", "alice", "--dir", secDir, "--tables", "demo"}} {
		if out, err := exec.CommandContext(ctx, scanctl, args...).CombinedOutput(); err != nil {
			t.Fatalf("scanctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	aliceDir = filepath.Join(t.TempDir(), "alice")
	if err := os.Mkdir(aliceDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for from, to := range map[string]string{"ca.crt": "ca.crt", "alice.crt": "client.crt", "alice.key": "client.key"} {
		data, err := os.ReadFile(filepath.Join(secDir, from))
		if err == nil {
			err = os.WriteFile(filepath.Join(aliceDir, to), data, 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return secDir, aliceDir
}
