package nixl

import (
	"context"
	"fmt"
	"slices"

	"github.com/kvferry/kvferry/engine"
)

// validate checks a descriptor list pair and builds the requests into
// x.reqs.
func (a *Agent) validate(x *xfer, op Op, p *peer, local, remote []Desc) error {
	if op != Read && op != Write {
		return fmt.Errorf("transfer: op %d: %w", op, engine.ErrInvalidArgument)
	}
	if len(local) != len(remote) || len(local) == 0 {
		return fmt.Errorf("transfer: %d local and %d remote descriptors: %w", len(local), len(remote), engine.ErrInvalidArgument)
	}
	gen := a.gen.Load()
	reqs := x.reqs[:0]
	for i := range local {
		l, r := &local[i], &remote[i]
		if l.Len != r.Len {
			return fmt.Errorf("transfer: descriptor %d: local %d bytes, remote %d: %w", i, l.Len, r.Len, engine.ErrInvalidArgument)
		}
		if l.MD != 0 {
			m, ok := a.mds.Get(uintptr(l.MD))
			if !ok || !m.local || !m.covers(l.Addr, l.Len) {
				return fmt.Errorf("transfer: local descriptor %d %#x+%d outside its registration: %w", i, l.Addr, l.Len, engine.ErrAddressNotRegistered)
			}
		} else if l.Len != 0 && !a.e.Registered(l.Addr, l.Len) {
			return fmt.Errorf("transfer: local descriptor %d %#x+%d: %w", i, l.Addr, l.Len, engine.ErrAddressNotRegistered)
		}
		if r.MD != 0 {
			m, ok := a.mds.Get(uintptr(r.MD))
			if !ok || m.local || m.peer != p || !m.covers(r.Addr, r.Len) {
				return fmt.Errorf("transfer: remote descriptor %d %#x+%d outside the buffers agent %q registered: %w", i, r.Addr, r.Len, p.agent, engine.ErrAddressNotRegistered)
			}
		} else if r.Len != 0 {
			ctx, cancel := a.metaCtx()
			err := a.e.CheckRange(ctx, p.seg, r.Addr, r.Len)
			cancel()
			if err != nil {
				return fmt.Errorf("transfer: remote descriptor %d of agent %q: %w", i, p.agent, err)
			}
		}
		reqs = append(reqs, engine.Request{Op: op.engineOp(), Source: uintptr(l.Addr), Target: p.seg, TargetOffset: r.Addr, Length: l.Len})
	}
	x.reqs = reqs
	x.op = op
	x.peer = p
	x.local = append(x.local[:0], local...)
	x.remote = append(x.remote[:0], remote...)
	x.gen = gen
	return nil
}

// PrepXfer checks a transfer of local to (Write) or from (Read) agent's
// remote descriptors, pairwise, and returns a reusable request for it.
// Descriptors with an MD must lie inside it; others are looked up in the
// registrations.
func (a *Agent) PrepXfer(op Op, agent string, local, remote []Desc) (Xfer, error) {
	p, err := a.peer(agent)
	if err != nil {
		return 0, fmt.Errorf("prepare transfer: %w", err)
	}
	x := &xfer{last: ErrNotPosted}
	if err := a.validate(x, op, p, local, remote); err != nil {
		return 0, err
	}
	return Xfer(a.xfers.Add(x)), nil
}

// Post starts request h again (specs/nixl.md §3.9), with descriptor lists
// that may differ from the prepared ones (they are checked again then). The
// previous post must be finished (else ErrRepostActive); its batch is freed
// first. Check reports the outcome.
func (a *Agent) Post(h Xfer, op Op, local, remote []Desc) error {
	return a.post(h, op, local, remote, nil)
}

// PostNotify is Post with a notification: once the transfer completed,
// the remote agent receives msg (any bytes) from this agent. Check reports
// success only once the notification has been handed to the peer.
func (a *Agent) PostNotify(h Xfer, op Op, local, remote []Desc, msg string) error {
	n := engine.Notification{Name: a.name, Msg: msg}
	return a.post(h, op, local, remote, &n)
}

func (a *Agent) post(h Xfer, op Op, local, remote []Desc, notif *engine.Notification) error {
	x, ok := a.xfers.Get(uintptr(h))
	if !ok {
		return fmt.Errorf("post request %#x: %w", uint64(h), engine.ErrInvalidArgument)
	}
	return a.postXfer(x, op, local, remote, notif)
}

// postXfer starts a new batch for x; a released x refuses with ErrReleased.
func (a *Agent) postXfer(x *xfer, op Op, local, remote []Desc, notif *engine.Notification) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.released {
		return fmt.Errorf("post: %w", ErrReleased)
	}
	if x.batch != 0 {
		bs, err := a.e.BatchStatus(x.batch)
		if err == nil && bs.State == engine.StateWaiting {
			return fmt.Errorf("post: %w", ErrRepostActive)
		}
		a.finish(x, bs, err)
	}
	if op != x.op || x.gen != a.gen.Load() || !slices.Equal(local, x.local) || !slices.Equal(remote, x.remote) {
		p, err := a.peer(x.peer.agent)
		if err != nil {
			return fmt.Errorf("post: %w", err)
		}
		if err := a.validate(x, op, p, local, remote); err != nil {
			x.local = x.local[:0] // validate again next time
			return err
		}
	}
	id, err := a.e.AllocateBatch(len(x.reqs))
	if err != nil {
		return fmt.Errorf("post: %w", err)
	}
	if notif != nil {
		err = a.e.SubmitWithNotify(id, x.reqs, *notif)
	} else {
		err = a.e.Submit(id, x.reqs)
	}
	if err != nil {
		_ = a.e.Cancel(a.ctx, id)
		_ = a.e.FreeBatch(id)
		return fmt.Errorf("post to agent %q: %w", x.peer.agent, err)
	}
	x.batch = id
	return nil
}

// finish records the outcome of x's terminal batch and frees it; x.mu held.
func (a *Agent) finish(x *xfer, bs engine.BatchStatus, err error) {
	switch {
	case err != nil:
		x.last = fmt.Errorf("transfer to agent %q: %w", x.peer.agent, err)
	case bs.State == engine.StateCompleted:
		x.last = nil
	case bs.State == engine.StateCanceled:
		x.last = fmt.Errorf("transfer to agent %q: %w", x.peer.agent, engine.ErrCanceled)
	case bs.Err != nil:
		x.last = fmt.Errorf("transfer to agent %q: %w", x.peer.agent, bs.Err)
		a.e.RecordError(bs.Err)
		a.log.Debug("nixl transfer failed", "agent", a.name, "peer", x.peer.agent, "err", bs.Err)
	default:
		x.last = fmt.Errorf("transfer to agent %q ended %s", x.peer.agent, bs.State)
	}
	_ = a.e.FreeBatch(x.batch)
	x.batch = 0
}

// Check reports the outcome of request h's last post without blocking:
// ErrInProgress while it runs, nil once it completed, ErrNotPosted before
// the first post, else why it failed or that it was canceled.
func (a *Agent) Check(h Xfer) error {
	x, ok := a.xfers.Get(uintptr(h))
	if !ok {
		return fmt.Errorf("check request %#x: %w", uint64(h), engine.ErrInvalidArgument)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.released {
		return fmt.Errorf("check: %w", ErrReleased)
	}
	if x.batch == 0 {
		return x.last
	}
	// Callers poll this in a loop (nixlbench, NIXL's own examples): a poll
	// that finds the transfer running gives the CPU to the threads that move
	// the data, or on a host whose every CPU polls they wait for a slice.
	bs, err := a.e.PollBatchStatus(x.batch)
	if err == nil && bs.State == engine.StateWaiting {
		return ErrInProgress
	}
	a.finish(x, bs, err)
	return x.last
}

// Release cancels request h's running post (bounded by the transfer
// timeout) and drops h. If the cancel fails h stays valid, so the caller
// can release it again.
func (a *Agent) Release(h Xfer) error {
	x, ok := a.xfers.Get(uintptr(h))
	if !ok {
		return fmt.Errorf("release request %#x: %w", uint64(h), ErrReleased)
	}
	if err := a.release(x); err != nil {
		return err
	}
	a.xfers.Remove(uintptr(h))
	return nil
}

func (a *Agent) release(x *xfer) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.released {
		return fmt.Errorf("release: %w", ErrReleased)
	}
	if x.batch != 0 {
		bs, err := a.e.BatchStatus(x.batch)
		if err == nil && bs.State == engine.StateWaiting {
			if err := a.e.Cancel(context.Background(), x.batch); err != nil {
				return fmt.Errorf("release: %w", err)
			}
			bs, err = a.e.BatchStatus(x.batch)
		}
		a.finish(x, bs, err)
	}
	x.released = true
	return nil
}
