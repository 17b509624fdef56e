//go:build soak

package soak_test

import (
	"fmt"
	"image/color"
	"os"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotSamples draws RSS (MiB), fds, threads and goroutines against time,
// one line per peer incarnation, four panels, with the end of the warm-up
// marked, into a PNG file.
func plotSamples(path string, ss []sample, warm time.Duration) error {
	type key struct{ peer, life int }
	var keys []key
	series := map[key][]sample{}
	for _, s := range ss {
		k := key{s.peer, s.life}
		if _, ok := series[k]; !ok {
			keys = append(keys, k)
		}
		series[k] = append(series[k], s)
	}
	metrics := []struct {
		title string
		get   func(sample) float64
	}{
		{"RSS (MiB)", func(s sample) float64 { return s.rss / (1 << 20) }},
		{"open fds", func(s sample) float64 { return s.fds }},
		{"threads", func(s sample) float64 { return s.threads }},
		{"goroutines", func(s sample) float64 { return s.gorout }},
	}
	var plots []*plot.Plot
	for _, m := range metrics {
		p := plot.New()
		p.Title.Text = "soak: " + m.title
		p.X.Label.Text = "seconds"
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		p.Legend.Left = true
		lo, hi := 0.0, 0.0
		for i, k := range keys {
			pts := make(plotter.XYs, len(series[k]))
			for j, s := range series[k] {
				v := m.get(s)
				pts[j] = plotter.XY{X: s.at.Seconds(), Y: v}
				if (i == 0 && j == 0) || v < lo {
					lo = v
				}
				hi = max(hi, v)
			}
			line, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			line.Color = plotutil.Color(k.peer)
			line.Dashes = plotutil.Dashes(k.life)
			p.Add(line)
			p.Legend.Add(fmt.Sprintf("p%d.%d", k.peer, k.life), line)
		}
		mark, err := plotter.NewLine(plotter.XYs{{X: warm.Seconds(), Y: lo}, {X: warm.Seconds(), Y: hi}})
		if err != nil {
			return err
		}
		mark.Color = color.Gray{Y: 128}
		p.Add(mark)
		p.Legend.Add("end of warm-up", mark)
		plots = append(plots, p)
	}
	const w, h = 12 * vg.Inch, 8 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseBackgroundColor(color.White), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 6, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align([][]*plot.Plot{{plots[0], plots[1]}, {plots[2], plots[3]}}, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[i/2][i%2])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
