package remoting

import "github.com/prometheus/client_golang/prometheus"

// RefusedMetric is the name of the counter of what the remote's Guard
// refused, labelled by reason (Reason.Label; every reason is exported
// from the start, at 0).
const RefusedMetric = "scanplane_remote_refused_total"

var refusedDesc = prometheus.NewDesc(RefusedMetric,
	"Calls, streams and messages the actor remote refused (docs/security.md), by reason.", []string{"reason"}, nil)

// RefusedCollector exports RefusedMetric for the Guard get returns at
// scrape time (nil: zeros; a process that replaces its actor system
// exports the new system's counts).
func RefusedCollector(get func() *Guard) prometheus.Collector {
	return refusedCollector{get}
}

type refusedCollector struct{ get func() *Guard }

func (c refusedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- refusedDesc }

func (c refusedCollector) Collect(ch chan<- prometheus.Metric) {
	g := c.get()
	for _, r := range Reasons() {
		var n uint64
		if g != nil {
			n = g.RefusedBy(r)
		}
		ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(n), r.Label())
	}
}
