package samehost

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/transport/samehost/shwire"
)

// Peers of Mooncake's own nvlink transports. Mooncake's "nvlink_intra"
// publishes every cudaMalloc allocation it registers as one buffer (its
// address and size, shm_name = the allocation's legacy IPC handle in
// upper-case hex); its "nvlink" publishes the registered range with the
// legacy handle or, when every GPU of its host supports fabric handles
// (and MC_USE_NVLINK_IPC is unset), the VMM allocation's range with its
// fabric handle. The descriptor does not say which kind a shm_name is:
// each side assumes the one its own GPUs make it use, and so do we. Such a
// peer has no kvferry host identity and no same-host socket, so there is
// no session, no registration mirror and no death notice: as Mooncake's
// own initiator does, we map the handles of the buffers its descriptor
// lists, check every range against those buffers, and keep the mappings
// until the buffer leaves the descriptor or the transport closes. Only
// peers that publish nothing but nvlink are taken (a multi-protocol peer
// may be on another host, reached by its other transports).
//
// Mooncake's "hip" transport (its ROCm build) is taken the same way. It
// publishes hipMalloc memory as the registered range with the 64-byte
// hipIpcMemHandle_t in shm_name (its default), or, with MC_USE_HIP_IPC=0
// on VMM-capable GPUs, hipMemCreate memory as the allocation's range
// (hipMemGetAddressRange) with an 8-byte shm_name: the exported POSIX fd's
// number in the owner and the owner's pid (two native ints), which the
// importer turns into an fd of its own with pidfd_open and pidfd_getfd
// before hipMemImportFromShareableHandle. The handle's length tells the
// two apart (Mooncake's own initiator also insists that it matches its
// own mode); we take either (docs/specs/hip.md).

// Describe publishes the same-host socket and, with
// Config.MooncakeProtocol set, that protocol for Mooncake's peers (unless
// a transport described before set one).
func (t *NVLink) Describe(seg *descriptor.Segment) {
	t.base.Describe(seg)
	if t.cfg.MooncakeProtocol != "" && seg.Protocol == "" {
		seg.Protocol = t.cfg.MooncakeProtocol
	}
}

// isForeignNVLink reports whether p is a peer of Mooncake's nvlink,
// nvlink_intra or hip transport (no kvferry host identity).
func isForeignNVLink(p *engine.Peer) bool {
	d := p.Descriptor()
	if d == nil || d.Host != nil {
		return false
	}
	return d.Protocol == protoNVLink || d.Protocol == protoNVLinkIntra || d.Protocol == protoHIP
}

// Mooncake's protocol names.
const (
	protoNVLink      = "nvlink"
	protoNVLinkIntra = "nvlink_intra"
	protoHIP         = "hip"
)

// mooncakeHIPHandleBytes is the size of the shm_name of a Mooncake hip
// peer's VMM memory: {int fd; int pid} (the fd's number in the owner).
const mooncakeHIPHandleBytes = 8

// mooncakeHIPShare returns the share kind of a Mooncake hip peer's buffer
// by its shm_name's length: a 64-byte IPC handle, or an fd and pid.
func mooncakeHIPShare(b descriptor.Buffer) engine.ShareKind {
	if len(b.ShmName) == 2*mooncakeHIPHandleBytes {
		return engine.SharePosixFD
	}
	return engine.ShareLegacyIPC
}

// parseFDPid reads a Mooncake hip peer's 8-byte shm_name: the exported
// fd's number in the owner and the owner's pid, little-endian ints.
func parseFDPid(shm string) (fd, pid int, err error) {
	raw, err := hex.DecodeString(shm)
	if err != nil || len(raw) != mooncakeHIPHandleBytes {
		return -1, 0, fmt.Errorf("shm_name %q is not an fd and pid: %w: %w", shm, shwire.ErrBadHandle, engine.ErrInvalidArgument)
	}
	fd, pid = int(int32(binary.LittleEndian.Uint32(raw))), int(int32(binary.LittleEndian.Uint32(raw[4:])))
	if fd < 0 || pid <= 0 {
		return -1, 0, fmt.Errorf("shm_name %q names fd %d of pid %d: %w", shm, fd, pid, engine.ErrInvalidArgument)
	}
	return fd, pid, nil
}

// openPeerFD maps the VMM allocation a Mooncake hip peer's buffer b
// publishes (its range is the allocation's): the fd is taken from the
// owner with pidfd_getfd, as Mooncake's initiator takes it, imported and
// closed again.
func (im *ipcMaps) openPeerFD(dev int, b descriptor.Buffer) (*ipcMapping, error) {
	ofd, pid, err := parseFDPid(b.ShmName)
	if err != nil {
		return nil, err
	}
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open of segment %q's pid %d: %w", im.peer, pid, err)
	}
	fd, err := unix.PidfdGetfd(pfd, ofd, 0)
	unix.Close(pfd)
	if err != nil {
		return nil, fmt.Errorf("pidfd_getfd of fd %d of segment %q's pid %d: %w", ofd, im.peer, pid, err)
	}
	defer unix.Close(fd)
	m, err := im.rt.ImportFD(dev, fd, b.Length)
	if err != nil {
		return nil, fmt.Errorf("map segment %q's exported memory: %w", im.peer, err)
	}
	return &ipcMapping{kind: engine.SharePosixFD, dev: dev, remoteBase: b.Addr, size: b.Length, localBase: m.Addr(), shared: m, shm: b.ShmName}, nil
}

// foreignPeers holds the mappings of Mooncake nvlink peers, by segment.
type foreignPeers struct {
	mu     sync.Mutex
	m      map[string]*ipcMaps
	fabric int8 // 0 unknown, 1 every device supports fabric handles, -1 not
	// legacyOnly is Config.MooncakeNVLinkIPC: Mooncake's nvlink peers
	// use legacy IPC handles even where fabric handles are supported.
	legacyOnly bool
}

// maps returns p's mappings (made on first use).
func (f *foreignPeers) maps(rt *gpu.Runtime, p *engine.Peer) *ipcMaps {
	f.mu.Lock()
	defer f.mu.Unlock()
	if im := f.m[p.Name]; im != nil {
		return im
	}
	if f.m == nil {
		f.m = make(map[string]*ipcMaps)
	}
	im := newIPCMaps(rt, p.Name)
	im.share = engine.ShareLegacyIPC
	switch proto := p.Descriptor().Protocol; {
	case proto == protoHIP:
		im.share, im.hip = 0, true // by each buffer's handle (mooncakeHIPShare)
	case proto == protoNVLink && f.fabricMode(rt):
		im.share = engine.ShareFabric
	}
	f.m[p.Name] = im
	return im
}

// fabricMode reports whether Mooncake's nvlink transport would use fabric
// handles on this host: every device supports them and MC_USE_NVLINK_IPC
// is unset (f.mu held).
func (f *foreignPeers) fabricMode(rt *gpu.Runtime) bool {
	if f.fabric == 0 {
		f.fabric = -1
		if !f.legacyOnly {
			if d, err := rt.Driver(); err == nil && d.DeviceCount() > 0 {
				all := true
				for i := range d.DeviceCount() {
					info, err := d.Device(i)
					all = all && err == nil && info.Fabric
				}
				if all {
					f.fabric = 1
				}
			}
		}
	}
	return f.fabric == 1
}

// retireAll closes every Mooncake peer's mappings (the transport closes).
func (f *foreignPeers) retireAll() {
	f.mu.Lock()
	ms := f.m
	f.m = nil
	f.mu.Unlock()
	for _, im := range ms {
		im.retireAll()
	}
}

// submitForeign queues slices to a Mooncake nvlink peer for the workers.
func (t *NVLink) submitForeign(p *engine.Peer, slices []*engine.Slice) {
	im := t.foreign.maps(t.cfg.GPU, p)
	per := max(1, (len(slices)+t.cfg.Workers-1)/t.cfg.Workers)
	for lo := 0; lo < len(slices); lo += per {
		t.q <- ipcJob{im: im, p: p, slices: slices[lo:min(lo+per, len(slices))]}
	}
}

// runForeign runs a job to a Mooncake nvlink peer: every range must lie in
// a buffer of its descriptor with a handle; mappings of buffers it no
// longer lists are closed first.
func (w *ipcWorker) runForeign(j ipcJob) {
	im := j.im
	im.sweepDescriptor(j.p)
	w.ops.reset()
	w.held = w.held[:0]
	w.errs = w.errs[:0]
	for _, sl := range j.slices {
		var err error
		if sl.Canceled() {
			err = engine.ErrCanceled
		} else if b, ok := j.p.RemoteBuffer(sl.Remote, sl.Length); !ok || b.ShmName == "" {
			err = failSlice(j.p.Name, sl, fmt.Errorf("no buffer with an IPC handle holds %#x+%d: %w", sl.Remote, sl.Length, engine.ErrRejected))
		} else if e := w.plan(im, nil, j.p, sl); e != nil {
			err = failSlice(j.p.Name, sl, e)
		}
		w.errs = append(w.errs, err)
	}
	err := w.ops.copy(w.t.cfg.GPU, nil)
	for _, m := range w.held {
		im.put(m)
	}
	for i, sl := range j.slices {
		if w.errs[i] == nil && err != nil {
			w.errs[i] = failSlice(j.p.Name, sl, err)
		}
		sl.Complete(w.errs[i])
	}
}

// sweepDescriptor closes the mappings of buffers p's descriptor no longer
// lists (Mooncake peers have no registration mirror).
func (im *ipcMaps) sweepDescriptor(p *engine.Peer) {
	im.mu.Lock()
	defer im.mu.Unlock()
	for _, m := range append([]*ipcMapping(nil), im.ms...) {
		if b, ok := p.RemoteBuffer(m.remoteBase, 1); ok && b.Addr == m.remoteBase && b.ShmName == m.shm {
			continue
		}
		m.stale = true
		if m.refs == 0 {
			im.drop(m)
		}
	}
}
