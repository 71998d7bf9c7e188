package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/tablets/rowfmt"
)

// scanctlRows is the table size of the scanctl scan tests: its ranges'
// output is many times what a pipe and scanctl's buffer hold, so a
// scanctl whose output is not read stays mid-scan.
const scanctlRows = 100000

// scanctlResult is what a scanctl scan printed and held.
type scanctlResult struct {
	out       []byte
	stderr    string
	code      int
	listening int // TCP sockets in LISTEN state it held mid-scan
	all       int // all its TCP sockets mid-scan
}

// runScanctlScan runs scanctl with args, reads the first line it
// prints, counts its TCP sockets while it waits for its output to be
// read (it is then mid-scan: the rest does not fit in the pipe), reads
// the rest and waits for it to end.
func runScanctlScan(t *testing.T, ctx context.Context, scanctl string, args ...string) scanctlResult {
	t.Helper()
	cmd := scanctlCmd(ctx, scanctl, args...)
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
	first, ferr := r.ReadBytes('\n')
	var res scanctlResult
	if ferr == nil {
		if res.listening, res.all, err = tcpSockets(cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatal(err)
		}
	}
	rest, _ := io.ReadAll(r)
	err = cmd.Wait()
	res.out, res.stderr = append(first, rest...), stderr.String()
	if ee, ok := err.(*exec.ExitError); ok {
		res.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("scanctl %q: %v", args, err)
	}
	return res
}

// scanctlCmd is scanctl with args, in this process's environment less
// the variables that would pick its secrets or API addresses instead of
// its flags.
func scanctlCmd(ctx context.Context, scanctl string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, scanctl, args...)
	cmd.Env = withoutEnv(cliutil.SecretsEnv, client.APIEnv)
	return cmd
}

// withoutEnv is the process's environment without the variables names.
func withoutEnv(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		keep := true
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				keep = false
			}
		}
		if keep {
			env = append(env, kv)
		}
	}
	return env
}

// tsv is rows as scanctl scan prints them (--format tsv).
func tsv(t *testing.T, rows []tablets.Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := rowfmt.NewWriter(&buf, rowfmt.Config{Format: rowfmt.TSV})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := w.Write(r.Key, r.Value); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestScanctlScanOpensNoListeningSocket: the real `scanctl scan`, by
// default, scans through a coordinator's HTTP port: on a plain and on a
// secured cluster (with a certificate granted only the table demo) it
// prints exactly the rows of a range while it holds no listening
// socket, only connections; its --count and --limit agree with the
// ground truth; a table the certificate may not scan fails with exit 1
// and one line naming the principal and the table. The same command with --via actor
// (the control) holds its actor endpoint's listening socket.
func TestScanctlScanOpensNoListeningSocket(t *testing.T) {
	clustertest.SkipShort(t)
	for _, secure := range []bool{false, true} {
		t.Run(fmt.Sprintf("secure=%v", secure), func(t *testing.T) { testScanctlScanNoListen(t, secure) })
	}
}

func testScanctlScanNoListen(t *testing.T, secure bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	scanctl := clustertest.BuildTool(t, ctx, "scanctl")
	cfg := localcluster.Config{Hosts: 2, ServersPerHost: 2, Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second,
		DataDir: t.TempDir()}
	var clientArgs []string
	if secure {
		secDir, aliceDir := aliceSecrets(t, ctx, scanctl)
		cfg.Secrets = secDir
		clientArgs = []string{"--secrets", aliceDir}
	}
	cl := clustertest.Start(t, ctx, cfg)
	t.Cleanup(func() { logTails(t, cfg.DataDir) })
	var admin *tls.Config
	if secure {
		var err error
		if admin, err = cliutil.RemoteTLS(cfg.Secrets, "admin"); err != nil {
			t.Fatal(err)
		}
	}
	truth := tablets.GenerateRows(scanctlRows)
	clustertest.Ingest(t, ctx, cl.NATSURL(), admin, "demo", truth, 8)
	clustertest.Ingest(t, ctx, cl.NATSURL(), admin, "other", tablets.GenerateRows(100), 1)
	if err := cl.WaitServers(ctx, 4, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	base := append([]string{"scan", "--nats", cl.NATSURL(), "--table", "demo", "--timeout", "2m"}, clientArgs...)
	const a, b = 1000, 91000 // truth[a:b]: across all but the last tablet
	rng := []string{"--start", string(truth[a].Key), "--end", string(truth[b].Key)}
	want := tsv(t, truth[a:b])

	res := runScanctlScan(t, ctx, scanctl, append(base, rng...)...)
	t.Logf("scanctl scan mid-scan: %d listening TCP sockets of %d; %d bytes out, exit %d", res.listening, res.all, len(res.out), res.code)
	if res.code != 0 || !bytes.Equal(res.out, want) {
		t.Fatalf("scanctl scan: exit %d, %d bytes (%d lines), stderr %q; want exit 0 and the %d rows of the range (%d bytes)",
			res.code, len(res.out), bytes.Count(res.out, []byte("\n")), res.stderr, b-a, len(want))
	}
	if res.listening != 0 || res.all == 0 {
		t.Fatalf("scanctl scan mid-scan: %d listening TCP sockets of %d; want none listening (and its connections)", res.listening, res.all)
	}

	// The control: the actor path listens for the scan servers.
	res = runScanctlScan(t, ctx, scanctl, append(append(base, "--via", "actor"), rng...)...)
	t.Logf("scanctl scan --via actor mid-scan: %d listening TCP sockets of %d", res.listening, res.all)
	if res.code != 0 || !bytes.Equal(res.out, want) {
		t.Fatalf("scanctl scan --via actor: exit %d, %d bytes, stderr %q; want the %d rows of the range", res.code, len(res.out), res.stderr, b-a)
	}
	if res.listening == 0 {
		t.Fatal("scanctl scan --via actor mid-scan: no listening socket; the count does not see its actor endpoint")
	}

	for _, tc := range []struct {
		args []string
		want []byte
	}{
		{append(append([]string{}, rng...), "--count"), []byte(strconv.Itoa(b-a) + "\n")},
		{append(append([]string{}, rng...), "--count", "--limit", "77"), []byte("77\n")},
		{[]string{"--count"}, []byte(strconv.Itoa(len(truth)) + "\n")},
		{[]string{"--start", string(truth[a].Key), "--limit", "10"}, tsv(t, truth[a:a+10])},
	} {
		out, err := scanctlCmd(ctx, scanctl, append(append([]string{}, base...), tc.args...)...).Output()
		if err != nil || !bytes.Equal(out, tc.want) {
			t.Errorf("scanctl scan %q: %v, printed %q; want %q", tc.args, err, trim(out), trim(tc.want))
		}
	}
	if !secure {
		return
	}
	other := append([]string{"scan", "--nats", cl.NATSURL(), "--table", "other", "--timeout", "2m"}, clientArgs...)
	for _, args := range [][]string{other, append(other, "--count")} {
		cmd := scanctlCmd(ctx, scanctl, args...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		ee, ok := err.(*exec.ExitError)
		msg := strings.TrimSpace(errOut.String())
		if !ok || ee.ExitCode() != 1 || out.Len() != 0 || strings.Contains(msg, "\n") ||
			!strings.Contains(msg, `principal "alice" may not scan table "other"`) {
			t.Errorf("alice: scanctl %q: %v, stdout %q, stderr %q; want exit 1, no rows, one line: alice may not scan other", args, err, out.String(), msg)
		}
	}
}

// trim is b's first 200 bytes, for messages.
func trim(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}
