package policysim

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// WritePlot writes latency-<setting>-<utilization>.png into dir: the
// latency distribution of each of rs (one setting, one curve per policy)
// as the fraction of requests slower than x, both axes log, so that p99
// and p99.9 are readable, as the load tester's tail plot. It returns the
// file's path.
func WritePlot(dir string, rs []*Result) (string, error) {
	if len(rs) == 0 {
		return "", errors.New("policysim: nothing to plot")
	}
	c := rs[0].Config
	p := plot.New()
	p.Title.Text = fmt.Sprintf("latency tail — %s, utilization %.2f, %d servers, %d clients", c.Setting, c.Utilization, c.Servers, c.Clients)
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "fraction of requests slower (log scale)"
	p.Add(plotter.NewGrid())
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	for i, r := range rs {
		n := len(r.Latencies)
		if n < 2 {
			continue
		}
		var xy plotter.XYs
		// 400 points, denser in the tail: quantiles 1 − 10^(−k/100).
		for k := 0; k <= 500; k++ {
			q := 1 - pow10(-float64(k)/100)
			j := int(q * float64(n))
			if j >= n || float64(n-j)/float64(n) < 1e-5 {
				break
			}
			if ms := float64(r.Latencies[j].Microseconds()) / 1000; ms > 0 {
				xy = append(xy, plotter.XY{X: ms, Y: float64(n-j) / float64(n)})
			}
		}
		if len(xy) < 2 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return "", err
		}
		l.Color, l.Dashes, l.Width = plotutil.Color(i), plotutil.Dashes(i), vg.Points(1.5)
		row := r.Row()
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (p99 %.1f, p99.9 %.1f ms)", r.Policy, row.P99ms, row.P999ms), l)
	}
	path := filepath.Join(dir, fmt.Sprintf("latency-%s-%.2f.png", c.Setting, c.Utilization))
	if err := p.Save(9*vg.Inch, 5.5*vg.Inch, path); err != nil {
		return "", err
	}
	return path, nil
}

func pow10(x float64) float64 { return math.Pow(10, x) }
