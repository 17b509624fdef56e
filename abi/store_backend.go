package abi

import (
	"context"
	"time"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/standalone"
)

// storeBackend is what a store handle runs its calls on: a store client
// (setup), or a dummy client forwarding every call to a real client
// process (setup_dummy, store/standalone).
type storeBackend interface {
	PutFrom(ctx context.Context, key string, addr uintptr, size uint64, cfg client.ReplicateConfig) error
	UpsertFrom(ctx context.Context, key string, addr uintptr, size uint64, cfg client.ReplicateConfig) error
	BatchPutFrom(ctx context.Context, keys []string, addrs []uintptr, sizes []uint64, cfg client.ReplicateConfig) []error
	BatchUpsertFrom(ctx context.Context, keys []string, addrs []uintptr, sizes []uint64, cfg client.ReplicateConfig) []error
	BatchPutFromMulti(ctx context.Context, keys []string, bufs [][]client.Buffer, cfg client.ReplicateConfig) []error
	BatchUpsertFromMulti(ctx context.Context, keys []string, bufs [][]client.Buffer, cfg client.ReplicateConfig) []error
	PublishFrom(ctx context.Context, key string, addr uintptr, size uint64, expected uint64, cfg client.ReplicateConfig) (uint64, error)
	GetInto(ctx context.Context, key string, addr uintptr, size uint64) (uint64, error)
	BatchGetInto(ctx context.Context, keys []string, addrs []uintptr, sizes []uint64) ([]uint64, []error)
	BatchGetIntoMulti(ctx context.Context, keys []string, bufs [][]client.Buffer) ([]uint64, []error)
	GetVersioned(ctx context.Context, key string, minVersion uint64, wait time.Duration) ([]byte, uint64, error)
	IsExist(ctx context.Context, key string) (bool, error)
	BatchIsExist(ctx context.Context, keys []string) ([]bool, error)
	GetSize(ctx context.Context, key string) (uint64, error)
	Remove(ctx context.Context, key string, force bool) error
	BatchRemove(ctx context.Context, keys []string, force bool) ([]error, error)
	RemoveByRegex(ctx context.Context, pattern string, force bool) (int64, error)
	RemoveAll(ctx context.Context, force bool) (int64, error)
	ReplicaDescs(ctx context.Context, keys []string) ([]client.KeyReplicas, error)
	CreateCopyTask(ctx context.Context, key string, targets []string) (string, error)
	CreateMoveTask(ctx context.Context, key, source, target string) (string, error)
	QueryTask(ctx context.Context, id string) (client.TaskInfo, error)
	RegisterBuffer(addr uintptr, size uint64) error
	UnregisterBuffer(addr uintptr) error
	HealthCheck(ctx context.Context) error
	Hostname() string
	MasterAddr() string
	Close() error
}

var (
	_ storeBackend = (*client.Client)(nil)
	_ storeBackend = (*standalone.Dummy)(nil)
)

// setUp reports whether the handle was set up (as a client or a dummy).
func (h *storeHandle) setUp() bool { return h.c.Load() != nil || h.dummy.Load() != nil }
