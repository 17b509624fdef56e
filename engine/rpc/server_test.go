package rpc

import (
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// dialFrom connects to addr from the local IP src (any 127.0.0.0/8 address
// works on Linux loopback), so a test can play a second host.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	assert.NilError(t, err)
	return c
}

// A slowloris from one address (half headers, kept open) takes no more
// than its per-IP share: an honest peer elsewhere keeps being answered,
// and the attacker's extra connections displace its older ones.
func TestServerSlowlorisKeepsAnswering(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	srv := NewServer(ln, func(context.Context, Type, []byte, net.Addr) ([]byte, error) {
		return []byte(`{"status":"success"}`), nil
	}, ServerConfig{RecvTimeout: 3 * time.Second, MaxConcurrent: 4, MaxConnsPerIP: 8})
	defer srv.Close()
	addr := srv.Addr().String()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 40 {
		c := dialFrom(t, "127.0.0.2", addr)
		_, _ = c.Write([]byte{2, 0, 0}) // half a length field
		conns = append(conns, c)
	}
	for range 5 {
		r, err := Call(context.Background(), addr, TypeProbe, []byte("{}"), ClientConfig{Timeout: 2 * time.Second})
		assert.NilError(t, err)
		assert.Equal(t, string(r), `{"status":"success"}`)
	}
	st := srv.Stats()
	assert.Assert(t, st.ConnsDisplaced >= 30, "%+v", st)
	// The oldest stalled ones were displaced; the rest are cut at RecvTimeout.
	_ = conns[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = conns[0].Read(make([]byte, 1))
	assert.Assert(t, err != nil && !isTimeout(err), "%v", err)
}

// A frame that claims a large body and sends little is refused when it
// stalls, without its claimed size being allocated (netguard.ReadFull).
func TestServerClaimedLengthStalls(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	srv := NewServer(ln, func(context.Context, Type, []byte, net.Addr) ([]byte, error) {
		return []byte(`{}`), nil
	}, ServerConfig{RecvTimeout: 500 * time.Millisecond, MaxMessage: MaxMaxMessage})
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Addr().String())
	assert.NilError(t, err)
	defer c.Close()
	var claim [19]byte
	binary.LittleEndian.PutUint64(claim[:], 100<<20)
	claim[8] = byte(TypeProbe)
	_, err = c.Write(claim[:]) // 100 MiB claimed, 11 bytes sent
	assert.NilError(t, err)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	assert.Assert(t, err != nil && !isTimeout(err), "%v", err)
	assert.Assert(t, srv.Stats().BadRequests >= 1)
}
