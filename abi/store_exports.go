package abi

/*
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include "store_c.h"
#include "kvferry.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/hostenv"
	"github.com/kvferry/kvferry/store/asyncq"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/embedded"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/standalone"
	"github.com/kvferry/kvferry/store/wire"
)

// The Go side of store_c.h (Mooncake Store C API, specs/mooncake.md §6.1)
// and of the store calls of kvferry.h. Every function here is called only
// from store_c.c, after the fork guard and the NULL checks Mooncake makes.
// Each recovers panics into -1, looks up the handle, converts C values and
// returns the store ErrorCode (wire.CodeOf is the one Go -> C table).

// Store-side return values that are not ErrorCodes.
const (
	storeErr = -1 // NULL handle or pointer, caught panic (Mooncake's -1)
	// Health check answers (Mooncake's HC_* values).
	hcHealthy           = 0
	hcNotInitialized    = 1
	hcMasterUnreachable = 2
	// maxBatch caps the count of a batch call, so a garbage count fails
	// instead of allocating without bound.
	maxBatch = 1 << 22
	// maxReplicas caps replica_num (the master places at most one replica
	// per segment anyway).
	maxReplicas = 1 << 16
)

// storeHandle is one mooncake_store_t: created empty, set up once.
type storeHandle struct {
	mu      sync.Mutex // guards c and dummy during setup and destroy, and tenant
	c       atomic.Pointer[client.Client]
	dummy   atomic.Pointer[standalone.Dummy] // setup_dummy: calls go to a real client
	lastErr atomic.Pointer[string]
	tenant  string        // kvferry_store_set_tenant, for the setup to come
	tier    storeTierOpts // kvferry_store_set_ssd_offload and _set_drain, for the setup to come
}

// stores is the table of live store handles.
var stores handles[*storeHandle]

func lookupStore(h C.uintptr_t) (*storeHandle, bool) {
	return stores.get(uintptr(h))
}

// ready returns the set-up client of h, or INVALID_PARAMS (Mooncake's
// answer for a client that is not initialized).
func (h *storeHandle) ready() (storeBackend, error) {
	if d := h.dummy.Load(); d != nil {
		return d, nil
	}
	if c := h.c.Load(); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("store is not set up: %w", wire.ErrInvalidParams)
}

// fail records err as the handle's last error and returns its store code.
func (h *storeHandle) fail(err error) int {
	if err == nil {
		return 0
	}
	s := err.Error()
	h.lastErr.Store(&s)
	logger.Debug("store c api call failed", "err", err)
	return int(wire.CodeOf(err))
}

func recoverStoreInt(rc *C.int) {
	if r := recover(); r != nil {
		_ = panicked(r)
		*rc = storeErr
	}
}

func recoverStoreInt64(rc *C.int64_t) {
	if r := recover(); r != nil {
		_ = panicked(r)
		*rc = storeErr
	}
}

// replicateConfig converts a C config; NULL gives the defaults. A config
// asking for 0 replicas is INVALID_PARAMS, as the master says in Mooncake.
func replicateConfig(p *C.mooncake_replicate_config_t) (client.ReplicateConfig, error) {
	var rc client.ReplicateConfig
	if p == nil {
		return rc, nil
	}
	if p.replica_num == 0 || p.replica_num > maxReplicas {
		return rc, fmt.Errorf("replicate config: replica_num %d: %w", uint64(p.replica_num), wire.ErrInvalidParams)
	}
	rc.ReplicaNum = int(p.replica_num)
	rc.SoftPin = p.with_soft_pin != 0
	rc.HardPin = p.with_hard_pin != 0
	if p.preferred_segments != nil && p.preferred_segments_count > 0 {
		if p.preferred_segments_count > maxBatch {
			return rc, fmt.Errorf("replicate config: %d preferred segments: %w", uint64(p.preferred_segments_count), wire.ErrInvalidParams)
		}
		for _, s := range unsafe.Slice(p.preferred_segments, int(p.preferred_segments_count)) {
			if s != nil {
				rc.PreferredSegments = append(rc.PreferredSegments, C.GoString(s))
			}
		}
	}
	return rc, nil
}

// goKeys copies count C strings.
func goKeys(keys **C.char, count C.size_t) []string {
	if count == 0 {
		return nil
	}
	cs := unsafe.Slice(keys, int(count))
	out := make([]string, len(cs))
	for i, k := range cs {
		out[i] = C.GoString(k)
	}
	return out
}

//export kvf_store_create
func kvf_store_create() (h C.uintptr_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
			h = 0
		}
	}()
	if err := setup(); err != nil {
		return 0
	}
	return C.uintptr_t(stores.add(&storeHandle{}))
}

//export kvf_store_destroy
func kvf_store_destroy(h C.uintptr_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
		}
	}()
	s, ok := stores.remove(uintptr(h))
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.c.Swap(nil); c != nil {
		_ = c.Close()
	}
	if d := s.dummy.Swap(nil); d != nil {
		_ = d.Close()
	}
}

// maxStallMs caps KVFERRY_STORE_MASTER_STALL_MS (ten minutes).
const maxStallMs = 10 * 60 * 1000

// storeEnv reads the store's MC_* environment (through hostenv, the one
// reader of the environment).
func storeEnv(cfg *client.Config) {
	if v, ok := hostenv.Getenv("MC_STORE_CLUSTER_ID"); ok && v != "" {
		cfg.ClusterID = v
	}
	if v, ok := hostenv.Getenv("KVFERRY_STORE_LAZY_SEGMENT"); ok && v != "" && v != "0" {
		cfg.LazySegment = true
	}
	if v, ok := hostenv.Getenv("KVFERRY_STORE_HUGEPAGES"); ok && strings.TrimSpace(v) == "0" {
		cfg.NoHugePages = true
	}
	if v, ok := hostenv.Getenv("KVFERRY_STORE_SPECULATIVE_GETS"); ok && strings.TrimSpace(v) == "0" {
		cfg.NoSpeculativeGets = true
	}
	if v, ok := hostenv.Getenv("KVFERRY_STORE_SPECULATIVE_GET_MAX"); ok {
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil && n > 0 {
			cfg.SpeculativeGetMax = n
		}
	}
	if v, ok := hostenv.Getenv("MC_STORE_LOCAL_HOT_CACHE_SIZE"); ok {
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			cfg.HotCacheBytes = n
		}
	}
	if v, ok := hostenv.Getenv("MC_STORE_LOCAL_HOT_ADMISSION_THRESHOLD"); ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
			cfg.HotCacheAdmission = n
		}
	}
	if v, ok := hostenv.Getenv("KVFERRY_STORE_DRAIN_ON_CLOSE_MS"); ok {
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			cfg.DrainOnClose = time.Duration(min(n, maxDrainMs)) * time.Millisecond
		}
	}
	if v, ok := hostenv.Getenv("KVFERRY_STORE_MASTER_STALL_MS"); ok {
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n > 0 {
			cfg.MasterStallTimeout = time.Duration(min(n, maxStallMs)) * time.Millisecond
		}
	}
	// KVFERRY_MASTER_PROTOCOL: auto (default), kvferry (mux, then gRPC),
	// mooncake (mooncake_master's coro_rpc), mux or grpc. An unknown value
	// is left to Config.Validate, which names it.
	if v, ok := hostenv.Getenv("KVFERRY_MASTER_PROTOCOL"); ok && strings.TrimSpace(v) != "" {
		cfg.MasterRPC = strings.ToLower(strings.TrimSpace(v))
	}
	if v, ok := hostenv.Getenv("MC_RPC_TIMEOUT_MS"); ok {
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n > 0 {
			cfg.RPCTimeout = time.Duration(n) * time.Millisecond
		}
	}
}

// storeHostname applies Mooncake's rule for a local hostname without a
// port outside P2P mode: a port from [12300, 14300] is appended, so two
// clients on one host get different segment names.
func storeHostname(host, metadata string) string {
	if metadata == "" || metadata == "P2PHANDSHAKE" {
		return host
	}
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	port := 12300 + int(time.Now().UnixNano()%2000)
	return net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(port))
}

//export kvf_store_set_tenant
func kvf_store_set_tenant(h C.uintptr_t, tenant *C.char) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	raw, _ := cstr(tenant)
	id, err := wire.TenantID(raw)
	if err != nil {
		return C.int(s.fail(fmt.Errorf("store set tenant: %w", err)))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.setUp() {
		return C.int(s.fail(fmt.Errorf("store set tenant %q: already set up: %w", id, wire.ErrInvalidParams)))
	}
	s.tenant = id
	return 0
}

//export kvf_store_setup
func kvf_store_setup(h C.uintptr_t, localHostname, metadataServer *C.char, globalSegmentSize, localBufferSize C.uint64_t,
	protocol, deviceName, masterAddr *C.char) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	host, _ := cstr(localHostname)
	meta, _ := cstr(metadataServer)
	proto, ok := cstr(protocol)
	if !ok || proto == "" {
		proto = "tcp"
	}
	dev, _ := cstr(deviceName)
	addr, ok := cstr(masterAddr)
	if !ok {
		addr = client.DefaultMasterAddr
	}
	if host == "" {
		host = "127.0.0.1"
	}
	cfg := client.Config{
		LocalHostname:     storeHostname(host, meta),
		MetadataServer:    meta,
		GlobalSegmentSize: uint64(globalSegmentSize),
		LocalBufferSize:   uint64(localBufferSize),
		NoLocalBuffer:     localBufferSize == 0,
		Protocol:          proto,
		DeviceName:        dev,
		MasterServerAddr:  addr,
		Stack:             stack.ConfigFromEnv(hostenv.Lookup),
		Logger:            logger,
	}
	storeEnv(&cfg)
	if addr == "" || addr == client.EmbeddedMaster {
		cfg.StartEmbeddedMaster = embedded.StartMaster(embedded.WithClientAuth(master.Config{Logger: logger}, cfg))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.setUp() {
		return C.int(s.fail(fmt.Errorf("store setup: already set up: %w", wire.ErrInvalidParams)))
	}
	cfg.TenantID = s.tenant
	s.tier.apply(&cfg)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.RPCTimeout+time.Minute)
	defer cancel()
	c, err := client.New(ctx, cfg)
	if err != nil {
		// A master failure has its store code (-900 RPC_FAIL, ...); a
		// failure of the engine or the memory has none and is -1.
		return C.int(s.fail(fmt.Errorf("store setup: %w", err)))
	}
	s.c.Store(c)
	return 0
}

//export kvf_store_health
func kvf_store_health(h C.uintptr_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return hcNotInitialized
	}
	switch err := c.HealthCheck(context.Background()); {
	case err == nil:
		return hcHealthy
	case errors.Is(err, client.ErrClosed):
		return hcNotInitialized
	default:
		s.fail(err)
		return hcMasterUnreachable
	}
}

//export kvf_store_put
func kvf_store_put(h C.uintptr_t, key *C.char, value unsafe.Pointer, size C.size_t,
	cfg *C.mooncake_replicate_config_t, upsert C.int) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return C.int(s.fail(err))
	}
	rcfg, err := replicateConfig(cfg)
	if err != nil {
		return C.int(s.fail(err))
	}
	k := C.GoString(key)
	if upsert != 0 {
		err = c.UpsertFrom(context.Background(), k, uintptr(value), uint64(size), rcfg)
	} else {
		err = c.PutFrom(context.Background(), k, uintptr(value), uint64(size), rcfg)
	}
	return C.int(s.fail(err))
}

//export kvf_store_batch_put
func kvf_store_batch_put(h C.uintptr_t, keys **C.char, buffers *unsafe.Pointer, sizes *C.size_t, count C.size_t,
	cfg *C.mooncake_replicate_config_t, results *C.int, upsert C.int) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok || count > maxBatch {
		return storeErr
	}
	if count == 0 {
		return 0
	}
	out := unsafe.Slice(results, int(count))
	c, err := s.ready()
	if err == nil {
		var rcfg client.ReplicateConfig
		if rcfg, err = replicateConfig(cfg); err == nil {
			ks := goKeys(keys, count)
			addrs := make([]uintptr, count)
			for i, p := range unsafe.Slice(buffers, int(count)) {
				addrs[i] = uintptr(p)
			}
			szs := make([]uint64, count)
			for i, n := range unsafe.Slice(sizes, int(count)) {
				szs[i] = uint64(n)
			}
			var errs []error
			if upsert != 0 {
				errs = c.BatchUpsertFrom(context.Background(), ks, addrs, szs, rcfg)
			} else {
				errs = c.BatchPutFrom(context.Background(), ks, addrs, szs, rcfg)
			}
			for i := range out {
				out[i] = C.int(s.fail(errs[i]))
			}
			return 0
		}
	}
	code := C.int(s.fail(err))
	for i := range out {
		out[i] = code
	}
	return 0
}

//export kvf_store_get_into
func kvf_store_get_into(h C.uintptr_t, key *C.char, buf unsafe.Pointer, size C.size_t) (rc C.int64_t) {
	defer recoverStoreInt64(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return C.int64_t(s.fail(err))
	}
	n, err := c.GetInto(context.Background(), C.GoString(key), uintptr(buf), uint64(size))
	if err != nil {
		return C.int64_t(s.fail(err))
	}
	return C.int64_t(n)
}

//export kvf_store_batch_get_into
func kvf_store_batch_get_into(h C.uintptr_t, keys **C.char, buffers *unsafe.Pointer, sizes *C.size_t, count C.size_t,
	results *C.int64_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok || count > maxBatch {
		return storeErr
	}
	if count == 0 {
		return 0
	}
	out := unsafe.Slice(results, int(count))
	c, err := s.ready()
	if err != nil {
		code := C.int64_t(s.fail(err))
		for i := range out {
			out[i] = code
		}
		return 0
	}
	ks := goKeys(keys, count)
	addrs := make([]uintptr, count)
	for i, p := range unsafe.Slice(buffers, int(count)) {
		addrs[i] = uintptr(p)
	}
	szs := make([]uint64, count)
	for i, n := range unsafe.Slice(sizes, int(count)) {
		szs[i] = uint64(n)
	}
	n, errs := c.BatchGetInto(context.Background(), ks, addrs, szs)
	for i := range out {
		if errs[i] != nil {
			out[i] = C.int64_t(s.fail(errs[i]))
		} else {
			out[i] = C.int64_t(n[i])
		}
	}
	return 0
}

//export kvf_store_is_exist
func kvf_store_is_exist(h C.uintptr_t, key *C.char) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return C.int(s.fail(err))
	}
	yes, err := c.IsExist(context.Background(), C.GoString(key))
	if err != nil {
		return C.int(s.fail(err))
	}
	if yes {
		return 1
	}
	return 0
}

//export kvf_store_batch_is_exist
func kvf_store_batch_is_exist(h C.uintptr_t, keys **C.char, count C.size_t, results *C.int) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok || count > maxBatch {
		return storeErr
	}
	if count == 0 {
		return 0
	}
	out := unsafe.Slice(results, int(count))
	c, err := s.ready()
	var yes []bool
	if err == nil {
		yes, err = c.BatchIsExist(context.Background(), goKeys(keys, count))
	}
	if err != nil {
		code := C.int(s.fail(err))
		for i := range out {
			out[i] = code
		}
		return 0
	}
	for i := range out {
		out[i] = 0
		if yes[i] {
			out[i] = 1
		}
	}
	return 0
}

//export kvf_store_get_size
func kvf_store_get_size(h C.uintptr_t, key *C.char) (rc C.int64_t) {
	defer recoverStoreInt64(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return C.int64_t(s.fail(err))
	}
	n, err := c.GetSize(context.Background(), C.GoString(key))
	if err != nil {
		return C.int64_t(s.fail(err))
	}
	return C.int64_t(n)
}

//export kvf_store_hostname
func kvf_store_hostname(h C.uintptr_t, buf *C.char, n C.size_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	name := ""
	if c, err := s.ready(); err == nil {
		name = c.Hostname()
	}
	if uint64(len(name)) >= uint64(n) {
		return storeErr
	}
	putString(buf, n, name)
	return 0
}

//export kvf_store_remove
func kvf_store_remove(h C.uintptr_t, key *C.char, force C.int) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return C.int(s.fail(err))
	}
	return C.int(s.fail(c.Remove(context.Background(), C.GoString(key), force != 0)))
}

//export kvf_store_batch_remove
func kvf_store_batch_remove(h C.uintptr_t, keys **C.char, count C.size_t, force C.int, results *C.int) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok || count > maxBatch {
		return storeErr
	}
	if count == 0 {
		return 0
	}
	out := unsafe.Slice(results, int(count))
	c, err := s.ready()
	var errs []error
	if err == nil {
		errs, err = c.BatchRemove(context.Background(), goKeys(keys, count), force != 0)
	}
	if err != nil {
		code := C.int(s.fail(err))
		for i := range out {
			out[i] = code
		}
		return 0
	}
	for i := range out {
		out[i] = C.int(s.fail(errs[i]))
	}
	return 0
}

//export kvf_store_remove_regex
func kvf_store_remove_regex(h C.uintptr_t, pattern *C.char, force C.int) (rc C.int64_t) {
	defer recoverStoreInt64(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return C.int64_t(s.fail(err))
	}
	n, err := c.RemoveByRegex(context.Background(), C.GoString(pattern), force != 0)
	if err != nil {
		return C.int64_t(s.fail(err))
	}
	return C.int64_t(n)
}

//export kvf_store_remove_all
func kvf_store_remove_all(h C.uintptr_t, force C.int) (rc C.int64_t) {
	defer recoverStoreInt64(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return C.int64_t(s.fail(err))
	}
	n, err := c.RemoveAll(context.Background(), force != 0)
	if err != nil {
		return C.int64_t(s.fail(err))
	}
	return C.int64_t(n)
}

//export kvf_store_register
func kvf_store_register(h C.uintptr_t, buf unsafe.Pointer, size C.size_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return C.int(s.fail(err))
	}
	if err := c.RegisterBuffer(uintptr(buf), uint64(size)); err != nil {
		s.fail(err)
		return storeErr
	}
	return 0
}

//export kvf_store_unregister
func kvf_store_unregister(h C.uintptr_t, buf unsafe.Pointer) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return C.int(s.fail(err))
	}
	if err := c.UnregisterBuffer(uintptr(buf)); err != nil {
		s.fail(err)
		return storeErr
	}
	return 0
}

//export kvf_store_get_alloc
func kvf_store_get_alloc(h C.uintptr_t, key *C.char, out *unsafe.Pointer) (rc C.int64_t) {
	defer recoverStoreInt64(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return C.int64_t(s.fail(err))
	}
	n, p, err := asyncq.GetAlloc(context.Background(), c, C.GoString(key))
	if err != nil {
		return C.int64_t(s.fail(err))
	}
	*out = cmem.Pointer(p)
	return C.int64_t(n)
}

//export kvf_store_last_error
func kvf_store_last_error(h C.uintptr_t, buf *C.char, n C.size_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	msg := ""
	if p := s.lastErr.Load(); p != nil {
		msg = *p
	}
	return C.int(putString(buf, n, msg))
}
