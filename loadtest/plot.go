package loadtest

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// WritePlots writes, for every fault, latency-cdf-<fault>.png (one curve
// per policy, log latency axis), latency-tail-<fault>.png (the same
// distribution as the fraction of scans slower than x, both axes log, so
// p99 and p99.9 are readable) and p99-<fault>.png (p99 of each second of
// the measurement window per policy, the fault windows shaded). It returns the
// files written.
func (r *Report) WritePlots(dir string) ([]string, error) {
	kinds := []struct {
		prefix string
		make   func(fault string, rs []Result) (*plot.Plot, error)
	}{{"latency-cdf-", cdfPlot}, {"latency-tail-", tailPlot}, {"p99-", p99Plot}}
	var files []string
	for _, f := range r.Faults() {
		var rs []Result
		for _, res := range r.Results {
			if res.Fault == f {
				rs = append(rs, res)
			}
		}
		name := strings.NewReplacer("+", "_", "/", "_").Replace(f)
		for _, k := range kinds {
			p, err := k.make(f, rs)
			if err != nil {
				return files, err
			}
			if p == nil {
				continue // no result with data
			}
			path := filepath.Join(dir, k.prefix+name+".png")
			if err := p.Save(9*vg.Inch, 5.5*vg.Inch, path); err != nil {
				return files, err
			}
			files = append(files, path)
		}
	}
	return files, nil
}

// newPlot is a plot with a title, axis labels and a grid.
func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	return p
}

func logAxis(a *plot.Axis) {
	a.Scale = plot.LogScale{}
	a.Tick.Marker = plot.LogTicks{Prec: -1}
}

// legendLine is one policy's curve and its legend entry.
type legendLine struct {
	line  *plotter.Line
	label string
}

// policyLines makes one styled line per result (the i-th result gets
// style i, so a policy keeps its colour across plots) from the points and
// label curve returns; a result with fewer than minPoints (>= 1) points has no
// line.
func policyLines(rs []Result, minPoints int, curve func(Result) (plotter.XYs, string)) ([]legendLine, error) {
	var out []legendLine
	for i, res := range rs {
		xy, label := curve(res)
		if len(xy) < minPoints {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		l.Width = vg.Points(1.5)
		out = append(out, legendLine{l, label})
	}
	return out, nil
}

func addLines(p *plot.Plot, ls []legendLine) {
	for _, l := range ls {
		p.Add(l.line)
		p.Legend.Add(l.label, l.line)
	}
}

func cdfPlot(fault string, rs []Result) (*plot.Plot, error) {
	ls, err := policyLines(rs, 1, func(res Result) (plotter.XYs, string) {
		var xy plotter.XYs
		for _, c := range res.CDF {
			if c.Ms > 0 {
				xy = append(xy, plotter.XY{X: c.Ms, Y: c.Q})
			}
		}
		return xy, fmt.Sprintf("%s (p99 %.1f ms)", res.Policy, res.P99Ms)
	})
	if err != nil || len(ls) == 0 {
		return nil, err
	}
	p := newPlot(fmt.Sprintf("scan latency CDF — fault: %s", fault), "latency (ms, log scale)", "fraction of scans")
	logAxis(&p.X)
	p.Y.Min, p.Y.Max = 0, 1
	addLines(p, ls)
	return p, nil
}

func tailPlot(fault string, rs []Result) (*plot.Plot, error) {
	ls, err := policyLines(rs, 2, func(res Result) (plotter.XYs, string) {
		var xy plotter.XYs
		for _, c := range res.CDF {
			if c.Ms > 0 && c.Q < 1 && 1-c.Q >= 1e-4 {
				xy = append(xy, plotter.XY{X: c.Ms, Y: 1 - c.Q})
			}
		}
		return xy, fmt.Sprintf("%s (p99 %.1f, p99.9 %.1f ms)", res.Policy, res.P99Ms, res.P999Ms)
	})
	if err != nil || len(ls) == 0 {
		return nil, err
	}
	p := newPlot(fmt.Sprintf("scan latency tail — fault: %s", fault), "latency (ms, log scale)", "fraction of scans slower (log scale)")
	logAxis(&p.X)
	logAxis(&p.Y)
	p.Legend.Top = true
	addLines(p, ls)
	return p, nil
}

func p99Plot(fault string, rs []Result) (*plot.Plot, error) {
	ymax, xmax := 0.0, 0.0
	ls, err := policyLines(rs, 1, func(res Result) (plotter.XYs, string) {
		var xy plotter.XYs
		for s, v := range res.P99OverTimeMs {
			if v > 0 {
				xy = append(xy, plotter.XY{X: float64(s) + 0.5, Y: v})
				ymax = math.Max(ymax, v)
			}
		}
		xmax = math.Max(xmax, float64(len(res.P99OverTimeMs)))
		return xy, fmt.Sprintf("%s (longest gap without a completed scan %.0f ms at %.1f s)", res.Policy, res.LongestGapMs, res.LongestGapAtS)
	})
	if err != nil || len(ls) == 0 {
		return nil, err
	}
	ymax *= 1.1
	p := newPlot(fmt.Sprintf("p99 per second of the measurement window — fault: %s (shaded: fault active)", fault),
		"seconds into the measurement window", "p99 latency (ms)")
	p.Legend.Top = true
	// Shade the fault windows first so the curves are drawn over them.
	shaded := map[[2]float64]bool{}
	for _, res := range rs {
		for _, w := range res.FaultWindowsS {
			if shaded[w] {
				continue
			}
			shaded[w] = true
			poly, err := plotter.NewPolygon(plotter.XYs{{X: w[0], Y: 0}, {X: w[1], Y: 0}, {X: w[1], Y: ymax}, {X: w[0], Y: ymax}})
			if err != nil {
				return nil, err
			}
			poly.Color = color.NRGBA{R: 255, G: 80, B: 80, A: 40}
			poly.LineStyle.Width = 0
			p.Add(poly)
		}
	}
	addLines(p, ls)
	p.X.Min, p.X.Max = 0, xmax
	p.Y.Min, p.Y.Max = 0, ymax
	return p, nil
}
