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
// the measured window per policy, the fault windows shaded). It returns the
// files written.
func (r *Report) WritePlots(dir string) ([]string, error) {
	var files []string
	for _, f := range r.Faults() {
		var rs []Result
		for _, res := range r.Results {
			if res.Fault == f {
				rs = append(rs, res)
			}
		}
		name := strings.NewReplacer("+", "_", "/", "_").Replace(f)
		p, err := cdfPlot(f, rs)
		if err != nil {
			return files, err
		}
		if p != nil {
			path := filepath.Join(dir, "latency-cdf-"+name+".png")
			if err := p.Save(9*vg.Inch, 5.5*vg.Inch, path); err != nil {
				return files, err
			}
			files = append(files, path)
		}
		if p, err = tailPlot(f, rs); err != nil {
			return files, err
		}
		if p != nil {
			path := filepath.Join(dir, "latency-tail-"+name+".png")
			if err := p.Save(9*vg.Inch, 5.5*vg.Inch, path); err != nil {
				return files, err
			}
			files = append(files, path)
		}
		if p, err = p99Plot(f, rs); err != nil {
			return files, err
		}
		if p != nil {
			path := filepath.Join(dir, "p99-"+name+".png")
			if err := p.Save(9*vg.Inch, 5.5*vg.Inch, path); err != nil {
				return files, err
			}
			files = append(files, path)
		}
	}
	return files, nil
}

func style(l *plotter.Line, i int) {
	l.Color = plotutil.Color(i)
	l.Dashes = plotutil.Dashes(i)
	l.Width = vg.Points(1.5)
}

func cdfPlot(fault string, rs []Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("scan latency CDF — fault: %s", fault)
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "fraction of scans"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	n := 0
	for i, res := range rs {
		var xy plotter.XYs
		for _, c := range res.CDF {
			if c.Ms > 0 {
				xy = append(xy, plotter.XY{X: c.Ms, Y: c.Q})
			}
		}
		if len(xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return nil, err
		}
		style(l, i)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (p99 %.1f ms)", res.Policy, res.P99Ms), l)
		n++
	}
	if n == 0 {
		return nil, nil
	}
	return p, nil
}

func tailPlot(fault string, rs []Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("scan latency tail — fault: %s", fault)
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "fraction of scans slower (log scale)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	n := 0
	for i, res := range rs {
		var xy plotter.XYs
		for _, c := range res.CDF {
			if c.Ms > 0 && c.Q < 1 && 1-c.Q >= 1e-4 {
				xy = append(xy, plotter.XY{X: c.Ms, Y: 1 - c.Q})
			}
		}
		if len(xy) < 2 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return nil, err
		}
		style(l, i)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (p99 %.1f, p99.9 %.1f ms)", res.Policy, res.P99Ms, res.P999Ms), l)
		n++
	}
	if n == 0 {
		return nil, nil
	}
	return p, nil
}

func p99Plot(fault string, rs []Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("p99 per second of the measured window — fault: %s (shaded: fault active)", fault)
	p.X.Label.Text = "seconds into the measured window"
	p.Y.Label.Text = "p99 latency (ms)"
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	ymax, xmax := 0.0, 0.0
	var lines []*plotter.Line
	var names []string
	for i, res := range rs {
		var xy plotter.XYs
		for s, v := range res.P99OverTimeMs {
			if v > 0 {
				xy = append(xy, plotter.XY{X: float64(s) + 0.5, Y: v})
				ymax = math.Max(ymax, v)
			}
		}
		xmax = math.Max(xmax, float64(len(res.P99OverTimeMs)))
		if len(xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return nil, err
		}
		style(l, i)
		lines = append(lines, l)
		names = append(names, res.Policy)
	}
	if len(lines) == 0 {
		return nil, nil
	}
	ymax *= 1.1
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
	for i, l := range lines {
		p.Add(l)
		p.Legend.Add(names[i], l)
	}
	p.X.Min, p.X.Max = 0, xmax
	p.Y.Min, p.Y.Max = 0, ymax
	return p, nil
}
