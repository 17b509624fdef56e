package tcp

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/rpc"
	"github.com/kvferry/kvferry/engine/transport/tcp/tcpwire"
	"github.com/kvferry/kvferry/internal/cmem"
)

// fuzzConn feeds r to the server and keeps what it writes.
type fuzzConn struct {
	net.Conn
	r *bytes.Reader
	w bytes.Buffer
}

func (c *fuzzConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *fuzzConn) Write(b []byte) (int, error)      { return c.w.Write(b) }
func (c *fuzzConn) Close() error                     { return nil }
func (c *fuzzConn) SetDeadline(time.Time) error      { return nil }
func (c *fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fuzzConn) SetWriteDeadline(time.Time) error { return nil }
func (c *fuzzConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (c *fuzzConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2} }

// FuzzServeConn plays arbitrary bytes as one connection to the data port
// of an engine with one registered region between two guard pages: the
// server must answer only whole status frames and READ payloads, and touch
// no byte outside the region (a stray access faults on a guard page; the
// region's own bytes outside what WRITEs named stay as they were).
func FuzzServeConn(f *testing.F) {
	e, err := engine.New(context.Background(), engine.Config{
		Metadata: metadata.NewP2P(rpc.ClientConfig{}), LocalServerName: "127.0.0.1",
		NewTransport: func(name string, e *engine.Engine) (engine.Transport, error) {
			return New(e, Config{StatusTimeout: time.Second})
		},
		Transports: []string{Name},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	const page = 4096
	m, err := cmem.MapAnon(3 * page)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { m.Close() })
	for _, g := range [][]byte{m.Bytes()[:page], m.Bytes()[2*page:]} {
		if err := unix.Mprotect(g, unix.PROT_NONE); err != nil {
			f.Fatal(err)
		}
	}
	region := m.Addr() + page
	if err := e.RegisterMemory(region, page, "cpu:0", true); err != nil {
		f.Fatal(err)
	}
	srv := e.Transport(Name).(*Transport).srv
	hdr := func(write, v2 bool, addr, n uint64) []byte {
		var b [tcpwire.HeaderSize]byte
		tcpwire.Header{Size: n, Addr: addr, Write: write, V2: v2}.Encode(&b)
		return b[:]
	}
	r := uint64(region)
	f.Add(append(hdr(true, true, r, 8), 1, 2, 3, 4, 5, 6, 7, 8))
	f.Add(hdr(false, true, r+100, 16))
	f.Add(hdr(false, false, r, page))
	f.Add(hdr(true, true, r+page-4, 8))
	f.Add(append(append(hdr(true, true, r, 4), 9, 9, 9, 9), hdr(false, true, r, 4)...))
	// The identity hello: naming this engine (then a request), or another
	// incarnation.
	var hello [tcpwire.HelloSize]byte
	tcpwire.EncodeHello(&hello, e.Transport(Name).(*Transport).inc)
	f.Add(append(hello[:], hdr(false, true, r, 16)...))
	tcpwire.EncodeHello(&hello, [tcpwire.IncarnationSize]byte{1})
	f.Add(append(hello[:], hdr(false, true, r, 16)...))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &fuzzConn{r: bytes.NewReader(in)}
		slot, err := srv.limit.Admit(nil, c)
		if err != nil {
			t.Fatal(err)
		}
		srv.serveConn(c, slot)
		slot.Release()
		out := c.w.Bytes()
		// Every answer is a status frame (v2) and/or a READ payload of at
		// most the region: no more than that per header sent.
		if uint64(len(out)) > uint64(len(in)/tcpwire.HeaderSize)*(tcpwire.StatusSize+page) {
			t.Fatalf("%d bytes answered to %d", len(out), len(in))
		}
	})
}
