package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSecretsInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	caDir := filepath.Join(t.TempDir(), "ca")
	for _, tc := range []struct {
		args     []string
		code     int
		out, err string
	}{
		{args: []string{"secrets"}, code: 2, err: "want 'scanctl secrets init"},
		{args: []string{"secrets", "init"}, code: 2, err: "--dir is required"},
		{args: []string{"secrets", "init", "--dir", dir, "--hosts", "a b"}, code: 2, err: `--hosts: "a b"`},
		{args: []string{"secrets", "init", "--dir", dir, "--hosts", "node1,10.0.0.1"}, code: 0, out: "pass --secrets " + dir},
		{args: []string{"secrets", "init", "--dir", dir}, code: 1, err: "secrets already exist (pass --force to replace them)"},
		{args: []string{"secrets", "init", "--dir", dir, "--force"}, code: 0, out: "wrote the CA's private key to " + filepath.Join(dir+"-ca", "ca.key")},
		{args: []string{"secrets", "init", "--dir", dir, "--force", "--ca-dir", dir}, code: 2, err: "--ca-dir " + dir + " is the secrets directory"},
		{args: []string{"secrets", "init", "--dir", dir, "--force", "--ca-dir", caDir}, code: 0, out: "wrote the CA's private key to " + filepath.Join(caDir, "ca.key")},
		{args: []string{"up", "--secrets", dir}, code: 2, err: "--secrets: `scanctl up` makes its own secrets; pass --secure"},
		{args: []string{"scan", "--secrets", filepath.Join(dir, "nope"), "--table", "t"}, code: 2, err: "ca.crt"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errOut)
		if code != tc.code || !strings.Contains(out.String(), tc.out) || !strings.Contains(errOut.String(), tc.err) {
			t.Errorf("%q: code %d, out %q, err %q; want code %d, out ~%q, err ~%q", tc.args, code, out.String(), errOut.String(), tc.code, tc.out, tc.err)
		}
	}
	for _, f := range []string{"ca.crt", "client.crt", "client.key", "coordinator.key", "scanserver.crt", "admin.key"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ca.key")); !os.IsNotExist(err) {
		t.Errorf("%s/ca.key: %v, want none", dir, err)
	}
	if _, err := os.Stat(filepath.Join(caDir, "ca.key")); err != nil {
		t.Error(err)
	}
}
