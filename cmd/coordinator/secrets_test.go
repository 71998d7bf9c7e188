package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/cliutil"
)

// TestSecretsListen (issue 9): with --secrets the actor remote has mutual
// TLS, so the coordinator and scanserver listen on 0.0.0.0 without
// --insecure; HTTP and NATS, which have no TLS yet, are still refused; a
// --secrets directory that is not one is a one-line error.
func TestSecretsListen(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs coordinator and scanserver processes")
	}
	coord := buildCmd(t, ".", "coordinator")
	server := buildCmd(t, "../scanserver", "scanserver")
	secrets := filepath.Join(t.TempDir(), "secrets")
	if err := cliutil.InitSecrets(secrets, cliutil.SecretsOptions{}); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	base := []string{"--data", data, "--nats-listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--cluster-provider", "none"}

	// Not a secrets directory: exit 2, one line naming --secrets.
	for _, bin := range []struct{ path, role string }{{coord, "coordinator"}, {server, "scanserver"}} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var errOut bytes.Buffer
		cmd := exec.CommandContext(ctx, bin.path, "--secrets", t.TempDir(), "--nats", "nats://127.0.0.1:1")
		cmd.Stderr = &errOut
		err := cmd.Run()
		cancel()
		ee, ok := err.(*exec.ExitError)
		msg := strings.TrimSpace(errOut.String())
		if !ok || ee.ExitCode() != 2 || strings.Contains(msg, "\n") || !strings.Contains(msg, "--secrets") || !strings.Contains(msg, "ca.crt") {
			t.Fatalf("%s --secrets EMPTYDIR: %v, stderr %q; want exit 2 and one line naming --secrets and ca.crt", bin.role, err, msg)
		}
	}
	// HTTP has no TLS: --secrets does not let it off loopback.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, coord, "--data", data, "--secrets", secrets, "--http", "0.0.0.0:0")
	cmd.Stderr = &errOut
	if err := cmd.Run(); err == nil || !strings.Contains(errOut.String(), "TLS is not implemented yet for --http") {
		t.Fatalf("coordinator --secrets --http 0.0.0.0:0: %v, stderr %q; want a refusal", err, errOut.String())
	}

	co, r := startReady(t, coord, append(base, "--listen", "0.0.0.0:0", "--secrets", secrets)...)
	ss, _ := startReady(t, server, "--nats", r.NATS, "--listen", "0.0.0.0:0", "--host", "h1", "--secrets", secrets)
	ss.stop(t)
	co.stop(t)
	if strings.Contains(co.stderr.String(), "--insecure") {
		t.Errorf("coordinator with --secrets warned about --insecure:\n%s", co.stderr.String())
	}
}
