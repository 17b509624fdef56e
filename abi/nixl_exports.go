package abi

/*
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include "kvferry.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/kvferry/kvferry/agent/nixl"
	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/hostenv"
)

// The Go side of kvferry.h "NIXL support", called only from the C
// definitions in nixl_c.c after the fork guard. Each export converts, recovers
// panics into KVFERRY_NIXL_ERR_UNKNOWN and calls agent/nixl, whose errors
// nixlCode (nixl_codes.go) maps to nixl_status_t.

// nixlAgent is one live kvferry_nixl_t: an agent and the handle of its
// engine in the engines table (for metrics).
type nixlAgent struct {
	*nixl.Agent
	eh uintptr
}

// nixlAgents is the table of live NIXL agents.
var nixlAgents handles[*nixlAgent]

// ignoredNixlKeys holds the parameter keys already logged as ignored, so
// each is logged once per process.
var ignoredNixlKeys sync.Map

// newNixlAgent creates agent name on a new engine (kvferry_nixl_create).
func newNixlAgent(name string, opts map[string]string, progress bool) (*nixlAgent, error) {
	if err := setup(); err != nil {
		return nil, err
	}
	p, err := nixl.ParseOptions(name, opts)
	if err != nil {
		return nil, err
	}
	for _, k := range p.Ignored {
		if _, seen := ignoredNixlKeys.LoadOrStore(k, true); !seen {
			nixlLogger.Debug("nixl backend parameter is not kvferry's; ignored", "agent", name, "key", k)
		}
	}
	eh, err := newEngine(p.MetadataConn, p.LocalServerName, true, p.EngineOptions)
	if err != nil {
		return nil, fmt.Errorf("nixl create agent %q: %w", name, err)
	}
	e, _ := engines.get(eh)
	a, err := nixl.New(nixl.Config{Name: name, Engine: e, ProgressThread: progress, Logger: nixlLogger})
	if err != nil {
		engines.remove(eh)
		_ = e.Close()
		return nil, err
	}
	return &nixlAgent{Agent: a, eh: eh}, nil
}

// close closes the agent and its engine.
func (a *nixlAgent) close() {
	engines.remove(a.eh)
	if err := a.Close(); err != nil {
		nixlLogger.Warn("nixl engine close", "agent", a.Name(), "err", err)
	}
}

// fail records err as the engine's last error and returns its status.
func (a *nixlAgent) fail(err error) int {
	engineFail(a.Engine(), err)
	return nixlCode(err)
}

// maxNixlDescs bounds one descriptor list from C.
const maxNixlDescs = 1 << 24

func recoverNixl(rc *C.int) {
	if r := recover(); r != nil {
		_ = panicked(r)
		*rc = nixlErrUnknown
	}
}

func bytesArg(p *C.char, n C.size_t) (string, bool) {
	if n == 0 {
		return "", true
	}
	if p == nil || n > 1<<30 {
		return "", false
	}
	return C.GoStringN(p, C.int(n)), true
}

func lookupNixl(h C.kvferry_nixl_t) (*nixlAgent, bool) {
	return nixlAgents.get(uintptr(h))
}

// descArg views a C descriptor array without copying.
func descArg(p *C.kvferry_nixl_desc_t, n C.size_t) ([]nixl.Desc, bool) {
	if n == 0 {
		return nil, true
	}
	if p == nil || n > maxNixlDescs {
		return nil, false
	}
	return unsafe.Slice((*nixl.Desc)(unsafe.Pointer(p)), int(n)), true
}

// putBytes copies min(len(s), n) bytes of s to buf (no NUL) and returns
// len(s).
func putBytes(buf *C.char, n C.size_t, s string) C.int64_t {
	if buf != nil && n > 0 {
		dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
		copy(dst, s)
	}
	return C.int64_t(len(s))
}

//export kvf_nixl_option
func kvf_nixl_option(i C.size_t, key *C.char, klen C.size_t, val *C.char, vlen C.size_t) (rc C.int) {
	defer recoverNixl(&rc)
	opts := nixl.Options(stack.ConfigFromEnv(hostenv.Lookup))
	if uint64(i) >= uint64(len(opts)) {
		return 0
	}
	putString(key, klen, opts[i].Key)
	putString(val, vlen, opts[i].Default)
	return 1
}

//export kvf_nixl_supported_mems
func kvf_nixl_supported_mems(mems *C.int, capacity C.size_t) (rc C.int) {
	defer recoverNixl(&rc)
	supported := []C.int{C.int(nixl.DRAM)}
	if gpuAvailable() {
		supported = append(supported, C.int(nixl.VRAM))
	}
	if mems != nil && capacity > 0 {
		copy(unsafe.Slice(mems, int(min(capacity, 16))), supported)
	}
	return C.int(len(supported))
}

//export kvf_nixl_create
func kvf_nixl_create(agent *C.char, alen C.size_t, keys, values **C.char, n C.size_t, progress C.int, delayUS C.uint64_t, out *C.kvferry_nixl_t) (rc C.int) {
	defer recoverNixl(&rc)
	_ = delayUS // the progress goroutine waits on events; nothing to pace
	if out == nil {
		return nixlCreateFailed("", fmt.Errorf("NULL output handle: %w", engine.ErrInvalidArgument))
	}
	*out = 0
	name, ok := bytesArg(agent, alen)
	if !ok || n > maxNixlParams || (n > 0 && (keys == nil || values == nil)) {
		return nixlCreateFailed(name, fmt.Errorf("bad arguments (agent name %d bytes, %d parameters, keys %p, values %p; at most %d parameters): %w",
			alen, n, keys, values, maxNixlParams, engine.ErrInvalidArgument))
	}
	opts := map[string]string{}
	if n > 0 {
		ks := unsafe.Slice(keys, int(n))
		vs := unsafe.Slice(values, int(n))
		for i := range ks {
			k, ok1 := cstr(ks[i])
			v, ok2 := cstr(vs[i])
			if !ok1 || !ok2 {
				return nixlCreateFailed(name, fmt.Errorf("parameter %d: NULL or oversized key or value: %w", i, engine.ErrInvalidArgument))
			}
			opts[k] = v
		}
	}
	a, err := newNixlAgent(name, opts, progress != 0)
	if err != nil {
		return nixlCreateFailed(name, err)
	}
	*out = C.kvferry_nixl_t(nixlAgents.add(a))
	return nixlSuccess
}

// maxNixlParams bounds the backend parameters of kvferry_nixl_create.
const maxNixlParams = 4096

// nixlCreateFailed logs why creating agent name failed and returns its
// status. The reason goes into the message, at error level: NIXL's own
// line that follows only says that the backend failed.
func nixlCreateFailed(name string, err error) C.int {
	_ = setup() // the logger; a setup failure is err itself then
	nixlLogger.Error("KVFERRY backend creation failed: "+err.Error(), "agent", name)
	return C.int(nixlCode(err))
}

// warnedBackendNames holds the backend names already warned about.
var warnedBackendNames sync.Map

//export kvf_nixl_backend_name
func kvf_nixl_backend_name(name *C.char, n C.size_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
		}
	}()
	s, ok := bytesArg(name, n)
	if !ok || s == nixl.BackendName {
		return
	}
	if _, seen := warnedBackendNames.LoadOrStore(s, true); seen {
		return
	}
	_ = setup() // the logger
	nixlLogger.Warn("this KVFERRY plugin was loaded as backend "+s+", from a copy or link under another file name: "+
		"NIXL names a backend after libplugin_<NAME>.so; install it as libplugin_KVFERRY.so", "backend", s)
}

//export kvf_nixl_destroy
func kvf_nixl_destroy(h C.kvferry_nixl_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
		}
	}()
	if a, ok := nixlAgents.remove(uintptr(h)); ok {
		a.close()
	}
}

//export kvf_nixl_conn_info
func kvf_nixl_conn_info(h C.kvferry_nixl_t, buf *C.char, n C.size_t) (rc C.int64_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
			rc = nixlErrUnknown
		}
	}()
	a, ok := lookupNixl(h)
	if !ok {
		return nixlErrInvalidParam
	}
	return putBytes(buf, n, a.ConnInfo())
}

//export kvf_nixl_load_conn_info
func kvf_nixl_load_conn_info(h C.kvferry_nixl_t, agent *C.char, alen C.size_t, info *C.char, ilen C.size_t) (rc C.int) {
	defer recoverNixl(&rc)
	a, ok := lookupNixl(h)
	name, ok1 := bytesArg(agent, alen)
	in, ok2 := bytesArg(info, ilen)
	if !ok || !ok1 || !ok2 {
		return nixlErrInvalidParam
	}
	return C.int(a.fail(a.LoadConnInfo(name, in)))
}

//export kvf_nixl_connect
func kvf_nixl_connect(h C.kvferry_nixl_t, agent *C.char, alen C.size_t) (rc C.int) {
	defer recoverNixl(&rc)
	a, ok := lookupNixl(h)
	name, ok1 := bytesArg(agent, alen)
	if !ok || !ok1 {
		return nixlErrInvalidParam
	}
	return C.int(a.fail(a.Connect(name)))
}

//export kvf_nixl_disconnect
func kvf_nixl_disconnect(h C.kvferry_nixl_t, agent *C.char, alen C.size_t) (rc C.int) {
	defer recoverNixl(&rc)
	a, ok := lookupNixl(h)
	name, ok1 := bytesArg(agent, alen)
	if !ok || !ok1 {
		return nixlErrInvalidParam
	}
	return C.int(a.fail(a.Disconnect(name)))
}

//export kvf_nixl_register
func kvf_nixl_register(h C.kvferry_nixl_t, mem C.int, addr, n, dev C.uint64_t, out *C.kvferry_nixl_md_t) (rc C.int) {
	defer recoverNixl(&rc)
	a, ok := lookupNixl(h)
	if !ok || out == nil {
		return nixlErrInvalidParam
	}
	*out = 0
	md, err := a.Register(nixl.MemType(mem), uint64(addr), uint64(n), uint64(dev))
	if err != nil {
		return C.int(a.fail(err))
	}
	*out = C.kvferry_nixl_md_t(md)
	return nixlSuccess
}

//export kvf_nixl_deregister
func kvf_nixl_deregister(h C.kvferry_nixl_t, md C.kvferry_nixl_md_t) (rc C.int) {
	defer recoverNixl(&rc)
	a, ok := lookupNixl(h)
	if !ok {
		return nixlErrInvalidParam
	}
	return C.int(a.fail(a.Deregister(nixl.MD(md))))
}

//export kvf_nixl_public_data
func kvf_nixl_public_data(h C.kvferry_nixl_t, md C.kvferry_nixl_md_t, buf *C.char, n C.size_t) (rc C.int64_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
			rc = nixlErrUnknown
		}
	}()
	a, ok := lookupNixl(h)
	if !ok {
		return nixlErrInvalidParam
	}
	s, err := a.PublicData(nixl.MD(md))
	if err != nil {
		return C.int64_t(a.fail(err))
	}
	return putBytes(buf, n, s)
}

//export kvf_nixl_load_remote_md
func kvf_nixl_load_remote_md(h C.kvferry_nixl_t, agent *C.char, alen C.size_t, mem C.int, addr, n, dev C.uint64_t, blob *C.char, blen C.size_t, out *C.kvferry_nixl_md_t) (rc C.int) {
	defer recoverNixl(&rc)
	a, ok := lookupNixl(h)
	name, ok1 := bytesArg(agent, alen)
	b, ok2 := bytesArg(blob, blen)
	if !ok || !ok1 || !ok2 || out == nil {
		return nixlErrInvalidParam
	}
	*out = 0
	md, err := a.LoadRemoteMD(name, nixl.MemType(mem), uint64(addr), uint64(n), uint64(dev), b)
	if err != nil {
		return C.int(a.fail(err))
	}
	*out = C.kvferry_nixl_md_t(md)
	return nixlSuccess
}

//export kvf_nixl_load_local_md
func kvf_nixl_load_local_md(h C.kvferry_nixl_t, md C.kvferry_nixl_md_t, out *C.kvferry_nixl_md_t) (rc C.int) {
	defer recoverNixl(&rc)
	a, ok := lookupNixl(h)
	if !ok || out == nil {
		return nixlErrInvalidParam
	}
	*out = 0
	r, err := a.LoadLocalMD(nixl.MD(md))
	if err != nil {
		return C.int(a.fail(err))
	}
	*out = C.kvferry_nixl_md_t(r)
	return nixlSuccess
}

//export kvf_nixl_unload_md
func kvf_nixl_unload_md(h C.kvferry_nixl_t, md C.kvferry_nixl_md_t) (rc C.int) {
	defer recoverNixl(&rc)
	a, ok := lookupNixl(h)
	if !ok {
		return nixlErrInvalidParam
	}
	return C.int(a.fail(a.UnloadMD(nixl.MD(md))))
}

//export kvf_nixl_xfer_prep
func kvf_nixl_xfer_prep(h C.kvferry_nixl_t, op C.int, agent *C.char, alen C.size_t, local *C.kvferry_nixl_desc_t, nl C.size_t, remote *C.kvferry_nixl_desc_t, nr C.size_t, out *C.kvferry_nixl_xfer_t) (rc C.int) {
	defer recoverNixl(&rc)
	a, ok := lookupNixl(h)
	name, ok1 := bytesArg(agent, alen)
	l, ok2 := descArg(local, nl)
	r, ok3 := descArg(remote, nr)
	if !ok || !ok1 || !ok2 || !ok3 || out == nil {
		return nixlErrInvalidParam
	}
	*out = 0
	x, err := a.PrepXfer(nixl.Op(op), name, l, r)
	if err != nil {
		return C.int(a.fail(err))
	}
	*out = C.kvferry_nixl_xfer_t(x)
	return nixlSuccess
}

//export kvf_nixl_xfer_post
func kvf_nixl_xfer_post(h C.kvferry_nixl_t, xh C.kvferry_nixl_xfer_t, op C.int, local *C.kvferry_nixl_desc_t, nl C.size_t, remote *C.kvferry_nixl_desc_t, nr C.size_t, hasNotif C.int, msg *C.char, mlen C.size_t) (rc C.int) {
	defer recoverNixl(&rc)
	a, ok := lookupNixl(h)
	if !ok {
		return nixlErrInvalidParam
	}
	l, ok1 := descArg(local, nl)
	r, ok2 := descArg(remote, nr)
	if !ok1 || !ok2 {
		return C.int(a.fail(fmt.Errorf("post request %#x: %w", uint64(xh), engine.ErrInvalidArgument)))
	}
	var err error
	if hasNotif != 0 {
		m, ok := bytesArg(msg, mlen)
		if !ok {
			return nixlErrInvalidParam
		}
		err = a.PostNotify(nixl.Xfer(xh), nixl.Op(op), l, r, m)
	} else {
		err = a.Post(nixl.Xfer(xh), nixl.Op(op), l, r)
	}
	if err != nil {
		return C.int(a.fail(err))
	}
	return nixlInProg
}

//export kvf_nixl_xfer_check
func kvf_nixl_xfer_check(h C.kvferry_nixl_t, xh C.kvferry_nixl_xfer_t) (rc C.int) {
	defer recoverNixl(&rc)
	a, ok := lookupNixl(h)
	if !ok {
		return nixlErrInvalidParam
	}
	return C.int(nixlCode(a.Check(nixl.Xfer(xh))))
}

//export kvf_nixl_xfer_release
func kvf_nixl_xfer_release(h C.kvferry_nixl_t, xh C.kvferry_nixl_xfer_t) (rc C.int) {
	defer recoverNixl(&rc)
	a, ok := lookupNixl(h)
	if !ok {
		return nixlErrInvalidParam
	}
	if err := a.Release(nixl.Xfer(xh)); err != nil {
		return C.int(a.fail(err))
	}
	return nixlSuccess
}

//export kvf_nixl_gen_notif
func kvf_nixl_gen_notif(h C.kvferry_nixl_t, agent *C.char, alen C.size_t, msg *C.char, mlen C.size_t) (rc C.int) {
	defer recoverNixl(&rc)
	a, ok := lookupNixl(h)
	name, ok1 := bytesArg(agent, alen)
	m, ok2 := bytesArg(msg, mlen)
	if !ok || !ok1 || !ok2 {
		return nixlErrInvalidParam
	}
	return C.int(a.fail(a.Notify(name, m)))
}

//export kvf_nixl_get_notifs
func kvf_nixl_get_notifs(h C.kvferry_nixl_t, out **C.kvferry_nixl_notif_t, count *C.size_t) (rc C.int) {
	defer recoverNixl(&rc)
	if out == nil || count == nil {
		return nixlErrInvalidParam
	}
	*out, *count = nil, 0
	a, ok := lookupNixl(h)
	if !ok {
		return nixlErrInvalidParam
	}
	ns := a.Notifications()
	if len(ns) == 0 {
		return nixlSuccess
	}
	// One allocation: the array, then every name and message.
	head := C.size_t(len(ns)) * C.size_t(unsafe.Sizeof(C.kvferry_nixl_notif_t{}))
	total := head
	for _, n := range ns {
		total += C.size_t(len(n.Name) + len(n.Msg))
	}
	block := C.malloc(total)
	if block == nil {
		nixlLogger.Error("nixl notifications lost: out of memory", "agent", a.Name(), "count", len(ns))
		return nixlErrBackend
	}
	arr := unsafe.Slice((*C.kvferry_nixl_notif_t)(block), len(ns))
	data := unsafe.Slice((*byte)(block), int(total))
	off := int(head)
	for i, n := range ns {
		arr[i].agent = (*C.char)(unsafe.Add(block, off))
		arr[i].agent_len = C.size_t(len(n.Name))
		off += copy(data[off:], n.Name)
		arr[i].msg = (*C.char)(unsafe.Add(block, off))
		arr[i].msg_len = C.size_t(len(n.Msg))
		off += copy(data[off:], n.Msg)
	}
	*out = (*C.kvferry_nixl_notif_t)(block)
	*count = C.size_t(len(ns))
	return nixlSuccess
}

//export kvf_nixl_last_error
func kvf_nixl_last_error(h C.kvferry_nixl_t, buf *C.char, n C.size_t) (rc C.int) {
	defer recoverNixl(&rc)
	a, ok := lookupNixl(h)
	if !ok {
		return nixlErrInvalidParam
	}
	return C.int(putString(buf, n, a.Engine().LastError()))
}
