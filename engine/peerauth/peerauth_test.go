package peerauth

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

const (
	keyA = "c2VjcmV0LWtleS1hbHBoYS0wMTIzNDU2Nzg5YWJjZGVm"
	keyB = "c2VjcmV0LWtleS1icmF2by0wMTIzNDU2Nzg5YWJjZGVm"
	keyC = "c2VjcmV0LWtleS1jaGFybGllLTAxMjM0NTY3ODlhYmNk"
)

func mustKeys(t testing.TB, lines ...string) *Keys {
	t.Helper()
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString("  " + l + " \n")
	}
	ks, err := ParseKeys(b.Bytes())
	assert.NilError(t, err)
	return ks
}

// pair runs a handshake over a pipe and returns both sides' errors.
func pair(t *testing.T, client, server *Keys, crole, srole Role) (cerr, serr error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		err := Server(b, server, srole)
		b.Close()
		done <- err
	}()
	_ = a.SetDeadline(time.Now().Add(5 * time.Second))
	cerr = Client(a, client, crole)
	if cerr == nil {
		// The server reads the proof after the client sent it.
		a.Close()
	}
	return cerr, <-done
}

func TestHandshake(t *testing.T) {
	a := mustKeys(t, keyA)
	cerr, serr := pair(t, a, a, RoleData, RoleData)
	assert.NilError(t, cerr)
	assert.NilError(t, serr)

	// A wrong key: the server finds no key in common and says so.
	cerr, serr = pair(t, mustKeys(t, keyB), a, RoleData, RoleData)
	assert.Assert(t, errors.Is(cerr, ErrRefused), "%v", cerr)
	assert.Assert(t, errors.Is(serr, ErrRefused), "%v", serr)

	// A handshake made for another port is refused.
	cerr, serr = pair(t, a, a, RoleRPC, RoleData)
	assert.Assert(t, errors.Is(cerr, ErrRefused), "%v", cerr)
	assert.Assert(t, errors.Is(serr, ErrRefused), "%v", serr)
}

// Rotation: every step of a rollover connects, in both directions.
func TestRotation(t *testing.T) {
	steps := [][]string{{keyA}, {keyA, keyB}, {keyB, keyA}, {keyB}}
	for i := 0; i+1 < len(steps); i++ {
		x, y := mustKeys(t, steps[i]...), mustKeys(t, steps[i+1]...)
		for _, p := range [][2]*Keys{{x, y}, {y, x}, {x, x}} {
			cerr, serr := pair(t, p[0], p[1], RoleMaster, RoleMaster)
			assert.NilError(t, cerr, "step %d", i)
			assert.NilError(t, serr, "step %d", i)
		}
	}
	// Nodes two steps apart share no key.
	cerr, _ := pair(t, mustKeys(t, keyA), mustKeys(t, keyB), RoleMaster, RoleMaster)
	assert.Assert(t, errors.Is(cerr, ErrRefused))
}

// A server that proves with the wrong key is caught by the client before
// it sends anything of its own.
func TestImpostorServer(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		defer b.Close()
		var ch [ClientHelloBytes]byte
		_, _ = io.ReadFull(b, ch[:])
		evil := mustKeys(t, keyC)
		var sh [ServerHelloBytes]byte
		copy(sh[:], magicServer[:])
		sh[8] = ch[8]
		copy(sh[48:56], ch[48:56]) // claims the client's key id
		p := mac(&evil.keys[0], labelServer, ch[:], sh[:serverMACStart])
		copy(sh[serverMACStart:], p[:])
		_, _ = b.Write(sh[:])
		_, _ = io.Copy(io.Discard, b)
	}()
	_ = a.SetDeadline(time.Now().Add(5 * time.Second))
	err := Client(a, mustKeys(t, keyA), RoleRPC)
	assert.Assert(t, errors.Is(err, ErrRefused), "%v", err)
}

// A captured client hello and proof, replayed, fail: the server's nonce is
// new.
func TestReplay(t *testing.T) {
	ks := mustKeys(t, keyA)
	var captured bytes.Buffer
	a, b := net.Pipe()
	first := make(chan error, 1)
	go func() {
		defer b.Close()
		first <- Server(&teeConn{Conn: b, r: &captured}, ks, RoleData)
	}()
	_ = a.SetDeadline(time.Now().Add(5 * time.Second))
	assert.NilError(t, Client(a, ks, RoleData))
	assert.NilError(t, <-first)
	a.Close()
	assert.Equal(t, captured.Len(), ClientHelloBytes+ClientProofBytes)

	a, b = net.Pipe()
	defer a.Close()
	done := make(chan error, 1)
	go func() { done <- Server(b, ks, RoleData); b.Close() }()
	go func() { _, _ = io.Copy(io.Discard, a) }()
	_, _ = a.Write(captured.Bytes())
	err := <-done
	assert.Assert(t, errors.Is(err, ErrRefused), "%v", err)
}

type teeConn struct {
	net.Conn
	r *bytes.Buffer
}

func (c *teeConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.r.Write(b[:n])
	return n, err
}

// Bytes of a peer that does not speak the handshake (a Mooncake RPC frame,
// a data header) are refused at once, as such.
func TestNoHandshake(t *testing.T) {
	for _, first := range [][]byte{
		{3, 0, 0, 0, 0, 0, 0, 0, 3, '{', '}'},          // Mooncake probe frame
		make([]byte, 24),                               // data header
		[]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),     // gRPC
		[]byte("GET /metadata?key=k HTTP/1.1\r\n\r\n"), // HTTP
	} {
		a, b := net.Pipe()
		go func() { _, _ = a.Write(first); _, _ = io.Copy(io.Discard, a) }()
		_ = b.SetDeadline(time.Now().Add(5 * time.Second))
		err := Server(b, mustKeys(t, keyA), RoleRPC)
		assert.Assert(t, errors.Is(err, ErrNoHandshake), "%q: %v", first, err)
		a.Close()
		b.Close()
	}
	// A server without a key meets a client with one: the client says so.
	a, b := net.Pipe()
	go func() {
		var x [64]byte
		_, _ = io.ReadFull(b, x[:])
		_, _ = b.Write([]byte("MCTV\x01\x00\x00\x00"))
		b.Close()
	}()
	_ = a.SetDeadline(time.Now().Add(5 * time.Second))
	err := Client(a, mustKeys(t, keyA), RoleData)
	assert.Assert(t, errors.Is(err, ErrNoHandshake), "%v", err)
	assert.Assert(t, IsClientHello(magicClient[:]))
}

// Golden bytes of a handshake with fixed nonces: the wire format and the
// proofs never change silently.
func TestGolden(t *testing.T) {
	old := randReader
	defer func() { randReader = old }()
	randReader = bytes.NewReader(append(bytes.Repeat([]byte{0x11}, 32), bytes.Repeat([]byte{0x22}, 32)...))
	ks := mustKeys(t, keyA, keyB)
	srv := mustKeys(t, keyB, keyA)
	var c2s, s2c bytes.Buffer
	a, b := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- Server(&teeConn{Conn: b, r: &c2s}, srv, RoleRPC); b.Close() }()
	_ = a.SetDeadline(time.Now().Add(5 * time.Second))
	assert.NilError(t, Client(&teeConn{Conn: a, r: &s2c}, ks, RoleRPC))
	a.Close()
	assert.NilError(t, <-done)
	got := hex.EncodeToString(c2s.Bytes()) + "/" + hex.EncodeToString(s2c.Bytes())
	const want = goldenClient + "/" + goldenServer
	if got != want {
		t.Fatalf("handshake bytes changed:\n got %s\nwant %s", got, want)
	}
	assert.Equal(t, ks.Fingerprint(), goldenFingerprintA)
}

// golden values (client hello + client proof / server hello); the server
// chose keyB, its first key, which the client also holds.
const (
	goldenFingerprintA = "c831dee02d66821c"
	goldenClient       = "4b564641555448310102000000000000" + // "KVFAUTH1", role rpc, 2 keys
		"1111111111111111111111111111111111111111111111111111111111111111" + // client nonce
		"c831dee02d66821c" + "5ceb4d2c82cdc602" + // key ids A, B
		"4b56464155544843" + // "KVFAUTHC"
		"3693cc92ab7acc47e0e0c927729c02e035b2a3a4df5b90dd99a922ff752e8d23" // client proof
	goldenServer = "4b564641555448530100000000000000" + // "KVFAUTHS", role rpc, status ok
		"2222222222222222222222222222222222222222222222222222222222222222" + // server nonce
		"5ceb4d2c82cdc602" + // chosen: key B
		"cf753e5b62bf98dfb738af7662a0713b78478cb26f26b897731b7fc64f398190" // server proof
)

func TestParseKeys(t *testing.T) {
	for _, bad := range []string{"", "\n \n", "short", keyA + "\n" + keyA, keyA + "\n" + keyB + "\n" + keyC} {
		_, err := ParseKeys([]byte(bad))
		assert.Assert(t, errors.Is(err, ErrBadKey), "%q", bad)
	}
	ks := mustKeys(t, keyA, keyB)
	assert.Equal(t, ks.Len(), 2)
	assert.Equal(t, mustKeys(t, keyA).Fingerprint(), ks.Fingerprint())
	var nilKeys *Keys
	assert.Equal(t, nilKeys.Len(), 0)
}

func TestLoadKeyFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	assert.NilError(t, os.WriteFile(p, []byte(keyA+"\n"), 0o644))
	_, err := LoadKeyFile(p)
	assert.ErrorContains(t, err, "readable by group or others")
	assert.NilError(t, os.Chmod(p, 0o600))
	ks, err := LoadKeyFile(p)
	assert.NilError(t, err)
	assert.Equal(t, ks.Fingerprint(), mustKeys(t, keyA).Fingerprint())
	_, err = LoadKeyFile(filepath.Join(dir, "missing"))
	assert.Assert(t, err != nil)
}

// Guard and Dialer over real sockets; the Listener keeps a silent peer
// from holding up others.
func TestListenerAndDialer(t *testing.T) {
	ks := mustKeys(t, keyA)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	g := NewGuard(ks, RoleMetadata, 500*time.Millisecond, nil)
	ln := Listen(raw, g)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello"))
			c.Close()
		}
	}()
	silent, err := net.Dial("tcp", raw.Addr().String())
	assert.NilError(t, err)
	defer silent.Close()
	dial := Dialer(&net.Dialer{}, ks, RoleMetadata)
	c, err := dial(context.Background(), "tcp", raw.Addr().String())
	assert.NilError(t, err)
	b, _ := io.ReadAll(c)
	c.Close()
	assert.Equal(t, string(b), "hello")
	_, err = Dialer(&net.Dialer{}, mustKeys(t, keyB), RoleMetadata)(context.Background(), "tcp", raw.Addr().String())
	assert.Assert(t, errors.Is(err, ErrRefused), "%v", err)
	_ = silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = silent.Read(make([]byte, 1))
	assert.Assert(t, err != nil, "silent peer cut")
	assert.Assert(t, g.Refused() >= 2)
	assert.Assert(t, Refusals(RoleMetadata) >= 2)
}

// FuzzServer: whatever a peer sends, the server never accepts it without
// the key and never panics.
func FuzzServer(f *testing.F) {
	ks := mustKeys(f, keyA)
	f.Add(append(magicClient[:], make([]byte, 96)...))
	var hello [ClientHelloBytes]byte
	copy(hello[:], magicClient[:])
	hello[8], hello[9] = byte(RoleRPC), 1
	copy(hello[48:], ks.keys[0].id[:])
	f.Add(append(hello[:], append(magicProof[:], make([]byte, 32)...)...))
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0, 3, '{', '}'})
	f.Fuzz(func(t *testing.T, in []byte) {
		rw := &fuzzConn{r: bytes.NewReader(in)}
		if err := Server(rw, ks, RoleRPC); err == nil {
			t.Fatal("accepted a peer without the key")
		}
		if rw.w.Len() != 0 && rw.w.Len() != ServerHelloBytes {
			t.Fatalf("wrote %d bytes", rw.w.Len())
		}
	})
}

type fuzzConn struct {
	r *bytes.Reader
	w bytes.Buffer
}

func (c *fuzzConn) Read(b []byte) (int, error)  { return c.r.Read(b) }
func (c *fuzzConn) Write(b []byte) (int, error) { return c.w.Write(b) }
