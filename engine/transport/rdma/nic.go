package rdma

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/transport/rdma/handshake"
	"github.com/kvferry/kvferry/engine/transport/rdma/ibv"
)

// nic is one opened device: its PD, its one CQ and completion channel, its
// endpoints, and one completion poller goroutine that spins briefly while
// work is in flight and otherwise parks on the completion channel (through
// Go's netpoller: no thread waits).
type nic struct {
	t    *Transport
	idx  int
	name string
	dev  *ibv.Context
	pd   *ibv.PD
	ch   *ibv.CompChannel
	cq   *ibv.CQ
	attr ibv.DeviceAttr
	port ibv.PortAttr
	info NIC
	mtu  ibv.MTU

	// gidSel is the GID in use; auto selection may switch it after a
	// failed connection setup (reprobeGID).
	gidMu  sync.RWMutex
	gidSel gidChoice

	active atomic.Bool
	// credits is the work requests this NIC may still have in flight (its
	// CQ's capacity: every WR may produce a completion).
	credits atomic.Int64

	mu       sync.Mutex
	eps      *epStore            // by peer NIC path, at most MaxEndpoints
	draining []*endpoint         // retired, replaced or evicted, not drained yet
	qps      map[uint32]*qpState // by QP number, for completions

	chFile, asyncFile *os.File
	stop              chan struct{}
	done              sync.WaitGroup

	// stats
	inflight      atomic.Int64
	bytesDone     atomic.Uint64
	slicesDone    atomic.Uint64
	slicesRetried atomic.Uint64
	slicesFailed  atomic.Uint64
	ewma          struct {
		sync.Mutex
		last  time.Time
		bytes uint64
		bps   float64
	}
}

// openNIC opens device name and prepares it.
func openNIC(t *Transport, idx int, name string) (*nic, error) {
	cfg := t.cfg
	dev, err := ibv.Open(name)
	if err != nil {
		return nil, err
	}
	n := &nic{t: t, idx: idx, name: name, dev: dev, qps: map[uint32]*qpState{}, stop: make(chan struct{})}
	fail := func(err error) (*nic, error) {
		n.destroy()
		return nil, fmt.Errorf("rdma device %s: %w", name, err)
	}
	if n.attr, err = dev.QueryDevice(); err != nil {
		return fail(err)
	}
	if n.port, err = dev.QueryPort(cfg.Port); err != nil {
		return fail(err)
	}
	if n.port.State != ibv.PortActive {
		return fail(fmt.Errorf("port %d not active (state %d)", cfg.Port, n.port.State))
	}
	if cfg.FixedGID {
		n.gidSel.index = cfg.GIDIndex
		if readString(cfg.SysFS, fmt.Sprintf("class/infiniband/%s/ports/%d/gid_attrs/ndevs/%d", name, cfg.Port, cfg.GIDIndex)) == "" {
			t.log.Warn("user-specified GID index has no network device; it may not be usable for RDMA", "device", name, "gid_index", cfg.GIDIndex)
		}
	} else if n.gidSel, err = selectGID(dev, cfg.Port, n.port.GIDTableLen, t.cfg.SysFS, name); err != nil {
		return fail(err)
	}
	if n.gidSel.gid, err = dev.QueryGID(cfg.Port, n.gidSel.index); err != nil {
		return fail(err)
	}
	if n.gidSel.gid.IsZero() {
		return fail(fmt.Errorf("GID %d is null; set MC_GID_INDEX", n.gidSel.index))
	}
	n.mtu = min(n.port.ActiveMTU, cfg.MTU)
	// As Mooncake's updateGlobalConfig: no more endpoints than the device
	// has QPs for.
	maxEP := cfg.MaxEndpoints
	if n.attr.MaxQP > 0 && maxEP*cfg.QPsPerEP > n.attr.MaxQP {
		maxEP = max(n.attr.MaxQP/cfg.QPsPerEP, 1)
	}
	n.eps = newEPStore(cfg.EndpointStore, maxEP)
	n.info = ReadNIC(cfg.SysFS, name, int(cfg.Port), n.gidSel.index)
	if n.pd, err = dev.AllocPD(); err != nil {
		return fail(err)
	}
	if n.ch, err = dev.CreateCompChannel(); err != nil {
		return fail(err)
	}
	cqe := min(cfg.MaxCQE, max(n.attr.MaxCQE, 1))
	if n.cq, err = dev.CreateCQ(cqe, n.ch, 0); err != nil {
		return fail(err)
	}
	n.credits.Store(int64(cqe))
	if n.chFile, err = pollable(n.ch.Fd(), name+"-cq"); err != nil {
		return fail(err)
	}
	if n.asyncFile, err = pollable(dev.AsyncFd(), name+"-async"); err != nil {
		return fail(err)
	}
	n.active.Store(true)
	n.ewma.last = time.Now()
	n.done.Add(2)
	go n.runPoller()
	go n.runAsync()
	return n, nil
}

// pollable returns a File over a duplicate of fd set non-blocking, so that
// Go's netpoller waits for it.
func pollable(fd int, name string) (*os.File, error) {
	if err := syscall.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("set %s non-blocking: %w", name, err)
	}
	d, err := syscall.Dup(fd)
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", name, err)
	}
	syscall.CloseOnExec(d)
	return os.NewFile(uintptr(d), name), nil
}

// nicPath returns this NIC's "<server>@<nic>".
func (n *nic) nicPath() string { return handshake.NICPath(n.t.serverName, n.name) }

// runPoller polls the CQ; owned by the nic, stopped by close.
func (n *nic) runPoller() {
	defer n.done.Done()
	wcs := make([]ibv.WC, 64)
	var spinStart time.Time
	for {
		select {
		case <-n.stop:
			return
		default:
		}
		k, err := n.cq.Poll(wcs)
		if err != nil {
			n.t.log.Error("rdma poll failed", "device", n.name, "err", err)
		}
		if k > 0 {
			n.handle(wcs[:k])
			spinStart = time.Time{}
			continue
		}
		if n.inflight.Load() > 0 && n.t.cfg.PollSpin > 0 {
			if spinStart.IsZero() {
				spinStart = time.Now()
			}
			if time.Since(spinStart) < n.t.cfg.PollSpin {
				runtime.Gosched()
				continue
			}
		}
		spinStart = time.Time{}
		// Park: arm, poll once more (a completion may have slipped in
		// before the arm), then wait for the channel.
		if err := n.cq.ReqNotify(); err != nil {
			n.t.log.Error("rdma arm cq failed", "device", n.name, "err", err)
		}
		if k, _ = n.cq.Poll(wcs); k > 0 {
			n.handle(wcs[:k])
			continue
		}
		n.park()
	}
}

// park waits for a completion event, at most one watchdog period while
// work is in flight (so stuck work meets its deadline) and a second
// otherwise; close wakes it.
func (n *nic) park() {
	wait := time.Second
	if n.inflight.Load() > 0 || n.pendingWork() {
		wait = 100 * time.Millisecond
	}
	_ = n.chFile.SetReadDeadline(time.Now().Add(wait))
	rc, err := n.chFile.SyscallConn()
	if err == nil {
		_ = rc.Read(func(uintptr) bool {
			got, err := n.ch.GetEvent()
			return got || err != nil
		})
	}
	for {
		got, err := n.ch.GetEvent()
		if !got || err != nil {
			break
		}
	}
	n.watchdog()
}

// runAsync handles the device's asynchronous events: port state changes
// and fatal QP errors. Owned by the nic, stopped by close.
func (n *nic) runAsync() {
	defer n.done.Done()
	rc, err := n.asyncFile.SyscallConn()
	if err != nil {
		return
	}
	for {
		var ev ibv.AsyncEvent
		var got bool
		rerr := rc.Read(func(uintptr) bool {
			var err error
			ev, got, err = n.dev.GetAsyncEvent()
			return got || err != nil
		})
		select {
		case <-n.stop:
			return
		default:
		}
		if rerr != nil && !errors.Is(rerr, os.ErrDeadlineExceeded) {
			return
		}
		if got {
			n.onAsync(ev)
		}
	}
}

func (n *nic) onAsync(ev ibv.AsyncEvent) {
	switch ev.Type {
	case ibv.EventPortErr:
		if n.active.Swap(false) {
			n.t.log.Warn("rdma port down: new slices avoid this nic", "device", n.name, "port", ev.Port)
		}
	case ibv.EventPortActive:
		if !n.active.Swap(true) {
			n.t.log.Info("rdma port active again", "device", n.name, "port", ev.Port)
		}
	case ibv.EventDeviceFail:
		n.active.Store(false)
		n.t.log.Error("rdma device fatal error", "device", n.name)
	case ibv.EventQPFatal, ibv.EventQPReqErr, ibv.EventQPAccess:
		n.mu.Lock()
		qs := n.qps[ev.QPNum]
		n.mu.Unlock()
		if qs != nil {
			n.t.log.Warn("rdma qp error event: endpoint retired", "device", n.name, "qp", ev.QPNum, "event", ev.Type)
			qs.ep.retire("qp error event")
		}
	}
}

// handle processes completions.
func (n *nic) handle(wcs []ibv.WC) {
	for i := range wcs {
		w := &wcs[i]
		n.mu.Lock()
		qs := n.qps[ibv.QPNum(w)]
		n.mu.Unlock()
		if qs == nil {
			continue // a receive or a QP already gone
		}
		qs.ep.complete(qs, ibv.WRID(w), ibv.Status(w), ibv.VendorErr(w))
	}
	n.t.flushPending(n)
}

// endpoints returns every endpoint of n, draining ones included.
func (n *nic) endpoints() []*endpoint {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*endpoint, 0, n.eps.len()+len(n.draining))
	n.eps.each(func(ep *endpoint) { out = append(out, ep) })
	return append(out, n.draining...)
}

// pendingWork reports whether an endpoint holds slices not yet posted.
func (n *nic) pendingWork() bool {
	for _, ep := range n.endpoints() {
		if ep.hasPending() {
			return true
		}
	}
	return false
}

// watchdog retires endpoints whose oldest work is past the transfer
// deadline (their QPs go to ERROR and flush, so the slices complete), and
// fails pending slices past it.
func (n *nic) watchdog() {
	for _, ep := range n.endpoints() {
		ep.checkDeadline(n.t.deadline)
	}
}

// addBytes accounts completed bytes and updates the bandwidth average.
func (n *nic) addBytes(b uint64) {
	n.bytesDone.Add(b)
	n.ewma.Lock()
	n.ewma.bytes += b
	n.sampleLocked(time.Now())
	n.ewma.Unlock()
}

const ewmaWindow = 10 * time.Millisecond

func (n *nic) sampleLocked(now time.Time) {
	dt := now.Sub(n.ewma.last)
	if dt < ewmaWindow {
		return
	}
	rate := float64(n.ewma.bytes) / dt.Seconds()
	// Weight by elapsed time: a half-life of 100 ms.
	a := 1 - math.Exp2(-dt.Seconds()/0.1)
	n.ewma.bps += a * (rate - n.ewma.bps)
	n.ewma.bytes = 0
	n.ewma.last = now
}

// stat returns the NIC's figures.
func (n *nic) stat() engine.NICStat {
	n.ewma.Lock()
	n.sampleLocked(time.Now())
	bps := n.ewma.bps
	n.ewma.Unlock()
	g := n.gid()
	st := engine.NICStat{
		Device: n.name, Transport: Name, Active: n.active.Load(), MTU: n.mtu.Bytes(),
		GID: g.gid.String(), GIDIndex: g.index, LID: n.port.LID, NUMA: n.info.NUMA, PCI: n.info.PCI,
		Netdev: n.info.Netdev, InflightBytes: uint64(max(n.inflight.Load(), 0)), EWMABandwidthBps: bps * 8,
		BytesCompleted: n.bytesDone.Load(), SlicesCompleted: n.slicesDone.Load(),
		SlicesRetried: n.slicesRetried.Load(), SlicesFailed: n.slicesFailed.Load(),
	}
	if pa, err := n.dev.QueryPort(n.t.cfg.Port); err == nil {
		st.State = portState(pa.State)
		st.RateGbps = rateGbps(pa.ActiveWidth, pa.ActiveSpeed)
		st.LinkLayer = "InfiniBand"
		if pa.LinkLayer == ibv.LinkLayerEthernet {
			st.LinkLayer = "Ethernet"
		}
	}
	for _, ep := range n.endpoints() {
		if ep.usable() {
			st.Endpoints++
		}
	}
	n.mu.Lock()
	st.EndpointsEvicted = n.eps.evictions
	n.mu.Unlock()
	for _, m := range *n.t.regs.snap.Load() {
		if m.kind == engine.MemoryDevice && len(m.chunks) > 0 && m.chunks[0].mrs[n.idx] != nil {
			st.GPURegions++
		}
	}
	return st
}

func portState(s int) string {
	switch s {
	case 1:
		return "down"
	case 2:
		return "init"
	case 3:
		return "armed"
	case 4:
		return "active"
	case 5:
		return "active-defer"
	}
	return fmt.Sprintf("state %d", s)
}

// rateGbps is the port's rate from its active width and lane speed codes
// (verbs.h / ibv_query_port(3)).
func rateGbps(width, speed uint8) float64 {
	lanes := map[uint8]float64{1: 1, 2: 4, 4: 8, 8: 12, 16: 2}[width]
	lane := map[uint16]float64{1: 2.5, 2: 5, 4: 10, 8: 10, 16: 14, 32: 25, 64: 50, 128: 100, 256: 200}[uint16(speed)]
	return lanes * lane
}

// close stops the poller and releases the device (endpoints are gone).
func (n *nic) close() {
	select {
	case <-n.stop:
	default:
		close(n.stop)
	}
	if n.chFile != nil {
		_ = n.chFile.SetReadDeadline(time.Now())
	}
	if n.asyncFile != nil {
		_ = n.asyncFile.SetReadDeadline(time.Now())
	}
	n.done.Wait()
	n.destroy()
}

func (n *nic) destroy() {
	if n.chFile != nil {
		n.chFile.Close()
	}
	if n.asyncFile != nil {
		n.asyncFile.Close()
	}
	if n.cq != nil {
		_ = n.cq.Destroy()
	}
	if n.ch != nil {
		_ = n.ch.Destroy()
	}
	if n.pd != nil {
		_ = n.pd.Dealloc()
	}
	if n.dev != nil {
		_ = n.dev.Close()
	}
}
