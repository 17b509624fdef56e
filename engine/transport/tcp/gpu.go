package tcp

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/transport/tcp/tcpwire"
)

// GPU memory over TCP. The wire stays Mooncake's: device memory is staged
// through pinned host bounce buffers (cuda.Stager) on whichever side holds
// it, pipelined so that the device copy of the next piece overlaps the
// socket I/O of this one:
//
//   - initiator WRITE from device memory: the writer stages the payload out
//     piece by piece behind the request header;
//   - initiator READ into device memory: the reader receives the payload
//     into bounce buffers and copies each piece to the device;
//   - server WRITE into device memory: the payload is received into bounce
//     buffers and copied to the device before the status frame goes out;
//   - server READ of device memory: the status frame leaves together with
//     the first staged piece, so a device failure before any byte left is
//     answered with a rejection.
//
// Host memory never goes through any of this.

// Carries reports that TCP moves every memory kind: host memory directly,
// device memory staged, when the transport has a GPU runtime.
func (t *Transport) Carries(_ *engine.Peer, e engine.Ends) bool {
	return (e.Local.HostAccessible() && e.Remote.HostAccessible()) || t.cfg.GPU != nil
}

// errDevice marks a failed device copy: the connection's stream position is
// lost (it closes), but the slice is not retried.
var errDevice = errors.New("device copy failed")

// stager returns the transport's runtime's new stager.
func (t *Transport) newStager() (gpu.Stager, error) {
	if t.cfg.GPU == nil {
		return nil, fmt.Errorf("device memory: %w", gpu.ErrNoGPU)
	}
	return t.cfg.GPU.NewStager()
}

// stagedWrites reports whether chunk holds a WRITE from device memory.
func (l *lane) stagedWrites(chunk []*engine.Slice) bool {
	if !l.t.e.HasDeviceMemory() {
		return false
	}
	for _, s := range chunk {
		if s.Op == engine.OpWrite && s.LocalKind() == engine.MemoryDevice {
			return true
		}
	}
	return false
}

// writeChunkStaged is writeChunk for a chunk with WRITEs from device
// memory: host slices are batched as usual; each device slice flushes them,
// then goes out as its header and its payload staged piece by piece. The
// caller holds l.w.
func (l *lane) writeChunkStaged(cs *conn, chunk []*engine.Slice) {
	start := 0
	for i, s := range chunk {
		if s.Op != engine.OpWrite || s.LocalKind() != engine.MemoryDevice {
			continue
		}
		if start < i {
			l.writeChunk(cs, chunk[start:i])
		}
		start = i + 1
		if cs.dead.Load() {
			l.retryOrFail(s, fmt.Errorf("connection to %s closed: %w", l.addr, errConn))
			continue
		}
		if s.Canceled() {
			s.Complete(engine.ErrCanceled)
			continue
		}
		l.writeStaged(cs, s)
	}
	if start < len(chunk) {
		l.writeChunk(cs, chunk[start:])
	}
}

// writeStaged sends one WRITE whose payload is device memory.
func (l *lane) writeStaged(cs *conn, s *engine.Slice) {
	if l.w.stager == nil {
		st, err := l.t.newStager()
		if err != nil {
			l.fail(s, err)
			return
		}
		l.w.stager = st
	}
	var hdr [tcpwire.HeaderSize]byte
	tcpwire.Header{Size: s.Length, Addr: s.Remote, Write: true, V2: l.v2}.Encode(&hdr)
	sent := false
	var sockErr error
	_ = cs.c.SetWriteDeadline(time.Now().Add(l.t.cfg.StatusTimeout))
	err := l.w.stager.FromDevice(s.LocalRegion().Device, uint64(s.Local), s.Length, func(b []byte) error {
		bufs := net.Buffers{b}
		if !sent {
			bufs = net.Buffers{hdr[:], b}
		}
		_ = cs.c.SetWriteDeadline(time.Now().Add(l.t.cfg.StatusTimeout))
		if _, err := writeBuffers(cs.c, &bufs); err != nil {
			sockErr = err
			return err
		}
		sent = true
		return nil
	})
	switch {
	case err == nil:
		l.t.sent.Add(1)
		if l.v2 {
			cs.push(s)
			cs.kickReader()
		} else {
			s.Complete(nil)
		}
	case sockErr != nil:
		werr := cs.failure(l.classifyWrite(sockErr)) // the reader's cause when it closed cs
		cs.kill(werr)
		l.retryOrFail(s, werr)
	case !sent:
		// The device failed before a byte of this request left: the
		// connection is still in step.
		l.fail(s, fmt.Errorf("%w: %w", errDevice, err))
	default:
		derr := fmt.Errorf("%w: %w", errDevice, err)
		cs.kill(derr)
		l.fail(s, derr)
	}
}

// readStaged receives a READ payload into device memory.
func (l *lane) readStaged(cs *conn, s *engine.Slice) error {
	if cs.stager == nil {
		st, err := l.t.newStager()
		if err != nil {
			return fmt.Errorf("%w: %w", errDevice, err)
		}
		cs.stager = st
	}
	var sockErr error
	err := cs.stager.ToDevice(s.LocalRegion().Device, uint64(s.Local), s.Length, func(b []byte) error {
		_ = cs.c.SetReadDeadline(time.Now().Add(l.t.cfg.StatusTimeout))
		if err := cs.rd.readFull(b); err != nil {
			sockErr = err
			return err
		}
		return nil
	})
	if sockErr != nil {
		return l.classify(sockErr)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errDevice, err)
	}
	return nil
}

// serveDevice serves one request whose target is device memory: pin holds
// it. It returns false when the connection must close.
func (s *server) serveDevice(c net.Conn, rd *connReader, st *gpu.Stager, h tcpwire.Header, pin *engine.Region, out *respBatch) bool {
	defer pin.Release()
	timeout := s.t.cfg.StatusTimeout
	// Earlier responses go first: this one is written directly.
	if err := out.flush(c, timeout); err != nil {
		return false
	}
	if *st == nil {
		x, err := s.t.newStager()
		if err != nil {
			s.t.log.Warn("tcp server: cannot stage device memory", "err", err)
			if h.V2 {
				out.add(tcpwire.StatusRejected, nil, nil)
				_ = out.flush(c, timeout)
			}
			return false
		}
		*st = x
	}
	if h.Write {
		var sockErr error
		err := (*st).ToDevice(pin.Device, h.Addr, h.Size, func(b []byte) error {
			_ = c.SetReadDeadline(time.Now().Add(timeout))
			if err := rd.readFull(b); err != nil {
				sockErr = err
				return err
			}
			return nil
		})
		_ = c.SetReadDeadline(time.Time{})
		if sockErr != nil {
			s.t.log.Debug("tcp server: read payload", "peer", c.RemoteAddr().String(), "err", sockErr)
			return false
		}
		if err != nil {
			s.t.log.Warn("tcp server: device copy of a write failed", "peer", c.RemoteAddr().String(), "err", err)
			if h.V2 {
				out.add(tcpwire.StatusRejected, nil, nil)
				_ = out.flush(c, timeout)
			}
			return false // the rest of the payload was not read
		}
		if h.V2 {
			out.add(tcpwire.StatusOK, nil, nil)
		}
		s.served.Add(1)
		return true
	}
	var status [tcpwire.StatusSize]byte
	tcpwire.EncodeStatus(status[:], tcpwire.StatusOK)
	sent := false
	var sockErr error
	err := (*st).FromDevice(pin.Device, h.Addr, h.Size, func(b []byte) error {
		bufs := net.Buffers{b}
		if !sent && h.V2 {
			bufs = net.Buffers{status[:], b}
		}
		_ = c.SetWriteDeadline(time.Now().Add(timeout))
		if _, err := writeBuffers(c, &bufs); err != nil {
			sockErr = err
			return err
		}
		sent = true
		return nil
	})
	switch {
	case err == nil:
		s.served.Add(1)
		return true
	case sockErr == nil && !sent && h.V2:
		s.t.log.Warn("tcp server: device copy of a read failed", "peer", c.RemoteAddr().String(), "err", err)
		out.add(tcpwire.StatusRejected, nil, nil)
		_ = out.flush(c, timeout)
	}
	return false
}
