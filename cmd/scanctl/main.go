// Command scanctl is scanplane's command line: start a local cluster (up,
// demo), ingest tables, scan them, and look at the cluster (tables, status,
// route, reload). Run `scanctl help` for the commands.
//
// Exit status: 0 on success, 1 when the operation failed, 2 on bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/cliutil"
)

// version is the build version, set at link time with
// -ldflags "-X main.version=v1.2.3"; empty = what cliutil.Version finds.
var version string

// defaultNATS lists the well-known client URLs of the NATS nodes `scanctl
// up` starts (one per coordinator): a command connects to whichever is up.
// The client library's default is the same list.
const defaultNATS = client.DefaultNATSURLs

// natsEnv is the environment variable --nats defaults to (before
// defaultNATS): what `scanctl up --port-base` prints for the other
// commands.
const natsEnv = "SCANPLANE_NATS"

// natsURLs is the NATS a command connects to: flagValue if set, else
// $SCANPLANE_NATS, else defaultNATS.
func natsURLs(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if env := strings.TrimSpace(os.Getenv(natsEnv)); env != "" {
		return env
	}
	return defaultNATS
}

// globals are the flags every command takes.
type globals struct {
	nats        string
	coordinator string
	timeout     time.Duration
	logLevel    string
	logFormat   string
	secrets     string
	// role is the certificate of --secrets a command uses on the actor
	// remote and NATS; "" = client.
	role string
	// tune, when set, adjusts the client's configuration before connect
	// starts it (flow-control flags of scanctl bench).
	tune func(*client.Config)
}

// register defines the global flags on fs; role is the certificate of
// --secrets the command uses.
func (g *globals) register(fs *flag.FlagSet, role string) {
	fs.StringVar(&g.nats, "nats", "", "NATS `URLS` of the cluster, comma-separated, any one up will do (default $"+natsEnv+", else the nodes scanctl up starts: "+defaultNATS+")")
	fs.StringVar(&g.coordinator, "coordinator", "", "coordinator actor `ADDRS` (host:port), comma-separated, in order of preference (default: found through NATS)")
	fs.DurationVar(&g.timeout, "timeout", 60*time.Second, "give up after this long (the command returns within a second of it, whatever is dead)")
	fs.StringVar(&g.logLevel, "log-level", "warn", "log `LEVEL`: debug, info, warn or error")
	fs.StringVar(&g.logFormat, "log-format", "text", cliutil.LogFormatUsage)
	fs.StringVar(&g.secrets, "secrets", "", cliutil.SecretsUsage+" (the "+role+" certificate)")
}

type command struct {
	name, args, help string
	run              func(ctx context.Context, g *globals, args []string, out, errOut io.Writer) error
}

// commands are scanctl's commands, in the order help lists them (set in
// init: the commands' help refers back to this table).
var commands []command

func init() {
	commands = []command{
		{"demo", "[--coordinators 3] [--hosts 3] [--servers-per-host 2] [--rows 100000] [--tablets 8] [--scans 200]", "start a local cluster, ingest sample data, scan it, verify and print results, stop", runDemo},
		{"up", "[--coordinators 3] [--hosts 3] [--servers-per-host 2] [--zones 1] [--data ./data] [--profiles FILE] [--port-base 4222] [--secure]", "run a local cluster of real processes in the foreground until Ctrl-C", runUp},
		{"ingest", "--table T [--splits N | --split-keys a,b,c] (FILE | - | --generate ROWS)", "load a table from TSV (key<TAB>value) or synthetic rows", runIngest},
		{"scan", "--table T [--start K] [--end K] [--hint scan_type=X] [--limit N] [--count] [--api ADDRS] [--via actor [--parallel N]]", "print key<TAB>value lines of a range in key order (through a coordinator's HTTP port; --via actor: the in-cluster path)", runScan},
		{"bench", "--table T [--parallel 1,4] [--rounds N] [--max-buffer BYTES] [--warmup=false] [--reader=false]", "time whole-table scans beside the tablets reader alone over the same blocks: rows/s, MB/s", runBench},
		{"tables", "[--table T] | drop --table T [--generation G]", "list every table's generations (current and kept for rollback); drop deletes a table, or one non-current generation, with its blocks", runTables},
		{"rollback", "--table T --generation G [--blocks-dir DIR]", "make a kept generation of a table current again (scanctl tables lists them)", runRollback},
		{"status", "[--watch [--interval 2s] [--count N]]", "hosts, servers, queues, cache hit ratios, busy counts; --watch redraws until Ctrl-C", runStatus},
		{"route", "--table T --row R [--hint scan_type=X] [--attempts busy,busy]", "show where a row's tablet would be scanned", runRoute},
		{"reload", "", "make every coordinator re-read its --profiles file", runReload},
		{"version", "", "print the version, VCS commit and Go version of scanctl", runVersion},
		{"secrets", "init --dir DIR [--hosts h1,h2,...] [--server-hosts a,b,...] [--force] | client NAME --dir DIR --tables T1,prefix*", "create a CA and a certificate per role for --secrets (mutual TLS of the actor remote and NATS); or a client certificate that may scan only some tables", runSecrets},
	}
}

// usageError marks bad usage (exit status 2).
type usageError struct{ error }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args = append([]string{"version"}, args[1:]...)
	}
	if len(args) == 0 {
		usage(errOut)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || (args[0] == "help" && len(args) == 1) {
		usage(out)
		return 0
	}
	name, cmdArgs := args[0], args[1:]
	if name == "help" {
		// scanctl help CMD: the command's own --help.
		name, cmdArgs = args[1], []string{"--help"}
		if len(args) > 2 {
			fmt.Fprintf(errOut, "scanctl help: want one command, got %q\n", args[1:])
			return 2
		}
		if name == "help" {
			usage(out)
			return 0
		}
	}
	c := findCommand(name)
	if c == nil {
		fmt.Fprintf(errOut, "scanctl: unknown command %q%s; run 'scanctl help'\n", name, didYouMean(name))
		return 2
	}
	err := c.run(ctx, &globals{}, cmdArgs, out, errOut)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	fmt.Fprintf(errOut, "scanctl %s: %s\n", c.name, msg)
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(errOut, "run 'scanctl help %s'\n", c.name)
		return 2
	}
	return 1
}

// findCommand returns the command called name, nil if there is none.
func findCommand(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// didYouMean is " (did you mean X?)" for the command nearest to name
// (one or two letters off), else "".
func didYouMean(name string) string {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	for _, c := range commands {
		fs.Bool(c.name, false, "")
	}
	if err := cliutil.ParseFlags(fs, []string{"--" + name}); err != nil {
		if _, s, ok := strings.Cut(err.Error(), "(did you mean --"); ok {
			return " (did you mean " + strings.TrimSuffix(s, "?)") + "?)"
		}
	}
	return ""
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: scanctl COMMAND [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-7s %s\n", c.name, c.help)
		if c.args != "" {
			fmt.Fprintf(w, "          %s\n", c.args)
		}
	}
	fmt.Fprintf(w, "\nevery command but secrets and version also takes --nats URL[,URL...] (default $%s, else %s), --coordinator ADDR, --timeout DUR, --log-level L, --log-format text|json; all but up, demo and secrets take --secrets DIR (ingest, reload, rollback and tables drop use its admin certificate, the others its client certificate; up takes --secure)\n", natsEnv, defaultNATS)
	fmt.Fprintln(w, "\nrun 'scanctl help COMMAND' for a command's flags")
}

// commandHelp prints command name's help ("tables drop": the tables
// command's): its usage line, what it does, and fs's flags.
func commandHelp(w io.Writer, name string, fs *flag.FlagSet) {
	line, about := "scanctl "+name, ""
	if c := findCommand(strings.Fields(name)[0]); c != nil {
		line, about = strings.TrimSpace("scanctl "+c.name+" "+c.args), c.help
	}
	cliutil.PrintHelp(w, line, about, fs)
}

// noRemote are the commands that take the global flags but run their own
// loopback cluster (up, demo): --secrets would be silently ignored there.
var noRemote = map[string]bool{"up": true, "demo": true}

// parse parses a command's flags (globals included), before and after
// positional arguments (up to a "--"); the positional arguments are
// returned. --help prints the command's help to out and returns
// flag.ErrHelp.
func parse(name string, g *globals, fs *flag.FlagSet, args []string, out io.Writer) ([]string, error) {
	role := "client"
	if name == "ingest" || name == "rollback" || name == "tables drop" || name == "reload" {
		role = "admin"
	}
	g.role = role
	g.register(fs, role)
	var pos []string
	for {
		if err := cliutil.ParseFlags(fs, args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				commandHelp(out, name, fs)
				return nil, err
			}
			return nil, usageError{err}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if i := len(args) - len(rest) - 1; i >= 0 && args[i] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if g.timeout <= 0 {
		return nil, usageError{fmt.Errorf("--timeout %v must be > 0", g.timeout)}
	}
	g.nats = natsURLs(g.nats)
	if g.secrets != "" && name == "up" {
		return nil, usageError{fmt.Errorf("--secrets: `scanctl up` makes its own secrets; pass --secure (it creates DATA/secrets and secures every process with it)")}
	}
	if g.secrets != "" && noRemote[name] {
		return nil, usageError{fmt.Errorf("--secrets: `scanctl %s` starts its own loopback cluster, which --secrets does not secure", name)}
	}
	return pos, nil
}

// clientConfig is the client configuration the globals name: NATS,
// coordinators, logger, TLS from --secrets (the command's role), and
// the command's tuning.
func clientConfig(g *globals, errOut io.Writer) (client.Config, error) {
	cfg := client.DefaultConfig()
	cfg.NATSURL = g.nats
	if g.coordinator != "" {
		for _, a := range strings.Split(g.coordinator, ",") {
			cfg.Coordinators = append(cfg.Coordinators, strings.TrimSpace(a))
		}
	}
	log, err := cliutil.Logger(errOut, g.logLevel, g.logFormat)
	if err != nil {
		return cfg, usageError{err}
	}
	cfg.Logger = log
	if g.tune != nil {
		g.tune(&cfg)
	}
	if dir := cliutil.SecretsDir(g.secrets); dir != "" {
		role := g.role
		if role == "" {
			role = "client"
		}
		if cfg.TLS, err = cliutil.RemoteTLS(dir, role); err != nil {
			return cfg, usageError{err}
		}
	}
	return cfg, nil
}

// connect starts a client for the cluster named by the globals.
func connect(ctx context.Context, g *globals, errOut io.Writer) (*client.Client, error) {
	cfg, err := clientConfig(g, errOut)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg)
	if err != nil {
		return nil, usageError{fmt.Errorf("--coordinator or --nats: %w", err)}
	}
	if err := c.Start(ctx); err != nil {
		return nil, natsError(ctx, g, err)
	}
	return c, nil
}

// natsError says in one short line why connecting to the globals' NATS
// failed (ctx is the one the connection was tried under): TLS required
// without --secrets, a TLS handshake refused, --timeout run out, or
// nothing answering at the URLs; only the last suggests starting a
// cluster. Other errors are returned as they are. The result wraps err.
func natsError(ctx context.Context, g *globals, err error) error {
	var msg string
	switch {
	case errors.Is(err, bus.ErrTLSRequired):
		msg = fmt.Sprintf("NATS at %s requires TLS and a client certificate: pass --secrets DIR or set %s", g.nats, cliutil.SecretsEnv)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		msg = fmt.Sprintf("--timeout %v ran out while connecting to the cluster (NATS at %s)", g.timeout, g.nats)
	case errors.Is(err, nats.ErrNoServers) || errors.Is(err, syscall.ECONNREFUSED):
		msg = fmt.Sprintf("no NATS server answered at %s: is a cluster running? (start one with 'scanctl up', or name it with --nats or $%s)", g.nats, natsEnv)
	case strings.Contains(err.Error(), "tls"):
		msg = fmt.Sprintf("NATS at %s refused the TLS handshake (%v): is --secrets a secrets directory of this cluster, its certificates current?", g.nats, innermost(err))
	default:
		return err
	}
	return &shortError{msg: msg, err: err}
}

// shortError is an error whose message replaces the wrapped one's.
type shortError struct {
	msg string
	err error
}

func (e *shortError) Error() string { return e.msg }
func (e *shortError) Unwrap() error { return e.err }

// innermost is the message of the last error in err's chain (the cause,
// without the callers' prefixes).
func innermost(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

// withClient runs fn with a client for the globals' cluster, under the
// globals' timeout, and closes the client (Close is bounded, so the
// command ends within a second of the timeout).
func withClient(ctx context.Context, g *globals, errOut io.Writer, fn func(context.Context, *client.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	c, err := connect(ctx, g, errOut)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(ctx, c)
}

// runVersion is `scanctl version` (and `scanctl --version`).
func runVersion(_ context.Context, _ *globals, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := cliutil.ParseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			commandHelp(out, "version", fs)
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	fmt.Fprintln(out, "scanctl", cliutil.Version(version))
	return nil
}

// hints collects repeated --hint k=v flags.
type hints map[string]string

func (h hints) String() string { return fmt.Sprint(map[string]string(h)) }

func (h hints) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("hint %q: want key=value", s)
	}
	h[k] = v
	return nil
}
