package abi

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/tcp"
)

// applyOption applies one kvferry_engine_create option (kvferry.h).
func applyOption(c *stack.Config, k, v string) error {
	bad := func(err error) error {
		return fmt.Errorf("option %s=%q: %w: %v", k, v, engine.ErrInvalidArgument, err)
	}
	num := func() (int64, error) { return strconv.ParseInt(strings.TrimSpace(v), 10, 64) }
	switch k {
	case "transport":
		v = strings.ToLower(strings.TrimSpace(v))
		if v == "auto" || v == "" {
			c.Engine.ForceTransport = ""
		} else {
			c.Engine.ForceTransport = v
		}
	case "protocol":
		// Mooncake's initialize(protocol): installed when it can run here,
		// else the engine goes on with what it has and logs why, once.
		c.Protocol = strings.TrimSpace(v)
	case "tcp_lanes":
		n, err := num()
		if err != nil || n < 1 || n > tcp.MaxLanes {
			return bad(fmt.Errorf("want 1-%d", tcp.MaxLanes))
		}
		c.TCP.Lanes = int(n)
	case "slice_size":
		n, err := num()
		if err != nil || n < 4096 {
			return bad(fmt.Errorf("want >= 4096"))
		}
		c.TCP.StripeSize = uint64(n)
	case "rdma_devices":
		// Mooncake's device_name whitelist: comma-separated NIC names.
		c.RDMA.Devices = nil
		for _, d := range strings.Split(v, ",") {
			if d = strings.TrimSpace(d); d != "" {
				c.RDMA.Devices = append(c.RDMA.Devices, d)
			}
		}
	case "timeout_ms":
		n, err := num()
		if err != nil || n <= 0 {
			return bad(fmt.Errorf("want > 0"))
		}
		c.Engine.TransferTimeout = time.Duration(n) * time.Millisecond
	default:
		return fmt.Errorf("option %q: unknown: %w", k, engine.ErrInvalidArgument)
	}
	return nil
}
