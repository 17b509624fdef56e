package coro

import (
	"bufio"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// loadReference reads testdata/structpack-reference.txt: bytes written by
// yalantinglibs' own struct_pack (testdata/README.md says how), one
// "name hex" line per message and one "fid name id" line per function id.
func loadReference(t testing.TB) (msgs map[string][]byte, fids map[string]uint32) {
	t.Helper()
	f, err := os.Open("testdata/structpack-reference.txt")
	assert.NilError(t, err)
	defer f.Close()
	msgs, fids = map[string][]byte{}, map[string]uint32{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		switch {
		case len(fs) == 3 && fs[0] == "fid":
			id, err := strconv.ParseUint(fs[2], 10, 32)
			assert.NilError(t, err)
			fids[fs[1]] = uint32(id)
		case len(fs) == 1:
			msgs[fs[0]] = []byte{}
		case len(fs) == 2:
			b, err := hex.DecodeString(fs[1])
			assert.NilError(t, err)
			msgs[fs[0]] = b
		default:
			t.Fatalf("bad reference line %q", sc.Text())
		}
	}
	assert.NilError(t, sc.Err())
	return msgs, fids
}

func u64p(v uint64) *uint64 { return &v }

// The values the reference generator serialized, built here from the same
// literals.
var (
	refCID = UUID{Hi: 0x1122334455667788, Lo: 0x99aabbccddeeff00}
	refSeg = Segment{ID: UUID{1, 2}, Name: "127.0.0.1:12345", Base: 0x7f0000000000, Size: 1 << 20,
		TEEndpoint: "127.0.0.1:12345", Protocol: "tcp", HostID: "host-a"}
	refCfg  = ReplicateConfig{ReplicaNum: 2}
	refCfg2 = ReplicateConfig{ReplicaNum: 1, SoftPinAction: 1, SoftPinTTLMs: u64p(5000), WithHardPin: true,
		PreferredSegments: []string{"a", "bc"}, PreferredSegment: "p", DataType: 1, HostID: "h",
		GroupIDs: &[]string{"g"}}
	refOM  = ObjectMeta{Key: "key1"}
	refOM2 = ObjectMeta{Key: "key2", ObjectChecksum: u64p(0xdeadbeef)}
	refBig = strings.Repeat("x", 300)
	refBD  = BufferDescriptor{Size: 1024, BufferAddress: 0x7f0000001000, Protocol: "tcp", TransportEndpoint: "127.0.0.1:12345"}
	refDM  = ReplicaDescriptor{ID: 7, Kind: KindMemory, Buffer: refBD, Status: StatusProcessing}
	refDD  = ReplicaDescriptor{ID: 8, Kind: KindDisk, Disk: DiskDescriptor{FilePath: "/tmp/f", ObjectSize: 1024}, Status: StatusComplete}
	refDL  = ReplicaDescriptor{ID: 9, Kind: KindLocalDisk, LocalDisk: LocalDiskDescriptor{ClientID: refCID, ObjectSize: 55, TransportEndpoint: "ep"}, Status: StatusComplete}
	refDF  = ReplicaDescriptor{ID: 10, Kind: KindDFS, DFS: DFSDescriptor{FilePath: "/dfs/x", Offset: 4096, ObjectSize: 100, AlignedSize: 4096, ShardIdx: -3}, Status: StatusComplete}
)

// refCase encodes one value with its codec and checks it against the
// reference bytes, then decodes the reference bytes and re-encodes them.
type refCase struct {
	name  string
	check func(t *testing.T, want []byte)
}

func same[T any](c sp.Codec[T], v T) func(t *testing.T, want []byte) {
	return func(t *testing.T, want []byte) {
		got := sp.Marshal(c, &v)
		assert.DeepEqual(t, hex.EncodeToString(got), hex.EncodeToString(want))
		back, err := sp.Unmarshal(c, want, sp.Limits{})
		assert.NilError(t, err)
		assert.DeepEqual(t, back, v)
		assert.DeepEqual(t, sp.Marshal(c, &back), want)
	}
}

func TestStructPackReference(t *testing.T) {
	msgs, _ := loadReference(t)
	cases := []refCase{
		{"req_Ping", same(UUIDCodec, refCID)},
		{"req_MountSegment", same(MountSegmentArgsCodec, MountSegmentArgs{Segment: refSeg, ClientID: refCID})},
		{"req_ReMountSegment", same(ReMountSegmentArgsCodec, ReMountSegmentArgs{Segments: []Segment{refSeg}, ClientID: refCID})},
		{"req_UnmountSegment", same(UnmountSegmentArgsCodec, UnmountSegmentArgs{SegmentID: UUID{1, 2}, ClientID: refCID})},
		{"req_ExistKey", same(KeyArgsCodec, KeyArgs{Key: "key1", TenantID: "default"})},
		{"req_BatchExistKey", same(KeysArgsCodec, KeysArgs{Keys: []string{"k1", "k2"}, TenantID: "default"})},
		{"req_GetReplicaList", same(KeyArgsCodec, KeyArgs{Key: "key1", TenantID: "default"})},
		{"req_PutStart", same(PutStartArgsCodec, PutStartArgs{ClientID: refCID, Key: "key1", SliceLength: 1024, Config: refCfg, TenantID: "default"})},
		{"req_PutStart_cfg2", same(PutStartArgsCodec, PutStartArgs{ClientID: refCID, Key: "key1", SliceLength: 1024, Config: refCfg2, TenantID: "default"})},
		{"req_PutStart_bigkey", same(PutStartArgsCodec, PutStartArgs{ClientID: refCID, Key: refBig, SliceLength: 1024, Config: refCfg, TenantID: "default"})},
		{"req_PutEnd", same(PutEndArgsCodec, PutEndArgs{ClientID: refCID, Meta: refOM, ReplicaType: ReplicaAll, TenantID: "default"})},
		{"req_PutEnd_cksum", same(PutEndArgsCodec, PutEndArgs{ClientID: refCID, Meta: refOM2, ReplicaType: ReplicaMemory, TenantID: "default"})},
		{"req_PutRevoke", same(PutRevokeArgsCodec, PutRevokeArgs{ClientID: refCID, Key: "key1", ReplicaType: ReplicaAll, TenantID: "default"})},
		{"req_BatchPutStart", same(BatchPutStartArgsCodec, BatchPutStartArgs{ClientID: refCID, Keys: []string{"k1", "k2"}, SliceLengths: []uint64{10, 20}, Config: refCfg, TenantID: "default"})},
		{"req_BatchPutEnd", same(BatchPutEndArgsCodec, BatchPutEndArgs{ClientID: refCID, Metas: []ObjectMeta{refOM, refOM2}, ReplicaType: ReplicaAll, TenantID: "default"})},
		{"req_Remove", same(RemoveArgsCodec, RemoveArgs{Key: "key1", TenantID: "default"})},
		{"req_RemoveByRegex", same(RemoveArgsCodec, RemoveArgs{Key: "^k.*", Force: true, TenantID: "default"})},
		{"req_RemoveAll", same(RemoveAllArgsCodec, RemoveAllArgs{TenantID: "default"})},
		{"req_BatchRemove", same(BatchRemoveArgsCodec, BatchRemoveArgs{Keys: []string{"k1"}, TenantID: "default"})},
		{"resp_void_ok", same(ExpVoidCodec, OK(struct{}{}))},
		{"resp_void_err", same(ExpVoidCodec, Fail[struct{}](CodeObjectNotFound))},
		{"resp_string_ok", same(ExpStringCodec, OK("2.0.0"))},
		{"resp_bool_ok", same(ExpBoolCodec, OK(true))},
		{"resp_bool_err", same(ExpBoolCodec, Fail[bool](CodeObjectNotFound))},
		{"resp_ping_ok", same(ExpPingCodec, OK(PingResponse{ViewVersionID: 3, ClientStatus: ClientNeedRemount}))},
		{"resp_putstart_ok", same(ExpDescriptorsCodec, OK([]ReplicaDescriptor{refDM}))},
		{"resp_putstart_err", same(ExpDescriptorsCodec, Fail[[]ReplicaDescriptor](CodeObjectAlreadyExists))},
		{"resp_grl_ok", same(ExpReplicaListCodec, OK(GetReplicaListResponse{Replicas: []ReplicaDescriptor{refDM, refDD, refDL, refDF}, LeaseTTLMs: 10000}))},
		{"resp_grl_cksum", same(ExpReplicaListCodec, OK(GetReplicaListResponse{Replicas: []ReplicaDescriptor{refDM}, LeaseTTLMs: 10000, ObjectChecksum: u64p(0x1234)}))},
		{"resp_batch_bool", same(BatchBoolCodec, []ExpBool{OK(true), Fail[bool](CodeObjectNotFound)})},
		{"resp_batch_void", same(BatchVoidCodec, []ExpVoid{OK(struct{}{}), Fail[struct{}](CodeInternalError)})},
		{"resp_batch_putstart", same(BatchDescriptorsCodec, []ExpDescriptors{OK([]ReplicaDescriptor{refDM}), Fail[[]ReplicaDescriptor](CodeObjectAlreadyExists)})},
		{"resp_long_ok", same(ExpInt64Codec, OK(int64(5)))},
		{"resp_removeall", same(sp.Int64, int64(3))},
		{"resp_storagecfg", same(ExpStorageConfigCodec, OK(GetStorageConfigResponse{FSDir: "/fs", EnableDiskEviction: true, QuotaBytes: 77}))},
		{"resp_regex_one", same(ExpRegexReplicasCodec, OK([]sp.KV[string, []ReplicaDescriptor]{{Key: "k2", Value: []ReplicaDescriptor{refDM}}}))},
		{"resp_regex_empty", same(ExpRegexReplicasCodec, OK[[]sp.KV[string, []ReplicaDescriptor]](nil))},
		{"resp_errmsg", same(sp.String, "invalid rpc arg")},
		{"resp_bigstring", same(ExpStringCodec, OK(refBig))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, ok := msgs[c.name]
			assert.Assert(t, ok, "no reference bytes for %s", c.name)
			c.check(t, want)
		})
	}
	// The no-argument calls send an empty body.
	assert.Equal(t, len(msgs["req_ServiceReady_none"]), 0)
	assert.Equal(t, len(msgs["req_GetFsdir_none"]), 0)
}

func TestFuncIDReference(t *testing.T) {
	_, fids := loadReference(t)
	for _, m := range Methods {
		want, ok := fids[m.Name]
		if !ok {
			// Not in the reference: the id must be one real Mooncake
			// frames carry (TestCapturedFrames checks the names).
			// MarkTaskToComplete alone has neither: kvferry-master never
			// assigns a task, so no client sends it; its id is the rule's.
			// The methods of rest.go were checked against mooncake_master
			// itself (testdata/mooncake-rest-verified.txt).
			found, _ := filepath.Glob(filepath.Join("testdata", "mooncake", "*-req-"+m.Name+".bin"))
			assert.Assert(t, len(found) > 0 || m == MethodMarkTaskToComplete || restVerified(t)[m.Name],
				"no reference id, no captured frame and no check against mooncake_master for %s", m.Name)
			want = FuncID(ServicePrefix + m.Name)
		}
		assert.Equal(t, m.ID, want, m.Name)
		got, ok := MethodByID(want)
		assert.Assert(t, ok)
		assert.Equal(t, got.Name, m.Name)
	}
	// Every id the reference lists follows the same rule, modelled or not.
	for name, want := range fids {
		assert.Equal(t, FuncID(ServicePrefix+name), want, name)
	}
}

// restVerified reads testdata/mooncake-rest-verified.txt: the methods of
// rest.go checked against mooncake_master (TestRestMethodsAgainstRealServer).
func restVerified(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "mooncake-rest-verified.txt"))
	assert.NilError(t, err)
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out[l] = true
		}
	}
	return out
}
