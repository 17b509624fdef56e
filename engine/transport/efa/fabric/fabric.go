package fabric

/*
#cgo CFLAGS: -O2 -Wall
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"structs"
	"sync"
	"syscall"
	"unsafe"
)

// DefaultLibrary is the library opened when no other is named.
const DefaultLibrary = "libfabric.so.1"

// Capability, mode and access bits (fabric.h values).
const (
	CapMsg         uint64 = C.FI_MSG
	CapRMA         uint64 = C.FI_RMA
	CapRead        uint64 = C.FI_READ
	CapWrite       uint64 = C.FI_WRITE
	CapRemoteRead  uint64 = C.FI_REMOTE_READ
	CapRemoteWrite uint64 = C.FI_REMOTE_WRITE
	CapHMEM        uint64 = C.FI_HMEM
	ModeContext    uint64 = C.FI_CONTEXT
	ModeContext2   uint64 = C.FI_CONTEXT2

	// DeliveryComplete makes a write complete once its data is in the
	// target's memory, not when it left (tx_attr->op_flags).
	DeliveryComplete uint64 = C.FI_DELIVERY_COMPLETE
)

// Memory registration modes (domain_attr->mr_mode bits).
const (
	MRLocal     = C.FI_MR_LOCAL
	MRVirtAddr  = C.FI_MR_VIRT_ADDR
	MRAllocated = C.FI_MR_ALLOCATED
	MRProvKey   = C.FI_MR_PROV_KEY
	MRHMEM      = C.FI_MR_HMEM
	MREndpoint  = C.FI_MR_ENDPOINT
	MRRaw       = C.FI_MR_RAW
)

// Memory interfaces of fi_mr_attr.iface.
const (
	IfaceSystem = C.FI_HMEM_SYSTEM
	IfaceCUDA   = C.FI_HMEM_CUDA
)

// Data progress models (domain_attr->data_progress).
const (
	ProgressAuto   = C.FI_PROGRESS_AUTO
	ProgressManual = C.FI_PROGRESS_MANUAL
)

// ErrUnavailable is returned (wrapped) when libfabric cannot be opened.
var ErrUnavailable = errors.New("libfabric unavailable")

// ErrNoProvider is returned (wrapped) when fi_getinfo finds no provider
// matching the hints (FI_ENODATA).
var ErrNoProvider = errors.New("no libfabric provider matches")

var load struct {
	once sync.Once
	path string
	err  error
}

// Load opens the library at path (DefaultLibrary when empty) once per
// process; later calls return the first call's result, whatever the path.
func Load(path string) error {
	load.once.Do(func() {
		if path == "" {
			path = DefaultLibrary
		}
		load.path = path
		cp := C.CString(path)
		defer C.free(unsafe.Pointer(cp))
		var buf [512]C.char
		if C.kvf_fi_load(cp, &buf[0], C.int(len(buf))) != 0 {
			load.err = fmt.Errorf("%w: %s", ErrUnavailable, C.GoString(&buf[0]))
		}
	})
	return load.err
}

// Loaded returns the path Load opened and its error.
func Loaded() (string, error) { return load.path, load.err }

// Version returns the loaded library's API version (fi_version).
func Version() (major, minor int) {
	if load.err != nil || load.path == "" {
		return 0, 0
	}
	v := uint32(C.kvf_fi_lib_version())
	return int(v >> 16), int(v & 0xffff)
}

// Error is a failed libfabric call: the call and its (positive) error
// number, which unwraps to syscall.Errno.
type Error struct {
	Op    string
	Errno int
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s", e.Op, Strerror(e.Errno))
}

// Unwrap returns the error number as a syscall.Errno.
func (e *Error) Unwrap() error { return syscall.Errno(e.Errno) }

func errOf(op string, rc C.int) error {
	n := int(rc)
	if n < 0 {
		n = -n
	}
	return &Error{Op: op, Errno: n}
}

// Strerror is fi_strerror (libfabric's own codes above errno's included).
func Strerror(errno int) string {
	if load.err != nil || load.path == "" {
		return syscall.Errno(errno).Error()
	}
	return C.GoString(C.kvf_fi_strerror(C.int(errno)))
}

// Hints select providers in GetInfo (an FI_EP_RDM endpoint, FI_THREAD_SAFE).
type Hints struct {
	// Provider is fabric_attr->prov_name ("efa", "tcp;ofi_rxm"); empty: any.
	Provider string
	// Domain is domain_attr->name; empty: any.
	Domain string
	// Caps are the capabilities asked for.
	Caps uint64
	// Mode are the modes the application supports (ModeContext).
	Mode uint64
	// MRMode are the memory registration modes the application supports.
	MRMode int
	// TxOpFlags are the default operation flags asked for
	// (DeliveryComplete).
	TxOpFlags uint64
	// Version is the API version asked for (major<<16|minor); 0: 1.17,
	// or the library's when older.
	Version uint32
}

// Info is one fi_getinfo result, copied out of the library's list.
type Info struct {
	Provider, Fabric, Domain string
	Caps, Mode               uint64
	MRMode                   int
	MRKeySize                int
	AddrFormat               uint32
	TxSize, RxSize           int
	TxOpFlags                uint64
	InjectSize               int
	MaxMsgSize               uint64
	DataProgress             int
	// SrcAddr is the provider's source address (Mooncake publishes it in
	// hex as a device's gid).
	SrcAddr []byte

	p *C.struct_fi_info
}

// InfoList is the list fi_getinfo returned; Free releases it.
type InfoList struct {
	Infos []Info
	head  *C.struct_fi_info
}

// GetInfo calls fi_getinfo with h.
func GetInfo(h Hints) (*InfoList, error) {
	if err := Load(""); err != nil {
		return nil, err
	}
	v := h.Version
	if v == 0 {
		v = 1<<16 | 17
	}
	if lib := uint32(C.kvf_fi_lib_version()); lib < v {
		v = lib
	}
	cp := C.CString(h.Provider)
	defer C.free(unsafe.Pointer(cp))
	cd := C.CString(h.Domain)
	defer C.free(unsafe.Pointer(cd))
	var head *C.struct_fi_info
	rc := C.kvf_fi_getinfo(C.uint32_t(v), cp, cd, C.uint64_t(h.Caps), C.uint64_t(h.Mode), C.int(h.MRMode), C.uint64_t(h.TxOpFlags), &head)
	if rc != 0 {
		err := errOf("fi_getinfo", rc)
		if errors.Is(err, syscall.ENODATA) {
			return nil, fmt.Errorf("%w (provider %q, domain %q): %w", ErrNoProvider, h.Provider, h.Domain, err)
		}
		return nil, err
	}
	l := &InfoList{head: head}
	for p := head; p != nil; p = p.next {
		in := Info{p: p, Caps: uint64(p.caps), Mode: uint64(p.mode), AddrFormat: uint32(p.addr_format)}
		if fa := p.fabric_attr; fa != nil {
			in.Provider, in.Fabric = C.GoString(fa.prov_name), C.GoString(fa.name)
		}
		if da := p.domain_attr; da != nil {
			in.Domain = C.GoString(da.name)
			in.MRMode, in.MRKeySize = int(da.mr_mode), int(da.mr_key_size)
			in.DataProgress = int(da.data_progress)
		}
		if ta := p.tx_attr; ta != nil {
			in.TxSize, in.InjectSize, in.TxOpFlags = int(ta.size), int(ta.inject_size), uint64(ta.op_flags)
		}
		if ra := p.rx_attr; ra != nil {
			in.RxSize = int(ra.size)
		}
		if ea := p.ep_attr; ea != nil {
			in.MaxMsgSize = uint64(ea.max_msg_size)
		}
		if p.src_addr != nil && p.src_addrlen > 0 {
			in.SrcAddr = C.GoBytes(p.src_addr, C.int(p.src_addrlen))
		}
		l.Infos = append(l.Infos, in)
	}
	return l, nil
}

// Free releases the list (fi_freeinfo); a second Free is harmless. Devices
// opened from it keep their own copy.
func (l *InfoList) Free() {
	if l.head != nil {
		C.kvf_fi_freeinfo(l.head)
		l.head = nil
		for i := range l.Infos {
			l.Infos[i].p = nil
		}
	}
}

// Device is one opened RDM endpoint with its fabric, domain, address vector
// (FI_AV_TABLE) and completion queue (FI_CQ_FORMAT_DATA, with a wait object
// where the provider has one). Its calls are safe for concurrent use (the
// domain is FI_THREAD_SAFE); Close must not race with any of them.
type Device struct {
	p     *C.struct_kvf_fi_dev
	addr  []byte
	slots int
}

// Open opens a device from in (still in its list) with an address vector
// of avCount entries, a CQ of cqSize entries and slots operation contexts.
func Open(in Info, avCount, cqSize, slots int) (*Device, error) {
	if in.p == nil {
		return nil, fmt.Errorf("open %s/%s: info list freed: %w", in.Provider, in.Domain, syscall.EINVAL)
	}
	var p *C.struct_kvf_fi_dev
	var buf [512]C.char
	rc := C.kvf_fi_dev_open(in.p, C.size_t(avCount), C.size_t(cqSize), C.uint32_t(slots), &p, &buf[0], C.int(len(buf)))
	if rc != 0 {
		return nil, fmt.Errorf("open %s/%s: %s: %w", in.Provider, in.Domain, C.GoString(&buf[0]), syscall.Errno(-rc))
	}
	return &Device{p: p, addr: C.GoBytes(unsafe.Pointer(&p.addr[0]), C.int(p.addrlen)), slots: slots}, nil
}

// Close closes the endpoint, AV, CQ, domain and fabric; a second Close is
// harmless.
func (d *Device) Close() error {
	if d.p != nil {
		C.kvf_fi_dev_close(d.p)
		d.p = nil
	}
	return nil
}

// Addr returns the endpoint's address (fi_getname).
func (d *Device) Addr() []byte { return d.addr }

// Slots returns the number of operation contexts.
func (d *Device) Slots() int { return d.slots }

// Waits reports whether the CQ has a wait object (Poll can wait, Signal
// wakes it).
func (d *Device) Waits() bool { return d.p.wait != 0 }

// Insert adds a peer's endpoint address to the AV (fi_av_insert).
func (d *Device) Insert(addr []byte) (uint64, error) {
	if len(addr) == 0 {
		return 0, fmt.Errorf("fi_av_insert: empty address: %w", syscall.EINVAL)
	}
	var out C.uint64_t
	if rc := C.kvf_fi_av_insert(d.p, unsafe.Pointer(&addr[0]), &out); rc != 0 {
		return 0, errOf("fi_av_insert", rc)
	}
	return uint64(out), nil
}

// Remove drops a peer from the AV (fi_av_remove).
func (d *Device) Remove(fiAddr uint64) error {
	if rc := C.kvf_fi_av_remove(d.p, C.uint64_t(fiAddr)); rc != 0 {
		return errOf("fi_av_remove", rc)
	}
	return nil
}

// MR is a registered memory region.
type MR struct {
	p *C.struct_fid_mr
}

// Access bits for RegMR: local and remote read and write.
const AccessAll = CapRead | CapWrite | CapRemoteRead | CapRemoteWrite

// RegMR registers [addr, addr+length) with fi_mr_regattr: iface
// IfaceSystem for host memory, IfaceCUDA with the CUDA device ordinal for
// GPU memory; requestedKey matters only without FI_MR_PROV_KEY.
func (d *Device) RegMR(addr uintptr, length uint64, access, requestedKey uint64, iface, device int) (*MR, error) {
	var mr *C.struct_fid_mr
	rc := C.kvf_fi_mr_reg(d.p, C.uint64_t(addr), C.uint64_t(length), C.uint64_t(access), C.uint64_t(requestedKey),
		C.int(iface), C.int(device), &mr)
	if rc != 0 {
		return nil, fmt.Errorf("%#x+%d: %w", addr, length, errOf("fi_mr_regattr", rc))
	}
	return &MR{p: mr}, nil
}

// Key returns the region's remote key (fi_mr_key).
func (m *MR) Key() uint64 { return uint64(m.p.key) }

// Desc returns the region's local descriptor (fi_mr_desc) for Op.Desc.
func (m *MR) Desc() uint64 { return uint64(uintptr(m.p.mem_desc)) }

// Close deregisters the region; a second Close is harmless.
func (m *MR) Close() error {
	if m.p == nil {
		return nil
	}
	rc := C.kvf_fi_mr_close(m.p)
	m.p = nil
	if rc != 0 {
		return errOf("fi_close mr", rc)
	}
	return nil
}

// Op is one RMA operation for Post: the Go mirror of struct kvf_fi_op.
type Op struct {
	_ structs.HostLayout
	// Local is the local address, Length the size in bytes.
	Local, Length uint64
	// Desc is the local region's MR.Desc (0 when the provider does not
	// ask for FI_MR_LOCAL).
	Desc uint64
	// Remote is the remote address (an offset into the remote region when
	// the provider lacks FI_MR_VIRT_ADDR), Key the remote region's key.
	Remote, Key uint64
	// Peer is the target's AV address (Insert).
	Peer uint64
	// Slot is the operation's context slot, returned with its completion.
	Slot uint32
	// Write is 1 for fi_write, 0 for fi_read.
	Write uint32
}

// Comp is one completion read by Poll: the Go mirror of struct kvf_fi_comp.
type Comp struct {
	_ structs.HostLayout
	// Slot is the completed operation's slot (^uint32(0) for a completion
	// without one).
	Slot uint32
	// Err is 0 or the error number of a failed operation
	// (fi_cq_err_entry.err); ProvErrno the provider's own code.
	Err, ProvErrno int32
	_              uint32
}

// Post posts ops in order with one crossing into C (fi_write/fi_read each)
// and returns how many were posted; when fewer than all, err says why
// (syscall.EAGAIN: the queue is full, post the rest later).
func (d *Device) Post(ops []Op) (int, error) {
	if len(ops) == 0 {
		return 0, nil
	}
	var rc C.int
	n := int(C.kvf_fi_post(d.p, (*C.struct_kvf_fi_op)(unsafe.Pointer(&ops[0])), C.int(len(ops)), &rc))
	if n < len(ops) {
		return n, errOf("fi_rma", rc)
	}
	return n, nil
}

// Poll reads completions into out (fi_cq_read; fi_cq_readerr for a failed
// one, which comes alone), waiting up to timeoutMs for the first when the
// CQ has a wait object. It also drives the provider's progress, which
// manual-progress providers need on both sides of a transfer.
func (d *Device) Poll(out []Comp, timeoutMs int) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	n := C.kvf_fi_poll(d.p, (*C.struct_kvf_fi_comp)(unsafe.Pointer(&out[0])), C.int(len(out)), C.int(timeoutMs))
	if n < 0 {
		return 0, errOf("fi_cq_read", n)
	}
	return int(n), nil
}

// Signal wakes a Poll waiting on the CQ (fi_cq_signal).
func (d *Device) Signal() error {
	if rc := C.kvf_fi_signal(d.p); rc != 0 {
		return errOf("fi_cq_signal", rc)
	}
	return nil
}

// checkLayout compares Op and Comp with the C structs they mirror and
// returns the first difference ("" when none).
func checkLayout() string {
	var o Op
	var co C.struct_kvf_fi_op
	var c Comp
	var cc C.struct_kvf_fi_comp
	type pair struct {
		name        string
		goOff, cOff uintptr
	}
	for _, p := range []pair{
		{"op size", unsafe.Sizeof(o), unsafe.Sizeof(co)},
		{"op.local", unsafe.Offsetof(o.Local), unsafe.Offsetof(co.local)},
		{"op.length", unsafe.Offsetof(o.Length), unsafe.Offsetof(co.length)},
		{"op.desc", unsafe.Offsetof(o.Desc), unsafe.Offsetof(co.desc)},
		{"op.raddr", unsafe.Offsetof(o.Remote), unsafe.Offsetof(co.raddr)},
		{"op.key", unsafe.Offsetof(o.Key), unsafe.Offsetof(co.key)},
		{"op.peer", unsafe.Offsetof(o.Peer), unsafe.Offsetof(co.peer)},
		{"op.slot", unsafe.Offsetof(o.Slot), unsafe.Offsetof(co.slot)},
		{"op.write", unsafe.Offsetof(o.Write), unsafe.Offsetof(co.write)},
		{"comp size", unsafe.Sizeof(c), unsafe.Sizeof(cc)},
		{"comp.slot", unsafe.Offsetof(c.Slot), unsafe.Offsetof(cc.slot)},
		{"comp.err", unsafe.Offsetof(c.Err), unsafe.Offsetof(cc.err)},
		{"comp.prov_errno", unsafe.Offsetof(c.ProvErrno), unsafe.Offsetof(cc.prov_errno)},
	} {
		if p.goOff != p.cOff {
			return fmt.Sprintf("%s: Go %d, C %d", p.name, p.goOff, p.cOff)
		}
	}
	return ""
}
