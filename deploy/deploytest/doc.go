// Package deploytest checks the operator files under deploy/ against the
// system they describe. It has only tests, and lives in the deploy
// module (deploy/go.mod) so that Prometheus' packages stay out of the
// main module's dependencies; it builds the main module's commands once
// per run (go build in the repository root).
//
//   - Alerts and dashboard: deploy/prometheus/alerts.yml is loaded with
//     Prometheus's rule parser, every query of the rules and of the
//     Grafana dashboard is parsed as PromQL, and every metric, label and
//     label value they use is looked up in the /metrics of a real
//     coordinator and scanserver; every alert is evaluated with
//     Prometheus's PromQL engine over series where it must fire and
//     series where it must not. nats-server-secure.conf's users are
//     natsserver.UserPermissions.
//   - Commands: every flag the systemd units, start-hosts.sh,
//     compose.yaml, the Kubernetes manifests and the READMEs' shell and
//     unit blocks pass is in the command's --help; every Prometheus
//     scrape target is on a port those files open with --http.
//   - Fit: compose.yaml's and deploy/k8s's processes find each other
//     (NATS routes and URLs, advertised addresses, ports, probes,
//     Services, volumes, the profiles ConfigMap), the Dockerfile builds
//     static binaries run by a non-root user, start-hosts.sh parses.
//   - No doc (README.md, docs/, deploy/) and no --help says TLS or
//     authentication does not exist yet.
//
// Every check also runs on deliberately broken copies of the files and
// must refuse each.
package deploytest
