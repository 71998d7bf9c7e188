package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/secrets"
)

// runSecrets is `scanctl secrets init`: a new secrets directory
// (docs/security.md).
func runSecrets(_ context.Context, _ *globals, args []string, out, errOut io.Writer) error {
	help := len(args) > 0 && (args[0] == "-h" || args[0] == "--help")
	if len(args) == 0 || (args[0] != "init" && !help) {
		return usageError{errors.New("want 'scanctl secrets init --dir DIR [--ca-dir CADIR] [--hosts h1,h2,...] [--server-hosts a,b,...] [--force]'")}
	}
	if help {
		args = append([]string{"init"}, args...)
	}
	fs := flag.NewFlagSet("secrets init", flag.ContinueOnError)
	dir := fs.String("dir", "", "`DIR` to create the secrets in (required; created 0700)")
	caDir := fs.String("ca-dir", "", "`CADIR` for the CA's private key, which no process needs (created 0700; default DIR-ca, beside DIR); keep it off the nodes")
	hosts := fs.String("hosts", "", "`HOSTS` (names or IP addresses) the certificates are valid for, comma separated (127.0.0.1, ::1 and localhost always are)")
	serverHosts := fs.String("server-hosts", "", "scan server host `IDS` (their --host), comma separated: a certificate each (scanserver.HOST.crt) that may publish only that host's heartbeats and signals on NATS; with any, scanserver.crt no longer connects to NATS")
	force := fs.Bool("force", false, "replace existing secrets (every certificate signed by the old CA stops being accepted)")
	if err := cliutil.ParseFlags(fs, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			commandHelp(out, "secrets", fs)
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if *dir == "" {
		return usageError{errors.New("--dir is required")}
	}
	var hs []string
	if *hosts != "" {
		hs = strings.Split(*hosts, ",")
	}
	var shs []string
	if *serverHosts != "" {
		shs = strings.Split(*serverHosts, ",")
	}
	if err := secrets.Init(*dir, secrets.InitOptions{Hosts: hs, ServerHosts: shs, CADir: *caDir, Force: *force}); err != nil {
		if errors.Is(err, secrets.ErrExist) {
			return err
		}
		return usageError{err}
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		abs = *dir
	}
	ca := *caDir
	if ca == "" {
		ca = secrets.DefaultCADir(*dir)
	}
	if a, err := filepath.Abs(ca); err == nil {
		ca = a
	}
	fmt.Fprintf(out, "wrote a CA certificate and certificates for %s in %s\n", strings.Join(secrets.Roles, ", "), abs)
	fmt.Fprintf(out, "wrote the CA's private key to %s: no process needs it; keep it off the nodes\n", filepath.Join(ca, "ca.key"))
	fmt.Fprintf(out, "pass --secrets %s (or set %s=%s) to the coordinator, scanserver and scanctl\n", abs, cliutil.SecretsEnv, abs)
	return nil
}
