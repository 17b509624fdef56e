package abi

/*
#include <stdlib.h>
#include <stdint.h>
#include "kvferry.h"
*/
import "C"

import (
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/kvferry/kvferry/agent/trtllm"
	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/internal/hostenv"
)

// The hidden Go exports behind kvferry.h "TensorRT-LLM support", called only
// from trtllm_c.c after the fork guard. Each converts its arguments, calls
// agent/trtllm, writes the error text into the calling thread's buffer (eb,
// el), maps the error with trtCode (trtllm_codes.go) and recovers panics
// into KVFERRY_ERR_INTERNAL.

// trtAgent is one live kvferry_trtllm_t: an agent and the handle of its
// engine in the engines table (kvferry_trtllm_engine).
type trtAgent struct {
	*trtllm.Agent
	eh uintptr
}

// trtAgents is the table of live agents.
var trtAgents handles[*trtAgent]

// newTRTAgent creates agent name on a new engine; opts are
// kvferry_trtllm_create's options.
func newTRTAgent(name string, opts map[string]string) (*trtAgent, error) {
	p, err := trtllm.ParseOptions(name, opts, hostenv.Getenv, logger)
	if err != nil {
		return nil, err
	}
	eh, err := newEngine(p.MetadataConn, p.LocalServerName, p.AutoDiscover, p.EngineOptions)
	if err != nil {
		return nil, fmt.Errorf("trtllm create agent %q: %w", name, err)
	}
	e, _ := engines.get(eh)
	a, err := trtllm.New(trtllm.Config{Name: name, Engine: e, NotifyWait: p.NotifyWait, Logger: logger})
	if err != nil {
		engines.remove(eh)
		_ = e.Close()
		return nil, err
	}
	return &trtAgent{Agent: a, eh: eh}, nil
}

// close closes the agent and its engine: running transfers end FAILED.
func (a *trtAgent) close() {
	engines.remove(a.eh)
	if err := a.Close(); err != nil {
		logger.Warn("trtllm agent close", "agent", a.Name(), "err", err)
	}
}

// trtMaxDescs bounds a descriptor array from C (far above the 40k
// descriptors TensorRT-LLM's Python transceiver submits at once).
const trtMaxDescs = 1 << 26

// trtFail records err as the calling thread's last error and returns its
// code.
func trtFail(eb *C.char, el C.size_t, err error) C.int {
	putString(eb, el, err.Error())
	logger.Debug("trtllm call failed", "err", err)
	return C.int(trtCode(err))
}

// trtRecover turns a panic into KVFERRY_ERR_INTERNAL with its text.
func trtRecover(rc *C.int, eb *C.char, el C.size_t) {
	if r := recover(); r != nil {
		err := panicked(r)
		putString(eb, el, err.Error())
		*rc = errInternal
	}
}

// trtBytes copies the byte string (p, n); NULL is valid only with n == 0.
func trtBytes(p *C.char, n C.size_t) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	if p == nil || n > 1<<31 {
		return nil, fmt.Errorf("byte string of %d bytes at %p: %w", n, p, engine.ErrInvalidArgument)
	}
	return C.GoBytes(unsafe.Pointer(p), C.int(n)), nil
}

// trtDescs views n descriptors at p (C memory, read during the call only).
func trtDescs(p unsafe.Pointer, n C.size_t) ([]trtllm.Desc, error) {
	if n == 0 {
		return nil, nil
	}
	if p == nil || n > trtMaxDescs {
		return nil, fmt.Errorf("%d descriptors at %p: %w", n, p, engine.ErrInvalidArgument)
	}
	return unsafe.Slice((*trtllm.Desc)(p), int(n)), nil
}

func lookupTRT(h C.uint64_t) (*trtAgent, error) {
	a, ok := trtAgents.get(uintptr(h))
	if !ok || a.Engine().Closed() {
		return nil, fmt.Errorf("trtllm agent handle %#x: %w", uint64(h), engine.ErrInvalidArgument)
	}
	return a, nil
}

//export kvf_trt_create
func kvf_trt_create(name *C.char, nameLen C.size_t, keys, values **C.char, n C.size_t, out *C.uint64_t, eb *C.char, el C.size_t) (rc C.int) {
	defer trtRecover(&rc, eb, el)
	if out == nil || n > 256 || n > 0 && (keys == nil || values == nil) {
		return trtFail(eb, el, fmt.Errorf("trtllm create: %w", engine.ErrInvalidArgument))
	}
	nm, err := trtBytes(name, nameLen)
	if err != nil {
		return trtFail(eb, el, fmt.Errorf("trtllm create: name: %w", err))
	}
	opts := map[string]string{}
	if n > 0 {
		ks, vs := unsafe.Slice(keys, int(n)), unsafe.Slice(values, int(n))
		for i := range ks {
			k, ok1 := cstr(ks[i])
			v, ok2 := cstr(vs[i])
			if !ok1 || !ok2 {
				return trtFail(eb, el, fmt.Errorf("trtllm create: option %d: %w", i, errNULL))
			}
			opts[k] = v
		}
	}
	a, err := newTRTAgent(string(nm), opts)
	if err != nil {
		return trtFail(eb, el, err)
	}
	*out = C.uint64_t(trtAgents.add(a))
	return 0
}

//export kvf_trt_destroy
func kvf_trt_destroy(h C.uint64_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
		}
	}()
	if a, ok := trtAgents.remove(uintptr(h)); ok {
		a.close()
	}
}

//export kvf_trt_engine
func kvf_trt_engine(h C.uint64_t) (eh C.uintptr_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
			eh = 0
		}
	}()
	a, err := lookupTRT(h)
	if err != nil {
		return 0
	}
	return C.uintptr_t(a.eh)
}

//export kvf_trt_conn_info
func kvf_trt_conn_info(h C.uint64_t, buf *C.char, n C.size_t, eb *C.char, el C.size_t) (rc C.int) {
	defer trtRecover(&rc, eb, el)
	a, err := lookupTRT(h)
	if err != nil {
		return trtFail(eb, el, err)
	}
	return C.int(putString(buf, n, a.ConnInfo()))
}

//export kvf_trt_register
func kvf_trt_register(h C.uint64_t, memType C.int, p unsafe.Pointer, n C.size_t, add C.int, eb *C.char, el C.size_t) (rc C.int) {
	defer trtRecover(&rc, eb, el)
	a, err := lookupTRT(h)
	if err != nil {
		return trtFail(eb, el, err)
	}
	descs, err := trtDescs(p, n)
	if err != nil {
		return trtFail(eb, el, err)
	}
	if add != 0 {
		err = a.Register(trtllm.MemType(memType), descs)
	} else {
		err = a.Deregister(descs)
	}
	if err != nil {
		return trtFail(eb, el, fmt.Errorf("agent %q: %w", a.Name(), err))
	}
	return 0
}

//export kvf_trt_load
func kvf_trt_load(h C.uint64_t, name *C.char, nameLen C.size_t, conn *C.char, connLen C.size_t, eb *C.char, el C.size_t) (rc C.int) {
	defer trtRecover(&rc, eb, el)
	a, err := lookupTRT(h)
	if err != nil {
		return trtFail(eb, el, err)
	}
	nm, err := trtBytes(name, nameLen)
	if err != nil {
		return trtFail(eb, el, err)
	}
	info, err := trtBytes(conn, connLen)
	if err != nil {
		return trtFail(eb, el, err)
	}
	if err := a.Load(string(nm), string(info)); err != nil {
		return trtFail(eb, el, fmt.Errorf("agent %q: %w", a.Name(), err))
	}
	return 0
}

//export kvf_trt_invalidate
func kvf_trt_invalidate(h C.uint64_t, name *C.char, nameLen C.size_t, eb *C.char, el C.size_t) (rc C.int) {
	defer trtRecover(&rc, eb, el)
	a, err := lookupTRT(h)
	if err != nil {
		return trtFail(eb, el, err)
	}
	nm, err := trtBytes(name, nameLen)
	if err != nil {
		return trtFail(eb, el, err)
	}
	a.Invalidate(string(nm))
	return 0
}

//export kvf_trt_check_remote
func kvf_trt_check_remote(h C.uint64_t, name *C.char, nameLen C.size_t, p unsafe.Pointer, n C.size_t, eb *C.char, el C.size_t) (rc C.int) {
	defer trtRecover(&rc, eb, el)
	a, err := lookupTRT(h)
	if err != nil {
		return trtFail(eb, el, err)
	}
	nm, err := trtBytes(name, nameLen)
	if err != nil {
		return trtFail(eb, el, err)
	}
	descs, err := trtDescs(p, n)
	if err != nil {
		return trtFail(eb, el, err)
	}
	if a.CheckRemote(string(nm), descs) {
		return 1
	}
	return 0
}

//export kvf_trt_submit
func kvf_trt_submit(h C.uint64_t, op C.int, name *C.char, nameLen C.size_t, local, remote unsafe.Pointer, n C.size_t,
	hasMsg C.int, msg *C.char, msgLen C.size_t, xfer *C.uint64_t, eb *C.char, el C.size_t) (rc C.int) {
	defer trtRecover(&rc, eb, el)
	a, err := lookupTRT(h)
	if err != nil {
		return trtFail(eb, el, err)
	}
	if xfer == nil {
		return trtFail(eb, el, fmt.Errorf("submit: transfer id: %w", errNULL))
	}
	nm, err := trtBytes(name, nameLen)
	if err != nil {
		return trtFail(eb, el, err)
	}
	ld, err := trtDescs(local, n)
	if err != nil {
		return trtFail(eb, el, err)
	}
	rd, err := trtDescs(remote, n)
	if err != nil {
		return trtFail(eb, el, err)
	}
	m, err := trtBytes(msg, msgLen)
	if err != nil {
		return trtFail(eb, el, err)
	}
	if op < 0 || op > math.MaxUint8 { // not an OpCode at all
		return trtFail(eb, el, fmt.Errorf("agent %q: submit: opcode %d: %w", a.Name(), int(op), engine.ErrInvalidArgument))
	}
	var id engine.BatchID
	if hasMsg != 0 {
		id, err = a.SubmitNotify(engine.OpCode(op), string(nm), ld, rd, m)
	} else {
		id, err = a.Submit(engine.OpCode(op), string(nm), ld, rd)
	}
	if err != nil {
		return trtFail(eb, el, fmt.Errorf("agent %q: %w", a.Name(), err))
	}
	*xfer = C.uint64_t(id)
	return 0
}

// kvf_trt_wait waits (block != 0) or polls the transfer; it returns a
// KVFERRY_XFER_* state and never fails otherwise.
//
//export kvf_trt_wait
func kvf_trt_wait(h C.uint64_t, xfer C.uint64_t, timeoutMS C.int64_t, block C.int) (st C.int) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
			st = C.int(trtllm.Failure)
		}
	}()
	a, err := lookupTRT(h)
	if err != nil {
		return C.int(trtllm.Failure)
	}
	if block == 0 {
		return C.int(a.Poll(engine.BatchID(xfer)))
	}
	timeout := time.Duration(-1) // as long as the transfer makes progress
	if timeoutMS >= 0 {
		timeout = time.Duration(min(int64(timeoutMS), int64(math.MaxInt64/time.Millisecond))) * time.Millisecond
	}
	return C.int(a.Wait(engine.BatchID(xfer), timeout))
}

//export kvf_trt_xfer_error
func kvf_trt_xfer_error(h C.uint64_t, xfer C.uint64_t, buf *C.char, n C.size_t) (rc C.int) {
	defer recoverResource(&rc)
	a, err := lookupTRT(h)
	if err != nil {
		return C.int(putString(buf, n, err.Error()))
	}
	return C.int(putString(buf, n, a.XferError(engine.BatchID(xfer))))
}

//export kvf_trt_cancel
func kvf_trt_cancel(h C.uint64_t, xfer C.uint64_t, eb *C.char, el C.size_t) (rc C.int) {
	defer trtRecover(&rc, eb, el)
	a, err := lookupTRT(h)
	if err != nil {
		return trtFail(eb, el, err)
	}
	if err := a.Cancel(engine.BatchID(xfer)); err != nil {
		return trtFail(eb, el, fmt.Errorf("agent %q: %w", a.Name(), err))
	}
	return 0
}

//export kvf_trt_xfer_free
func kvf_trt_xfer_free(h C.uint64_t, xfer C.uint64_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
		}
	}()
	if a, ok := trtAgents.get(uintptr(h)); ok {
		a.Free(engine.BatchID(xfer))
	}
}

//export kvf_trt_notify
func kvf_trt_notify(h C.uint64_t, name *C.char, nameLen C.size_t, msg *C.char, msgLen C.size_t, eb *C.char, el C.size_t) (rc C.int) {
	defer trtRecover(&rc, eb, el)
	a, err := lookupTRT(h)
	if err != nil {
		return trtFail(eb, el, err)
	}
	nm, err := trtBytes(name, nameLen)
	if err != nil {
		return trtFail(eb, el, err)
	}
	m, err := trtBytes(msg, msgLen)
	if err != nil {
		return trtFail(eb, el, err)
	}
	queued, err := a.Notify(string(nm), m)
	if err != nil {
		return trtFail(eb, el, fmt.Errorf("agent %q: %w", a.Name(), err))
	}
	if queued {
		return 1
	}
	return 0
}

// trtNotifSize is sizeof(kvferry_trtllm_notif_t).
const trtNotifSize = C.size_t(unsafe.Sizeof(C.kvferry_trtllm_notif_t{}))

//export kvf_trt_get_notifs
func kvf_trt_get_notifs(h C.uint64_t, out **C.kvferry_trtllm_notif_t, count *C.size_t, eb *C.char, el C.size_t) (rc C.int) {
	defer trtRecover(&rc, eb, el)
	if out == nil || count == nil {
		return trtFail(eb, el, fmt.Errorf("get notifications: %w", errNULL))
	}
	a, err := lookupTRT(h)
	if err != nil {
		return trtFail(eb, el, err)
	}
	ns := a.Notifications()
	if len(ns) == 0 {
		return 0
	}
	// One block: the array, then every name and message.
	size := C.size_t(len(ns)) * trtNotifSize
	for _, n := range ns {
		size += C.size_t(len(n.Name) + len(n.Msg))
	}
	block := C.malloc(size)
	if block == nil {
		return trtFail(eb, el, fmt.Errorf("get notifications: malloc of %d bytes failed", size))
	}
	arr := unsafe.Slice((*C.kvferry_trtllm_notif_t)(block), len(ns))
	data := unsafe.Slice((*byte)(block), int(size))
	off := int(C.size_t(len(ns)) * trtNotifSize)
	for i, n := range ns {
		arr[i].agent = (*C.char)(unsafe.Pointer(&data[min(off, len(data)-1)]))
		arr[i].agent_len = C.size_t(copy(data[off:], n.Name))
		off += len(n.Name)
		arr[i].msg = (*C.char)(unsafe.Pointer(&data[min(off, len(data)-1)]))
		arr[i].msg_len = C.size_t(copy(data[off:], n.Msg))
		off += len(n.Msg)
	}
	*out = (*C.kvferry_trtllm_notif_t)(block)
	*count = C.size_t(len(ns))
	return 0
}

// trtCLayout reports the C compiler's layout of kvferry_trtllm_desc_t, for
// the layout test (cgo cannot appear in _test.go files).
func trtCLayout() map[string]uintptr {
	var d C.kvferry_trtllm_desc_t
	return map[string]uintptr{
		"sizeof(kvferry_trtllm_desc_t)":        unsafe.Sizeof(d),
		"offsetof(len)":                        unsafe.Offsetof(d.len),
		"offsetof(device_id)":                  unsafe.Offsetof(d.device_id),
		"sizeof(kvferry_trtllm_notif_t)":       uintptr(trtNotifSize),
		"offsetof(kvferry_trtllm_notif_t.msg)": unsafe.Offsetof(C.kvferry_trtllm_notif_t{}.msg),
		"KVFERRY_XFER_IN_PROGRESS":             C.KVFERRY_XFER_IN_PROGRESS,
		"KVFERRY_XFER_SUCCESS":                 C.KVFERRY_XFER_SUCCESS,
		"KVFERRY_XFER_FAILURE":                 C.KVFERRY_XFER_FAILURE,
		"KVFERRY_TRTLLM_DRAM":                  C.KVFERRY_TRTLLM_DRAM,
		"KVFERRY_TRTLLM_VRAM":                  C.KVFERRY_TRTLLM_VRAM,
	}
}
