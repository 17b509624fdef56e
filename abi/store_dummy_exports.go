package abi

/*
#include <stdint.h>
#include <stddef.h>
*/
import "C"

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/standalone"
	"github.com/kvferry/kvferry/store/wire"
)

// The Go side of kvferry.h's standalone storage mode: setup_dummy and the
// shared host memory allocator (store/standalone), called from
// store_py_c.c after the fork guard and the NULL checks.

//export kvf_store_setup_dummy
func kvf_store_setup_dummy(h C.uintptr_t, memPoolSize, localBufferSize C.uint64_t, serverAddress *C.char) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	addr, _ := cstr(serverAddress)
	var cfg client.Config
	storeEnv(&cfg) // MC_RPC_TIMEOUT_MS
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.setUp() {
		return C.int(s.fail(fmt.Errorf("store setup_dummy: already set up: %w", wire.ErrInvalidParams)))
	}
	timeout := cfg.RPCTimeout
	if timeout <= 0 {
		timeout = client.DefaultRPCTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Second)
	defer cancel()
	// A call's bound covers the real client's master calls and transfers
	// (a real client that dies fails the calls at once: its socket closes).
	d, err := standalone.Dial(ctx, standalone.DummyConfig{ServerAddress: addr, LocalBufferSize: uint64(localBufferSize),
		Timeout: timeout + time.Minute, Logger: logger})
	if err != nil {
		return C.int(s.fail(fmt.Errorf("store setup_dummy (mem pool %d bytes): %w", uint64(memPoolSize), err)))
	}
	s.dummy.Store(d)
	logger.Info("store dummy client set up", "real_client", addr, "segment", d.Hostname())
	return 0
}

//export kvf_host_mem_alloc
func kvf_host_mem_alloc(size C.size_t) (p unsafe.Pointer) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
			p = nil
		}
	}()
	if err := setup(); err != nil {
		return nil
	}
	addr, err := standalone.ProcessHostMem().Alloc(uint64(size))
	if err != nil {
		logger.Warn("host memory allocation failed", "bytes", uint64(size), "err", err)
		return nil
	}
	return cmem.Pointer(addr) // a shared mapping, never Go memory
}

//export kvf_host_mem_free
func kvf_host_mem_free(p unsafe.Pointer) (rc C.int) {
	defer recoverStoreInt(&rc)
	if err := standalone.ProcessHostMem().Free(uintptr(p)); err != nil {
		logger.Debug("host memory free failed", "err", err)
		return storeErr
	}
	return 0
}
