// Package netguard holds what every kvferry listener uses against hostile
// or broken peers: connection caps in total and per remote IP (so one
// address cannot take every slot), under which a new connection displaces
// one that holds its slot without using it (so a slowloris from an address
// that honest processes share cannot lock them out: limiter.go), an
// accept-error backoff (so running out of file descriptors neither spins
// nor floods the log), and a reader that allocates a claimed length only
// as its bytes arrive.
package netguard

import (
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// IP returns the IP of a TCP or UDP address ("" for anything else, which
// then shares one per-IP budget).
func IP(a net.Addr) string {
	switch v := a.(type) {
	case *net.TCPAddr:
		return v.IP.String()
	case *net.UDPAddr:
		return v.IP.String()
	case nil:
		return ""
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

// DefaultMaxConns returns a total connection cap for a listener: a quarter
// of the process's file-descriptor limit, kept between 64 and 4096, so a
// flood on one listener leaves descriptors for the others.
func DefaultMaxConns() int {
	var rl syscall.Rlimit
	n := 4096
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur > 0 && rl.Cur < 1<<24 {
		n = int(rl.Cur / 4)
	}
	return min(max(n, 64), 4096)
}

// Backoff paces retries of a failing Accept: 5 ms doubling to 1 s, reset
// by a success. The zero value is ready.
type Backoff struct{ d time.Duration }

// Next returns how long to wait after a failure.
func (b *Backoff) Next() time.Duration {
	b.d = min(max(2*b.d, 5*time.Millisecond), time.Second)
	return b.d
}

// Reset is called after a successful Accept.
func (b *Backoff) Reset() { b.d = 0 }

// ReadChunk is the step in which ReadFull grows its buffer.
const ReadChunk = 64 << 10

// ReadFull reads exactly n bytes from r into buf (reused when large
// enough) and returns them. A buffer for a claimed length is never
// allocated up front: beyond cap(buf) it grows in steps of at most
// ReadChunk (doubling), as bytes arrive, so a peer that claims a large
// body and sends little costs little.
func ReadFull(r io.Reader, buf []byte, n int) ([]byte, error) {
	if n < 0 {
		return nil, fmt.Errorf("read %d bytes: negative length", n)
	}
	if cap(buf) >= n {
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	buf = buf[:0]
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grow := min(max(cap(buf), ReadChunk), n-len(buf))
			nb := make([]byte, len(buf), len(buf)+grow)
			copy(nb, buf)
			buf = nb
		}
		m, err := r.Read(buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+m]
		if err != nil {
			if err == io.EOF && len(buf) > 0 {
				err = io.ErrUnexpectedEOF
			}
			if len(buf) == n {
				break
			}
			return nil, err
		}
	}
	return buf, nil
}
