package efa

import (
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/transport/efa/fabric"
	"github.com/kvferry/kvferry/internal/hostenv"
)

func mapEnv(m map[string]string) hostenv.Env {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

func TestConfigFromEnv(t *testing.T) {
	c := ConfigFromEnv(mapEnv(map[string]string{
		"KVFERRY_LIBFABRIC_LIB": " /opt/amazon/efa/lib/libfabric.so.1 ", "KVFERRY_LIBFABRIC_PROVIDER": "tcp;ofi_rxm",
		"KVFERRY_LIBFABRIC_DOMAINS": "lo, ,lo", "KVFERRY_EFA_SLICE_SIZE": "2097152", "KVFERRY_EFA_SLOTS": "64",
	}))
	assert.DeepEqual(t, c, Config{Library: "/opt/amazon/efa/lib/libfabric.so.1", Provider: "tcp;ofi_rxm",
		Domains: []string{"lo", "lo"}, SliceSize: 2 << 20, Slots: 64})
	// Out of range: the defaults stay.
	c = ConfigFromEnv(mapEnv(map[string]string{"KVFERRY_EFA_SLICE_SIZE": "100", "KVFERRY_EFA_SLOTS": "0"}))
	assert.DeepEqual(t, c.withDefaults(), Config{Provider: DefaultProvider, SliceSize: DefaultSliceSize, Slots: DefaultSlots})
}

// TestPickInfos chooses the domains to open: named ones in order (and
// repeated), every efa domain, else the fabric holding the engine's host.
func TestPickInfos(t *testing.T) {
	tcp := []fabric.Info{
		{Provider: "tcp;ofi_rxm", Fabric: "192.0.2.0/24", Domain: "eth0"},
		{Provider: "tcp;ofi_rxm", Fabric: "127.0.0.1/32", Domain: "lo"},
	}
	domains := func(in []fabric.Info) []string {
		var out []string
		for _, i := range in {
			out = append(out, i.Domain)
		}
		return out
	}
	got, err := pickInfos(tcp, Config{Provider: "tcp;ofi_rxm"}, "127.0.0.1:15000")
	assert.NilError(t, err)
	assert.DeepEqual(t, domains(got), []string{"lo"})
	got, err = pickInfos(tcp, Config{Provider: "tcp;ofi_rxm"}, "192.0.2.7:15000")
	assert.NilError(t, err)
	assert.DeepEqual(t, domains(got), []string{"eth0"})
	got, err = pickInfos(tcp, Config{Provider: "tcp;ofi_rxm", Domains: []string{"lo", "eth0", "lo"}}, "x")
	assert.NilError(t, err)
	assert.DeepEqual(t, domains(got), []string{"lo", "eth0", "lo"})
	_, err = pickInfos(tcp, Config{Provider: "tcp;ofi_rxm", Domains: []string{"ib0"}}, "x")
	assert.ErrorContains(t, err, `no domain "ib0"`)

	efaInfos := []fabric.Info{
		{Provider: "efa", Domain: "rdmap16s27-rdm"},
		{Provider: "efa", Domain: "rdmap32s27-rdm"}, {Provider: "efa", Domain: "rdmap16s27-rdm"},
	}
	got, err = pickInfos(efaInfos, Config{Provider: "efa"}, "10.0.0.1:15000")
	assert.NilError(t, err)
	assert.DeepEqual(t, domains(got), []string{"rdmap16s27-rdm", "rdmap32s27-rdm"})
	got, err = pickInfos(efaInfos, Config{Provider: "efa", Domains: []string{"rdmap32s27"}}, "x")
	assert.NilError(t, err)
	assert.DeepEqual(t, domains(got), []string{"rdmap32s27-rdm"})
}
