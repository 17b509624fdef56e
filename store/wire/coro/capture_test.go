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
		mu sync.Mutex
		n  int
		wg sync.WaitGroup
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
		names := map[uint32]string{} // seq -> method; seqs count per connection
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

// reencode decodes a body with c and encodes it again, with its type
// literal when the body carried one (a struct_pack build without NDEBUG,
// as Mooncake's Release build is).
func reencode[T any](c sp.Codec[T]) func([]byte) ([]byte, error) {
	return func(b []byte) ([]byte, error) {
		v, err := sp.Unmarshal(c, b, sp.Limits{})
		if err != nil {
			return nil, err
		}
		if sp.HasLiteral(b) {
			return sp.MarshalWithLiteral(c, &v), nil
		}
		return sp.Marshal(c, &v), nil
	}
}

// rebuildError rebuilds a coro_rpc failure frame from its code and text,
// the message's type literal included when the captured body has one.
func rebuildError(seq uint32, re *RPCError, body []byte) []byte {
	if !sp.HasLiteral(body) || re.Code > 255 {
		return AppendError(nil, seq, re.Code, re.Msg)
	}
	b := sp.MarshalWithLiteral(sp.String, &re.Msg)
	h := RespHeader{Magic: Magic, Version: Version, ErrCode: uint8(re.Code), Seq: seq, Length: uint32(len(b))}
	return append(h.Append(nil), b...)
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
	"FetchTasks":            {reencode(FetchTasksArgsCodec), reencode(ExpTasksCodec)},
	"MarkTaskToComplete":    {reencode(MarkTaskToCompleteArgsCodec), reencode(ExpVoidCodec)},
}

// capturedSets are the directories of captured frames, each with its
// README: frames between a yalantinglibs coro_rpc client and server built
// for the purpose, and frames between Mooncake's own store client and
// mooncake_master.
var capturedSets = []struct {
	dir  string
	from string
}{
	{"testdata/captured", "yalantinglibs coro_rpc stand-ins"},
	{"testdata/mooncake-goclient", "mooncake_master answering our Go client"},
	{"testdata/mooncake", "mooncake_master and Mooncake's store client"},
}

// TestCapturedFrames: every captured frame parses, its body decodes with
// our codec and re-encodes to the same bytes, and the whole frame rebuilt
// by our framing from that body equals the captured bytes.
func TestCapturedFrames(t *testing.T) {
	for _, set := range capturedSets {
		t.Run(filepath.Base(set.dir), func(t *testing.T) {
			files, err := filepath.Glob(filepath.Join(set.dir, "*.bin"))
			assert.NilError(t, err)
			if len(files) == 0 {
				t.Skipf("no captured frames in %s", set.dir)
			}
			sort.Strings(files)
			seen := map[string]bool{}
			for _, f := range files {
				checkCapturedFrame(t, f, seen)
			}
			t.Logf("methods verified against frames from %s: %v", set.from, keys(seen))
		})
	}
}

func checkCapturedFrame(t *testing.T, f string, seen map[string]bool) {
	base := filepath.Base(f)
	parts := strings.SplitN(strings.TrimSuffix(base, ".bin"), "-", 3)
	assert.Equal(t, len(parts), 3, base)
	kind, method := parts[1], parts[2]
	b, err := os.ReadFile(f)
	assert.NilError(t, err)
	t.Run(base, func(t *testing.T) {
		var body []byte
		var reframe func(body []byte) []byte
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
			reframe = func(body []byte) []byte { return AppendRequest(nil, req.Header.Seq, req.Header.FuncID, body, nil) }
		case "resp":
			r := bytes.NewReader(b)
			resp, err := ReadResponse(r, 0)
			assert.NilError(t, err)
			assert.Equal(t, r.Len(), 0, "bytes after the frame")
			assert.NilError(t, ResponseError(resp))
			body = resp.Body
			reframe = func(body []byte) []byte { return AppendResponse(nil, resp.Header.Seq, body) }
		case "errresp":
			// A coro_rpc failure: rebuilt whole from its code and text.
			resp, err := ReadResponse(bytes.NewReader(b), 0)
			assert.NilError(t, err)
			var re *RPCError
			assert.Assert(t, errors.As(ResponseError(resp), &re))
			assert.DeepEqual(t, hexOf(rebuildError(resp.Header.Seq, re, resp.Body)), hexOf(b))
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
			assert.DeepEqual(t, hexOf(reframe(nil)), hexOf(b))
			seen[method] = true
			return
		}
		again, err := f(body)
		assert.NilError(t, err)
		assert.DeepEqual(t, again, body)
		assert.DeepEqual(t, hexOf(reframe(again)), hexOf(b))
		seen[method] = true
	})
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
// from the values sent and answered equal the captured bytes.
func TestCapturedFramesByteExact(t *testing.T) {
	read := func(t *testing.T, path string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", path))
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
	// mooncake_master 3b5a594 (testdata/mooncake-goclient): every body
	// carries its type literal; the first Ping after MountSegment answers
	// view version 0 (no HA) and NEED_REMOUNT (the client is taken in by
	// the master's monitor thread only after its first ping).
	mcPing := OK(PingResponse{ViewVersionID: 0, ClientStatus: ClientNeedRemount})
	mcCID := UUID{Hi: 0x1111, Lo: 0x2222}
	void := OK(struct{}{})
	yes := OK(true)
	notReg := "the rpc function not registered"
	for _, tc := range []struct {
		file string
		want []byte
	}{
		{"captured/0001-req-ServiceReady.bin", AppendRequest(nil, 0, MethodServiceReady.ID, nil, nil)},
		{"captured/0002-resp-ServiceReady.bin", AppendResponse(nil, 0, sp.Marshal(ExpStringCodec, &ExpString{OK: true, Value: version}))},
		{"captured/0003-req-MountSegment.bin", AppendRequest(nil, 1, MethodMountSegment.ID, sp.Marshal(MountSegmentArgsCodec, &seg), nil)},
		{"captured/0005-req-Ping.bin", AppendRequest(nil, 2, MethodPing.ID, sp.Marshal(UUIDCodec, &refCID), nil)},
		{"captured/0006-resp-Ping.bin", AppendResponse(nil, 2, sp.Marshal(ExpPingCodec, &ping))},
		{"captured/0020-resp-GetReplicaList.bin", AppendResponse(nil, 9, sp.Marshal(ExpReplicaListCodec, &missing))},
		{"mooncake-goclient/0002-resp-ServiceReady.bin", AppendResponse(nil, 0, sp.MarshalWithLiteral(ExpStringCodec, &ExpString{OK: true, Value: version}))},
		{"mooncake-goclient/0004-resp-MountSegment.bin", AppendResponse(nil, 1, sp.MarshalWithLiteral(ExpVoidCodec, &void))},
		{"mooncake-goclient/0005-req-Ping.bin", AppendRequest(nil, 2, MethodPing.ID, sp.Marshal(UUIDCodec, &mcCID), nil)},
		{"mooncake-goclient/0006-resp-Ping.bin", AppendResponse(nil, 2, sp.MarshalWithLiteral(ExpPingCodec, &mcPing))},
		{"mooncake-goclient/0014-resp-ExistKey.bin", AppendResponse(nil, 6, sp.MarshalWithLiteral(ExpBoolCodec, &yes))},
		{"mooncake-goclient/0018-resp-GetReplicaList.bin", AppendResponse(nil, 8, sp.MarshalWithLiteral(ExpReplicaListCodec, &missing))},
		{"mooncake-goclient/0024-errresp-fid12345.bin", rebuildError(11, &RPCError{Code: ErrcFunctionNotRegistered, Msg: notReg},
			sp.MarshalWithLiteral(sp.String, &notReg))},
	} {
		t.Run(tc.file, func(t *testing.T) {
			assert.DeepEqual(t, hexOf(tc.want), hexOf(read(t, tc.file)))
		})
	}
}

func hexOf(b []byte) string { return fmt.Sprintf("%x", b) }
