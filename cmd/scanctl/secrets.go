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
	"github.com/scanplane/scanplane/internal/grants"
	"github.com/scanplane/scanplane/internal/secrets"
)

const secretsUsage = "want 'scanctl secrets init --dir DIR [--ca-dir CADIR] [--hosts h1,h2,...] [--server-hosts a,b,...] [--force]' or 'scanctl secrets client NAME --dir DIR --tables T1,T2,prefix* [--ca-dir CADIR] [--force]'"

// runSecrets is `scanctl secrets init`, a new secrets directory, and
// `scanctl secrets client`, a client certificate limited to some tables
// (docs/security.md).
func runSecrets(_ context.Context, _ *globals, args []string, out, errOut io.Writer) error {
	if len(args) > 0 && args[0] == "client" {
		return runSecretsClient(args[1:], out)
	}
	help := len(args) > 0 && (args[0] == "-h" || args[0] == "--help")
	if len(args) == 0 || (args[0] != "init" && !help) {
		return usageError{errors.New(secretsUsage)}
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

// runSecretsClient is `scanctl secrets client NAME --dir DIR --tables
// T1,T2`: NAME.crt and NAME.key in DIR, signed by the CA of DIR-ca (or
// --ca-dir), that may scan only those tables.
func runSecretsClient(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("secrets client", flag.ContinueOnError)
	dir := fs.String("dir", "", "secrets `DIR` made by secrets init (required): NAME.crt and NAME.key are written there, with the hosts of its client.crt")
	caDir := fs.String("ca-dir", "", "`CADIR` holding the CA's key (default DIR-ca, where secrets init put it)")
	tables := fs.String("tables", "", "`TABLES` the certificate may scan, comma separated: names, or prefix* patterns (required; * is every table)")
	force := fs.Bool("force", false, "replace an existing NAME.crt and NAME.key")
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := cliutil.ParseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			cliutil.PrintHelp(out, "scanctl secrets client NAME --dir DIR --tables T1,T2,prefix* [--ca-dir CADIR] [--force]",
				"write NAME.crt and NAME.key in DIR: a client certificate of DIR's CA that may scan only TABLES (docs/security.md, Who may scan what)", fs)
			return err
		}
		return usageError{err}
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
		if err := cliutil.ParseFlags(fs, fs.Args()[1:]); err != nil {
			return usageError{err}
		}
	}
	switch {
	case name == "":
		return usageError{errors.New("want the client's NAME: " + secretsUsage)}
	case fs.NArg() > 0:
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	case *dir == "":
		return usageError{errors.New("--dir is required")}
	case *tables == "":
		return usageError{errors.New("--tables is required (T1,T2 or prefix*; * for every table)")}
	}
	gr, err := grants.Parse(name, *tables)
	if err != nil {
		return usageError{fmt.Errorf("--tables %q: %w", *tables, err)}
	}
	if err := secrets.IssueClient(*dir, gr, secrets.ClientOptions{CADir: *caDir, Force: *force}); err != nil {
		if errors.Is(err, secrets.ErrExist) {
			return err
		}
		return usageError{err}
	}
	crt := filepath.Join(*dir, name+".crt")
	fmt.Fprintf(out, "wrote %s and %s for %s, which may scan %s\n", crt, filepath.Join(*dir, name+".key"), name, strings.Join(orEvery(gr.Tables()), ","))
	fmt.Fprintf(out, "give the client a directory holding ca.crt and these two files as client.crt and client.key\n")
	return nil
}

func orEvery(ts []string) []string {
	if len(ts) == 0 {
		return []string{"*"}
	}
	return ts
}
