package client

import (
	"context"
	"fmt"

	"github.com/kvferry/kvferry/store/wire"
)

// BatchReplicaClear asks the master to clear the replicas of keys that
// this client wrote and that no reader holds a lease on (Mooncake's
// batch_replica_clear): whole objects with segment "", otherwise only the
// replicas on the segment of that name (a holder's Hostname), an object
// left with none being removed. Keys that do not qualify are skipped; it
// returns those cleared.
func (c *Client) BatchReplicaClear(ctx context.Context, keys []string, segment string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	mc, err := c.master()
	if err != nil {
		return nil, fmt.Errorf("replica clear: %w", err)
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	resp, err := mc.mc.BatchReplicaClear(rctx, &wire.BatchReplicaClearRequest{TenantId: c.tenant, ClientId: c.clientID,
		Keys: keys, SegmentName: segment})
	if err != nil {
		return nil, fmt.Errorf("replica clear: %w", c.rpcErr(err))
	}
	return resp.GetClearedKeys(), nil
}
