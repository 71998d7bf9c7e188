// Package deploytest checks the operator files under deploy/ against the
// system they describe: deploy/prometheus/alerts.yml is loaded with
// Prometheus's rule parser, every query of the rules and of the Grafana
// dashboard (deploy/grafana/scanplane.json) is parsed as PromQL, and every
// metric, label and label value they use is looked up in the /metrics of a
// real coordinator and scanserver, so renaming a metric fails the tests.
// Every alert is also evaluated with Prometheus's PromQL engine over
// series where it must fire and series where it must not. It has only
// tests.
package deploytest
