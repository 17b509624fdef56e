package engine

import (
	"github.com/kvferry/kvferry/internal/ratelog"
)

// Notification memory caps (Config.NotifyQueueBytes, NotifyPeerBytes).
const (
	DefaultNotifyQueueBytes = 64 << 20
	DefaultNotifyPeerBytes  = 16 << 20
	// notifyOverheadBytes is charged per notification on top of its text,
	// so a flood of empty ones is bounded too.
	notifyOverheadBytes = 64
)

// notifyBudget counts the bytes of received, undrained notifications in
// total and per sending address (the peer's IP, which a sender cannot
// choose the way it chooses the name it claims). It is guarded by
// Engine.inbox's mutex; a drain resets it.
type notifyBudget struct {
	total  uint64
	byPeer map[string]uint64
	logs   ratelog.Every
}

// admit charges a notification of n bytes from peer, or reports why it
// cannot be kept ("" when it was charged).
func (b *notifyBudget) admit(cfg *Config, peer string, n int) string {
	cost := uint64(n) + notifyOverheadBytes
	switch {
	case b.total+cost > uint64(cfg.NotifyQueueBytes):
		return "notification bytes in total"
	case b.byPeer[peer]+cost > uint64(cfg.NotifyPeerBytes):
		return "notification bytes from one peer"
	}
	if b.byPeer == nil {
		b.byPeer = make(map[string]uint64)
	}
	b.total += cost
	b.byPeer[peer] += cost
	return ""
}

// reset forgets every charge (the queue was drained).
func (b *notifyBudget) reset() {
	b.total = 0
	clear(b.byPeer)
}
