package efa

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/rpc"
	"github.com/kvferry/kvferry/engine/transport/rdma/handshake"
)

// Mooncake's EFA transport (efa_transport.cpp, efa_context.cpp,
// efa_endpoint.cpp, transfer_metadata.cpp) and how this file matches it:
//
//   - descriptor: protocol "efa"; devices[] {name = the verbs device name
//     (the libfabric domain without its "-rdm" suffix), lid 0, gid = hex of
//     fi_info's src_addr}; buffers[] {name, addr, length, rkey[], lkey[]}
//     with one fi_mr_key per device (64-bit in EFA builds, 0 where a buffer
//     is not registered on a device); priority_matrix naming the devices,
//     which Mooncake's selectDevice needs to pick one.
//   - handshake: a Connection request per (local device, peer device)
//     with local_nic_path "<server>@<device>", peer_nic_path the same of
//     the peer device, efa_addr the lower-case hex of fi_getname; the reply
//     carries the peer device's efa_addr, and a non-empty reply_msg is a
//     refusal. Both sides insert the other's address into the device's AV.
//   - remote addresses are virtual addresses (the efa provider's
//     FI_MR_VIRT_ADDR); kvferry peers on a provider without it use offsets,
//     and both sides then use the same provider.

// describeMooncake fills the descriptor fields Mooncake's EFA transport
// publishes: protocol "efa", the devices (lid 0, gid the hex of the
// provider's source address), per buffer one rkey and lkey per device and
// a priority matrix naming the devices in order for every buffer location.
// It leaves the descriptor alone when an RDMA transport published its NICs
// there or a buffer is not registered with the devices.
func describeMooncake(seg *descriptor.Segment, devs []*device, pub *Published) bool {
	if seg.Protocol == descriptor.ProtocolRDMA || len(seg.Devices) > 0 {
		return false
	}
	keys := make([][]uint64, len(seg.Buffers))
	for i, b := range seg.Buffers {
		r, ok := pub.Region(b.Addr, b.Length)
		if !ok {
			return false
		}
		keys[i] = slices.Clone(r.Keys)
	}
	seg.Protocol = Name
	seg.Devices = make([]descriptor.Device, len(devs))
	names := make([]string, len(devs))
	for i, d := range devs {
		gid := d.info.SrcAddr
		if len(gid) == 0 { // Mooncake's decoder refuses a device without gid
			gid = d.addr
		}
		seg.Devices[i] = descriptor.Device{Name: d.name, LID: 0, GID: hex.EncodeToString(gid)}
		names[i] = d.name
	}
	// Mooncake's Topology numbers devices in the order the matrix first
	// names them (its keys sorted): every entry lists all devices in
	// descriptor order, so its numbers are the descriptor's.
	matrix := map[string][2][]string{"cpu:0": {names, {}}}
	for i := range seg.Buffers {
		seg.Buffers[i].RKey = keys[i]
		seg.Buffers[i].LKey = slices.Clone(keys[i])
		matrix[seg.Buffers[i].Name] = [2][]string{names, {}}
	}
	if b, err := json.Marshal(matrix); err == nil {
		seg.PriorityMatrix = b
	}
	return true
}

// mooncakePublished builds the record of a peer that publishes only
// Mooncake's fields: its devices (addresses still unknown: the handshake
// learns them) and its buffers with their rkeys. Remote addresses are
// taken as this engine's own provider takes them.
func (t *Transport) mooncakePublished(d *descriptor.Segment) (*Published, error) {
	if d.Protocol != Name || len(d.Devices) == 0 {
		return nil, fmt.Errorf("efa: %q publishes no efa devices: %w", d.Name, engine.ErrNotSupportedTransport)
	}
	p := &Published{Provider: t.provider, VirtAddr: t.virtAddr}
	for _, dev := range d.Devices {
		p.Devices = append(p.Devices, PublishedDevice{Name: dev.Name})
	}
	for _, b := range d.Buffers {
		if len(b.RKey) == 0 { // registered without remote access
			continue
		}
		p.Regions = append(p.Regions, PublishedRegion{Addr: b.Addr, Length: b.Length, Keys: slices.Clone(b.RKey)})
	}
	if err := p.checkRegions(); err != nil {
		return nil, fmt.Errorf("efa: %q: %w", d.Name, err)
	}
	return p, nil
}

// nicServer is the server part of a segment's NIC paths (Mooncake's
// nicPathServerName).
func nicServer(d *descriptor.Segment) string {
	if d.RDMAServerName != "" {
		return d.RDMAServerName
	}
	return d.Name
}

// connectMooncake learns the endpoint address of every device of a peer
// that publishes only Mooncake's fields, by the Connection handshake of
// every (local device, peer device) pair as Mooncake's warmupSegment does
// (its passive side puts our address in its AV). It fills pi.addrs, or
// pi.err, and closes pi.ready; it is bounded by the handshake deadline.
func (t *Transport) connectMooncake(p *engine.Peer, d *descriptor.Segment, pi *peerInfo) {
	defer close(pi.ready)
	if p == nil || p.Endpoint.IPOrHostName == "" {
		pi.err = fmt.Errorf("efa: %q: no RPC address to handshake with: %w", d.Name, engine.ErrPeerGone)
		return
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.handshakeTimeout())
	defer cancel()
	cc := t.e.RPCClientConfig()
	cc.Timeout = t.handshakeTimeout()
	server := nicServer(d)
	addrs := make([][]byte, len(pi.pub.Devices))
	for j, pd := range pi.pub.Devices {
		for _, ld := range t.devs {
			req := &handshake.Desc{LocalNICPath: handshake.NICPath(t.e.SegmentName(), ld.name),
				PeerNICPath: handshake.NICPath(server, pd.Name), EFAAddr: hex.EncodeToString(ld.addr)}
			raw, err := rpc.Call(ctx, p.Endpoint.Addr(), rpc.TypeConnection, handshake.Encode(req), cc)
			if err != nil {
				pi.err = fmt.Errorf("efa: handshake %s -> %s: %w: %w", req.LocalNICPath, req.PeerNICPath, engine.ErrPeerGone, err)
				return
			}
			reply, err := handshake.Decode(raw)
			if err != nil {
				pi.err = fmt.Errorf("efa: handshake %s -> %s: %w: %w", req.LocalNICPath, req.PeerNICPath, engine.ErrRejected, err)
				return
			}
			if reply.ReplyMsg != "" || reply.EFAAddr == "" {
				pi.err = fmt.Errorf("efa: handshake %s -> %s refused (%q): %w", req.LocalNICPath, req.PeerNICPath, reply.ReplyMsg, engine.ErrRejected)
				return
			}
			a, err := decodeAddr(reply.EFAAddr)
			if err != nil {
				pi.err = fmt.Errorf("efa: handshake %s -> %s: %w: %w", req.LocalNICPath, req.PeerNICPath, err, engine.ErrRejected)
				return
			}
			if addrs[j] != nil && string(addrs[j]) != string(a) {
				pi.err = fmt.Errorf("efa: %s answers two endpoint addresses: %w", req.PeerNICPath, engine.ErrRejected)
				return
			}
			addrs[j] = a
			if err := t.insertLive(ld, a); err != nil {
				pi.err = err
				return
			}
		}
		pi.pub.Devices[j].Addr = hex.EncodeToString(addrs[j])
	}
	pi.addrs = addrs
}

// insertLive puts a into d's AV unless the transport is closed.
func (t *Transport) insertLive(d *device, a []byte) error {
	t.life.RLock()
	defer t.life.RUnlock()
	if t.closed.Load() {
		return engine.ErrClosed
	}
	_, err := d.fiAddr(a)
	return err
}

func (t *Transport) handshakeTimeout() time.Duration {
	if c := t.e.Config().ConnectTimeout; c > 0 {
		return c
	}
	return 5 * time.Second
}

// handleConnection answers a Connection request that carries an efa_addr
// (Mooncake's onSetupEfaConnections): it finds the local device that
// peer_nic_path names, puts the peer's address into that device's AV
// (dropping the one the same peer path had before: a restarted peer) and
// replies with the device's own address. Requests without efa_addr belong
// to the rdma transport (engine.ErrRPCDeclined).
func (t *Transport) handleConnection(_ context.Context, body []byte, from net.Addr) ([]byte, error) {
	peer, err := handshake.Decode(body)
	if err != nil || peer.EFAAddr == "" {
		return nil, engine.ErrRPCDeclined
	}
	reject := func(msg string) ([]byte, error) {
		t.log.Warn("efa handshake refused", "from", from, "peer", peer.LocalNICPath, "reason", msg)
		return handshake.Encode(&handshake.Desc{ReplyMsg: msg}), nil
	}
	t.life.RLock()
	defer t.life.RUnlock()
	if t.closed.Load() {
		return reject("efa transport closed")
	}
	_, nic, ok := handshake.SplitNICPath(peer.PeerNICPath)
	if !ok {
		return reject("EFA nic path inconsistency")
	}
	i := slices.IndexFunc(t.devs, func(d *device) bool { return d.name == nic })
	if i < 0 || peer.PeerNICPath != handshake.NICPath(t.e.SegmentName(), nic) {
		return reject("EFA nic path inconsistency")
	}
	if _, _, ok := handshake.SplitNICPath(peer.LocalNICPath); !ok {
		return reject("EFA nic path inconsistency")
	}
	a, err := decodeAddr(peer.EFAAddr)
	if err != nil {
		return reject("Failed to insert peer address")
	}
	d := t.devs[i]
	t.hs.Lock()
	old, had := t.hs.m[peer.LocalNICPath+"\x00"+d.name]
	if len(t.hs.m) >= DefaultAVCount {
		clear(t.hs.m)
	}
	t.hs.m[peer.LocalNICPath+"\x00"+d.name] = a
	t.hs.Unlock()
	if had && string(old) != string(a) {
		t.log.Info("efa peer re-established its endpoint", "device", d.name, "peer", peer.LocalNICPath)
		d.dropPeer(old)
	}
	if _, err := d.fiAddr(a); err != nil {
		return reject("Failed to insert peer address")
	}
	return handshake.Encode(&handshake.Desc{LocalNICPath: handshake.NICPath(t.e.SegmentName(), d.name),
		PeerNICPath: peer.LocalNICPath, EFAAddr: hex.EncodeToString(d.addr)}), nil
}

// hookConnection registers handleConnection for both Connection types.
func (t *Transport) hookConnection() error {
	for _, typ := range []rpc.Type{rpc.TypeConnection, rpc.TypeLegacy} {
		remove, err := t.e.HandleRPCFirst(typ, t.handleConnection)
		if err != nil {
			for _, u := range t.unhook {
				u()
			}
			return fmt.Errorf("efa: %w", err)
		}
		t.unhook = append(t.unhook, remove)
	}
	return nil
}

// waitReady waits for a peer's handshake, bounded by ctx.
func waitReady(ctx context.Context, pi *peerInfo) error {
	if pi.ready == nil {
		return pi.err
	}
	select {
	case <-pi.ready:
		return pi.err
	case <-ctx.Done():
		return errors.Join(ctx.Err(), engine.ErrTimeout)
	}
}
