package hostile_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/tlsconf"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
)

// pki writes a CA and a certificate it signs for 127.0.0.1 (server and
// client use); it returns the files of a node.
func pki(t *testing.T) tlsconf.Files {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	assert.NilError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kvferry test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	assert.NilError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	assert.NilError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	assert.NilError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kvferry node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	assert.NilError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	assert.NilError(t, err)
	f := tlsconf.Files{Cert: filepath.Join(dir, "node.pem"), Key: filepath.Join(dir, "node.key"), CA: filepath.Join(dir, "ca.pem")}
	write := func(p, typ string, b []byte) {
		assert.NilError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600))
	}
	write(f.Cert, "CERTIFICATE", der)
	write(f.Key, "EC PRIVATE KEY", kb)
	write(f.CA, "CERTIFICATE", caDER)
	return f
}

// The control plane over TLS: socket RPC (P2P descriptors, notifications),
// the store master (mux and gRPC) and an https metadata server; peers
// without TLS, or without a certificate the CA signed, are refused.
func TestControlPlaneTLS(t *testing.T) {
	files := pki(t)
	other := pki(t) // a second, unrelated CA
	mk := func(f tlsconf.Files, key string) *engine.Engine {
		ec := engine.Config{LocalServerName: "127.0.0.1", Transports: []string{"tcp"}, TLSFiles: f}
		if key != "" {
			ec.AuthKeyFile = keyFile(t, key)
		}
		e, err := stack.New(ctxT(t), stack.Config{Engine: ec})
		assert.NilError(t, err)
		t.Cleanup(func() { e.Close() })
		return e
	}
	t.Run("rpc", func(t *testing.T) {
		for _, key := range []string{"", keyA} {
			a, b := mk(files, key), mk(files, key)
			seg, err := a.OpenSegment(ctxT(t), b.SegmentName())
			assert.NilError(t, err)
			assert.NilError(t, a.Notify(ctxT(t), seg, engine.Notification{Name: "a", Msg: "over tls"}))
			for _, f := range []tlsconf.Files{{}, other} {
				c := mk(f, key)
				_, err = c.OpenSegment(ctxT(t), b.SegmentName())
				assert.Assert(t, err != nil, "a peer with TLS files %+v fetched a TLS node's descriptor", f)
			}
		}
	})
	t.Run("store master", func(t *testing.T) {
		p, err := tlsconf.Load(files)
		assert.NilError(t, err)
		srv, err := master.NewServer(master.Config{RPCAddr: "127.0.0.1:0", TLS: p.Server})
		assert.NilError(t, err)
		defer srv.Close()
		for _, mode := range []string{client.MasterRPCMux, client.MasterRPCGRPC} {
			mkc := func(f tlsconf.Files, seg uint64) (*client.Client, error) {
				return client.New(ctxT(t), client.Config{LocalHostname: "127.0.0.1", MasterServerAddr: srv.Addr(),
					GlobalSegmentSize: seg, MasterRPC: mode, RPCTimeout: 5 * time.Second,
					Stack: stack.Config{Engine: engine.Config{TLSFiles: f}}})
			}
			holder, err := mkc(files, 8<<20)
			assert.NilError(t, err, mode)
			val := bytes.Repeat([]byte("t"), 5000)
			assert.NilError(t, holder.Put(ctxT(t), "tls-"+mode, val, client.ReplicateConfig{}))
			got, err := holder.Get(ctxT(t), "tls-"+mode)
			assert.NilError(t, err)
			assert.Assert(t, bytes.Equal(got, val))
			holder.Close()
			for _, f := range []tlsconf.Files{{}, other} {
				c, err := mkc(f, 0)
				if err == nil {
					c.Close()
				}
				assert.Assert(t, err != nil, "%s client with TLS files %+v admitted", mode, f)
			}
		}
	})
	t.Run("https metadata", func(t *testing.T) {
		p, err := tlsconf.Load(files)
		assert.NilError(t, err)
		srv, err := mdhttp.NewServer(mdhttp.ServerConfig{})
		assert.NilError(t, err)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		assert.NilError(t, err)
		hs := mdhttp.HTTPServer(srv, 0, nil)
		go func() { _ = hs.Serve(tls.NewListener(ln, p.Server)) }()
		defer hs.Close()
		conn := "https://" + ln.Addr().String() + "/metadata"
		ec := engine.Config{LocalServerName: "tls-seg", MetadataConn: conn, Transports: []string{"tcp"}, BindAddress: "127.0.0.1",
			TLSFiles: files}
		e, err := stack.New(ctxT(t), stack.Config{Engine: ec})
		assert.NilError(t, err)
		defer e.Close()
		ec.TLSFiles = other
		ec.LocalServerName = "other-seg"
		_, err = stack.New(ctxT(t), stack.Config{Engine: ec})
		assert.Assert(t, err != nil, "a client of another CA used the https metadata server")
		// Plain HTTP to the TLS port gets nothing.
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + ln.Addr().String() + "/health")
		if err == nil {
			resp.Body.Close()
			assert.Assert(t, resp.StatusCode != 200)
		}
	})
}
