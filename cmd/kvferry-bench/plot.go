package main

import (
	"fmt"
	"image/color"
	"os"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotResults draws throughput (GB/s) and median batch latency (µs)
// against block size, one line per (batch size, threads), side by side,
// into a PNG file.
func plotResults(path string, rs []Result) error {
	type key struct{ batch, threads int }
	series := map[key][]Result{}
	var keys []key
	for _, r := range rs {
		k := key{r.BatchSize, r.Threads}
		if _, ok := series[k]; !ok {
			keys = append(keys, k)
		}
		series[k] = append(series[k], r)
	}
	tp := plot.New()
	tp.Title.Text = fmt.Sprintf("kvferry %s throughput", rs[0].Operation)
	tp.X.Label.Text = "block size (bytes)"
	tp.Y.Label.Text = "GB/s"
	tp.Y.Min = 0
	lat := plot.New()
	lat.Title.Text = fmt.Sprintf("kvferry %s batch latency (p50)", rs[0].Operation)
	lat.X.Label.Text = "block size (bytes)"
	lat.Y.Label.Text = "µs"
	for _, p := range []*plot.Plot{tp, lat} {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = sizeTicks{}
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		p.Legend.Left = true
	}
	lat.Y.Scale = plot.LogScale{}
	lat.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	for i, k := range keys {
		pts := series[k]
		sort.Slice(pts, func(a, b int) bool { return pts[a].BlockSize < pts[b].BlockSize })
		thr := make(plotter.XYs, len(pts))
		l := make(plotter.XYs, 0, len(pts))
		for j, r := range pts {
			thr[j] = plotter.XY{X: float64(r.BlockSize), Y: r.GBps}
			if r.P50BatchUs > 0 {
				l = append(l, plotter.XY{X: float64(r.BlockSize), Y: r.P50BatchUs})
			}
		}
		name := fmt.Sprintf("batch %d, %d threads", k.batch, k.threads)
		for _, x := range []struct {
			p   *plot.Plot
			xys plotter.XYs
		}{{tp, thr}, {lat, l}} {
			if len(x.xys) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(x.xys)
			if err != nil {
				return err
			}
			c := plotutil.Color(i)
			line.Color, points.Color = c, c
			points.Shape = plotutil.Shape(i)
			x.p.Add(line, points)
			x.p.Legend.Add(name, line, points)
		}
	}
	const w, h = 12 * vg.Inch, 4.5 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseBackgroundColor(color.White), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 6, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align([][]*plot.Plot{{tp, lat}}, tiles, dc)
	tp.Draw(canvases[0][0])
	lat.Draw(canvases[0][1])
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

// sizeTicks marks powers of two with binary size names (every other one
// when there are many).
type sizeTicks struct{}

// Ticks implements plot.Ticker.
func (sizeTicks) Ticks(lo, hi float64) []plot.Tick {
	var vs []float64
	for v := 1.0; v <= hi*1.001; v *= 2 {
		if v >= lo*0.999 {
			vs = append(vs, v)
		}
	}
	ts := make([]plot.Tick, len(vs))
	for i, v := range vs {
		ts[i].Value = v
		if len(vs) <= 8 || i%2 == 0 {
			ts[i].Label = sizeName(uint64(v))
		}
	}
	return ts
}
