// Package metrics holds the metric conventions the coordinator and the
// scan server share: latency histogram options and the outcome label of a
// wire error code. It keeps no state.
package metrics
