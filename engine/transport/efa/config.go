package efa

import (
	"strings"

	"github.com/kvferry/kvferry/internal/hostenv"
)

// Tunables.
const (
	// DefaultProvider is the libfabric provider used when Config.Provider
	// is empty: AWS's Elastic Fabric Adapter.
	DefaultProvider = "efa"
	// DefaultSliceSize is the largest slice the engine hands the
	// transport: each slice is one fi_write or fi_read (Mooncake's EFA
	// transport sends blocks up to 2 MiB as one operation and recommends
	// 1 MiB blocks).
	DefaultSliceSize = 1 << 20
	// DefaultSlots caps the operations in flight on one device (fewer when
	// the provider's transmit queue is shorter).
	DefaultSlots = 1024
	// DefaultAVCount is the address vector size of each device (peers
	// cost one entry each, per local device).
	DefaultAVCount = 4096
)

// Config configures the efa transport.
type Config struct {
	// Library is the libfabric to open; empty means libfabric.so.1
	// (KVFERRY_LIBFABRIC_LIB).
	Library string
	// Provider is the libfabric provider; empty means "efa". Another
	// provider with FI_EP_RDM and FI_RMA runs the same transport, e.g.
	// "tcp;ofi_rxm" or "verbs;ofi_rxm" (KVFERRY_LIBFABRIC_PROVIDER).
	Provider string
	// Domains lists the provider domains to open, one device each, in
	// descriptor order; a domain named twice is opened twice (two
	// endpoints to stripe over). Empty means every domain of the "efa"
	// provider, and for another provider the domain whose fabric holds
	// the engine's address (KVFERRY_LIBFABRIC_DOMAINS, comma separated).
	Domains []string
	// SliceSize is the largest slice; 0 means DefaultSliceSize
	// (KVFERRY_EFA_SLICE_SIZE).
	SliceSize uint64
	// Slots caps the operations in flight per device; 0 means
	// DefaultSlots, never more than the provider's transmit queue.
	Slots int
	// MooncakeOnly publishes only what Mooncake's EFA transport publishes
	// (no kvferry record): peers then learn the endpoint addresses in the
	// Connection handshake, as from a Mooncake node
	// (KVFERRY_EFA_MOONCAKE_ONLY=1).
	MooncakeOnly bool
}

func (c Config) withDefaults() Config {
	if c.Provider == "" {
		c.Provider = DefaultProvider
	}
	if c.SliceSize == 0 {
		c.SliceSize = DefaultSliceSize
	}
	if c.Slots <= 0 {
		c.Slots = DefaultSlots
	}
	return c
}

// ConfigFromEnv reads the transport's configuration from env
// (hostenv.Lookup in the library, the C getenv):
//
//	KVFERRY_LIBFABRIC_LIB        libfabric to open (default libfabric.so.1)
//	KVFERRY_LIBFABRIC_PROVIDER   provider (default efa), e.g. "tcp;ofi_rxm"
//	KVFERRY_LIBFABRIC_DOMAINS    comma list of the domains to open
//	KVFERRY_EFA_SLICE_SIZE       slice size in bytes (1 MiB; 4 KiB - 1 GiB)
//	KVFERRY_EFA_SLOTS            operations in flight per device (1024)
//	KVFERRY_EFA_MOONCAKE_ONLY    1: publish only Mooncake's EFA fields
func ConfigFromEnv(env hostenv.Env) Config {
	var c Config
	if v, ok := env.Str("KVFERRY_LIBFABRIC_LIB"); ok {
		c.Library = strings.TrimSpace(v)
	}
	if v, ok := env.Str("KVFERRY_LIBFABRIC_PROVIDER"); ok {
		c.Provider = strings.TrimSpace(v)
	}
	if v, ok := env.Str("KVFERRY_LIBFABRIC_DOMAINS"); ok {
		for _, d := range strings.Split(v, ",") {
			if d = strings.TrimSpace(d); d != "" {
				c.Domains = append(c.Domains, d)
			}
		}
	}
	if n, ok := env.Int("KVFERRY_EFA_SLICE_SIZE"); ok && n >= 4096 && n <= 1<<30 {
		c.SliceSize = uint64(n)
	}
	if n, ok := env.Int("KVFERRY_EFA_SLOTS"); ok && n > 0 && n <= 1<<16 {
		c.Slots = int(n)
	}
	if n, ok := env.Int("KVFERRY_EFA_MOONCAKE_ONLY"); ok {
		c.MooncakeOnly = n != 0
	}
	return c
}
