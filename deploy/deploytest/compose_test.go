package deploytest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// checkCompose checks that compose.yaml's services fit together and fit
// the image: every service builds deploy/Dockerfile into one image and
// runs a command it holds, under its own name as hostname; every
// coordinator names its NATS node and advertises itself by that name,
// routes to every coordinator (and only those), and keeps --data on a
// named volume; every scan server reaches every coordinator's NATS node,
// advertises its name, has a host id of its own and starts after the
// coordinators.
func checkCompose(name string, c composeFile, imageBins []string) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(name+": "+format, args...)) }
	invs, ierrs := composeInvocations(name, c)
	errs = append(errs, ierrs...)
	byService := map[string]invocation{}
	for _, inv := range invs {
		byService[strings.TrimPrefix(inv.where, name+": service ")] = inv
	}
	var coords, natsURLs, routeURLs []string
	for _, s := range sortedKeys(byService) {
		inv := byService[s]
		if inv.bin != "coordinator" {
			continue
		}
		coords = append(coords, s)
		np, _ := portOf(first(inv.value("nats-listen")))
		rp, _ := portOf(first(inv.value("nats-cluster")))
		natsURLs = append(natsURLs, fmt.Sprintf("nats://%s:%d", s, np))
		routeURLs = append(routeURLs, fmt.Sprintf("nats-route://%s:%d", s, rp))
	}
	if len(coords) != 3 {
		fail("coordinators %v, want 3", coords)
	}
	image := ""
	hosts := map[string]string{}
	for _, s := range sortedKeys(c.Services) {
		svc := c.Services[s]
		if image == "" {
			image = svc.Image
		}
		if svc.Image == "" || svc.Image != image {
			fail("service %s: image %q, want every service on one image (%q)", s, svc.Image, image)
		}
		if df := filepath.Join("..", svc.Build.Context, svc.Build.Dockerfile); svc.Build.Dockerfile == "" || !fileExists(df) {
			fail("service %s: build context %q, dockerfile %q: want deploy/Dockerfile", s, svc.Build.Context, svc.Build.Dockerfile)
		}
		if svc.Hostname != s {
			fail("service %s: hostname %q, want the service name (the address it advertises)", s, svc.Hostname)
		}
		inv, ok := byService[s]
		if !ok {
			continue
		}
		if !slices.Contains(imageBins, inv.bin) {
			fail("service %s: runs %s, which the image does not hold (%v)", s, inv.bin, imageBins)
		}
		lp, _ := portOf(first(inv.value("listen")))
		if v, want := first(inv.value("advertise")), fmt.Sprintf("%s:%d", s, lp); v != want {
			fail("service %s: --advertise %q, want %q", s, v, want)
		}
		switch inv.bin {
		case "coordinator":
			if v := first(inv.value("nats-name")); v != s {
				fail("service %s: --nats-name %q, want the service name", s, v)
			}
			if got := splitList(first(inv.value("nats-routes"))); !sameSet(got, routeURLs) {
				fail("service %s: --nats-routes %v, want every coordinator's route port %v", s, got, routeURLs)
			}
			data, ok := inv.value("data")
			vol := ""
			for _, v := range svc.Volumes {
				src, dst, _ := strings.Cut(v, ":")
				if strings.TrimSuffix(dst, ":rw") == data {
					vol = src
				}
			}
			if _, named := c.Volumes[vol]; !ok || !named {
				fail("service %s: --data %q is not a named volume's mount (%v)", s, data, svc.Volumes)
			}
			if p, ok := inv.value("profiles"); ok {
				mounted := false
				for _, v := range svc.Volumes {
					parts := strings.Split(v, ":")
					if len(parts) >= 2 && parts[1] == p && fileExists(filepath.Join("..", parts[0])) {
						mounted = true
					}
				}
				if !mounted {
					fail("service %s: --profiles %s: no file of deploy/ is mounted there (%v)", s, p, svc.Volumes)
				}
			}
		case "scanserver":
			if got := splitList(first(inv.value("nats"))); !sameSet(got, natsURLs) {
				fail("service %s: --nats %v, want every coordinator's NATS node %v", s, got, natsURLs)
			}
			h := first(inv.value("host"))
			if other, dup := hosts[h]; dup || h == "" {
				fail("service %s: --host %q (also %s's): want one host id per service", s, h, other)
			}
			hosts[h] = s
			for _, co := range coords {
				if !slices.Contains(svc.DependsOn, co) {
					fail("service %s: depends_on %v lacks %s", s, svc.DependsOn, co)
				}
			}
		}
	}
	return errs
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// TestComposeWiring checks compose.yaml as checkCompose says, and that
// each check fails on a broken copy.
func TestComposeWiring(t *testing.T) {
	f := readDeploy(t, "compose.yaml")
	bins := imageCommands(t)
	c, err := parseCompose(f.name, f.data)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range checkCompose(f.name, c, bins) {
		t.Error(err)
	}
	for _, b := range []struct{ what, old, new string }{
		{"a route to a service that does not exist", "nats-route://c3:6222", "nats-route://c4:6222"},
		{"two NATS nodes of one name", "--nats-name=c2", "--nats-name=c1"},
		{"a coordinator advertising another's name", "--advertise=c3:8090", "--advertise=c1:8090"},
		{"a scan server missing a NATS node", "--nats=nats://c1:4222,nats://c2:4222,nats://c3:4222\n      - --host=h2", "--nats=nats://c1:4222,nats://c2:4222\n      - --host=h2"},
		{"two hosts of one id", "--host=h3", "--host=h1"},
		{"--data on the container's own layer", "- c1:/var/lib/scanplane", "- /tmp:/var/lib/scanplane"},
		{"a command the image lacks", "- scanserver\n", "- loadtest\n"},
		{"another Dockerfile", "dockerfile: deploy/Dockerfile", "dockerfile: Dockerfile"},
	} {
		if !strings.Contains(string(f.data), b.old) {
			t.Fatalf("%s has no %q to break", f.name, b.old)
		}
		bc, err := parseCompose(f.name, []byte(strings.Replace(string(f.data), b.old, b.new, 1)))
		if err != nil {
			t.Fatal(err)
		}
		if errs := checkCompose(f.name, bc, bins); len(errs) == 0 {
			t.Errorf("%s: not refused", b.what)
		} else {
			t.Logf("%s: refused: %v", b.what, errs[0])
		}
	}
}

// TestStartHostsScriptParses: bash reads start-hosts.sh without a syntax
// error (bash -n), and refuses a broken copy.
func TestStartHostsScriptParses(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	f := readDeploy(t, "start-hosts.sh")
	check := func(data []byte) error {
		p := filepath.Join(t.TempDir(), "start-hosts.sh")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bash, "-n", p).CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	if err := check(f.data); err != nil {
		t.Errorf("bash -n %s: %v", f.name, err)
	}
	// An apostrophe in ${VAR:?message} inside double quotes opens a
	// quote that never closes.
	if err := check([]byte(strings.Replace(string(f.data), "NATS URL(s) of the cluster", "cluster's NATS URL(s)", 1))); err == nil {
		t.Error("a script with an unclosed quote: bash -n found nothing")
	}
}
