package abi

/*
#include <stdlib.h>
#include <stdint.h>
#include "transfer_engine_c.h"
#include "kvferry.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unsafe"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/metadata/connstr"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/efa"
	"github.com/kvferry/kvferry/engine/transport/rdma"
	"github.com/kvferry/kvferry/engine/transport/tcp"
	"github.com/kvferry/kvferry/internal/hostenv"
)

// Every function here is called only from the C definitions in te_c.c, after
// the fork guard. Each recovers panics into an error code.

func engineFail(e *engine.Engine, err error) {
	if e != nil {
		e.RecordError(err)
	}
	logger.Debug("c api call failed", "err", err)
}

func newEngine(conn, name string, autoDiscover bool, opts map[string]string) (h uintptr, err error) {
	if err := setup(); err != nil {
		return 0, err
	}
	cfg := stack.ConfigFromEnv(hostenv.Lookup)
	cfg.Engine.MetadataConn = conn
	cfg.Engine.LocalServerName = name
	cfg.AutoDiscover = autoDiscover
	for k, v := range opts {
		if err := applyOption(&cfg, k, v); err != nil {
			return 0, err
		}
	}
	e, err := stack.New(context.Background(), cfg)
	if err != nil {
		return 0, err
	}
	return engines.add(e), nil
}

//export kvf_create
func kvf_create(conn, name *C.char, autoDiscover C.int) (h C.uintptr_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
			h = 0
		}
	}()
	c, ok := cstr(conn)
	if !ok || c == "" {
		c = "P2PHANDSHAKE"
	}
	n, ok := cstr(name)
	if !ok || n == "" {
		n = engine.FirstNonLoopbackIPv4()
	}
	v, err := newEngine(c, n, autoDiscover != 0, nil)
	if err != nil {
		logger.Error("createTransferEngine failed", "metadata", connstr.Redact(c), "local_server_name", n, "err", err)
		return 0
	}
	return C.uintptr_t(v)
}

//export kvf_destroy
func kvf_destroy(h C.uintptr_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
		}
	}()
	if e, ok := engines.remove(uintptr(h)); ok {
		_ = e.Close()
	}
}

//export kvf_discover
func kvf_discover(h C.uintptr_t) (rc C.int) {
	defer recoverResource(&rc)
	if _, err := lookupEngine(uintptr(h)); err != nil {
		return C.int(resourceCode(err))
	}
	return 0
}

//export kvf_warmup_efa
func kvf_warmup_efa(h C.uintptr_t, name *C.char) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	seg, ok := cstr(name)
	if !ok {
		return errInvalidArgument
	}
	t, ok := e.Transport(efa.Name).(*efa.Transport)
	if !ok || seg == "" || seg == e.SegmentName() {
		return 0 // nothing to connect, as Mooncake's for a loopback name
	}
	ctx, cancel := metaCtx(e)
	defer cancel()
	if err := t.Warmup(ctx, seg); err != nil {
		engineFail(e, err)
		return C.int(resourceCode(err))
	}
	return 0
}

//export kvf_local_ip_port
func kvf_local_ip_port(h C.uintptr_t, buf *C.char, n C.size_t) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	if buf == nil || n == 0 {
		return errInvalidArgument
	}
	putString(buf, n, fmt.Sprintf("%s:%d", bracket(e.Host()), e.RPCPort()))
	return 0
}

func bracket(h string) string {
	if strings.Contains(h, ":") {
		return "[" + h + "]"
	}
	return h
}

// transport handles are the engine handle plus a small per-name tag, so
// they are never NULL and never collide with engine handles.
var transportTags = map[string]uintptr{"tcp": 1, "local": 2, "rdma": 3, "nvlink": 4, "shm": 5, "cma": 6, "efa": 7}

//export kvf_install
func kvf_install(h C.uintptr_t, proto *C.char, args unsafe.Pointer) (t C.uintptr_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
			t = 0
		}
	}()
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return 0
	}
	p, ok := cstr(proto)
	if !ok || p == "" {
		return 0
	}
	p = strings.ToLower(p)
	// args[0], when set, is a NIC priority matrix (RDMA); TCP ignores it,
	// but a malformed one fails as in Mooncake.
	var matrix string
	if args != nil {
		if first := *(**C.char)(args); first != nil {
			matrix = C.GoString(first)
			var m map[string][2][]string
			if err := json.Unmarshal([]byte(matrix), &m); err != nil {
				engineFail(e, fmt.Errorf("install transport %q: priority matrix: %w", p, err))
				return 0
			}
		}
	}
	if p == rdma.Name {
		// No NIC, no libibverbs: NULL, as Mooncake's installTransport; the
		// transports installed before stay.
		if _, err := e.InstallTransportWith(p, []string{matrix}); err != nil {
			engineFail(e, err)
			logger.Info("installTransport(rdma) failed", "err", err)
			return 0
		}
		return C.uintptr_t(uintptr(h) | transportTags[p])
	}
	names := []string{p}
	if p == tcp.Name {
		// A Mooncake program that installs TCP by hand still gets the
		// same-process and same-host paths: they are chosen per request
		// only for kvferry peers on this host, and Mooncake peers keep TCP.
		// Their errors are ignored; the descriptor is published once.
		for _, name := range stack.DefaultTransports {
			if name != tcp.Name {
				names = append(names, name)
			}
		}
	}
	if err := e.InstallTransports(names...)[0]; err != nil {
		engineFail(e, err)
		return 0
	}
	tag := transportTags[p]
	if tag == 0 {
		tag = 15
	}
	return C.uintptr_t(uintptr(h) | tag)
}

//export kvf_uninstall
func kvf_uninstall(h C.uintptr_t, proto *C.char) (rc C.int) {
	defer recoverResource(&rc)
	if _, err := lookupEngine(uintptr(h)); err != nil {
		return C.int(resourceCode(err))
	}
	return 0 // a no-op in Mooncake too
}

func metaCtx(e *engine.Engine) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), e.Config().MetadataTimeout+e.Config().ConnectTimeout)
}

//export kvf_open
func kvf_open(h C.uintptr_t, name *C.char, nocache C.int) (id C.int32_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
			id = -1
		}
	}()
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return -1
	}
	n, ok := cstr(name)
	if !ok {
		engineFail(e, fmt.Errorf("open segment: %w", errNULL))
		return -1
	}
	ctx, cancel := metaCtx(e)
	defer cancel()
	var sid engine.SegmentID
	if nocache != 0 {
		sid, err = e.OpenSegmentNoCache(ctx, n)
	} else {
		sid, err = e.OpenSegment(ctx, n)
	}
	if err != nil {
		engineFail(e, err)
		return -1
	}
	return C.int32_t(sid)
}

//export kvf_close_segment
func kvf_close_segment(h C.uintptr_t, id C.int32_t) (rc C.int) {
	defer recoverResource(&rc)
	if _, err := lookupEngine(uintptr(h)); err != nil {
		return C.int(resourceCode(err))
	}
	return 0 // descriptors stay cached, as in Mooncake
}

//export kvf_remove_segment
func kvf_remove_segment(h C.uintptr_t, name *C.char) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	n, ok := cstr(name)
	if !ok || n == "" {
		return errInvalidArgument
	}
	if err := e.RemoveSegment(n); err != nil {
		engineFail(e, err)
		return C.int(resourceCode(err))
	}
	return 0
}

//export kvf_register
func kvf_register(h C.uintptr_t, addr unsafe.Pointer, length C.size_t, location *C.char, remote C.int) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	if addr == nil || length == 0 {
		engineFail(e, fmt.Errorf("register memory %p+%d: %w", addr, length, engine.ErrInvalidArgument))
		return errInvalidArgument
	}
	loc, ok := cstr(location)
	if !ok || loc == "" {
		loc = "*"
	}
	if err := e.RegisterMemory(uintptr(addr), uint64(length), loc, remote != 0); err != nil {
		engineFail(e, err)
		return C.int(resourceCode(err))
	}
	return 0
}

//export kvf_unregister
func kvf_unregister(h C.uintptr_t, addr unsafe.Pointer) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	if err := e.UnregisterMemory(uintptr(addr)); err != nil {
		engineFail(e, err)
		return C.int(resourceCode(err))
	}
	return 0
}

//export kvf_register_batch
func kvf_register_batch(h C.uintptr_t, list *C.buffer_entry_t, n C.size_t, location *C.char) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	if n == 0 {
		return 0
	}
	if list == nil || n > 1<<24 {
		return errInvalidArgument
	}
	entries := unsafe.Slice(list, int(n))
	bufs := make([]engine.Buffer, len(entries))
	for i, b := range entries {
		if b.addr == nil || b.length == 0 {
			engineFail(e, fmt.Errorf("register batch: entry %d: %w", i, engine.ErrInvalidArgument))
			return errInvalidArgument
		}
		bufs[i] = engine.Buffer{Addr: uintptr(b.addr), Length: uint64(b.length)}
	}
	loc, ok := cstr(location)
	if !ok || loc == "" {
		loc = "*"
	}
	if err := e.RegisterMemoryBatch(bufs, loc); err != nil {
		engineFail(e, err)
		return C.int(resourceCode(err))
	}
	return 0
}

//export kvf_unregister_batch
func kvf_unregister_batch(h C.uintptr_t, addrs *unsafe.Pointer, n C.size_t) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	if n == 0 {
		return 0
	}
	if addrs == nil || n > 1<<24 {
		return errInvalidArgument
	}
	list := unsafe.Slice(addrs, int(n))
	// Unregister one by one so that every known address goes, and report
	// the first error (Mooncake's behaviour).
	first := 0
	for _, a := range list {
		if err := e.UnregisterMemory(uintptr(a)); err != nil {
			engineFail(e, err)
			if first == 0 {
				first = resourceCode(err)
			}
		}
	}
	return C.int(first)
}

//export kvf_alloc_batch
func kvf_alloc_batch(h C.uintptr_t, size C.size_t) (id C.uint64_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
			id = C.UINT64_MAX
		}
	}()
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.UINT64_MAX
	}
	if uint64(size) > 1<<31 {
		engineFail(e, fmt.Errorf("allocate batch of %d: %w", size, engine.ErrInvalidArgument))
		return C.UINT64_MAX
	}
	b, err := e.AllocateBatch(int(size))
	if err != nil {
		engineFail(e, err)
		return C.UINT64_MAX
	}
	return C.uint64_t(b)
}

// cTransferRequest mirrors struct transfer_request (layout tested in
// layout_test.go against the C compiler's view).
type cTransferRequest struct {
	Opcode       int32
	_            [4]byte
	Source       uintptr
	TargetID     int32
	_            [4]byte
	TargetOffset uint64
	Length       uint64
}

func convertRequests(entries unsafe.Pointer, count int) ([]engine.Request, error) {
	if count == 0 {
		return nil, nil
	}
	if entries == nil {
		return nil, fmt.Errorf("requests: %w", errNULL)
	}
	in := unsafe.Slice((*cTransferRequest)(entries), count)
	out := make([]engine.Request, count)
	for i, r := range in {
		if r.Opcode != 0 && r.Opcode != 1 {
			return nil, fmt.Errorf("request %d: opcode %d: %w", i, r.Opcode, engine.ErrInvalidArgument)
		}
		out[i] = engine.Request{Op: engine.OpCode(r.Opcode), Source: r.Source, Target: engine.SegmentID(r.TargetID), TargetOffset: r.TargetOffset, Length: r.Length}
	}
	return out, nil
}

//export kvf_submit
func kvf_submit(h C.uintptr_t, batch C.uint64_t, entries unsafe.Pointer, count C.size_t, withNotify C.int, name, msg *C.char) (rc C.int) {
	defer recoverStatus(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return stInvalidArgument
	}
	if withNotify != 0 && count == 0 {
		return stInvalidArgument
	}
	if uint64(count) > 1<<31 {
		return stInvalidArgument
	}
	reqs, err := convertRequests(entries, int(count))
	if err != nil {
		engineFail(e, err)
		return stInvalidArgument
	}
	if withNotify != 0 {
		n, _ := cstr(name)
		m, _ := cstr(msg)
		err = e.SubmitWithNotify(engine.BatchID(batch), reqs, engine.Notification{Name: n, Msg: m})
	} else {
		err = e.Submit(engine.BatchID(batch), reqs)
	}
	if err != nil {
		engineFail(e, err)
		return C.int(statusCode(err))
	}
	return 0
}

//export kvf_get_notifs
func kvf_get_notifs(h C.uintptr_t, size *C.int) (out *C.notify_msg_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
			out = nil
		}
	}()
	if size != nil {
		*size = 0
	}
	e, err := lookupEngine(uintptr(h))
	if err != nil || size == nil {
		return nil
	}
	ns := e.Notifications()
	if len(ns) == 0 {
		return nil
	}
	// Array and strings come from malloc so callers may free() them.
	arr := (*C.notify_msg_t)(C.malloc(C.size_t(len(ns)) * C.size_t(unsafe.Sizeof(C.notify_msg_t{}))))
	if arr == nil {
		return nil
	}
	dst := unsafe.Slice(arr, len(ns))
	for i, n := range ns {
		dst[i].name = C.CString(n.Name)
		dst[i].msg = C.CString(n.Msg)
	}
	*size = C.int(len(ns))
	return arr
}

//export kvf_gen_notify
func kvf_gen_notify(h C.uintptr_t, target C.uint64_t, name, msg *C.char) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	if uint64(target) > 1<<31-1 {
		return errMetadata
	}
	n, _ := cstr(name)
	m, _ := cstr(msg)
	ctx, cancel := metaCtx(e)
	defer cancel()
	if err := e.Notify(ctx, engine.SegmentID(target), engine.Notification{Name: n, Msg: m}); err != nil {
		engineFail(e, err)
		if errors.Is(err, engine.ErrUnknownSegment) {
			return errMetadata
		}
		return errSocket
	}
	return 0
}

//export kvf_status
func kvf_status(h C.uintptr_t, batch C.uint64_t, task C.size_t, out *C.struct_transfer_status) (rc C.int) {
	defer recoverStatus(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil || out == nil {
		return stInvalidArgument
	}
	if uint64(task) > 1<<31 {
		return stInvalidArgument
	}
	st, err := e.PollTaskStatus(engine.BatchID(batch), int(task))
	if err != nil {
		engineFail(e, err)
		return C.int(statusCode(err))
	}
	if st.Err != nil {
		// Why it failed reaches kvferry_engine_last_error (the transport's
		// reason arrives asynchronously: no call returned it before).
		engineFail(e, fmt.Errorf("batch %d task %d %s: %w", batch, task, st.State, st.Err))
	}
	out.status = C.int(st.State)
	out.transferred_bytes = C.uint64_t(st.TransferredBytes)
	return 0
}

//export kvf_free_batch
func kvf_free_batch(h C.uintptr_t, batch C.uint64_t) (rc C.int) {
	defer recoverStatus(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return stInvalidArgument
	}
	if err := e.FreeBatch(engine.BatchID(batch)); err != nil {
		engineFail(e, err)
		return C.int(statusCode(err))
	}
	return 0
}

//export kvf_sync_cache
func kvf_sync_cache(h C.uintptr_t) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	ctx, cancel := metaCtx(e)
	defer cancel()
	if err := e.SyncSegmentCache(ctx); err != nil {
		// Mooncake returns 0 here; keep the error for diagnostics only.
		engineFail(e, err)
	}
	return 0
}

//export kvf_nic_stats
func kvf_nic_stats(h C.uintptr_t, stats unsafe.Pointer, count *C.size_t) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil || count == nil {
		return errInvalidArgument
	}
	// One entry per NIC of the RDMA transport (none without it).
	nics := e.NICStats()
	capacity := int(*count)
	if stats == nil {
		capacity = 0
	}
	out := unsafe.Slice((*C.struct_nic_load_stat)(stats), capacity)
	for i := 0; i < len(nics) && i < capacity; i++ {
		o := &out[i]
		name := nics[i].Device
		if len(name) > 63 {
			name = name[:63]
		}
		for j := range o.device_name {
			o.device_name[j] = 0
		}
		for j := 0; j < len(name); j++ {
			o.device_name[j] = C.char(name[j])
		}
		o.inflight_bytes = C.uint64_t(nics[i].InflightBytes)
		o.ewma_bandwidth_bps = C.double(nics[i].EWMABandwidthBps)
	}
	*count = C.size_t(len(nics))
	return 0
}

// portCountersLine is a NIC port's kernel counters as showLinks prints
// them: traffic, link_downed, the error total with the counters that
// moved, and the driver's hw_counters that are not zero.
func portCountersLine(c engine.NICCounters) string {
	if c.Err != "" {
		return fmt.Sprintf("port %d counters: unavailable (%s)", c.Port, c.Err)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "port %d counters: xmit %d B (%d packets) rcv %d B (%d packets) link_downed %d errors %d",
		c.Port, c.XmitBytes, c.XmitPackets, c.RcvBytes, c.RcvPackets, c.LinkDowned, c.ErrorTotal())
	nonzero := func(m map[string]uint64) []string {
		var out []string
		for k, v := range m {
			if v != 0 {
				out = append(out, fmt.Sprintf("%s %d", k, v))
			}
		}
		sort.Strings(out)
		return out
	}
	if l := nonzero(c.Errors); len(l) > 0 {
		sb.WriteString(" (" + strings.Join(l, ", ") + ")")
	}
	if l := nonzero(c.HW); len(l) > 0 {
		sb.WriteString(" hw_counters: " + strings.Join(l, ", "))
	}
	return sb.String()
}

//export kvf_show_links
func kvf_show_links(h C.uintptr_t, buf *C.char, n C.size_t, asJSON C.int) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil || buf == nil || n == 0 {
		return errInvalidArgument
	}
	type link struct {
		Segment   string `json:"segment"`
		ID        int32  `json:"id"`
		Transport string `json:"transport"`
		Endpoint  string `json:"endpoint"`
	}
	var links []link
	for id := engine.SegmentID(0); ; id++ {
		p := e.Peer(id)
		if p == nil {
			if int(id) > e.Metrics().Segments+1 {
				break
			}
			continue
		}
		links = append(links, link{Segment: p.Name, ID: int32(id), Transport: e.ChooseTransport(id), Endpoint: p.Endpoint.Addr()})
	}
	nics := e.NICStats()
	counters := e.NICCounters()
	rdmaNote := rdmaStatus(e)
	health := e.PathHealth()
	efaNote := efaStatus(e)
	var s string
	if asJSON != 0 {
		type pathHealth struct {
			Segment     string  `json:"segment"`
			Transport   string  `json:"transport"`
			State       string  `json:"state"`
			Consecutive int     `json:"consecutive_failures"`
			Failures    uint64  `json:"failures"`
			Failovers   uint64  `json:"failovers"`
			RetryInSec  float64 `json:"retry_in_s"`
			LastError   string  `json:"last_error"`
		}
		hs := make([]pathHealth, len(health))
		for i, h := range health {
			hs[i] = pathHealth{h.Segment, h.Transport, h.State, h.ConsecutiveFailures, h.Failures, h.Failovers, h.RetryIn.Seconds(), h.LastError}
		}
		b, _ := json.Marshal(map[string]any{"segment": e.SegmentName(), "transports": e.Transports(), "links": links,
			"rdma": rdmaNote, "efa": efaNote, "nics": nics, "nic_counters": counters, "health": hs})
		s = string(b)
	} else {
		var sb strings.Builder
		fmt.Fprintf(&sb, "segment %s transports %v\n", e.SegmentName(), e.Transports())
		fmt.Fprintf(&sb, "rdma: %s\nefa: %s\n", rdmaNote, efaNote)
		for _, c := range nics {
			fmt.Fprintf(&sb, "  nic %s %s %s %.0f Gb/s mtu %d gid[%d] %s numa %d pci %s netdev %s inflight %d B ewma %.3g bit/s completed %d B (%d slices, %d retried, %d failed) endpoints %d\n",
				c.Device, c.State, c.LinkLayer, c.RateGbps, c.MTU, c.GIDIndex, c.GID, c.NUMA, orDash(c.PCI), orDash(c.Netdev),
				c.InflightBytes, c.EWMABandwidthBps, c.BytesCompleted, c.SlicesCompleted, c.SlicesRetried, c.SlicesFailed, c.Endpoints)
			for _, pc := range counters {
				if pc.Device == c.Device {
					sb.WriteString("    " + portCountersLine(pc) + "\n")
				}
			}
		}
		for _, l := range links {
			fmt.Fprintf(&sb, "  [%d] %s via %s (%s)\n", l.ID, l.Segment, l.Transport, l.Endpoint)
			for _, h := range health {
				if h.Segment != l.Segment {
					continue
				}
				fmt.Fprintf(&sb, "    %s %s: %d failures (%d in a row), %d slices failed over", h.Transport, h.State, h.Failures, h.ConsecutiveFailures, h.Failovers)
				if h.State == "down" {
					fmt.Fprintf(&sb, ", probed again in %s", h.RetryIn.Round(time.Millisecond))
				}
				if h.LastError != "" {
					fmt.Fprintf(&sb, "; last: %s", h.LastError)
				}
				sb.WriteString("\n")
			}
		}
		s = sb.String()
	}
	putString(buf, n, s)
	return 0
}

// ---- kvferry.h ----

//export kvf_engine_create_kv
func kvf_engine_create_kv(keys, values **C.char, n C.size_t) (h C.uintptr_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
			h = 0
		}
	}()
	if n > 0 && (keys == nil || values == nil) || n > 256 {
		return 0
	}
	opts := map[string]string{}
	if n > 0 {
		ks := unsafe.Slice(keys, int(n))
		vs := unsafe.Slice(values, int(n))
		for i := range ks {
			k, ok1 := cstr(ks[i])
			v, ok2 := cstr(vs[i])
			if !ok1 || !ok2 {
				return 0
			}
			opts[k] = v
		}
	}
	conn := opts["metadata"]
	if conn == "" {
		conn = "P2PHANDSHAKE"
	}
	name := opts["local_server_name"]
	if name == "" {
		name = engine.FirstNonLoopbackIPv4()
	}
	auto := opts["auto_discover"] != "0"
	delete(opts, "metadata")
	delete(opts, "local_server_name")
	delete(opts, "auto_discover")
	v, err := newEngine(conn, name, auto, opts)
	if err != nil {
		logger.Error("kvferry_engine_create failed", "err", err)
		return 0
	}
	return C.uintptr_t(v)
}

//export kvf_rpc_port
func kvf_rpc_port(h C.uintptr_t) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	return C.int(e.RPCPort())
}

//export kvf_segment_name
func kvf_segment_name(h C.uintptr_t, buf *C.char, n C.size_t) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	return C.int(putString(buf, n, e.SegmentName()))
}

//export kvf_last_error
func kvf_last_error(h C.uintptr_t, buf *C.char, n C.size_t) (rc C.int) {
	defer recoverResource(&rc)
	e, ok := engines.get(uintptr(h))
	if !ok {
		return errInvalidArgument
	}
	return C.int(putString(buf, n, e.LastError()))
}

func putBatchStatus(bs engine.BatchStatus, state *C.int, bytes *C.uint64_t, tasks *C.size_t) {
	if state != nil {
		*state = C.int(bs.State)
	}
	if bytes != nil {
		*bytes = C.uint64_t(bs.TransferredBytes)
	}
	if tasks != nil {
		*tasks = C.size_t(bs.Tasks)
	}
}

//export kvf_batch_status
func kvf_batch_status(h C.uintptr_t, batch C.uint64_t, state *C.int, bytes *C.uint64_t, tasks *C.size_t) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	bs, err := e.PollBatchStatus(engine.BatchID(batch))
	if err != nil {
		engineFail(e, err)
		return C.int(resourceCode(err))
	}
	recordBatchErr(e, batch, bs)
	putBatchStatus(bs, state, bytes, tasks)
	return 0
}

//export kvf_batch_wait
func kvf_batch_wait(h C.uintptr_t, batch C.uint64_t, timeoutMS C.int64_t, state *C.int) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	timeout := e.Config().TransferTimeout
	if timeoutMS >= 0 {
		timeout = time.Duration(timeoutMS) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	bs, err := e.WaitLocked(ctx, engine.BatchID(batch))
	putBatchStatus(bs, state, nil, nil)
	if err != nil {
		engineFail(e, err)
		if errors.Is(err, engine.ErrTimeout) {
			return errTimeout
		}
		return C.int(resourceCode(err))
	}
	recordBatchErr(e, batch, bs)
	return 0
}

//export kvf_batch_await
func kvf_batch_await(h C.uintptr_t, batch C.uint64_t) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	if err := e.Await(engine.BatchID(batch)); err != nil {
		engineFail(e, err)
		return C.int(resourceCode(err))
	}
	return 0
}

// recordBatchErr keeps why batch bs ended other than completed as the
// engine's last error.
func recordBatchErr(e *engine.Engine, batch C.uint64_t, bs engine.BatchStatus) {
	if bs.State.Terminal() && bs.State != engine.StateCompleted {
		if bs.Err != nil {
			engineFail(e, fmt.Errorf("batch %d %s: %w", batch, bs.State, bs.Err))
		} else {
			engineFail(e, fmt.Errorf("batch %d %s, no reason recorded", batch, bs.State))
		}
	}
}

//export kvf_batch_cancel
func kvf_batch_cancel(h C.uintptr_t, batch C.uint64_t) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	if err := e.Cancel(context.Background(), engine.BatchID(batch)); err != nil {
		engineFail(e, err)
		return C.int(resourceCode(err))
	}
	return 0
}

//export kvf_segment_check
func kvf_segment_check(h C.uintptr_t, id C.int32_t, addr, length C.uint64_t) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	if length == 0 {
		return errInvalidArgument
	}
	ctx, cancel := metaCtx(e)
	defer cancel()
	if err := e.CheckRange(ctx, engine.SegmentID(id), uint64(addr), uint64(length)); err != nil {
		engineFail(e, err)
		if errors.Is(err, engine.ErrUnknownSegment) {
			return errInvalidArgument
		}
		return C.int(resourceCode(err))
	}
	return 0
}

//export kvf_metrics_text
func kvf_metrics_text(buf *C.char, n C.size_t) (rc C.int64_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
			rc = errInternal
		}
	}()
	text, err := metricsText()
	if err != nil {
		return errInternal
	}
	if buf != nil && n > 0 {
		dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
		k := copy(dst[:n-1], text)
		dst[k] = 0
	}
	return C.int64_t(len(text))
}

// kvf_graceful_targets are destroyed by the graceful-shutdown watcher.
//
//export kvf_graceful
func kvf_graceful(h C.uintptr_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
		}
	}()
	if e, err := lookupEngine(uintptr(h)); err == nil {
		enableGracefulShutdown(uintptr(h), e)
	}
}

func recoverResource(rc *C.int) {
	if r := recover(); r != nil {
		_ = panicked(r)
		*rc = errInternal
	}
}

func recoverStatus(rc *C.int) {
	if r := recover(); r != nil {
		_ = panicked(r)
		*rc = stContext
	}
}

// rdmaStatus says whether RDMA is in use on e, and why not.
func rdmaStatus(e *engine.Engine) string {
	if t, ok := e.Transport(rdma.Name).(*rdma.Transport); ok {
		return fmt.Sprintf("installed on %v; %s", t.Devices(), t.GPUDirectStatus())
	}
	if _, err := rdma.Available(rdma.ConfigFromEnv(hostenv.Lookup)); err != nil {
		return "not installed: " + err.Error()
	}
	return "not installed (devices present; the engine did not install the rdma transport)"
}

// efaStatus says whether the libfabric transport is installed, on which
// provider, fabric and devices, or why not (showLinks).
func efaStatus(e *engine.Engine) string {
	if t, ok := e.Transport(efa.Name).(*efa.Transport); ok {
		prov, fab := t.Provider()
		return fmt.Sprintf("installed: provider %s, fabric %s, devices %v", prov, fab, t.Devices())
	}
	return "not installed (installTransport(\"efa\") or protocol \"efa\" installs it where libfabric and the provider are present)"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
