package descriptor

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// mooncakeTCP is a descriptor as Mooncake's TCP transport publishes it
// (specs/mooncake.md §3.3), written by hand from the spec.
const mooncakeTCP = `{"buffers":[{"addr":140234567913472,"length":1073741824,"name":"10.0.0.5:15123"}],` +
	`"name":"10.0.0.5:15123","protocol":"tcp","tcp_data_port":16001,"tcp_proto_version":2,` +
	`"timestamp":"2026-11-29 10:11:12.123456"}` + "\n"

const mooncakeRDMA = `{"name":"node1","protocol":"rdma","tcp_data_port":0,"tcp_proto_version":2,` +
	`"devices":[{"name":"mlx5_0","lid":0,"gid":"00:00:00:00:00:00:00:00:00:00:ff:ff:0a:00:00:05"}],` +
	`"buffers":[{"name":"cpu:0","addr":4096,"length":8192,"rkey":[17],"lkey":[18]}],` +
	`"priority_matrix":{"cpu:0":[["mlx5_0"],[]]}}`

func TestDecodeMooncake(t *testing.T) {
	s, err := Unmarshal([]byte(mooncakeTCP))
	nilErr(t, err)
	eq(t, s.Name, "10.0.0.5:15123")
	eq(t, s.Protocol, "tcp")
	eq(t, s.TCPDataPort, 16001)
	eq(t, s.TCPProtoVersion, 2)
	deepEq(t, s.Buffers, []Buffer{{Name: "10.0.0.5:15123", Addr: 140234567913472, Length: 1 << 30}})
	check(t, s.Host == nil)
	b, ok := s.Find(140234567913472+100, 4096)
	check(t, ok)
	eq(t, b.Length, uint64(1<<30))
	_, ok = s.Find(140234567913472+(1<<30)-1, 2)
	check(t, !ok, "range crossing the end")

	r, err := Unmarshal([]byte(mooncakeRDMA))
	nilErr(t, err)
	eq(t, r.Devices[0].Name, "mlx5_0")
	deepEq(t, r.Buffers[0].RKey, []uint64{17})
}

func TestMissingProtoVersionMeansV1(t *testing.T) {
	s, err := Unmarshal([]byte(`{"name":"a:1","protocol":"tcp","tcp_data_port":5,"buffers":[]}`))
	nilErr(t, err)
	eq(t, s.TCPProtoVersion, 1)
}

func TestRejectionRules(t *testing.T) {
	bad := map[string]string{
		"not json":           `{`,
		"no name":            `{"protocol":"tcp","buffers":[]}`,
		"no protocol":        `{"name":"a"}`,
		"buffer no name":     `{"name":"a","protocol":"tcp","buffers":[{"name":"","addr":1,"length":1}]}`,
		"buffer zero addr":   `{"name":"a","protocol":"tcp","buffers":[{"name":"a","addr":0,"length":1}]}`,
		"buffer zero len":    `{"name":"a","protocol":"tcp","buffers":[{"name":"a","addr":1,"length":0}]}`,
		"buffer wraps":       `{"name":"a","protocol":"tcp","buffers":[{"name":"a","addr":18446744073709551615,"length":2}]}`,
		"rdma device no gid": `{"name":"a","protocol":"rdma","devices":[{"name":"m","lid":1,"gid":""}],"buffers":[]}`,
		"rdma key count":     `{"name":"a","protocol":"rdma","devices":[{"name":"m","gid":"g"}],"buffers":[{"name":"cpu:0","addr":1,"length":1,"rkey":[1,2],"lkey":[1,2]}]}`,
		"negative addr":      `{"name":"a","protocol":"tcp","buffers":[{"name":"a","addr":-1,"length":1}]}`,
		"chunk gap":          `{"name":"a","protocol":"tcp","buffers":[{"name":"cuda:0","addr":4096,"length":8192,"kvferry_chunks":[{"addr":4096,"size":4096},{"addr":12288,"size":4096}]}]}`,
		"chunks short":       `{"name":"a","protocol":"tcp","buffers":[{"name":"cuda:0","addr":4096,"length":8192,"kvferry_chunks":[{"addr":4096,"size":4096}]}]}`,
		"chunk after start":  `{"name":"a","protocol":"tcp","buffers":[{"name":"cuda:0","addr":4096,"length":4096,"kvferry_chunks":[{"addr":8192,"size":4096}]}]}`,
		"chunk zero size":    `{"name":"a","protocol":"tcp","buffers":[{"name":"cuda:0","addr":4096,"length":4096,"kvferry_chunks":[{"addr":0,"size":0},{"addr":0,"size":8192}]}]}`,
	}
	for name, js := range bad {
		_, err := Unmarshal([]byte(js))
		check(t, errors.Is(err, ErrMalformed), "%s: %v", name, err)
	}
}

func TestEncodeFieldsAsMooncake(t *testing.T) {
	s := &Segment{Name: "127.0.0.1:15000", Protocol: "tcp", TCPDataPort: 16000, TCPProtoVersion: 2,
		Timestamp: "2026-11-29 10:00:00.000000", Buffers: []Buffer{{Name: "127.0.0.1:15000", Addr: 4096, Length: 8192}},
		Host: &Host{BootID: "b", PID: 7}, Transports: []string{"local", "tcp"}, Features: []string{FeatureNotifyBytes}}
	b, err := Marshal(s)
	nilErr(t, err)
	var m map[string]any
	nilErr(t, json.Unmarshal(b, &m))
	for _, k := range []string{"name", "protocol", "tcp_data_port", "tcp_proto_version", "timestamp", "buffers"} {
		_, ok := m[k]
		check(t, ok, "missing %s in %s", k, b)
	}
	buf := m["buffers"].([]any)[0].(map[string]any)
	eq(t, buf["addr"], float64(4096)) // a JSON number, not hex
	_, hasRKey := buf["rkey"]
	check(t, !hasRKey, "tcp buffers carry no keys")
	back, err := Unmarshal(b)
	nilErr(t, err)
	deepEq(t, back, s)
	check(t, back.Has(FeatureNotifyBytes))
	mc, err := Unmarshal([]byte(mooncakeTCP))
	nilErr(t, err)
	check(t, !mc.Has(FeatureNotifyBytes), "Mooncake announces no kvferry feature")
}

func TestRPCMetaAndNames(t *testing.T) {
	m, err := UnmarshalRPCMeta([]byte(`{"ip_or_host_name":"10.1.2.3","rpc_port":15001}`))
	nilErr(t, err)
	eq(t, m.Addr(), "10.1.2.3:15001")
	_, err = UnmarshalRPCMeta([]byte(`{"ip_or_host_name":"","rpc_port":1}`))
	check(t, errors.Is(err, ErrMalformed))
	p, err := ParseP2PName("[::1]:15500")
	nilErr(t, err)
	eq(t, p.IPOrHostName, "::1")
	eq(t, P2PName("::1", 15500), "[::1]:15500")
	for _, bad := range []string{"", "host", "host:", "host:0", "host:70000", ":15"} {
		_, err := ParseP2PName(bad)
		check(t, err != nil, bad)
	}
}

func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte(mooncakeTCP))
	f.Add([]byte(mooncakeRDMA))
	f.Add([]byte(`{"name":"a","protocol":["tcp","rdma"],"buffers":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Unmarshal(data)
		if err != nil {
			if s != nil {
				t.Fatal("error with a result")
			}
			return
		}
		b, err := Marshal(s)
		if err != nil {
			t.Fatalf("marshal a decoded descriptor: %v", err)
		}
		s2, err := Unmarshal(b)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		b2, _ := Marshal(s2)
		if string(b) != string(b2) {
			t.Fatalf("unstable round trip:\n%s\n%s", b, b2)
		}
	})
}

// TestFindContinues: a registration published as several buffers (one per
// memory region) is found as one buffer across its parts; adjacent buffers
// of separate registrations are not merged.
func TestFindContinues(t *testing.T) {
	s := &Segment{Buffers: []Buffer{
		{Name: "cpu:0", Addr: 0x1000, Length: 0x1000, RKey: []uint64{1}},
		{Name: "cpu:0", Addr: 0x2000, Length: 0x1000, RKey: []uint64{2}, Continues: true},
		{Name: "cpu:0", Addr: 0x3000, Length: 0x1000, RKey: []uint64{3}, Continues: true},
		{Name: "cpu:0", Addr: 0x4000, Length: 0x1000, RKey: []uint64{4}},
	}}
	b, ok := s.Find(0x1800, 0x2000)
	check(t, ok)
	eq(t, b.Addr, uint64(0x1000))
	eq(t, b.Length, uint64(0x3000))
	deepEq(t, b.RKey, []uint64{1})
	b, ok = s.Find(0x2800, 0x100)
	check(t, ok)
	deepEq(t, b.RKey, []uint64{2})
	_, ok = s.Find(0x3800, 0x1000) // into the next registration
	check(t, !ok)
	_, ok = s.Find(0x1000, 0x3001)
	check(t, !ok)
	// The flag travels in the JSON (and Mooncake's peers ignore it).
	raw, err := json.Marshal(s.Buffers[1])
	nilErr(t, err)
	check(t, strings.Contains(string(raw), `"kvferry_continues":true`), "%s", raw)
	raw, err = json.Marshal(s.Buffers[0])
	nilErr(t, err)
	check(t, !strings.Contains(string(raw), "kvferry_continues"), "%s", raw)
}

// TestChunks: a buffer's chunks round-trip, and ChunkAt finds the one
// holding an address.
func TestChunks(t *testing.T) {
	js := `{"name":"a","protocol":"tcp","buffers":[{"name":"cuda:0","addr":8192,"length":8192,"kvferry_share":"ipc",` +
		`"kvferry_chunks":[{"addr":4096,"size":8192,"handle":"AB"},{"addr":12288,"size":4096,"handle":"CD"}]}]}`
	s, err := Unmarshal([]byte(js))
	nilErr(t, err)
	b := s.Buffers[0]
	eq(t, len(b.Chunks), 2)
	for addr, want := range map[uint64]string{8192: "AB", 12287: "AB", 12288: "CD", 16383: "CD"} {
		c, ok := b.ChunkAt(addr)
		check(t, ok)
		eq(t, c.Handle, want, "%#x", addr)
	}
	_, ok := b.ChunkAt(16384)
	check(t, !ok)
	_, ok = b.ChunkAt(4095)
	check(t, !ok)
	c := s.Clone()
	c.Buffers[0].Chunks[0].Handle = "EF"
	eq(t, s.Buffers[0].Chunks[0].Handle, "AB")
	out, err := Marshal(s)
	nilErr(t, err)
	check(t, strings.Contains(string(out), `"kvferry_chunks":[{"addr":4096,"size":8192,"handle":"AB"}`), "%s", out)
}

// TestDecodeMooncakeNVLink: descriptors of Mooncake's nvlink and
// nvlink_intra transports (GPU buffers by location with the IPC or fabric
// handle in shm_name, upper-case hex, as they publish them) parse, and
// their buffers are GPU memory without kvferry's fields.
func TestDecodeMooncakeNVLink(t *testing.T) {
	h := strings.Repeat("0123456789ABCDEF", 8) // 64 bytes
	for _, proto := range []string{"nvlink", "nvlink_intra"} {
		js := `{"name":"10.0.0.5:12001","protocol":"` + proto + `","tcp_data_port":0,"tcp_proto_version":2,` +
			`"timestamp":"2026-11-29 10:11:12.123456","buffers":[{"name":"cuda:0","addr":140000000000000,"length":2097152,"shm_name":"` + h + `"}]}`
		s, err := Unmarshal([]byte(js))
		nilErr(t, err, proto)
		eq(t, s.Protocol, proto)
		b := s.Buffers[0]
		check(t, b.GPU() && b.Share == "" && b.IPCOffset == 0 && b.Chunks == nil, "%+v", b)
		eq(t, b.ShmName, h)
	}
}

// TestIncarnation: the incarnation travels as "kvferry_incarnation", is
// absent from Mooncake's descriptors and from descriptors without one,
// and only 32 hex digits decode.
func TestIncarnation(t *testing.T) {
	inc, err := NewIncarnation(strings.NewReader("0123456789abcdef"))
	nilErr(t, err)
	eq(t, inc, "30313233343536373839616263646566")
	b, ok := ParseIncarnation(inc)
	check(t, ok)
	eq(t, string(b[:]), "0123456789abcdef")
	for _, bad := range []string{"", "3031", inc + "00", "zz" + inc[2:]} {
		_, ok := ParseIncarnation(bad)
		check(t, !ok, bad)
	}
	_, err = NewIncarnation(strings.NewReader("short"))
	check(t, err != nil)

	s := &Segment{Name: "a", Protocol: ProtocolTCP, TCPDataPort: 15001, TCPProtoVersion: 2, Incarnation: inc}
	j, err := Marshal(s)
	nilErr(t, err)
	check(t, strings.Contains(string(j), `"kvferry_incarnation":"`+inc+`"`), string(j))
	back, err := Unmarshal(j)
	nilErr(t, err)
	eq(t, back.Incarnation, inc)
	eq(t, back.Clone().Incarnation, inc)
	s.Incarnation = ""
	j, err = Marshal(s)
	nilErr(t, err)
	check(t, !strings.Contains(string(j), "kvferry_incarnation"), string(j))
	m, err := Unmarshal([]byte(mooncakeTCP))
	nilErr(t, err)
	eq(t, m.Incarnation, "")
}
