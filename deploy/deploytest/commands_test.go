package deploytest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// A command line of a deploy file: one of the main module's commands
// (bin; for scanctl the subcommand too) with its arguments.
type invocation struct {
	where string // file and place, for messages
	bin   string
	sub   string // scanctl's subcommand ("ingest", "secrets init"); "" otherwise
	args  []string
}

// flags returns the --flag names of inv's arguments (without a value
// after =) in order.
func (inv invocation) flags() []string {
	var fs []string
	for _, a := range inv.args {
		if name, ok := flagName(a); ok {
			fs = append(fs, name)
		}
	}
	return fs
}

// value returns the value of --name (--name=V or --name V), and whether
// the flag is there.
func (inv invocation) value(name string) (string, bool) {
	for i, a := range inv.args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(inv.args) {
			return strings.Trim(inv.args[i+1], `'"`), true
		}
	}
	return "", false
}

var flagToken = regexp.MustCompile(`^--([A-Za-z0-9][A-Za-z0-9_.-]*)(=.*)?$`)

func flagName(arg string) (string, bool) {
	m := flagToken.FindStringSubmatch(strings.Trim(arg, `'"`))
	if m == nil {
		return "", false
	}
	return m[1], true
}

// invocationOf makes an invocation of tokens starting at a command's
// name (or path), and false when tokens[0] is not one of the commands.
func invocationOf(where string, tokens []string) (invocation, bool) {
	if len(tokens) == 0 {
		return invocation{}, false
	}
	bin := path.Base(strings.Trim(tokens[0], `'"`))
	if !slices.Contains(commands, bin) {
		return invocation{}, false
	}
	inv := invocation{where: where, bin: bin, args: tokens[1:]}
	if bin == "scanctl" && len(inv.args) > 0 && regexp.MustCompile(`^[a-z]+$`).MatchString(inv.args[0]) {
		inv.sub, inv.args = inv.args[0], inv.args[1:]
		if inv.sub == "secrets" && len(inv.args) > 0 && !strings.HasPrefix(inv.args[0], "-") {
			inv.sub, inv.args = "secrets "+inv.args[0], inv.args[1:]
		}
	}
	return inv, true
}

// logicalLines joins lines continued with a trailing backslash.
func logicalLines(text string) []string {
	var out []string
	cur := ""
	for _, l := range strings.Split(text, "\n") {
		if s, ok := strings.CutSuffix(strings.TrimRight(l, " \t"), `\`); ok {
			cur += s + " "
			continue
		}
		out = append(out, cur+l)
		cur = ""
	}
	if cur != "" {
		out = append(out, cur)
	}
	return out
}

// unitInvocations returns the ExecStart command of every systemd unit
// under deploy/ that runs one of the commands.
func unitInvocations(name string, data []byte) []invocation {
	var invs []invocation
	for _, l := range logicalLines(string(data)) {
		cmd, ok := strings.CutPrefix(strings.TrimSpace(l), "ExecStart=")
		if !ok {
			continue
		}
		if inv, ok := invocationOf(name+": ExecStart", strings.Fields(cmd)); ok {
			invs = append(invs, inv)
		}
	}
	return invs
}

// scriptInvocations returns start-hosts.sh's commands: it runs only
// scanserver, so every --flag of a line that is not a comment counts as
// a scanserver flag (the script builds the command line in pieces).
func scriptInvocations(name string, data []byte) []invocation {
	var invs []invocation
	for i, l := range logicalLines(string(data)) {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		var args []string
		for _, tok := range strings.FieldsFunc(l, func(r rune) bool { return r == ' ' || r == '\t' || r == '"' || r == '\'' }) {
			if _, ok := flagName(tok); ok {
				args = append(args, tok)
			}
		}
		if len(args) > 0 {
			invs = append(invs, invocation{where: fmt.Sprintf("%s: logical line %d", name, i+1), bin: "scanserver", args: args})
		}
	}
	return invs
}

// markdownInvocations returns the commands in a Markdown file's shell
// code blocks (```sh, ```bash, ```console): on each command line, the
// first word naming a command (coordinator, /usr/local/bin/scanserver,
// `go run ./cmd/scanctl`) and what follows it, up to a comment; and the
// ExecStart lines of its systemd blocks (```ini: units and drop-ins).
func markdownInvocations(name string, data []byte) []invocation {
	var invs []invocation
	in, ini := false, false
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	var block []string
	n, start := 0, 0
	for sc.Scan() {
		n++
		l := sc.Text()
		t := strings.TrimSpace(l)
		switch {
		case !in && (t == "```sh" || t == "```bash" || t == "```console" || t == "```shell" || t == "```ini"):
			in, ini, block, start = true, t == "```ini", nil, n
		case in && t == "```" && ini:
			in = false
			invs = append(invs, unitInvocations(fmt.Sprintf("%s: code block at line %d", name, start), []byte(strings.Join(block, "\n")))...)
		case in && t == "```":
			in = false
			for _, cl := range logicalLines(strings.Join(block, "\n")) {
				cl, _, _ = strings.Cut(cl, " #")
				if strings.HasPrefix(strings.TrimSpace(cl), "#") {
					continue
				}
				tokens := strings.Fields(cl)
				for i, tok := range tokens {
					if strings.HasPrefix(tok, "./cmd/") {
						tokens[i] = strings.TrimPrefix(tok, "./cmd/")
					}
					if inv, ok := invocationOf(fmt.Sprintf("%s: code block at line %d", name, start), tokens[i:]); ok {
						invs = append(invs, inv)
						break
					}
				}
			}
		case in:
			block = append(block, l)
		}
	}
	return invs
}

// composeFile is the part of a Compose file these tests read.
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image    string `yaml:"image"`
	Hostname string `yaml:"hostname"`
	Build    struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Command   []string `yaml:"command"`
	Volumes   []string `yaml:"volumes"`
	Ports     []string `yaml:"ports"`
	DependsOn []string `yaml:"depends_on"`
	Restart   string   `yaml:"restart"`
}

func parseCompose(name string, data []byte) (composeFile, error) {
	var c composeFile
	if err := yaml.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("%s: %v", name, err)
	}
	if len(c.Services) == 0 {
		return c, fmt.Errorf("%s: no services", name)
	}
	return c, nil
}

// composeInvocations returns every service's command (the image has no
// entrypoint: the command names the binary).
func composeInvocations(name string, c composeFile) ([]invocation, []error) {
	var invs []invocation
	var errs []error
	for _, s := range sortedKeys(c.Services) {
		inv, ok := invocationOf(fmt.Sprintf("%s: service %s", name, s), c.Services[s].Command)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: service %s: command %q does not start with one of %v", name, s, c.Services[s].Command, commands))
			continue
		}
		invs = append(invs, inv)
	}
	return invs, errs
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// deployFile is one file under deploy/ (name relative to deploy/).
type deployFile struct {
	name string
	data []byte
}

func readDeploy(t testing.TB, name string) deployFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", name))
	if err != nil {
		t.Fatal(err)
	}
	return deployFile{name: "deploy/" + name, data: data}
}

func globDeploy(t testing.TB, pattern string) []deployFile {
	t.Helper()
	names, err := filepath.Glob(filepath.Join("..", pattern))
	if err != nil {
		t.Fatal(err)
	}
	var fs []deployFile
	for _, n := range names {
		rel, _ := filepath.Rel("..", n)
		fs = append(fs, readDeploy(t, filepath.ToSlash(rel)))
	}
	return fs
}

// deployFiles are the files whose commands these tests check.
type deployFiles struct {
	units   []deployFile // deploy/*.service
	script  deployFile   // deploy/start-hosts.sh
	compose deployFile   // deploy/compose.yaml
	k8s     []deployFile // deploy/k8s/*.yaml but kustomization.yaml
	readmes []deployFile // deploy/README.md and the README
}

func loadDeployFiles(t testing.TB) deployFiles {
	t.Helper()
	d := deployFiles{
		units:   globDeploy(t, "*.service"),
		script:  readDeploy(t, "start-hosts.sh"),
		compose: readDeploy(t, "compose.yaml"),
		readmes: []deployFile{readDeploy(t, "README.md"), readDeploy(t, "../README.md")},
	}
	d.readmes[1].name = "README.md"
	for _, f := range globDeploy(t, "k8s/*.yaml") {
		if path.Base(f.name) != "kustomization.yaml" {
			d.k8s = append(d.k8s, f)
		}
	}
	if len(d.units) < 5 || len(d.k8s) < 3 {
		t.Fatalf("found %d units and %d Kubernetes manifests under deploy/", len(d.units), len(d.k8s))
	}
	return d
}

// invocations returns every command line of the files, with the errors
// of the files that do not parse.
func (d deployFiles) invocations() ([]invocation, []error) {
	var invs []invocation
	var errs []error
	for _, u := range d.units {
		invs = append(invs, unitInvocations(u.name, u.data)...)
	}
	invs = append(invs, scriptInvocations(d.script.name, d.script.data)...)
	if c, err := parseCompose(d.compose.name, d.compose.data); err != nil {
		errs = append(errs, err)
	} else {
		ci, cerrs := composeInvocations(d.compose.name, c)
		invs, errs = append(invs, ci...), append(errs, cerrs...)
	}
	for _, f := range d.k8s {
		objs, err := parseManifests(f.name, f.data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ki, kerrs := manifestInvocations(objs)
		invs, errs = append(invs, ki...), append(errs, kerrs...)
	}
	for _, r := range d.readmes {
		invs = append(invs, markdownInvocations(r.name, r.data)...)
	}
	return invs, errs
}

// checkFlags returns an error for every flag of invs that its command's
// --help does not list.
func checkFlags(t testing.TB, invs []invocation) []error {
	var errs []error
	for _, inv := range invs {
		fs := inv.flags()
		if len(fs) == 0 {
			continue
		}
		h := helpOf(t, inv.bin, inv.sub)
		for _, f := range fs {
			if !h.flags[f] {
				errs = append(errs, fmt.Errorf("%s: %s has no flag --%s (%s --help)", inv.where, strings.TrimSpace(inv.bin+" "+inv.sub), f, strings.TrimSpace(inv.bin+" "+inv.sub)))
			}
		}
	}
	return errs
}

// TestDeployFlagsExist: every flag the systemd units, start-hosts.sh,
// compose.yaml, the Kubernetes manifests and the READMEs' shell blocks
// pass to a command is one its --help lists (the commands built from
// this tree). The check is tried on broken copies too, each of which
// must fail.
func TestDeployFlagsExist(t *testing.T) {
	d := loadDeployFiles(t)
	invs, errs := d.invocations()
	for _, err := range errs {
		t.Error(err)
	}
	per := map[string]int{}
	for _, inv := range invs {
		per[strings.SplitN(inv.where, ":", 2)[0]]++
	}
	for _, f := range append(append(d.units[:0:0], d.units...), d.script, d.compose, d.readmes[0]) {
		if f.name == "deploy/nats-server.service" {
			continue
		}
		if per[f.name] == 0 {
			t.Errorf("%s: no command of %v found in it", f.name, commands)
		}
	}
	for _, f := range []string{"deploy/k8s/coordinator.yaml", "deploy/k8s/scanserver.yaml"} {
		if per[f] == 0 {
			t.Errorf("%s: no command of %v found in it", f, commands)
		}
	}
	for _, err := range checkFlags(t, invs) {
		t.Error(err)
	}
	t.Logf("%d command lines checked: %v", len(invs), per)

	// The check itself, on broken copies: each must be refused.
	broken := func(f deployFile, old, new string) deployFile {
		t.Helper()
		if !strings.Contains(string(f.data), old) {
			t.Fatalf("%s has no %q to break", f.name, old)
		}
		return deployFile{name: f.name + " (broken)", data: []byte(strings.Replace(string(f.data), old, new, 1))}
	}
	unit := readDeploy(t, "scanplane-scanserver.service")
	comp := readDeploy(t, "compose.yaml")
	coord := readDeploy(t, "k8s/coordinator.yaml")
	for _, b := range []struct {
		what string
		invs func() []invocation
	}{
		{"a unit's --http misspelt", func() []invocation {
			f := broken(unit, "--http 0.0.0.0:8101", "--htp 0.0.0.0:8101")
			return unitInvocations(f.name, f.data)
		}},
		{"start-hosts.sh with a coordinator flag", func() []invocation {
			f := broken(d.script, "--http 0.0.0.0:8101", "--nats-listen 0.0.0.0:8101")
			return scriptInvocations(f.name, f.data)
		}},
		{"a compose service with a flag of the other binary", func() []invocation {
			f := broken(comp, "--cache-size=256MiB", "--nats-name=h1")
			c, err := parseCompose(f.name, f.data)
			if err != nil {
				t.Fatal(err)
			}
			invs, _ := composeInvocations(f.name, c)
			return invs
		}},
		{"a manifest with a removed flag", func() []invocation {
			f := broken(coord, "--nats-name=$(POD_NAME)", "--nats-server-name=$(POD_NAME)")
			objs, err := parseManifests(f.name, f.data)
			if err != nil {
				t.Fatal(err)
			}
			invs, _ := manifestInvocations(objs)
			return invs
		}},
		{"a README block with a flag of another subcommand", func() []invocation {
			return markdownInvocations("README (broken)", []byte("```sh\nscanctl ingest --table t --count data.tsv\n```\n"))
		}},
	} {
		if errs := checkFlags(t, b.invs()); len(errs) == 0 {
			t.Errorf("%s: not refused", b.what)
		} else {
			t.Logf("%s: refused: %v", b.what, errs[0])
		}
	}
}

// TestScrapeTargetsMatchHTTPPorts: every target of prometheus.yml's
// scanplane jobs is on a port that a unit, start-hosts.sh, compose.yaml
// or a manifest opens with --http on that job's command (coordinator,
// scanserver).
func TestScrapeTargetsMatchHTTPPorts(t *testing.T) {
	d := loadDeployFiles(t)
	invs, errs := d.invocations()
	for _, err := range errs {
		t.Error(err)
	}
	prom, err := os.ReadFile(prometheusFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range checkScrapePorts(prom, invs) {
		t.Error(err)
	}
	broken := strings.Replace(string(prom), `"scan1:8101"`, `"scan1:8102"`, 1)
	if broken == string(prom) {
		t.Fatalf("%s has no scan1:8101 to break", prometheusFile)
	}
	if errs := checkScrapePorts([]byte(broken), invs); len(errs) == 0 {
		t.Error("a scan server target on a port nothing opens: not refused")
	} else {
		t.Logf("a scan server target on a port nothing opens: refused: %v", errs[0])
	}
	var noHTTP []invocation
	for _, inv := range invs {
		if inv.bin == "scanserver" {
			if v, ok := inv.value("http"); ok && strings.HasSuffix(v, ":8101") {
				continue // as if no scanserver passed --http (the default: off)
			}
		}
		noHTTP = append(noHTTP, inv)
	}
	if errs := checkScrapePorts(prom, noHTTP); len(errs) == 0 {
		t.Error("scan server targets while no scanserver passes --http: not refused")
	} else {
		t.Logf("scan server targets while no scanserver passes --http: refused: %v", errs[0])
	}
}

// scrapeJobCommand is the command each scrape job of prometheus.yml
// scrapes.
var scrapeJobCommand = map[string]string{"scanplane-coordinator": "coordinator", "scanplane-scanserver": "scanserver"}

func checkScrapePorts(prom []byte, invs []invocation) []error {
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(prom, &cfg); err != nil {
		return []error{fmt.Errorf("%s: %v", prometheusFile, err)}
	}
	opened := map[string]map[string][]string{} // command → port → where
	for _, inv := range invs {
		v, ok := inv.value("http")
		if !ok {
			continue
		}
		if _, port, err := net.SplitHostPort(v); err == nil {
			if opened[inv.bin] == nil {
				opened[inv.bin] = map[string][]string{}
			}
			opened[inv.bin][port] = append(opened[inv.bin][port], inv.where)
		}
	}
	var errs []error
	targets := 0
	for _, sc := range cfg.ScrapeConfigs {
		bin, ok := scrapeJobCommand[sc.JobName]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: job %s: not one of %v", prometheusFile, sc.JobName, sortedKeys(scrapeJobCommand)))
			continue
		}
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				targets++
				_, port, err := net.SplitHostPort(target)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: job %s: target %q: %v", prometheusFile, sc.JobName, target, err))
					continue
				}
				if len(opened[bin][port]) == 0 {
					errs = append(errs, fmt.Errorf("%s: job %s: target %s: no %s in deploy/ opens port %s with --http (ports opened: %v)", prometheusFile, sc.JobName, target, bin, port, sortedKeys(opened[bin])))
				}
			}
		}
	}
	if targets == 0 {
		errs = append(errs, fmt.Errorf("%s: no static targets", prometheusFile))
	}
	return errs
}
