package coro

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// The capture proxy records golden frames from a real Mooncake master and
// client (testdata/captured/README.md). It runs only when asked:
//
//	go test ./store/wire/coro -run TestCaptureProxy -v \
//	  -capture.listen 127.0.0.1:50061 -capture.target 127.0.0.1:50051 \
//	  -capture.out /tmp/coro-capture -capture.for 60s
//
// and the Mooncake client is pointed at the listen address. Each frame is
// written whole (header and body) to NNNN-req-<Method>.bin or
// NNNN-resp-<Method>.bin, numbered in the order the proxy saw them.
var (
	captureListen = flag.String("capture.listen", "", "capture proxy: address to listen on (empty: skip)")
	captureTarget = flag.String("capture.target", "127.0.0.1:50051", "capture proxy: the real mooncake_master")
	captureOut    = flag.String("capture.out", "", "capture proxy: directory for the frames")
	captureFor    = flag.Duration("capture.for", time.Minute, "capture proxy: how long to run")
)

func TestCaptureProxy(t *testing.T) {
	if *captureListen == "" {
		t.Skip("capture proxy runs only with -capture.listen")
	}
	assert.Assert(t, *captureOut != "", "-capture.out is required")
	assert.NilError(t, os.MkdirAll(*captureOut, 0o755))
	lis, err := net.Listen("tcp", *captureListen)
	assert.NilError(t, err)
	defer lis.Close()
	time.AfterFunc(*captureFor, func() { lis.Close() })

	var (
		mu    sync.Mutex
		n     int
		names = map[uint32]string{} // seq -> method, per proxy (seqs are per client connection)
		wg    sync.WaitGroup
	)
	save := func(kind, method string, frame []byte) {
		mu.Lock()
		n++
		name := fmt.Sprintf("%04d-%s-%s.bin", n, kind, method)
		mu.Unlock()
		assert.Check(t, os.WriteFile(filepath.Join(*captureOut, name), frame, 0o644))
	}
	for {
		c, err := lis.Accept()
		if err != nil {
			break
		}
		up, err := net.Dial("tcp", *captureTarget)
		assert.NilError(t, err)
		wg.Add(2)
		go func() { // client -> master: requests
			defer wg.Done()
			defer up.Close()
			var raw bytes.Buffer // the frame's bytes exactly as they came
			in := io.TeeReader(c, &raw)
			for {
				raw.Reset()
				req, err := ReadRequest(in, 0)
				if err != nil {
					return
				}
				frame := append([]byte(nil), raw.Bytes()...)
				name := fmt.Sprintf("fid%d", req.Header.FuncID)
				if m, ok := methodNameOf(req.Header.FuncID); ok {
					name = m
				}
				mu.Lock()
				names[req.Header.Seq] = name
				mu.Unlock()
				save("req", name, frame)
				if _, err := up.Write(frame); err != nil {
					return
				}
			}
		}()
		go func() { // master -> client: responses
			defer wg.Done()
			defer c.Close()
			var raw bytes.Buffer
			in := io.TeeReader(up, &raw)
			for {
				raw.Reset()
				resp, err := ReadResponse(in, 0)
				if err != nil {
					return
				}
				frame := append([]byte(nil), raw.Bytes()...)
				mu.Lock()
				name := names[resp.Header.Seq]
				mu.Unlock()
				save("resp", name, frame)
				if _, err := c.Write(frame); err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// capturedNames are the handler names the capture proxy recognises: the
// modelled methods and the others MasterClient may send.
var capturedNames = []string{"CalcCacheStats", "BatchQueryIp", "BatchReplicaClear",
	"QuerySegmentStatus", "QuerySegmentStatusById", "MountLocalDiskSegment", "UnmountLocalDiskSegment",
	"PollRemoveAll", "EvictDiskReplica", "BatchEvictDiskReplica", "OffloadObjectHeartbeat", "ReportSsdCapacity"}

// methodNameOf names any master function id the proxy may see.
func methodNameOf(id uint32) (string, bool) {
	if m, ok := MethodByID(id); ok {
		return m.Name, true
	}
	for _, n := range capturedNames {
		if FuncID(ServicePrefix+n) == id {
			return n, true
		}
	}
	return "", false
}

// reencode decodes a body with c and encodes it again.
func reencode[T any](c sp.Codec[T]) func([]byte) ([]byte, error) {
	return func(b []byte) ([]byte, error) {
		v, err := sp.Unmarshal(c, b, sp.Limits{})
		if err != nil {
			return nil, err
		}
		return sp.Marshal(c, &v), nil
	}
}

// capturedCodecs: per method, the request and the answer body codecs.
var capturedCodecs = map[string][2]func([]byte) ([]byte, error){
	"Ping":                  {reencode(UUIDCodec), reencode(ExpPingCodec)},
	"MountSegment":          {reencode(MountSegmentArgsCodec), reencode(ExpVoidCodec)},
	"ReMountSegment":        {reencode(ReMountSegmentArgsCodec), reencode(ExpVoidCodec)},
	"UnmountSegment":        {reencode(UnmountSegmentArgsCodec), reencode(ExpVoidCodec)},
	"ExistKey":              {reencode(KeyArgsCodec), reencode(ExpBoolCodec)},
	"BatchExistKey":         {reencode(KeysArgsCodec), reencode(BatchBoolCodec)},
	"GetReplicaList":        {reencode(KeyArgsCodec), reencode(ExpReplicaListCodec)},
	"BatchGetReplicaList":   {reencode(KeysArgsCodec), reencode(BatchReplicaListCodec)},
	"PutStart":              {reencode(PutStartArgsCodec), reencode(ExpDescriptorsCodec)},
	"PutEnd":                {reencode(PutEndArgsCodec), reencode(ExpVoidCodec)},
	"PutRevoke":             {reencode(PutRevokeArgsCodec), reencode(ExpVoidCodec)},
	"BatchPutStart":         {reencode(BatchPutStartArgsCodec), reencode(BatchDescriptorsCodec)},
	"BatchPutEnd":           {reencode(BatchPutEndArgsCodec), reencode(BatchVoidCodec)},
	"BatchPutRevoke":        {reencode(BatchPutRevokeArgsCodec), reencode(BatchVoidCodec)},
	"Remove":                {reencode(RemoveArgsCodec), reencode(ExpVoidCodec)},
	"RemoveByRegex":         {reencode(RemoveArgsCodec), reencode(ExpInt64Codec)},
	"RemoveAll":             {reencode(RemoveAllArgsCodec), reencode(sp.Int64)},
	"BatchRemove":           {reencode(BatchRemoveArgsCodec), reencode(BatchVoidCodec)},
	"GetReplicaListByRegex": {reencode(KeyArgsCodec), reencode(ExpRegexReplicasCodec)},
	"GetFsdir":              {nil, reencode(ExpStringCodec)},
	"GetStorageConfig":      {nil, reencode(ExpStorageConfigCodec)},
	"ServiceReady":          {nil, reencode(ExpStringCodec)},
}

// TestCapturedFrames: every frame captured between a real mooncake_master
// and a real Mooncake client parses, and its body decodes with our codec
// and re-encodes to the same bytes.
func TestCapturedFrames(t *testing.T) {
	files, err := filepath.Glob("testdata/captured/*.bin")
	assert.NilError(t, err)
	if len(files) == 0 {
		t.Skip("no captured frames in testdata/captured")
	}
	sort.Strings(files)
	seen := map[string]bool{}
	for _, f := range files {
		base := filepath.Base(f)
		parts := strings.SplitN(strings.TrimSuffix(base, ".bin"), "-", 3)
		assert.Equal(t, len(parts), 3, base)
		kind, method := parts[1], parts[2]
		b, err := os.ReadFile(f)
		assert.NilError(t, err)
		t.Run(base, func(t *testing.T) {
			var body []byte
			switch kind {
			case "req":
				r := bytes.NewReader(b)
				req, err := ReadRequest(r, 0)
				assert.NilError(t, err)
				assert.Equal(t, r.Len(), 0, "bytes after the frame")
				assert.Equal(t, req.Header.MsgType, uint8(0))
				assert.Equal(t, len(req.Attach), 0)
				if m, ok := MethodByID(req.Header.FuncID); ok {
					assert.Equal(t, m.Name, method)
				}
				body = req.Body
			case "resp":
				r := bytes.NewReader(b)
				resp, err := ReadResponse(r, 0)
				assert.NilError(t, err)
				assert.Equal(t, r.Len(), 0, "bytes after the frame")
				assert.NilError(t, ResponseError(resp))
				body = resp.Body
			case "errresp":
				// A coro_rpc failure: rebuilt whole from its code and text.
				resp, err := ReadResponse(bytes.NewReader(b), 0)
				assert.NilError(t, err)
				var re *RPCError
				assert.Assert(t, errors.As(ResponseError(resp), &re))
				assert.DeepEqual(t, hexOf(AppendError(nil, resp.Header.Seq, re.Code, re.Msg)), hexOf(b))
				return
			default:
				t.Fatalf("unknown frame kind %q", kind)
			}
			codecs, ok := capturedCodecs[method]
			if !ok {
				t.Skipf("method %s is not modelled", method)
			}
			f := codecs[0]
			if kind == "resp" {
				f = codecs[1]
			}
			if f == nil {
				assert.Equal(t, len(body), 0, "call without arguments")
				return
			}
			again, err := f(body)
			assert.NilError(t, err)
			assert.DeepEqual(t, again, body)
			seen[method] = true
		})
	}
	t.Logf("methods verified against captured frames: %v", keys(seen))
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestCapturedFramesByteExact: whole frames our framing and codec build
// from the values the capturing client sent equal the captured bytes.
func TestCapturedFramesByteExact(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata/captured", name))
		if errors.Is(err, os.ErrNotExist) {
			t.Skip("no captured frames")
		}
		assert.NilError(t, err)
		return b
	}
	version := "2.0.0"
	ping := OK(PingResponse{ViewVersionID: 1, ClientStatus: ClientOK})
	missing := Fail[GetReplicaListResponse](CodeObjectNotFound)
	seg := MountSegmentArgs{Segment: Segment{ID: UUID{1, 2}, Name: "127.0.0.1:12345", Base: 0x7f0000000000, Size: 64 << 20,
		TEEndpoint: "127.0.0.1:12345", Protocol: "tcp"}, ClientID: refCID}
	for _, tc := range []struct {
		file string
		want []byte
	}{
		{"0001-req-ServiceReady.bin", AppendRequest(nil, 0, MethodServiceReady.ID, nil, nil)},
		{"0002-resp-ServiceReady.bin", AppendResponse(nil, 0, sp.Marshal(ExpStringCodec, &ExpString{OK: true, Value: version}))},
		{"0003-req-MountSegment.bin", AppendRequest(nil, 1, MethodMountSegment.ID, sp.Marshal(MountSegmentArgsCodec, &seg), nil)},
		{"0005-req-Ping.bin", AppendRequest(nil, 2, MethodPing.ID, sp.Marshal(UUIDCodec, &refCID), nil)},
		{"0006-resp-Ping.bin", AppendResponse(nil, 2, sp.Marshal(ExpPingCodec, &ping))},
		{"0020-resp-GetReplicaList.bin", AppendResponse(nil, 9, sp.Marshal(ExpReplicaListCodec, &missing))},
	} {
		t.Run(tc.file, func(t *testing.T) {
			assert.DeepEqual(t, hexOf(tc.want), hexOf(read(tc.file)))
		})
	}
}

func hexOf(b []byte) string { return fmt.Sprintf("%x", b) }
