package rdma

import (
	"io/fs"
	"testing"
	"testing/fstest"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/transport/rdma/priority"
)

// fakeSys builds a sysfs tree: two NUMA nodes; NICs mlx5_0 (node 0, under
// the root port of GPU 0), mlx5_1 (node 0, another switch), mlx5_2 and
// mlx5_3 (node 1, mlx5_2 beside GPU 1); two NVIDIA GPUs.
func fakeSys() fstest.MapFS {
	m := fstest.MapFS{}
	link := func(name, target string) { m[name] = &fstest.MapFile{Data: []byte(target), Mode: fs.ModeSymlink} }
	file := func(name, data string) { m[name] = &fstest.MapFile{Data: []byte(data)} }
	file("devices/system/node/node0/cpulist", "0-7\n")
	file("devices/system/node/node1/cpulist", "8-15\n")
	dev := map[string]string{ // PCI address -> device directory
		"0000:17:00.0": "devices/pci0000:16/0000:16:01.0/0000:17:00.0", // GPU 0
		"0000:18:00.0": "devices/pci0000:16/0000:16:01.0/0000:18:00.0", // mlx5_0
		"0000:2a:00.0": "devices/pci0000:29/0000:29:01.0/0000:2a:00.0", // mlx5_1
		"0000:9b:00.0": "devices/pci0000:9a/0000:9a:01.0/0000:9b:00.0", // GPU 1
		"0000:9c:00.0": "devices/pci0000:9a/0000:9a:01.0/0000:9c:00.0", // mlx5_2
		"0000:ba:00.0": "devices/pci0000:b9/0000:b9:01.0/0000:ba:00.0", // mlx5_3
	}
	numa := map[string]string{"0000:17:00.0": "0", "0000:18:00.0": "0", "0000:2a:00.0": "0", "0000:9b:00.0": "1", "0000:9c:00.0": "1", "0000:ba:00.0": "1"}
	for pci, d := range dev {
		file(d+"/numa_node", numa[pci]+"\n")
		link("bus/pci/devices/"+pci, "../../../"+d)
	}
	for _, gpu := range []string{"0000:17:00.0", "0000:9b:00.0"} {
		file(dev[gpu]+"/vendor", "0x10de\n")
		file(dev[gpu]+"/class", "0x030200\n")
	}
	nics := map[string]string{"mlx5_0": "0000:18:00.0", "mlx5_1": "0000:2a:00.0", "mlx5_2": "0000:9c:00.0", "mlx5_3": "0000:ba:00.0"}
	for name, pci := range nics {
		file(dev[pci]+"/vendor", "0x15b3\n")
		file(dev[pci]+"/class", "0x020700\n")
		file(dev[pci]+"/infiniband/"+name+"/ports/1/gid_attrs/ndevs/3", "eth_"+name+"\n")
		link("class/infiniband/"+name, "../../"+dev[pci]+"/infiniband/"+name)
	}
	return m
}

func TestReadNIC(t *testing.T) {
	sys := fakeSys()
	n := ReadNIC(sys, "mlx5_2", 1, 3)
	assert.DeepEqual(t, n, NIC{Name: "mlx5_2", PCI: "0000:9c:00.0", NUMA: 1, Netdev: "eth_mlx5_2"})
	n = ReadNIC(sys, "nosuch", 1, 3)
	assert.DeepEqual(t, n, NIC{Name: "nosuch", NUMA: -1})
	assert.DeepEqual(t, GPUsFromSysfs(sys), []GPU{{0, "0000:17:00.0"}, {1, "0000:9b:00.0"}})
	// Mooncake compares the resolved paths character by character: siblings
	// under one bridge are at distance 0, other root ports count their levels.
	assert.Equal(t, pciDistance(sys, "0000:18:00.0", "0000:17:00.0"), 0)
	assert.Equal(t, pciDistance(sys, "0000:2a:00.0", "0000:17:00.0"), 4)
	assert.Equal(t, pciDistance(sys, "0000:2a:00.0", "nosuch"), -1)
}

func TestDiscover(t *testing.T) {
	sys := fakeSys()
	var nics []NIC
	for _, name := range []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"} {
		nics = append(nics, ReadNIC(sys, name, 1, -1))
	}
	m := Discover(sys, nics, GPUsFromSysfs(sys))
	assert.DeepEqual(t, m, priority.Matrix{
		"cpu:0":  {{"mlx5_0", "mlx5_1"}, {"mlx5_2", "mlx5_3"}},
		"cpu:1":  {{"mlx5_2", "mlx5_3"}, {"mlx5_0", "mlx5_1"}},
		"cuda:0": {{"mlx5_0"}, {"mlx5_1", "mlx5_2", "mlx5_3"}},
		"cuda:1": {{"mlx5_2"}, {"mlx5_0", "mlx5_1", "mlx5_3"}},
	})
	// The JSON form is Mooncake's: sorted locations, pairs of lists.
	assert.Equal(t, string(m.JSON()), `{"cpu:0":[["mlx5_0","mlx5_1"],["mlx5_2","mlx5_3"]],"cpu:1":[["mlx5_2","mlx5_3"],["mlx5_0","mlx5_1"]],"cuda:0":[["mlx5_0"],["mlx5_1","mlx5_2","mlx5_3"]],"cuda:1":[["mlx5_2"],["mlx5_0","mlx5_1","mlx5_3"]]}`)
	assert.DeepEqual(t, m.Devices(), []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"})

	// A GPU on a NUMA node without NICs: the nearest of all NICs.
	sys["bus/pci/devices/0000:9b:00.0"] = &fstest.MapFile{Data: []byte("../../../devices/pci0000:9a/0000:9a:01.0/0000:9b:00.0"), Mode: fs.ModeSymlink}
	sys["devices/pci0000:9a/0000:9a:01.0/0000:9b:00.0/numa_node"] = &fstest.MapFile{Data: []byte("3\n")}
	m = Discover(sys, nics, GPUsFromSysfs(sys))
	assert.DeepEqual(t, m["cuda:1"], [2][]string{{"mlx5_2"}, {"mlx5_0", "mlx5_1", "mlx5_3"}})

	// No NUMA information at all: one cpu:0 row with every NIC available.
	m = Discover(fstest.MapFS{}, []NIC{{Name: "a", NUMA: -1}, {Name: "b", NUMA: -1}}, nil)
	assert.DeepEqual(t, m, priority.Matrix{"cpu:0": {{}, {"a", "b"}}})
}
