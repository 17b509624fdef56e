// Package ibv is kvferry's one binding of libibverbs: a thin C shim
// (shim.c) that opens libibverbs.so.1 with dlopen at run time (never at
// link time, so the library loads on hosts without rdma-core) and Go
// wrappers over it. The shim is compiled against our own declaration of the
// verbs ABI (verbs_abi.h, compared with rdma-core's verbs.h by
// layout_test.go), so building needs no rdma-core headers. The verbs that
// verbs.h makes static inline (post_send, post_recv, poll_cq, req_notify_cq)
// are written out in the shim and reach the provider through the context's
// ops table. The shim keeps no state beyond the table of entry points; all
// logic lives in the RDMA transport.
//
// KVFERRY_IBVERBS_LIB names another library to open (tests load a fake
// provider built under tests/rdma this way).
package ibv

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
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

// DefaultLibrary is the library opened when no other is named.
const DefaultLibrary = "libibverbs.so.1"

// ErrUnavailable is returned (wrapped) when libibverbs cannot be opened or
// lists no device.
var ErrUnavailable = errors.New("rdma unavailable")

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
		if C.kvf_ibv_load(cp, &buf[0], C.int(len(buf))) != 0 {
			load.err = fmt.Errorf("%w: %s", ErrUnavailable, C.GoString(&buf[0]))
		}
	})
	return load.err
}

// Loaded returns the path Load opened and its error.
func Loaded() (string, error) { return load.path, load.err }

// HasDmabuf reports whether the library has ibv_reg_dmabuf_mr.
func HasDmabuf() bool { return load.err == nil && C.kvf_ibv_has_dmabuf() != 0 }

func errnoErr(what string, rc C.int) error {
	if rc < 0 {
		rc = -rc
	}
	return fmt.Errorf("%s: %w", what, syscall.Errno(rc))
}

// DeviceNames lists the RDMA devices (ibv_get_device_list).
func DeviceNames() ([]string, error) {
	if err := Load(""); err != nil {
		return nil, err
	}
	buf := make([]byte, 16<<10)
	n := C.kvf_ibv_device_names((*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)))
	if n < 0 {
		return nil, fmt.Errorf("%w: ibv_get_device_list: %w", ErrUnavailable, syscall.Errno(-n))
	}
	s := string(buf[:indexZero(buf)])
	var names []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			names = append(names, l)
		}
	}
	return names, nil
}

func indexZero(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return len(b)
}

// Context is an opened device.
type Context struct {
	p    *C.struct_ibv_context
	Name string
}

// Open opens the device called name.
func Open(name string) (*Context, error) {
	if err := Load(""); err != nil {
		return nil, err
	}
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	p, err := C.kvf_ibv_open(cn)
	if p == nil {
		return nil, fmt.Errorf("ibv_open_device %s: %w", name, err)
	}
	return &Context{p: p, Name: name}, nil
}

// Close closes the device.
func (c *Context) Close() error {
	if rc := C.kvf_ibv_close(c.p); rc != 0 {
		return errnoErr("ibv_close_device "+c.Name, rc)
	}
	return nil
}

// DeviceAttr holds the device limits kvferry uses.
type DeviceAttr struct {
	FWVersion string
	// NodeGUID is as ibv_query_device reports it: in network byte order.
	NodeGUID                 uint64
	VendorID, VendorPartID   uint32
	MaxMRSize                uint64
	MaxQP, MaxQPWR, MaxSGE   int
	MaxCQ, MaxCQE, MaxQPRdAt int
	PhysPorts                int
}

// QueryDevice returns the device's attributes.
func (c *Context) QueryDevice() (DeviceAttr, error) {
	var a C.struct_ibv_device_attr
	if rc := C.kvf_ibv_query_device(c.p, &a); rc != 0 {
		return DeviceAttr{}, errnoErr("ibv_query_device "+c.Name, rc)
	}
	return DeviceAttr{
		FWVersion: C.GoString(&a.fw_ver[0]), NodeGUID: uint64(a.node_guid),
		VendorID: uint32(a.vendor_id), VendorPartID: uint32(a.vendor_part_id),
		MaxMRSize: uint64(a.max_mr_size), MaxQP: int(a.max_qp), MaxQPWR: int(a.max_qp_wr),
		MaxSGE: int(a.max_sge), MaxCQ: int(a.max_cq), MaxCQE: int(a.max_cqe),
		MaxQPRdAt: int(a.max_qp_rd_atom), PhysPorts: int(a.phys_port_cnt),
	}, nil
}

// Port states, MTUs and link layers (verbs.h values).
const (
	PortDown   = C.IBV_PORT_DOWN
	PortActive = C.IBV_PORT_ACTIVE

	LinkLayerInfiniBand = C.IBV_LINK_LAYER_INFINIBAND
	LinkLayerEthernet   = C.IBV_LINK_LAYER_ETHERNET
)

// MTU is an enum ibv_mtu value.
type MTU uint8

// MTUs.
const (
	MTU512  MTU = C.IBV_MTU_512
	MTU1024 MTU = C.IBV_MTU_1024
	MTU2048 MTU = C.IBV_MTU_2048
	MTU4096 MTU = C.IBV_MTU_4096
)

// Bytes returns the MTU in bytes.
func (m MTU) Bytes() int {
	if m < MTU512 || m > MTU4096+1 {
		return 0
	}
	return 128 << int(m)
}

// PortAttr holds the port attributes kvferry uses.
type PortAttr struct {
	State       int
	MaxMTU      MTU
	ActiveMTU   MTU
	GIDTableLen int
	LID         uint16
	ActiveWidth uint8
	ActiveSpeed uint8
	LinkLayer   uint8
}

// QueryPort returns port's attributes (verbs.h's inline ibv_query_port).
func (c *Context) QueryPort(port uint8) (PortAttr, error) {
	var a C.struct_ibv_port_attr
	if rc := C.kvf_ibv_query_port(c.p, C.uint8_t(port), &a); rc != 0 {
		return PortAttr{}, errnoErr(fmt.Sprintf("ibv_query_port %s/%d", c.Name, port), rc)
	}
	return PortAttr{
		State: int(a.state), MaxMTU: MTU(a.max_mtu), ActiveMTU: MTU(a.active_mtu),
		GIDTableLen: int(a.gid_tbl_len), LID: uint16(a.lid), ActiveWidth: uint8(a.active_width),
		ActiveSpeed: uint8(a.active_speed), LinkLayer: uint8(a.link_layer),
	}, nil
}

// GID is a 16-byte global identifier.
type GID [16]byte

// IsZero reports whether every byte is zero.
func (g GID) IsZero() bool { return g == GID{} }

// String formats g as Mooncake does: 16 colon-separated hex bytes.
func (g GID) String() string {
	var b strings.Builder
	for i, x := range g {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02x", x)
	}
	return b.String()
}

// ParseGID parses Mooncake's "xx:xx:...:xx" form (16 bytes).
func ParseGID(s string) (GID, error) {
	var g GID
	parts := strings.Split(s, ":")
	if len(parts) != 16 {
		return g, fmt.Errorf("gid %q: want 16 bytes", s)
	}
	for i, p := range parts {
		var v uint
		if _, err := fmt.Sscanf(p, "%x", &v); err != nil || v > 0xff || p == "" || len(p) > 2 {
			return g, fmt.Errorf("gid %q: bad byte %d", s, i)
		}
		g[i] = byte(v)
	}
	return g, nil
}

// GID types (enum ibv_gid_type).
const (
	GIDTypeIB     = C.IBV_GID_TYPE_IB
	GIDTypeRoCEv1 = C.IBV_GID_TYPE_ROCE_V1
	GIDTypeRoCEv2 = C.IBV_GID_TYPE_ROCE_V2
)

// QueryGID returns entry index of port's GID table.
func (c *Context) QueryGID(port uint8, index int) (GID, error) {
	var g GID
	if rc := C.kvf_ibv_query_gid(c.p, C.uint8_t(port), C.int(index), (*C.uint8_t)(unsafe.Pointer(&g[0]))); rc != 0 {
		return g, errnoErr(fmt.Sprintf("ibv_query_gid %s/%d[%d]", c.Name, port, index), rc)
	}
	return g, nil
}

// QueryGIDType returns the type and network interface index of a GID
// entry (ibv_query_gid_ex); ok is false when the library or device cannot
// tell.
func (c *Context) QueryGIDType(port uint8, index int) (typ uint32, ifindex uint32, ok bool) {
	if C.kvf_ibv_has_gid_ex() == 0 {
		return 0, 0, false
	}
	var t, ifi C.uint32_t
	if C.kvf_ibv_query_gid_type(c.p, C.uint8_t(port), C.int(index), &t, &ifi) != 0 {
		return 0, 0, false
	}
	return uint32(t), uint32(ifi), true
}

// AsyncFd returns the context's asynchronous event descriptor.
func (c *Context) AsyncFd() int { return int(C.kvf_ibv_async_fd(c.p)) }

// NumCompVectors returns the number of completion vectors.
func (c *Context) NumCompVectors() int { return int(C.kvf_ibv_num_comp_vectors(c.p)) }

// Async event types (enum ibv_event_type) the transport acts on.
const (
	EventQPFatal    = C.IBV_EVENT_QP_FATAL
	EventQPReqErr   = C.IBV_EVENT_QP_REQ_ERR
	EventQPAccess   = C.IBV_EVENT_QP_ACCESS_ERR
	EventPortActive = C.IBV_EVENT_PORT_ACTIVE
	EventPortErr    = C.IBV_EVENT_PORT_ERR
	EventDeviceFail = C.IBV_EVENT_DEVICE_FATAL
	EventGIDChange  = C.IBV_EVENT_GID_CHANGE
)

// AsyncEvent is one asynchronous event.
type AsyncEvent struct {
	Type  int
	QPNum uint32
	Port  uint8
}

// GetAsyncEvent takes one event from the non-blocking async fd (make it
// non-blocking first); ok is false when none is pending.
func (c *Context) GetAsyncEvent() (ev AsyncEvent, ok bool, err error) {
	var a C.struct_kvf_async
	rc := C.kvf_ibv_get_async_event(c.p, &a)
	if rc < 0 {
		return ev, false, errnoErr("ibv_get_async_event "+c.Name, rc)
	}
	if rc == 0 {
		return ev, false, nil
	}
	return AsyncEvent{Type: int(a.event_type), QPNum: uint32(a.qp_num), Port: uint8(a.port_num)}, true, nil
}

// PD is a protection domain.
type PD struct{ p *C.struct_ibv_pd }

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() (*PD, error) {
	p, err := C.kvf_ibv_alloc_pd(c.p)
	if p == nil {
		return nil, fmt.Errorf("ibv_alloc_pd %s: %w", c.Name, err)
	}
	return &PD{p: p}, nil
}

// Dealloc frees the protection domain.
func (pd *PD) Dealloc() error {
	if rc := C.kvf_ibv_dealloc_pd(pd.p); rc != 0 {
		return errnoErr("ibv_dealloc_pd", rc)
	}
	return nil
}

// Access flags (enum ibv_access_flags).
const (
	AccessLocalWrite  = C.IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite = C.IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead  = C.IBV_ACCESS_REMOTE_READ
	AccessRemoteAtom  = C.IBV_ACCESS_REMOTE_ATOMIC
	AccessRelaxed     = C.IBV_ACCESS_RELAXED_ORDERING
)

// MR is a registered memory region.
type MR struct {
	p          *C.struct_ibv_mr
	LKey, RKey uint32
}

// RegMR registers [addr, addr+n) (ibv_reg_mr).
func (pd *PD) RegMR(addr uintptr, n uint64, access int) (*MR, error) {
	p, err := C.kvf_ibv_reg_mr(pd.p, C.uint64_t(addr), C.uint64_t(n), C.int(access))
	if p == nil {
		return nil, fmt.Errorf("ibv_reg_mr %#x+%d: %w", addr, n, err)
	}
	return &MR{p: p, LKey: uint32(C.kvf_ibv_mr_lkey(p)), RKey: uint32(C.kvf_ibv_mr_rkey(p))}, nil
}

// RegDmabufMR registers n bytes at offset of the dma-buf fd, addressed by
// peers as iova (ibv_reg_dmabuf_mr; GPU memory).
func (pd *PD) RegDmabufMR(offset, n, iova uint64, fd, access int) (*MR, error) {
	p, err := C.kvf_ibv_reg_dmabuf_mr(pd.p, C.uint64_t(offset), C.uint64_t(n), C.uint64_t(iova), C.int(fd), C.int(access))
	if p == nil {
		return nil, fmt.Errorf("ibv_reg_dmabuf_mr fd %d +%d: %w", fd, n, err)
	}
	return &MR{p: p, LKey: uint32(C.kvf_ibv_mr_lkey(p)), RKey: uint32(C.kvf_ibv_mr_rkey(p))}, nil
}

// Dereg deregisters the region.
func (mr *MR) Dereg() error {
	if rc := C.kvf_ibv_dereg_mr(mr.p); rc != 0 {
		return errnoErr("ibv_dereg_mr", rc)
	}
	return nil
}

// CompChannel is a completion event channel.
type CompChannel struct{ p *C.struct_ibv_comp_channel }

// CreateCompChannel creates a completion channel.
func (c *Context) CreateCompChannel() (*CompChannel, error) {
	p, err := C.kvf_ibv_create_comp_channel(c.p)
	if p == nil {
		return nil, fmt.Errorf("ibv_create_comp_channel %s: %w", c.Name, err)
	}
	return &CompChannel{p: p}, nil
}

// Fd returns the channel's descriptor.
func (ch *CompChannel) Fd() int { return int(C.kvf_ibv_comp_channel_fd(ch.p)) }

// GetEvent takes and acknowledges one completion event from the
// (non-blocking) channel; ok is false when none is pending.
func (ch *CompChannel) GetEvent() (ok bool, err error) {
	rc := C.kvf_ibv_get_cq_event(ch.p)
	if rc < 0 {
		return false, errnoErr("ibv_get_cq_event", rc)
	}
	return rc == 1, nil
}

// Destroy destroys the channel.
func (ch *CompChannel) Destroy() error {
	if rc := C.kvf_ibv_destroy_comp_channel(ch.p); rc != 0 {
		return errnoErr("ibv_destroy_comp_channel", rc)
	}
	return nil
}

// CQ is a completion queue.
type CQ struct{ p *C.struct_ibv_cq }

// CreateCQ creates a CQ of cqe entries raising events on ch.
func (c *Context) CreateCQ(cqe int, ch *CompChannel, vector int) (*CQ, error) {
	var chp *C.struct_ibv_comp_channel
	if ch != nil {
		chp = ch.p
	}
	p, err := C.kvf_ibv_create_cq(c.p, C.int(cqe), chp, C.int(vector))
	if p == nil {
		return nil, fmt.Errorf("ibv_create_cq %s: %w", c.Name, err)
	}
	return &CQ{p: p}, nil
}

// Destroy destroys the CQ.
func (cq *CQ) Destroy() error {
	if rc := C.kvf_ibv_destroy_cq(cq.p); rc != 0 {
		return errnoErr("ibv_destroy_cq", rc)
	}
	return nil
}

// ReqNotify arms the CQ: the next completion raises an event on its channel.
func (cq *CQ) ReqNotify() error {
	if rc := C.kvf_ibv_req_notify_cq(cq.p); rc != 0 {
		return errnoErr("ibv_req_notify_cq", rc)
	}
	return nil
}

// WC is a work completion (the shim's struct kvf_wc).
type WC = C.struct_kvf_wc

// WC status values (enum ibv_wc_status) the transport tells apart.
const (
	WCSuccess        = C.IBV_WC_SUCCESS
	WCLocLenErr      = C.IBV_WC_LOC_LEN_ERR
	WCLocQPOpErr     = C.IBV_WC_LOC_QP_OP_ERR
	WCLocProtErr     = C.IBV_WC_LOC_PROT_ERR
	WCFlushErr       = C.IBV_WC_WR_FLUSH_ERR
	WCRemInvReqErr   = C.IBV_WC_REM_INV_REQ_ERR
	WCRemAccessErr   = C.IBV_WC_REM_ACCESS_ERR
	WCRemOpErr       = C.IBV_WC_REM_OP_ERR
	WCRetryExcErr    = C.IBV_WC_RETRY_EXC_ERR
	WCRnrRetryExcErr = C.IBV_WC_RNR_RETRY_EXC_ERR
	WCFatalErr       = C.IBV_WC_FATAL_ERR
	WCGeneralErr     = C.IBV_WC_GENERAL_ERR
)

// WC opcodes (enum ibv_wc_opcode) for receive completions.
const (
	WCRecv         = C.IBV_WC_RECV
	WCRecvRDMAImm  = C.IBV_WC_RECV_RDMA_WITH_IMM
	WCWithImmFlag  = C.IBV_WC_WITH_IMM
	WCOpRDMAWrite  = C.IBV_WC_RDMA_WRITE
	WCOpRDMARead   = C.IBV_WC_RDMA_READ
	WCOpSend       = C.IBV_WC_SEND
	maxPollEntries = 64
)

// WRID returns the completion's work request id.
func WRID(w *WC) uint64 { return uint64(w.wr_id) }

// Status returns the completion's status.
func Status(w *WC) int { return int(w.status) }

// QPNum returns the QP the completion belongs to.
func QPNum(w *WC) uint32 { return uint32(w.qp_num) }

// Opcode returns the completion's opcode.
func Opcode(w *WC) int { return int(w.opcode) }

// ByteLen returns the received length (receive completions).
func ByteLen(w *WC) uint32 { return uint32(w.byte_len) }

// Imm returns the immediate data (host order) of a completion with one.
func Imm(w *WC) uint32 { return uint32(w.imm) }

// VendorErr returns the vendor error code.
func VendorErr(w *WC) uint32 { return uint32(w.vendor_err) }

// Poll polls up to len(out) (at most 64) completions into out; out must
// not be Go memory holding Go pointers (WC has none).
func (cq *CQ) Poll(out []WC) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	n := C.kvf_ibv_poll_cq(cq.p, C.int(min(len(out), maxPollEntries)), &out[0])
	if n < 0 {
		return 0, fmt.Errorf("ibv_poll_cq: %d", int(n))
	}
	return int(n), nil
}

// QP is a reliable-connected queue pair.
type QP struct {
	p   *C.struct_ibv_qp
	Num uint32
	// MaxInline is the inline size the device granted.
	MaxInline uint32
}

// QPCaps are a QP's queue sizes.
type QPCaps struct {
	MaxSendWR, MaxRecvWR, MaxSGE, MaxInline uint32
}

// CreateQP creates an RC QP on pd whose completions go to cq.
func (pd *PD) CreateQP(send, recv *CQ, caps QPCaps) (*QP, error) {
	var inl C.uint32_t
	p, err := C.kvf_ibv_create_qp(pd.p, send.p, recv.p, C.uint32_t(caps.MaxSendWR), C.uint32_t(caps.MaxRecvWR),
		C.uint32_t(caps.MaxSGE), C.uint32_t(caps.MaxInline), &inl)
	if p == nil {
		return nil, fmt.Errorf("ibv_create_qp: %w", err)
	}
	return &QP{p: p, Num: uint32(C.kvf_ibv_qp_num(p)), MaxInline: uint32(inl)}, nil
}

// Destroy destroys the QP.
func (qp *QP) Destroy() error {
	if rc := C.kvf_ibv_destroy_qp(qp.p); rc != 0 {
		return errnoErr(fmt.Sprintf("ibv_destroy_qp %d", qp.Num), rc)
	}
	return nil
}

// QP states (enum ibv_qp_state).
const (
	QPSReset = C.IBV_QPS_RESET
	QPSInit  = C.IBV_QPS_INIT
	QPSRTR   = C.IBV_QPS_RTR
	QPSRTS   = C.IBV_QPS_RTS
	QPSErr   = C.IBV_QPS_ERR
)

// ToInit moves the QP from RESET to INIT.
func (qp *QP) ToInit(port uint8, pkeyIndex uint16, access int) error {
	if rc := C.kvf_ibv_qp_to_init(qp.p, C.uint8_t(port), C.uint16_t(pkeyIndex), C.int(access)); rc != 0 {
		return errnoErr(fmt.Sprintf("qp %d to INIT", qp.Num), rc)
	}
	return nil
}

// RTR are the INIT -> RTR attributes.
type RTR struct {
	DGID             GID
	DestQPNum, RQPSN uint32
	DLID             uint16
	Port, SGIDIndex  uint8
	PathMTU          MTU
	HopLimit         uint8
	TrafficClass, SL uint8
	MinRNRTimer      uint8
	MaxDestRdAtomic  uint8
	Global           bool
}

// ToRTR moves the QP from INIT to RTR.
func (qp *QP) ToRTR(a RTR) error {
	var r C.struct_kvf_rtr
	for i := range a.DGID {
		r.dgid[i] = C.uint8_t(a.DGID[i])
	}
	r.dest_qp_num = C.uint32_t(a.DestQPNum)
	r.rq_psn = C.uint32_t(a.RQPSN)
	r.dlid = C.uint16_t(a.DLID)
	r.port_num = C.uint8_t(a.Port)
	r.sgid_index = C.uint8_t(a.SGIDIndex)
	r.path_mtu = C.uint8_t(a.PathMTU)
	r.hop_limit = C.uint8_t(a.HopLimit)
	r.traffic_class = C.uint8_t(a.TrafficClass)
	r.sl = C.uint8_t(a.SL)
	r.min_rnr_timer = C.uint8_t(a.MinRNRTimer)
	r.max_dest_rd_atomic = C.uint8_t(a.MaxDestRdAtomic)
	if a.Global {
		r.is_global = 1
	}
	if rc := C.kvf_ibv_qp_to_rtr(qp.p, &r); rc != 0 {
		return errnoErr(fmt.Sprintf("qp %d to RTR (dest qp %d)", qp.Num, a.DestQPNum), rc)
	}
	return nil
}

// ToRTS moves the QP from RTR to RTS.
func (qp *QP) ToRTS(timeout, retryCnt, rnrRetry uint8, sqPSN uint32, maxRdAtomic uint8) error {
	if rc := C.kvf_ibv_qp_to_rts(qp.p, C.uint8_t(timeout), C.uint8_t(retryCnt), C.uint8_t(rnrRetry), C.uint32_t(sqPSN), C.uint8_t(maxRdAtomic)); rc != 0 {
		return errnoErr(fmt.Sprintf("qp %d to RTS", qp.Num), rc)
	}
	return nil
}

// ToState moves the QP to state (RESET or ERR).
func (qp *QP) ToState(state int) error {
	if rc := C.kvf_ibv_qp_to_state(qp.p, C.int(state)); rc != 0 {
		return errnoErr(fmt.Sprintf("qp %d to state %d", qp.Num, state), rc)
	}
	return nil
}

// State queries the QP's state.
func (qp *QP) State() (int, error) {
	rc := C.kvf_ibv_qp_state(qp.p)
	if rc < 0 {
		return 0, errnoErr("ibv_query_qp", rc)
	}
	return int(rc), nil
}

// WR opcodes (enum ibv_wr_opcode).
const (
	WRWrite    = C.IBV_WR_RDMA_WRITE
	WRWriteImm = C.IBV_WR_RDMA_WRITE_WITH_IMM
	WRSend     = C.IBV_WR_SEND
	WRSendImm  = C.IBV_WR_SEND_WITH_IMM
	WRRead     = C.IBV_WR_RDMA_READ
)

// MaxChain is the most work requests PostSend takes in one call.
const MaxChain = 256

// SendWR is one work request (the shim's struct kvf_wr).
type SendWR = C.struct_kvf_wr

// SetSendWR fills w.
func SetSendWR(w *SendWR, id uint64, opcode int, local uint64, length, lkey uint32, remote uint64, rkey uint32, signaled bool) {
	*w = SendWR{}
	w.wr_id = C.uint64_t(id)
	w.opcode = C.uint8_t(opcode)
	w.local_addr = C.uint64_t(local)
	w.length = C.uint32_t(length)
	w.lkey = C.uint32_t(lkey)
	w.remote_addr = C.uint64_t(remote)
	w.rkey = C.uint32_t(rkey)
	if signaled {
		w.signaled = 1
	}
}

// SetImm sets the immediate data of a WRITE_WITH_IMM or SEND_WITH_IMM.
func SetImm(w *SendWR, imm uint32) { w.imm = C.uint32_t(imm) }

// PostSend posts wrs (at most MaxChain) as one chain with one doorbell.
// It returns how many were posted; on error the rest were not.
func (qp *QP) PostSend(wrs []SendWR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	var bad C.int
	if rc := C.kvf_ibv_post_send(qp.p, &wrs[0], C.int(len(wrs)), &bad); rc != 0 {
		return int(bad), errnoErr(fmt.Sprintf("ibv_post_send qp %d", qp.Num), rc)
	}
	return len(wrs), nil
}

// RecvWR is one receive request (the shim's struct kvf_recv).
type RecvWR = C.struct_kvf_recv

// SetRecvWR fills w.
func SetRecvWR(w *RecvWR, id, addr uint64, length, lkey uint32) {
	w.wr_id = C.uint64_t(id)
	w.addr = C.uint64_t(addr)
	w.length = C.uint32_t(length)
	w.lkey = C.uint32_t(lkey)
}

// PostRecv posts receive requests (at most 64).
func (qp *QP) PostRecv(wrs []RecvWR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	var bad C.int
	if rc := C.kvf_ibv_post_recv(qp.p, &wrs[0], C.int(len(wrs)), &bad); rc != 0 {
		return int(bad), errnoErr(fmt.Sprintf("ibv_post_recv qp %d", qp.Num), rc)
	}
	return len(wrs), nil
}

// StatusString names a completion status as ibv_wc_status_str does.
func StatusString(s int) string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("status %d", s)
}

var statusNames = map[int]string{
	C.IBV_WC_SUCCESS: "success", C.IBV_WC_LOC_LEN_ERR: "local length error",
	C.IBV_WC_LOC_QP_OP_ERR: "local QP operation error", C.IBV_WC_LOC_EEC_OP_ERR: "local EE context operation error",
	C.IBV_WC_LOC_PROT_ERR: "local protection error", C.IBV_WC_WR_FLUSH_ERR: "Work Request Flushed Error",
	C.IBV_WC_MW_BIND_ERR: "memory management operation error", C.IBV_WC_BAD_RESP_ERR: "bad response error",
	C.IBV_WC_LOC_ACCESS_ERR: "local access error", C.IBV_WC_REM_INV_REQ_ERR: "remote invalid request error",
	C.IBV_WC_REM_ACCESS_ERR: "remote access error", C.IBV_WC_REM_OP_ERR: "remote operation error",
	C.IBV_WC_RETRY_EXC_ERR: "transport retry counter exceeded", C.IBV_WC_RNR_RETRY_EXC_ERR: "RNR retry counter exceeded",
	C.IBV_WC_LOC_RDD_VIOL_ERR: "local RDD violation error", C.IBV_WC_REM_INV_RD_REQ_ERR: "remote invalid RD request",
	C.IBV_WC_REM_ABORT_ERR: "aborted error", C.IBV_WC_INV_EECN_ERR: "invalid EE context number",
	C.IBV_WC_INV_EEC_STATE_ERR: "invalid EE context state", C.IBV_WC_FATAL_ERR: "fatal error",
	C.IBV_WC_RESP_TIMEOUT_ERR: "response timeout error", C.IBV_WC_GENERAL_ERR: "general error",
}
