package policysim

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// Row is one line of the -json output.
type Row struct {
	Setting     string  `json:"setting"`
	Utilization float64 `json:"utilization"`
	Servers     int     `json:"servers"`
	Policy      string  `json:"policy"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	P999ms      float64 `json:"p999_ms"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Row summarises r.
func (r *Result) Row() Row {
	return Row{Setting: r.Config.Setting, Utilization: r.Config.Utilization, Servers: r.Config.Servers, Policy: r.Policy,
		P50ms: ms(r.Quantile(0.50)), P99ms: ms(r.Quantile(0.99)), P999ms: ms(r.Quantile(0.999))}
}

// WriteJSON writes r's Row as one JSON object and a newline.
func (r *Result) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(r.Row())
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteTable writes one table per setting and utilization: the quantiles
// and the attempt counts of each policy.
func WriteTable(w io.Writer, rs []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	var last string
	for _, r := range rs {
		key := fmt.Sprintf("%s, utilization %.2f, %d servers, %d clients", r.Config.Setting, r.Config.Utilization, r.Config.Servers, r.Config.Clients)
		if key != last {
			if last != "" {
				fmt.Fprintln(tw)
			}
			fmt.Fprintf(tw, "%s\n", key)
			fmt.Fprintln(tw, "policy\tp50 ms\tp99 ms\tp99.9 ms\trequests\tfailed\thedges\tbusy\ttimeouts\t")
			last = key
		}
		row := r.Row()
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%d\t%d\t%d\t%d\t%d\t\n", r.Policy, row.P50ms, row.P99ms, row.P999ms, r.Requests, r.Failed,
			r.Hedges, r.Busy, r.Timeouts)
	}
	return tw.Flush()
}
