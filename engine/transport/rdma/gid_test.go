package rdma

import (
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/transport/rdma/ibv"
)

func v4GID(a, b, c, d byte) ibv.GID {
	return ibv.GID{10: 0xff, 11: 0xff, 12: a, 13: b, 14: c, 15: d}
}

func linkLocalGID(last byte) ibv.GID { return ibv.GID{0: 0xfe, 1: 0x80, 15: last} }

func v2(i int, g ibv.GID, ndev string) gidCandidate {
	return gidCandidate{index: i, gid: g, typ: ibv.GIDTypeRoCEv2, typeOK: true, queryOK: true, ndev: ndev}
}

func indexes(r []gidChoice) []int {
	var out []int
	for _, c := range r {
		out = append(out, c.index)
	}
	return out
}

// TestRankGIDs checks the auto-selection order Mooncake's rdma_gid_probe
// defines: routable entries with a network device, then without; private
// IPv4 (10/8, 172.16/12, 100.64/10) after those; overlay interfaces and
// link-local IPv6 (degraded) after that; ties by index; null, unreadable
// and RoCE v1 entries only as the first-nonzero fallback, last.
func TestRankGIDs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cands []gidCandidate
		want  []int
		first gidClass
	}{
		{"network device first", []gidCandidate{v2(0, v4GID(192, 0, 2, 1), ""), v2(1, v4GID(192, 0, 2, 1), "eth0")}, []int{1, 0}, gidNetworkRoutable},
		{"link-local after routable", []gidCandidate{v2(0, linkLocalGID(1), "eth0"), v2(1, v4GID(192, 0, 2, 7), "eth0")}, []int{1, 0}, gidNetworkRoutable},
		{"overlay after normal", []gidCandidate{v2(0, v4GID(192, 0, 2, 3), "docker0"), v2(1, v4GID(192, 0, 2, 4), "eth1")}, []int{1, 0}, gidNetworkRoutable},
		{"tunl0 is overlay", []gidCandidate{v2(0, v4GID(192, 0, 2, 3), "tunl0"), v2(1, v4GID(192, 0, 2, 4), "")}, []int{1, 0}, gidNoNetworkRoutable},
		{"no-network routable before network-degraded", []gidCandidate{v2(0, linkLocalGID(2), "eth0"), v2(1, v4GID(192, 0, 2, 9), "")}, []int{1, 0}, gidNoNetworkRoutable},
		{"private v4 after routable, before degraded", []gidCandidate{
			v2(0, linkLocalGID(3), "eth0"), v2(1, v4GID(10, 1, 2, 3), "eth0"), v2(2, v4GID(198, 51, 100, 1), ""),
			v2(3, v4GID(172, 20, 0, 1), ""), v2(4, v4GID(100, 64, 0, 1), "eth0"), v2(5, v4GID(172, 32, 0, 1), "eth0")},
			[]int{5, 2, 1, 4, 0, 3}, gidNetworkRoutable},
		{"ib entries are never link-local-demoted", []gidCandidate{
			{index: 0, gid: linkLocalGID(4), typ: ibv.GIDTypeIB, typeOK: true, queryOK: true, ndev: "ib0"}, v2(1, v4GID(192, 0, 2, 5), "")},
			[]int{0, 1}, gidNetworkRoutable},
		{"fallback last", []gidCandidate{
			{index: 0, queryOK: true}, // null
			{index: 1, gid: v4GID(192, 0, 2, 6), typ: ibv.GIDTypeRoCEv1, typeOK: true, queryOK: true}, // v1
			{index: 2, gid: v4GID(192, 0, 2, 8)},                                                      // unreadable
			v2(3, linkLocalGID(5), "")},
			[]int{3, 1}, gidNoNetworkDegraded},
		{"only a fallback", []gidCandidate{{index: 0, queryOK: true}, {index: 1, gid: v4GID(192, 0, 2, 6), queryOK: true}}, []int{1}, gidFallbackNonzero},
		{"nothing", []gidCandidate{{index: 0, queryOK: true}, {index: 1}}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rankGIDs(tc.cands)
			assert.DeepEqual(t, indexes(r), tc.want)
			if len(r) > 0 {
				assert.Equal(t, r[0].class, tc.first)
			}
		})
	}
}
