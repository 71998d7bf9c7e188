package deploytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8syaml "sigs.k8s.io/yaml"
)

// manifests are the Kubernetes objects of deploy/k8s, decoded strictly
// into the API's own types (a misspelt or misplaced field is an error).
type manifests struct {
	services     []*corev1.Service
	configMaps   []*corev1.ConfigMap
	statefulSets []*appsv1.StatefulSet
	deployments  []*appsv1.Deployment
	pdbs         []*policyv1.PodDisruptionBudget
	files        map[string]string // "Kind/name" → file
}

func (m *manifests) add(o manifests) {
	m.services = append(m.services, o.services...)
	m.configMaps = append(m.configMaps, o.configMaps...)
	m.statefulSets = append(m.statefulSets, o.statefulSets...)
	m.deployments = append(m.deployments, o.deployments...)
	m.pdbs = append(m.pdbs, o.pdbs...)
	if m.files == nil {
		m.files = map[string]string{}
	}
	for k, v := range o.files {
		m.files[k] = v
	}
}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// parseManifests decodes every YAML document of a manifest file.
func parseManifests(name string, data []byte) (manifests, error) {
	m := manifests{files: map[string]string{}}
	for i, doc := range docSeparator.Split(string(data), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := k8syaml.Unmarshal([]byte(doc), &tm); err != nil {
			return m, fmt.Errorf("%s: document %d: %v", name, i+1, err)
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 Service":
			o := &corev1.Service{}
			m.services, obj = append(m.services, o), o
		case "v1 ConfigMap":
			o := &corev1.ConfigMap{}
			m.configMaps, obj = append(m.configMaps, o), o
		case "apps/v1 StatefulSet":
			o := &appsv1.StatefulSet{}
			m.statefulSets, obj = append(m.statefulSets, o), o
		case "apps/v1 Deployment":
			o := &appsv1.Deployment{}
			m.deployments, obj = append(m.deployments, o), o
		case "policy/v1 PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			m.pdbs, obj = append(m.pdbs, o), o
		default:
			return m, fmt.Errorf("%s: document %d: %s %s: a kind these tests do not check", name, i+1, tm.APIVersion, tm.Kind)
		}
		if err := k8syaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return m, fmt.Errorf("%s: %s %s: %v", name, tm.Kind, tm.Metadata.Name, err)
		}
		if tm.Metadata.Name == "" {
			return m, fmt.Errorf("%s: document %d: %s without a name", name, i+1, tm.Kind)
		}
		m.files[tm.Kind+"/"+tm.Metadata.Name] = name
	}
	return m, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// workload is a StatefulSet's or Deployment's pod template.
type workload struct {
	kind, name string
	replicas   int32
	template   corev1.PodTemplateSpec
}

func (m manifests) workloads() []workload {
	var ws []workload
	for _, s := range m.statefulSets {
		ws = append(ws, workload{"StatefulSet", s.Name, ptrOr(s.Spec.Replicas, 1), s.Spec.Template})
	}
	for _, d := range m.deployments {
		ws = append(ws, workload{"Deployment", d.Name, ptrOr(d.Spec.Replicas, 1), d.Spec.Template})
	}
	return ws
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func (w workload) where(m manifests, c corev1.Container) string {
	return fmt.Sprintf("%s: %s %s, container %s", m.files[w.kind+"/"+w.name], w.kind, w.name, c.Name)
}

// containerInvocation is a container's command and args as one command
// line.
func containerInvocation(where string, c corev1.Container) (invocation, bool) {
	return invocationOf(where, append(slices.Clone(c.Command), c.Args...))
}

// manifestInvocations returns every container's command line.
func manifestInvocations(m manifests) ([]invocation, []error) {
	var invs []invocation
	var errs []error
	for _, w := range m.workloads() {
		for _, c := range w.template.Spec.Containers {
			inv, ok := containerInvocation(w.where(m, c), c)
			if !ok {
				errs = append(errs, fmt.Errorf("%s: command %q does not start with one of %v", w.where(m, c), c.Command, commands))
				continue
			}
			invs = append(invs, inv)
		}
	}
	return invs, errs
}

// endpoints are the HTTP paths each command serves on --http.
var endpoints = map[string][]string{
	"coordinator": {"/", "/status", "/metrics"},
	"scanserver":  {"/metrics"},
}

// listenFlags are the flags with which a command opens a port.
var listenFlags = []string{"listen", "http", "nats-listen", "nats-cluster"}

func portOf(addr string) (int32, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(p, 10, 32)
	return int32(n), err
}

// containerPort resolves a probe's or Service's port (a name or a
// number) among c's ports.
func containerPort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkManifests checks that the objects of deploy/k8s fit together and
// fit the image and commands:
//   - every container runs a command the image holds, with its $(VAR)
//     references defined in its env, opens a containerPort exactly for
//     each port it listens on, and has startup, readiness and liveness
//     probes on its --http port, on paths the command serves;
//   - every Service selects one workload and targets ports it opens;
//   - the coordinators' StatefulSet has a headless Service publishing
//     not-ready pods, starts its pods in parallel, names every pod (and
//     only those) in --nats-routes, names its NATS node and advertises
//     itself by pod, keeps --data on a volume claim, and reads --profiles
//     from a ConfigMap holding deploy/profiles.json;
//   - the scan servers reach every coordinator's NATS node and advertise
//     their pod IP, under their pod name as host id.
func checkManifests(m manifests, imageBins []string, profiles []byte) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	type coord struct {
		sts                   *appsv1.StatefulSet
		service               string
		natsPort, routesPort  int32
		listenPort            int32
		replicas              int32
		natsURLs, routeURLs   []string
		containerEnvFieldPath map[string]string
	}
	var coords []coord
	for _, w := range m.workloads() {
		if len(w.template.Spec.Containers) == 0 {
			fail("%s %s: no container", w.kind, w.name)
		}
		for _, c := range w.template.Spec.Containers {
			where := w.where(m, c)
			inv, ok := containerInvocation(where, c)
			if !ok {
				fail("%s: command %q is not one of %v", where, c.Command, commands)
				continue
			}
			if !slices.Contains(imageBins, inv.bin) {
				fail("%s: runs %s, which the image (deploy/Dockerfile) does not build: it has %v", where, inv.bin, imageBins)
			}
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = ""
				if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
					env[e.Name] = e.ValueFrom.FieldRef.FieldPath
				}
			}
			for _, a := range inv.args {
				for _, r := range envRef.FindAllStringSubmatch(a, -1) {
					if _, ok := env[r[1]]; !ok {
						fail("%s: %s refers to $(%s), which the container's env does not define", where, a, r[1])
					}
				}
			}
			// Ports: one containerPort per listening flag, and no other.
			listens := map[int32]string{}
			for _, f := range listenFlags {
				if v, ok := inv.value(f); ok {
					p, err := portOf(v)
					if err != nil || p == 0 {
						fail("%s: --%s %s: want host:port with a fixed port (%v)", where, f, v, err)
						continue
					}
					listens[p] = f
				}
			}
			for _, cp := range c.Ports {
				if _, ok := listens[cp.ContainerPort]; !ok {
					fail("%s: containerPort %s %d is not a port the command listens on (%v)", where, cp.Name, cp.ContainerPort, listens)
				}
			}
			for p, f := range listens {
				if _, ok := containerPort(c, intstr.FromInt32(p)); !ok {
					fail("%s: --%s listens on port %d, which no containerPort declares", where, f, p)
				}
			}
			// Probes: on --http, on a path the command serves.
			httpAddr, _ := inv.value("http")
			httpPort, _ := portOf(httpAddr)
			for _, pr := range []struct {
				what string
				p    *corev1.Probe
			}{{"startupProbe", c.StartupProbe}, {"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}} {
				switch {
				case pr.p == nil:
					fail("%s: no %s", where, pr.what)
				case pr.p.HTTPGet == nil:
					fail("%s: %s is not an HTTP GET", where, pr.what)
				default:
					port, ok := containerPort(c, pr.p.HTTPGet.Port)
					if !ok || port != httpPort || httpPort == 0 {
						fail("%s: %s on port %s, not the --http port %q", where, pr.what, pr.p.HTTPGet.Port.String(), httpAddr)
					}
					if !slices.Contains(endpoints[inv.bin], pr.p.HTTPGet.Path) {
						fail("%s: %s on %s, which %s does not serve (it serves %v)", where, pr.what, pr.p.HTTPGet.Path, inv.bin, endpoints[inv.bin])
					}
				}
			}
			if inv.bin == "coordinator" && w.kind == "StatefulSet" {
				var sts *appsv1.StatefulSet
				for _, s := range m.statefulSets {
					if s.Name == w.name {
						sts = s
					}
				}
				co := coord{sts: sts, service: sts.Spec.ServiceName, replicas: w.replicas, containerEnvFieldPath: env}
				co.natsPort, _ = portOf(first(inv.value("nats-listen")))
				co.routesPort, _ = portOf(first(inv.value("nats-cluster")))
				co.listenPort, _ = portOf(first(inv.value("listen")))
				for i := range w.replicas {
					pod := fmt.Sprintf("%s-%d.%s", w.name, i, co.service)
					co.natsURLs = append(co.natsURLs, fmt.Sprintf("nats://%s:%d", pod, co.natsPort))
					co.routeURLs = append(co.routeURLs, fmt.Sprintf("nats-route://%s:%d", pod, co.routesPort))
				}
				coords = append(coords, co)
				if got := splitList(first(inv.value("nats-routes"))); !sameSet(got, co.routeURLs) {
					fail("%s: --nats-routes %v, want every pod's route port %v", where, got, co.routeURLs)
				}
				if v, _ := inv.value("nats-name"); v != "$(POD_NAME)" || env["POD_NAME"] != "metadata.name" {
					fail("%s: --nats-name %q, want $(POD_NAME) with POD_NAME the pod's metadata.name (unique and stable per pod)", where, v)
				}
				if v, want := first(inv.value("advertise")), fmt.Sprintf("$(POD_NAME).%s:%d", co.service, co.listenPort); v != want {
					fail("%s: --advertise %q, want %q", where, v, want)
				}
				data, ok := inv.value("data")
				if !ok {
					fail("%s: no --data (the JetStream store)", where)
				}
				var claims []string
				for _, vc := range sts.Spec.VolumeClaimTemplates {
					claims = append(claims, vc.Name)
				}
				if vm := mountAt(c, data); vm == nil || !slices.Contains(claims, vm.Name) {
					fail("%s: --data %s is not a mount of a volume claim template %v", where, data, claims)
				}
				if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
					fail("%s: podManagementPolicy %q, want Parallel (a new NATS cluster needs every node up before any is ready)", where, sts.Spec.PodManagementPolicy)
				}
				if p, ok := inv.value("profiles"); ok {
					errs = append(errs, checkProfilesMount(m, w, c, where, p, profiles)...)
				}
			}
		}
	}
	if len(coords) != 1 {
		fail("deploy/k8s: %d coordinator StatefulSets, want 1", len(coords))
		return errs
	}
	co := coords[0]
	// The coordinators' governing Service: headless, publishing pods
	// before they are ready.
	var gov *corev1.Service
	for _, s := range m.services {
		if s.Name == co.service {
			gov = s
		}
	}
	switch {
	case gov == nil:
		fail("StatefulSet %s: serviceName %q names no Service", co.sts.Name, co.service)
	case gov.Spec.ClusterIP != corev1.ClusterIPNone || !gov.Spec.PublishNotReadyAddresses:
		fail("Service %s: clusterIP %q, publishNotReadyAddresses %v; want None and true (pods find each other before they are ready)", gov.Name, gov.Spec.ClusterIP, gov.Spec.PublishNotReadyAddresses)
	}
	// Scan servers: every coordinator's NATS node; their pod IP.
	for _, w := range m.workloads() {
		for _, c := range w.template.Spec.Containers {
			inv, ok := containerInvocation(w.where(m, c), c)
			if !ok || inv.bin != "scanserver" {
				continue
			}
			env := map[string]string{}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
					env[e.Name] = e.ValueFrom.FieldRef.FieldPath
				}
			}
			if got := splitList(first(inv.value("nats"))); !sameSet(got, co.natsURLs) {
				fail("%s: --nats %v, want every coordinator's NATS node %v", inv.where, got, co.natsURLs)
			}
			lp, _ := portOf(first(inv.value("listen")))
			if v, want := first(inv.value("advertise")), fmt.Sprintf("$(POD_IP):%d", lp); v != want || env["POD_IP"] != "status.podIP" {
				fail("%s: --advertise %q, want %q with POD_IP the pod's status.podIP", inv.where, v, want)
			}
			if v := first(inv.value("host")); v != "$(POD_NAME)" || env["POD_NAME"] != "metadata.name" {
				fail("%s: --host %q, want $(POD_NAME) with POD_NAME the pod's metadata.name", inv.where, v)
			}
		}
	}
	// Services: each selects one workload and targets its ports.
	for _, s := range m.services {
		where := fmt.Sprintf("%s: Service %s", m.files["Service/"+s.Name], s.Name)
		var sel []workload
		for _, w := range m.workloads() {
			if len(s.Spec.Selector) > 0 && labelsMatch(s.Spec.Selector, w.template.Labels) {
				sel = append(sel, w)
			}
		}
		if len(sel) != 1 {
			fail("%s: selector %v selects %d workloads, want 1", where, s.Spec.Selector, len(sel))
			continue
		}
		for _, p := range s.Spec.Ports {
			tp := p.TargetPort
			if tp.Type == intstr.Int && tp.IntVal == 0 {
				tp = intstr.FromInt32(p.Port)
			}
			found := false
			for _, c := range sel[0].template.Spec.Containers {
				if _, ok := containerPort(c, tp); ok {
					found = true
				}
			}
			if !found {
				fail("%s: port %s targets %s, which %s %s does not open", where, p.Name, tp.String(), sel[0].kind, sel[0].name)
			}
		}
	}
	for _, d := range m.pdbs {
		found := false
		for _, w := range m.workloads() {
			if d.Spec.Selector != nil && labelsMatch(d.Spec.Selector.MatchLabels, w.template.Labels) {
				found = true
			}
		}
		if !found {
			fail("PodDisruptionBudget %s selects no workload", d.Name)
		}
	}
	return errs
}

// checkProfilesMount: --profiles names a key of a ConfigMap mounted at
// its directory, and that key holds deploy/profiles.json.
func checkProfilesMount(m manifests, w workload, c corev1.Container, where, file string, profiles []byte) []error {
	vm := mountAt(c, path.Dir(file))
	if vm == nil {
		return []error{fmt.Errorf("%s: --profiles %s: nothing is mounted at %s", where, file, path.Dir(file))}
	}
	var cmName string
	for _, v := range w.template.Spec.Volumes {
		if v.Name == vm.Name && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	for _, cm := range m.configMaps {
		if cm.Name != cmName {
			continue
		}
		got, ok := cm.Data[path.Base(file)]
		if !ok {
			return []error{fmt.Errorf("%s: --profiles %s: ConfigMap %s has no key %s", where, file, cmName, path.Base(file))}
		}
		var a, b any
		if err := json.Unmarshal([]byte(got), &a); err != nil {
			return []error{fmt.Errorf("ConfigMap %s: %s: %v", cmName, path.Base(file), err)}
		}
		if err := json.Unmarshal(profiles, &b); err != nil {
			return []error{fmt.Errorf("deploy/profiles.json: %v", err)}
		}
		if !reflect.DeepEqual(a, b) {
			return []error{fmt.Errorf("ConfigMap %s: %s differs from deploy/profiles.json", cmName, path.Base(file))}
		}
		return nil
	}
	return []error{fmt.Errorf("%s: --profiles %s: volume %s is not a ConfigMap of deploy/k8s", where, file, vm.Name)}
}

func mountAt(c corev1.Container, dir string) *corev1.VolumeMount {
	for i, vm := range c.VolumeMounts {
		if path.Clean(vm.MountPath) == path.Clean(dir) {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func first(s string, _ bool) string { return s }

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return len(a) > 0 && slices.Equal(a, b)
}

// imageCommands returns the commands deploy/Dockerfile builds into the
// image (./cmd/NAME on its go build line).
func imageCommands(t testing.TB) []string {
	t.Helper()
	data := readDeploy(t, "Dockerfile").data
	var bins []string
	for _, l := range logicalLines(string(data)) {
		if !strings.Contains(l, "go build") {
			continue
		}
		for _, m := range regexp.MustCompile(`\./cmd/([a-z]+)`).FindAllStringSubmatch(l, -1) {
			bins = append(bins, m[1])
		}
	}
	if len(bins) == 0 {
		t.Fatal("deploy/Dockerfile: no go build of ./cmd/NAME")
	}
	return bins
}

func loadManifests(t testing.TB, files []deployFile) manifests {
	t.Helper()
	var m manifests
	for _, f := range files {
		o, err := parseManifests(f.name, f.data)
		if err != nil {
			t.Fatal(err)
		}
		m.add(o)
	}
	return m
}

// TestKubernetesManifests checks deploy/k8s as checkManifests says, that
// kustomization.yaml lists exactly its manifests and sets the image the
// containers use, and that each check fails on a broken copy.
func TestKubernetesManifests(t *testing.T) {
	d := loadDeployFiles(t)
	m := loadManifests(t, d.k8s)
	bins := imageCommands(t)
	profiles := readDeploy(t, "profiles.json").data
	for _, err := range checkManifests(m, bins, profiles) {
		t.Error(err)
	}
	if len(m.statefulSets) != 1 || len(m.deployments) != 1 || len(m.services) < 2 || len(m.configMaps) != 1 || len(m.pdbs) != 1 {
		t.Errorf("deploy/k8s: %d StatefulSets, %d Deployments, %d Services, %d ConfigMaps, %d PodDisruptionBudgets", len(m.statefulSets), len(m.deployments), len(m.services), len(m.configMaps), len(m.pdbs))
	}

	var kust struct {
		Resources []string `json:"resources"`
		Images    []struct {
			Name, NewName, NewTag string
		} `json:"images"`
	}
	if err := k8syaml.Unmarshal(readDeploy(t, "k8s/kustomization.yaml").data, &kust); err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range d.k8s {
		files = append(files, path.Base(f.name))
	}
	if !sameSet(kust.Resources, files) {
		t.Errorf("deploy/k8s/kustomization.yaml: resources %v, want the manifests %v", kust.Resources, files)
	}
	for _, w := range m.workloads() {
		for _, c := range w.template.Spec.Containers {
			name, _, _ := strings.Cut(c.Image, ":")
			if len(kust.Images) != 1 || name != kust.Images[0].Name {
				t.Errorf("%s: image %s is not the kustomization's image %v", w.where(m, c), c.Image, kust.Images)
			}
		}
	}

	// Each check on a broken copy: it must fail.
	coordFile := readDeploy(t, "k8s/coordinator.yaml")
	var others []deployFile
	for _, f := range d.k8s {
		if f.name != coordFile.name {
			others = append(others, f)
		}
	}
	for _, b := range []struct{ what, old, new string }{
		{"a misspelt field", "publishNotReadyAddresses: true", "publishNotReadyAdresses: true"},
		{"pods that cannot find each other before they are ready", "publishNotReadyAddresses: true", "publishNotReadyAddresses: false"},
		{"ordered pod start", "podManagementPolicy: Parallel", "podManagementPolicy: OrderedReady"},
		{"a route to a pod that does not exist", "scanplane-coordinator-2.scanplane-coordinator:6222", "scanplane-coordinator-3.scanplane-coordinator:6222"},
		{"a probe on the actor port", "              path: /status\n              port: http", "              path: /status\n              port: actor"},
		{"a probe on a path nothing serves", "path: /status", "path: /healthz"},
		{"--http on another port than the container's", "--http=0.0.0.0:8091", "--http=0.0.0.0:9091"},
		{"an undefined $(VAR)", "--nats-name=$(POD_NAME)", "--nats-name=$(NODE_NAME)"},
		{"--data off the volume claim", "--data=/var/lib/scanplane", "--data=/tmp/scanplane"},
		{"a Service port nothing opens", "      targetPort: routes", "      targetPort: cluster"},
		{"--profiles where nothing is mounted", "--profiles=/etc/scanplane/profiles.json", "--profiles=/etc/scanplane2/profiles.json"},
	} {
		if !strings.Contains(string(coordFile.data), b.old) {
			t.Fatalf("%s has no %q to break", coordFile.name, b.old)
		}
		broken := deployFile{name: coordFile.name, data: []byte(strings.Replace(string(coordFile.data), b.old, b.new, 1))}
		var bm manifests
		var errs []error
		for _, f := range append([]deployFile{broken}, others...) {
			o, err := parseManifests(f.name, f.data)
			if err != nil {
				errs = append(errs, err)
			}
			bm.add(o)
		}
		if len(errs) == 0 {
			errs = checkManifests(bm, bins, profiles)
		}
		if len(errs) == 0 {
			t.Errorf("%s: not refused", b.what)
		} else {
			t.Logf("%s: refused: %v", b.what, errs[0])
		}
	}
	if errs := checkManifests(m, bins, bytes.Replace(profiles, []byte(`"ribbon-zone"`), []byte(`"random"`), 1)); len(errs) == 0 {
		t.Error("a ConfigMap that differs from deploy/profiles.json: not refused")
	}
	if errs := checkManifests(m, slices.DeleteFunc(slices.Clone(bins), func(b string) bool { return b == "scanserver" }), profiles); len(errs) == 0 {
		t.Error("an image without scanserver: not refused")
	}
}

// TestDockerfile: the image is built static (CGO_ENABLED=0), runs as a
// non-root user, and holds the commands compose.yaml and deploy/k8s run.
func TestDockerfile(t *testing.T) {
	text := string(readDeploy(t, "Dockerfile").data)
	for _, err := range checkDockerfile(text) {
		t.Error(err)
	}
	for _, b := range []struct{ what, old, new string }{
		{"cgo on", "RUN CGO_ENABLED=0", "RUN CGO_ENABLED=1"},
		{"root", "USER 65532:65532", "USER root"},
	} {
		if !strings.Contains(text, b.old) {
			t.Fatalf("deploy/Dockerfile has no %q", b.old)
		}
		if len(checkDockerfile(strings.Replace(text, b.old, b.new, 1))) == 0 {
			t.Errorf("%s: not refused", b.what)
		}
	}
	bins := imageCommands(t)
	for _, want := range []string{"coordinator", "scanserver", "scanctl"} {
		if !slices.Contains(bins, want) {
			t.Errorf("deploy/Dockerfile builds %v, not %s", bins, want)
		}
	}
	if _, err := os.Stat(filepath.Join(repoRoot, ".dockerignore")); err != nil {
		t.Errorf(".dockerignore: %v (the build context is the repository root)", err)
	}
}

func checkDockerfile(text string) []error {
	var errs []error
	build := ""
	for _, l := range logicalLines(text) {
		if strings.Contains(l, "go build") {
			build = l
		}
	}
	if !strings.Contains(build, "CGO_ENABLED=0") {
		errs = append(errs, fmt.Errorf("deploy/Dockerfile: go build without CGO_ENABLED=0: %q", strings.TrimSpace(build)))
	}
	users := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindAllStringSubmatch(text, -1)
	if len(users) == 0 {
		errs = append(errs, fmt.Errorf("deploy/Dockerfile: no USER: the image would run as root"))
	} else if u := strings.SplitN(users[len(users)-1][1], ":", 2)[0]; u == "0" || u == "root" {
		errs = append(errs, fmt.Errorf("deploy/Dockerfile: USER %s: want a non-root user", u))
	}
	return errs
}
