package tcp

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/internal/cmem"
)

// server accepts data connections and serves requests against the engine's
// registered memory. Owned by Transport; stopped by Transport.Close.
type server struct {
	t     *Transport
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}

	rejected atomic.Uint64
	served   atomic.Uint64
}

func (s *server) track(c net.Conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.conns == nil { // closed
			return false
		}
		s.conns[c] = struct{}{}
	} else {
		delete(s.conns, c)
	}
	return true
}

// runAccept accepts until the listener closes.
func (s *server) runAccept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.t.log.Warn("tcp accept failed", "err", err)
			time.Sleep(5 * time.Millisecond) // back off from EMFILE-style errors
			continue
		}
		if !s.track(c, true) {
			c.Close()
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.track(c, false)
			defer c.Close()
			s.serveConn(c)
		}()
	}
}

func (s *server) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.conns = nil
	s.mu.Unlock()
	s.wg.Wait()
}

// serveConn serves requests on one connection until it fails or closes.
// Status frames are batched: they are flushed before the server would block
// waiting for the next header, so pipelined requests get their
// acknowledgements in one write.
func (s *server) serveConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	rd, err := newConnReader(c)
	if err != nil {
		s.t.log.Error("tcp server: no read buffer", "err", err)
		return
	}
	defer rd.close()
	timeout := s.t.cfg.StatusTimeout
	out := make([]byte, 0, 4096)
	var bufs net.Buffers
	var vec [2][]byte
	deadlineSet := false
	flush := func() error {
		if len(out) == 0 {
			return nil
		}
		_ = c.SetWriteDeadline(time.Now().Add(timeout))
		_, err := c.Write(out)
		out = out[:0]
		return err
	}
	for {
		if rd.buffered() < HeaderSize {
			if err := flush(); err != nil {
				return
			}
			if deadlineSet {
				_ = c.SetReadDeadline(time.Time{})
				deadlineSet = false
			}
		}
		hb, err := rd.peek(HeaderSize)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.t.log.Debug("tcp server: read header", "peer", c.RemoteAddr().String(), "err", err)
			}
			return
		}
		h, err := DecodeHeader(hb)
		rd.discard(HeaderSize)
		if err != nil {
			s.t.log.Warn("tcp server: bad header, closing", "peer", c.RemoteAddr().String(), "err", err)
			return
		}
		pin := s.t.e.Pin(h.Addr, h.Size)
		if pin == nil {
			s.rejected.Add(1)
			s.t.logReject(c.RemoteAddr().String(), h)
			if h.V2 {
				var st [StatusSize]byte
				EncodeStatus(st[:], StatusRejected)
				out = append(out, st[:]...)
				_ = flush()
			}
			return
		}
		mem := cmem.Bytes(uintptr(h.Addr), h.Size)
		if h.Write {
			if rd.buffered() < len(mem) {
				_ = c.SetReadDeadline(time.Now().Add(timeout))
				deadlineSet = true
			}
			err = rd.readFull(mem)
			pin.Release()
			if err != nil {
				s.t.log.Debug("tcp server: read payload", "peer", c.RemoteAddr().String(), "err", err)
				return
			}
			if h.V2 {
				var st [StatusSize]byte
				EncodeStatus(st[:], StatusOK)
				out = append(out, st[:]...)
			}
		} else {
			if h.V2 {
				var st [StatusSize]byte
				EncodeStatus(st[:], StatusOK)
				out = append(out, st[:]...)
			}
			vec[0], vec[1] = out, mem
			bufs = vec[:]
			_ = c.SetWriteDeadline(time.Now().Add(timeout))
			_, err = bufs.WriteTo(c)
			out = out[:0]
			pin.Release()
			if err != nil {
				s.t.log.Debug("tcp server: write payload", "peer", c.RemoteAddr().String(), "err", err)
				return
			}
		}
		s.served.Add(1)
	}
}

var _ engine.Transport = (*Transport)(nil)
