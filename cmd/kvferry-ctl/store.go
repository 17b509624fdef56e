package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvferry/kvferry/store/ha"
)

func cmdObjects(ctx context.Context, o *options, args []string) error {
	fs := newSubFlags("objects")
	tenant := fs.String("tenant", "", "tenant whose keys to list (default tenant: empty)")
	limit := fs.Int("limit", 1000, "list at most this many objects (0: all)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	q := ""
	if *tenant != "" {
		q = "?tenant_id=" + url.QueryEscape(*tenant)
	}
	body, err := o.adminGet(ctx, "/get_all_keys"+q)
	if err != nil {
		return err
	}
	var keys []string
	for _, k := range strings.Split(body, "\n") {
		if k != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if *limit > 0 && len(keys) > *limit {
		keys = keys[:*limit]
	}
	type replica struct {
		Segment string `json:"segment"`
		Addr    uint64 `json:"addr"`
		Size    uint64 `json:"size"`
	}
	type object struct {
		Key      string    `json:"key"`
		Size     uint64    `json:"size"`
		Replicas []replica `json:"replicas"`
		Error    string    `json:"error,omitempty"`
	}
	var objs []object
	var rows [][]string
	for _, k := range keys {
		ob := object{Key: k}
		v := url.Values{"key": {k}}
		if *tenant != "" {
			v.Set("tenant_id", *tenant)
		}
		body, err := o.adminGet(ctx, "/query_key?"+v.Encode())
		var r struct {
			Data []struct {
				Segment string `json:"transport_endpoint_"`
				Addr    uint64 `json:"buffer_address_"`
				Size    uint64 `json:"size_"`
			} `json:"data"`
		}
		if err == nil {
			err = json.Unmarshal([]byte(body), &r)
		}
		if err != nil {
			ob.Error = err.Error() // removed or evicted since the listing
		}
		var segs []string
		for _, d := range r.Data {
			ob.Replicas = append(ob.Replicas, replica{d.Segment, d.Addr, d.Size})
			ob.Size += d.Size
			segs = append(segs, d.Segment)
		}
		objs = append(objs, ob)
		if ob.Error != "" {
			rows = append(rows, []string{k, "-", "-", "gone: " + ob.Error})
			continue
		}
		rows = append(rows, []string{k, bytesName(float64(ob.Size)), fmt.Sprint(len(ob.Replicas)), strings.Join(segs, ",")})
	}
	return o.emit(objs, []string{"KEY", "SIZE", "REPLICAS", "SEGMENTS"}, rows)
}

// cmdUsage prints each mounted segment's capacity, use and state, and
// each disk tier's capacity, use, files and writers' queue, from the
// master's metrics (and its segment status endpoint).
func cmdUsage(ctx context.Context, o *options, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("usage takes no arguments")
	}
	body, err := o.adminGet(ctx, "/metrics")
	if err != nil {
		return err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return err
	}
	type seg struct {
		Tier     string  `json:"tier"`
		Segment  string  `json:"segment"`
		Capacity float64 `json:"capacity_bytes"`
		Used     float64 `json:"used_bytes"`
		Ratio    float64 `json:"used_ratio"`
		// Status is the memory segment's state (OK, DRAINING, DRAINED).
		Status string `json:"status,omitempty"`
		// Objects and OffloadQueue are a disk tier's files and the
		// OFFLOAD tasks its writers have not finished.
		Objects      *float64 `json:"objects,omitempty"`
		OffloadQueue *float64 `json:"offload_queue,omitempty"`
	}
	read := func(tier string, sets map[string]func(*seg, float64)) []seg {
		by := map[string]*seg{}
		for name, set := range sets {
			if mf := mfs[name]; mf != nil {
				for _, m := range mf.GetMetric() {
					n := labels(m)["segment"]
					if by[n] == nil {
						by[n] = &seg{Tier: tier, Segment: n}
					}
					set(by[n], value(m))
				}
			}
		}
		var list []seg
		for _, s := range by {
			if s.Capacity > 0 {
				s.Ratio = s.Used / s.Capacity
			}
			list = append(list, *s)
		}
		sort.Slice(list, func(i, j int) bool { return list[i].Segment < list[j].Segment })
		return list
	}
	list := read("memory", map[string]func(*seg, float64){
		"kvferry_store_master_segment_capacity_bytes": func(s *seg, v float64) { s.Capacity = v },
		"kvferry_store_master_segment_used_bytes":     func(s *seg, v float64) { s.Used = v },
	})
	for i := range list {
		if list[i].Segment != "other" {
			list[i].Status = o.segmentStatus(ctx, list[i].Segment)
		}
	}
	disks := read("disk", map[string]func(*seg, float64){
		"kvferry_store_master_disk_tier_capacity_bytes": func(s *seg, v float64) { s.Capacity = v },
		"kvferry_store_master_disk_tier_used_bytes":     func(s *seg, v float64) { s.Used = v },
		"kvferry_store_master_disk_tier_objects":        func(s *seg, v float64) { s.Objects = &v },
		"kvferry_store_master_disk_tier_offload_queue":  func(s *seg, v float64) { s.OffloadQueue = &v },
	})
	var rows [][]string
	var capSum, usedSum float64
	for _, s := range list {
		capSum += s.Capacity
		usedSum += s.Used
		rows = append(rows, []string{s.Tier, s.Segment, bytesName(s.Capacity), bytesName(s.Used),
			fmt.Sprintf("%.1f%%", 100*s.Ratio), s.Status, "-", "-"})
	}
	if len(list) > 1 && !o.json {
		rows = append(rows, []string{"memory", "total", bytesName(capSum), bytesName(usedSum),
			fmt.Sprintf("%.1f%%", 100*usedSum/max(capSum, 1)), "", "", ""})
	}
	num := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	for _, s := range disks {
		rows = append(rows, []string{s.Tier, s.Segment, bytesName(s.Capacity), bytesName(s.Used),
			fmt.Sprintf("%.1f%%", 100*s.Ratio), "-", num(s.Objects), num(s.OffloadQueue)})
	}
	return o.emit(append(list, disks...), []string{"TIER", "SEGMENT", "CAPACITY", "USED", "USE", "STATUS", "FILES", "QUEUE"}, rows)
}

// cmdMaster shows the serving master: under HA (--master etcd://...) the
// leader recorded in etcd, else what --master_admin says.
func cmdMaster(ctx context.Context, o *options, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("master takes no arguments")
	}
	type view struct {
		Source  string `json:"source"`
		Leader  string `json:"leader"`
		Version uint64 `json:"view_version"`
		Role    string `json:"role,omitempty"`
		Ready   bool   `json:"service_ready,omitempty"`
	}
	var views []view
	if strings.HasPrefix(o.master, "etcd://") {
		eps, err := ha.ParseEndpoints(strings.TrimPrefix(o.master, "etcd://"))
		if err != nil {
			return err
		}
		cli, err := ha.Dial(eps, o.timeout)
		if err != nil {
			return err
		}
		defer cli.Close()
		c, cancel := context.WithTimeout(ctx, o.timeout)
		v, err := ha.Leader(c, cli, o.clusterID)
		cancel()
		if err != nil {
			return fmt.Errorf("leader of %s in %s: %w", o.clusterID, o.master, err)
		}
		views = append(views, view{Source: o.master, Leader: v.Address, Version: v.Version, Role: "leader"})
	} else if o.master != "" && o.masterAdmin == "" {
		return fmt.Errorf("--master takes etcd://...; give a master's admin port with --master_admin")
	}
	if o.masterAdmin != "" {
		body, err := o.adminGet(ctx, "/health")
		if err != nil {
			return err
		}
		var h struct {
			Role    string `json:"role"`
			Ready   bool   `json:"service_ready"`
			Leader  string `json:"leader_address"`
			Version uint64 `json:"view_version"`
		}
		if err := json.Unmarshal([]byte(body), &h); err != nil {
			return fmt.Errorf("master /health: %w", err)
		}
		views = append(views, view{Source: o.masterAdmin, Leader: h.Leader, Version: h.Version, Role: h.Role, Ready: h.Ready})
	}
	if len(views) == 0 {
		return fmt.Errorf("give --master etcd://... (HA) or --master_admin host:port")
	}
	var rows [][]string
	for _, v := range views {
		rows = append(rows, []string{v.Source, v.Leader, fmt.Sprint(v.Version), v.Role})
	}
	return o.emit(views, []string{"ASKED", "LEADER", "VIEW", "ROLE"}, rows)
}
