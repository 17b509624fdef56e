package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvferry/kvferry/engine/transport/rdma"
)

// nicRow is one NIC port: from a process's metrics (Endpoint set) or from
// this host's sysfs.
type nicRow struct {
	Endpoint  string   `json:"endpoint,omitempty"`
	Device    string   `json:"device"`
	Port      string   `json:"port"`
	PCI       string   `json:"pci,omitempty"`
	NUMA      *int     `json:"numa,omitempty"`
	Netdevs   []string `json:"netdevs,omitempty"`
	Up        *bool    `json:"up,omitempty"`
	InFlight  float64  `json:"inflight_bytes"`
	Bandwidth float64  `json:"bandwidth_bytes_per_s"`
	Endpoints float64  `json:"endpoints"`
	// The port's kernel counters (all traffic of the host).
	XmitBytes   float64            `json:"xmit_bytes"`
	RcvBytes    float64            `json:"rcv_bytes"`
	XmitPackets float64            `json:"xmit_packets"`
	RcvPackets  float64            `json:"rcv_packets"`
	LinkDowned  float64            `json:"link_downed"`
	Errors      map[string]float64 `json:"errors,omitempty"`
	HW          map[string]float64 `json:"hw_counters,omitempty"`
	Note        string             `json:"note,omitempty"`
}

func (r *nicRow) errorTotal() float64 {
	var n float64
	for _, v := range r.Errors {
		n += v
	}
	return n
}

// cmdNICs lists the RDMA NICs: with --metrics as the processes report
// them (their NIC gauges beside the ports' kernel counters), else this
// host's devices read from sysfs through rdmamap.
func cmdNICs(ctx context.Context, o *options, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("nics takes no arguments")
	}
	rows := []*nicRow{}
	if len(o.metrics) == 0 {
		rows = hostNICRows(rdma.RdmamapClass{}, os.DirFS("/sys"))
		if len(rows) == 0 && !o.json {
			fmt.Fprintln(o.out, "no RDMA device in /sys/class/infiniband")
			return nil
		}
	} else {
		for _, ep := range o.metrics {
			body, err := httpGet(ctx, metricsURL(ep), o.timeout)
			if err != nil {
				return err
			}
			p := expfmt.NewTextParser(model.UTF8Validation)
			mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
			if err != nil {
				return fmt.Errorf("%s: %w", ep, err)
			}
			rows = append(rows, metricNICRows(ep, mfs)...)
		}
	}
	var table [][]string
	for _, r := range rows {
		up := "-"
		if r.Up != nil {
			up = strconv.FormatBool(*r.Up)
		}
		where := r.Endpoint
		if where == "" {
			where = orDash(r.PCI)
			if r.NUMA != nil {
				where += " numa " + strconv.Itoa(*r.NUMA)
			}
			if len(r.Netdevs) > 0 {
				where += " " + strings.Join(r.Netdevs, ",")
			}
		}
		errs := num(r.errorTotal())
		if r.Note != "" {
			errs = r.Note
		}
		table = append(table, []string{where, r.Device, r.Port, up, bytesName(r.InFlight), rateName(r.Bandwidth),
			num(r.Endpoints), bytesName(r.XmitBytes), bytesName(r.RcvBytes), num(r.LinkDowned), errs, hwSummary(r.HW)})
	}
	return o.emit(rows, []string{"PROCESS/PLACE", "DEVICE", "PORT", "UP", "IN FLIGHT", "BANDWIDTH", "ENDPOINTS",
		"XMIT", "RCV", "LINK DOWNED", "ERRORS", "HW COUNTERS (non-zero)"}, table)
}

// hostNICRows reads the host's NICs (class, and fsys rooted at /sys).
func hostNICRows(class rdma.SysClass, fsys fs.FS) []*nicRow {
	rows := []*nicRow{}
	for _, h := range rdma.Inventory(class, fsys) {
		numa := h.NUMA
		base := nicRow{Device: h.Device, PCI: h.PCI, NUMA: &numa, Netdevs: h.Netdevs, Port: "-"}
		if len(h.Ports) == 0 {
			r := base
			r.Note = "no ports"
			rows = append(rows, &r)
		}
		for _, p := range h.Ports {
			r := base
			r.Port = strconv.Itoa(p.Port)
			if p.Err != "" {
				r.Note = "counters unavailable: " + p.Err
			}
			r.XmitBytes, r.RcvBytes = float64(p.XmitBytes), float64(p.RcvBytes)
			r.XmitPackets, r.RcvPackets, r.LinkDowned = float64(p.XmitPackets), float64(p.RcvPackets), float64(p.LinkDowned)
			r.Errors, r.HW = floats(p.Errors), floats(p.HW)
			rows = append(rows, &r)
		}
	}
	return rows
}

func floats(m map[string]uint64) map[string]float64 {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = float64(v)
	}
	return out
}

// metricNICRows reads one endpoint's kvferry_rdma_nic_* gauges and
// kvferry_rdma_port_* counters, one row per (device, port); a NIC
// without readable counters gets a row with port "-".
func metricNICRows(ep string, mfs map[string]*dto.MetricFamily) []*nicRow {
	byPort := map[[2]string]*nicRow{}
	nicOnly := map[string]*nicRow{}
	row := func(l map[string]string) *nicRow {
		if p, ok := l["port"]; ok {
			k := [2]string{l["device"], p}
			if byPort[k] == nil {
				byPort[k] = &nicRow{Endpoint: ep, Device: k[0], Port: p}
			}
			return byPort[k]
		}
		if nicOnly[l["device"]] == nil {
			nicOnly[l["device"]] = &nicRow{Endpoint: ep, Device: l["device"], Port: "-"}
		}
		return nicOnly[l["device"]]
	}
	each := func(name string, f func(r *nicRow, l map[string]string, v float64)) {
		if mf := mfs[name]; mf != nil {
			for _, m := range mf.GetMetric() {
				l := labels(m)
				f(row(l), l, value(m))
			}
		}
	}
	each("kvferry_rdma_port_xmit_bytes_total", func(r *nicRow, _ map[string]string, v float64) { r.XmitBytes = v })
	each("kvferry_rdma_port_rcv_bytes_total", func(r *nicRow, _ map[string]string, v float64) { r.RcvBytes = v })
	each("kvferry_rdma_port_xmit_packets_total", func(r *nicRow, _ map[string]string, v float64) { r.XmitPackets = v })
	each("kvferry_rdma_port_rcv_packets_total", func(r *nicRow, _ map[string]string, v float64) { r.RcvPackets = v })
	each("kvferry_rdma_port_link_downed_total", func(r *nicRow, _ map[string]string, v float64) { r.LinkDowned = v })
	each("kvferry_rdma_port_errors_total", func(r *nicRow, l map[string]string, v float64) {
		if r.Errors == nil {
			r.Errors = map[string]float64{}
		}
		r.Errors[l["counter"]] = v
	})
	each("kvferry_rdma_port_hw_counters_total", func(r *nicRow, l map[string]string, v float64) {
		if r.HW == nil {
			r.HW = map[string]float64{}
		}
		r.HW[l["counter"]] = v
	})
	// The NIC gauges go on each of the NIC's port rows (on a row of
	// their own when the ports' counters are not exported).
	gauge := func(name string, set func(r *nicRow, v float64)) {
		if mf := mfs[name]; mf != nil {
			for _, m := range mf.GetMetric() {
				dev, n := labels(m)["device"], 0
				for k, r := range byPort {
					if k[0] == dev {
						set(r, value(m))
						n++
					}
				}
				if n == 0 {
					set(row(map[string]string{"device": dev}), value(m))
				}
			}
		}
	}
	gauge("kvferry_rdma_nic_up", func(r *nicRow, v float64) { up := v != 0; r.Up = &up })
	gauge("kvferry_rdma_nic_inflight_bytes", func(r *nicRow, v float64) { r.InFlight = v })
	gauge("kvferry_rdma_nic_bandwidth_bytes_per_second", func(r *nicRow, v float64) { r.Bandwidth = v })
	gauge("kvferry_rdma_nic_endpoints", func(r *nicRow, v float64) { r.Endpoints = v })
	var out []*nicRow
	for _, r := range byPort {
		out = append(out, r)
	}
	for _, r := range nicOnly {
		r.Note = "no port counters"
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Device != out[j].Device {
			return out[i].Device < out[j].Device
		}
		return out[i].Port < out[j].Port
	})
	return out
}

// hwSummary lists the non-zero hw_counters, "-" when none.
func hwSummary(m map[string]float64) string {
	var l []string
	for k, v := range m {
		if v != 0 {
			l = append(l, k+" "+num(v))
		}
	}
	if len(l) == 0 {
		return "-"
	}
	sort.Strings(l)
	return strings.Join(l, ", ")
}
