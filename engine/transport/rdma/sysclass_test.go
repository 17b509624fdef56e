package rdma

import (
	"errors"
	"io/fs"
	"os"
	"sort"
	"testing"
	"testing/fstest"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
)

// counterSys is fakeSys with port counters: mlx5_0 has counters and mlx5's
// hw_counters, mlx5_1 counters only, and mlx5_3 is an InfiniBand device
// whose IPoIB interface ib0 sits in device/net (its ports have no GID
// netdevs).
func counterSys() fstest.MapFS {
	m := fakeSys()
	file := func(name, data string) { m[name] = &fstest.MapFile{Data: []byte(data)} }
	pci0 := "devices/pci0000:16/0000:16:01.0/0000:18:00.0/infiniband/mlx5_0/ports/1/"
	for name, v := range map[string]string{
		"port_xmit_data": "1000", "port_rcv_data": "2000", "port_xmit_packets": "30", "port_rcv_packets": "40",
		"link_downed": "1", "symbol_error": "2", "port_rcv_errors": "0", "port_xmit_wait": "77", "VL15_dropped": "garbage",
	} {
		file(pci0+"counters/"+name, v+"\n")
	}
	file(pci0+"hw_counters/out_of_buffer", "5\n")
	file(pci0+"hw_counters/rnr_nak_retry_err", "0\n")
	file(pci0+"hw_counters/lifespan", "12\n")
	file("devices/pci0000:29/0000:29:01.0/0000:2a:00.0/infiniband/mlx5_1/ports/1/counters/port_xmit_data", "8\n")
	ib := "devices/pci0000:b9/0000:b9:01.0/0000:ba:00.0/"
	delete(m, ib+"infiniband/mlx5_3/ports/1/gid_attrs/ndevs/3")
	file(ib+"infiniband/mlx5_3/ports/1/counters/port_rcv_data", "3\n")
	file(ib+"net/ib0/type", "32\n")
	m[ib+"infiniband/mlx5_3/device"] = &fstest.MapFile{Data: []byte("../.."), Mode: fs.ModeSymlink}
	return m
}

func TestSysfsClass(t *testing.T) {
	c := SysfsClass{FS: counterSys()}
	assert.DeepEqual(t, c.Devices(), []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"})
	assert.DeepEqual(t, c.Ports("mlx5_0"), []int{1})
	assert.Assert(t, c.Ports("nosuch") == nil)

	for netdev, want := range map[string]string{"eth_mlx5_0": "mlx5_0", "eth_mlx5_2": "mlx5_2", "ib0": "mlx5_3"} {
		dev, err := c.DeviceForNetdev(netdev)
		assert.NilError(t, err, netdev)
		assert.Equal(t, dev, want, netdev)
	}
	_, err := c.DeviceForNetdev("eth9")
	assert.ErrorContains(t, err, `netdev "eth9": none`)
	assert.DeepEqual(t, c.DevicesForPCI("0000:2a:00.0"), []string{"mlx5_1"})
	assert.Assert(t, c.DevicesForPCI("0000:17:00.0") == nil) // the GPU
	assert.DeepEqual(t, Netdevs(c.FS, "mlx5_3"), []string{"ib0"})
	assert.DeepEqual(t, Netdevs(c.FS, "mlx5_0"), []string{"eth_mlx5_0"})

	pc, err := c.PortCounters("mlx5_0", 1)
	assert.NilError(t, err)
	assert.Equal(t, pc.Counters["port_xmit_data"], uint64(1000))
	assert.Equal(t, pc.Counters["VL15_dropped"], uint64(0)) // unparsable: 0, as rdmamap reads it
	assert.Equal(t, pc.HW["lifespan"], uint64(12))
	pc, err = c.PortCounters("mlx5_1", 1)
	assert.NilError(t, err)
	assert.Assert(t, pc.HW == nil)
	_, err = c.PortCounters("mlx5_2", 1)
	assert.Assert(t, errors.Is(err, fs.ErrNotExist), "%v", err)
}

func TestNICCounters(t *testing.T) {
	c := SysfsClass{FS: counterSys()}
	pc, err := c.PortCounters("mlx5_0", 1)
	got := nicCounters("mlx5_0", 1, pc, err)
	assert.DeepEqual(t, got, engine.NICCounters{
		Device: "mlx5_0", Port: 1, XmitBytes: 4000, RcvBytes: 8000, XmitPackets: 30, RcvPackets: 40, LinkDowned: 1,
		// Only the error counters the port has; port_xmit_wait is no error.
		Errors: map[string]uint64{"symbol_error": 2, "port_rcv_errors": 0, "VL15_dropped": 0},
		// lifespan is the refresh period of the others, no counter.
		HW: map[string]uint64{"out_of_buffer": 5, "rnr_nak_retry_err": 0},
	})
	assert.Equal(t, got.ErrorTotal(), uint64(2))
	pc, err = c.PortCounters("mlx5_2", 1)
	got = nicCounters("mlx5_2", 1, pc, err)
	assert.Assert(t, got.Err != "" && got.XmitBytes == 0 && got.Errors == nil)
}

func TestFilterDevices(t *testing.T) {
	names := []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}
	class := SysfsClass{FS: counterSys()}
	for _, tc := range []struct {
		name      string
		keep      []string
		want      []string
		unmatched int
	}{
		{"none", nil, names, 0},
		{"devices, in the list's order", []string{"mlx5_2", "mlx5_0"}, []string{"mlx5_0", "mlx5_2"}, 0},
		{"roce netdev", []string{"eth_mlx5_1"}, []string{"mlx5_1"}, 0},
		{"ipoib netdev", []string{"ib0"}, []string{"mlx5_3"}, 0},
		{"pci address", []string{"0000:9c:00.0"}, []string{"mlx5_2"}, 0},
		{"mixed, duplicates", []string{"mlx5_1", "eth_mlx5_1", "0000:18:00.0"}, []string{"mlx5_0", "mlx5_1"}, 0},
		{"unknown entries", []string{"mlx5_9", "eth9", "0000:17:00.0", "mlx5_0"}, []string{"mlx5_0"}, 3},
		{"nothing left", []string{"eth9"}, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, unmatched := filterDevices(names, tc.keep, class)
			assert.DeepEqual(t, got, tc.want)
			assert.Equal(t, len(unmatched), tc.unmatched, "%v", unmatched)
			for _, err := range unmatched {
				assert.Assert(t, errors.Is(err, errNoMatch), "%v", err)
			}
		})
	}
	// A device of the class that verbs does not list is not used.
	got, unmatched := filterDevices([]string{"mlx5_0"}, []string{"eth_mlx5_2"}, class)
	assert.Assert(t, got == nil && len(unmatched) == 1)
	// Without a class only device names match.
	got, _ = filterDevices(names, []string{"eth_mlx5_1", "mlx5_3"}, nil)
	assert.DeepEqual(t, got, []string{"mlx5_3"})
}

// failingClass is a SysClass whose counters cannot be read.
type failingClass struct{ SysfsClass }

func (failingClass) PortCounters(dev string, port int) (PortCounters, error) {
	return PortCounters{}, errors.New("permission denied")
}

func TestInventory(t *testing.T) {
	sys := counterSys()
	inv := Inventory(SysfsClass{FS: sys}, sys)
	assert.Equal(t, len(inv), 4)
	assert.Equal(t, inv[0].Device, "mlx5_0")
	assert.Equal(t, inv[0].PCI, "0000:18:00.0")
	assert.Equal(t, inv[0].NUMA, 0)
	assert.DeepEqual(t, inv[0].Netdevs, []string{"eth_mlx5_0"})
	assert.Equal(t, len(inv[0].Ports), 1)
	assert.Equal(t, inv[0].Ports[0].RcvBytes, uint64(8000))
	assert.Assert(t, inv[2].Ports[0].Err != "") // no counters in the tree
	assert.Equal(t, inv[3].NUMA, 1)
	assert.DeepEqual(t, inv[3].Netdevs, []string{"ib0"})

	inv = Inventory(failingClass{SysfsClass{FS: sys}}, sys)
	assert.Equal(t, inv[0].Ports[0].Err, "permission denied")
}

// TestRdmamapClass reads this host's /sys through rdmamap. Where the host
// has RDMA devices (a hardware run: make hw-check), every answer must
// equal SysfsClass's over /sys, which reads the same files; elsewhere
// rdmamap must report no devices and missing counters as such.
func TestRdmamapClass(t *testing.T) {
	var r RdmamapClass
	s := SysfsClass{FS: os.DirFS("/sys")}
	devs := r.Devices()
	assert.DeepEqual(t, devs, s.Devices())
	if len(devs) == 0 {
		_, err := r.PortCounters("nosuch_0", 1)
		assert.Assert(t, errors.Is(err, fs.ErrNotExist), "%v", err)
		_, err = r.DeviceForNetdev("lo")
		assert.Assert(t, err != nil)
		t.Skip("no RDMA device in /sys/class/infiniband: compared rdmamap's answers with none")
	}
	for _, dev := range devs {
		assert.DeepEqual(t, r.Ports(dev), s.Ports(dev))
		for _, port := range r.Ports(dev) {
			a, err := r.PortCounters(dev, port)
			assert.NilError(t, err, "%s/%d", dev, port)
			b, err := s.PortCounters(dev, port)
			assert.NilError(t, err, "%s/%d", dev, port)
			// Counters move between the two readings: compare the names.
			assert.DeepEqual(t, counterNames(a.Counters), counterNames(b.Counters))
			assert.DeepEqual(t, counterNames(a.HW), counterNames(b.HW))
		}
		for _, nd := range Netdevs(s.FS, dev) {
			got, err := r.DeviceForNetdev(nd)
			assert.NilError(t, err, "netdev %s of %s", nd, dev)
			assert.Equal(t, got, dev, "netdev %s", nd)
		}
		info := ReadNIC(s.FS, dev, 1, -1)
		if info.PCI != "" {
			assert.Assert(t, contains(r.DevicesForPCI(info.PCI), dev), "%s at %s", dev, info.PCI)
		}
	}
}

func counterNames(m map[string]uint64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
