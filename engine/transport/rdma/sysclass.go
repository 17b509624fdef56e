package rdma

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/Mellanox/rdmamap"

	"github.com/kvferry/kvferry/engine"
)

// PortCounters are one RDMA port's counters as the kernel keeps them in
// sysfs, by file name: class/infiniband/<dev>/ports/<port>/counters (the
// InfiniBand port counters; port_xmit_data and port_rcv_data count 4-byte
// words) and .../hw_counters (the driver's own, mlx5's out_of_buffer,
// rnr_nak_retry_err, ...; none for drivers without them). They count
// everything the port carries, every process's traffic.
type PortCounters struct {
	Device   string
	Port     int
	Counters map[string]uint64
	HW       map[string]uint64
}

// SysClass is what the transport reads of the kernel's RDMA class besides
// the topology (which comes from Config.SysFS): which RDMA device belongs
// to a network interface or a PCI function, for MC_TE_FILTERS, and each
// port's counters, for the metrics and showLinks. Implementations are safe
// for concurrent use and touch no verbs state.
type SysClass interface {
	// Devices lists the host's RDMA devices, sorted.
	Devices() []string
	// Ports lists device's port numbers, sorted.
	Ports(device string) []int
	// DeviceForNetdev returns the RDMA device of network interface name
	// (RoCE: the interface of the port's GIDs; IPoIB: the device whose
	// node GUID the interface's address carries), or an error.
	DeviceForNetdev(name string) (string, error)
	// DevicesForPCI returns the RDMA devices of PCI function addr
	// ("0000:18:00.0"; several with switchdev representors), none when
	// the function has no RDMA device.
	DevicesForPCI(addr string) []string
	// PortCounters reads port's counters of device; the error wraps
	// fs.ErrNotExist when sysfs has none for it.
	PortCounters(device string, port int) (PortCounters, error)
}

// RdmamapClass is the SysClass of this host, read through
// github.com/Mellanox/rdmamap: /sys/class/infiniband (device list, ports,
// GID netdevs, node GUIDs, counters), /sys/bus/pci/devices/<addr>/infiniband
// and, for a network interface, its netlink attributes (IPoIB). rdmamap's
// paths are fixed to /sys; tests use SysfsClass over a fake tree instead.
type RdmamapClass struct{}

// Devices implements SysClass with rdmamap.GetRdmaDeviceList.
func (RdmamapClass) Devices() []string {
	d := rdmamap.GetRdmaDeviceList()
	sort.Strings(d)
	return d
}

// Ports implements SysClass with rdmamap.GetPorts.
func (RdmamapClass) Ports(device string) []int { return portNumbers(rdmamap.GetPorts(device)) }

// portNumbers parses port directory names, sorted; others are left out.
func portNumbers(names []string) []int {
	var out []int
	for _, n := range names {
		if p, err := strconv.Atoi(n); err == nil && p > 0 {
			out = append(out, p)
		}
	}
	sort.Ints(out)
	return out
}

// DeviceForNetdev implements SysClass with rdmamap.GetRdmaDeviceForNetdevice.
func (RdmamapClass) DeviceForNetdev(name string) (string, error) {
	dev, err := rdmamap.GetRdmaDeviceForNetdevice(name)
	if err != nil {
		return "", fmt.Errorf("rdma device of netdev %q: %w", name, err)
	}
	if dev == "" {
		return "", fmt.Errorf("rdma device of netdev %q: none", name)
	}
	return dev, nil
}

// DevicesForPCI implements SysClass with rdmamap.GetRdmaDevicesForPcidev.
func (RdmamapClass) DevicesForPCI(addr string) []string {
	return rdmamap.GetRdmaDevicesForPcidev(addr)
}

// PortCounters implements SysClass with rdmamap.GetRdmaSysfsAllStats. That
// function returns nothing, and no error, for a port without hw_counters
// (most drivers but mlx5's); the port counters alone are then read with
// rdmamap.GetRdmaSysfsStats.
func (RdmamapClass) PortCounters(device string, port int) (PortCounters, error) {
	pc := PortCounters{Device: device, Port: port}
	all, err := rdmamap.GetRdmaSysfsAllStats(device, port)
	if err == nil && all.Port == port && len(all.Stats) > 0 {
		pc.Counters, pc.HW = entries(all.Stats), entries(all.HwStats)
		return pc, nil
	}
	stats, err := rdmamap.GetRdmaSysfsStats(device, port)
	if err != nil {
		return pc, fmt.Errorf("rdma port counters %s/%d: %w", device, port, err)
	}
	pc.Counters = entries(stats)
	return pc, nil
}

func entries(es []rdmamap.RdmaStatEntry) map[string]uint64 {
	if len(es) == 0 {
		return nil
	}
	m := make(map[string]uint64, len(es))
	for _, e := range es {
		m[e.Name] = e.Value
	}
	return m
}

// SysfsClass is a SysClass over a sysfs tree (fsys rooted at /sys), reading
// the files rdmamap reads: the transport uses it when Config.SysFS names a
// tree (tests' fake machines). Without netlink, a network interface is
// found through the ports' GID netdevs (RoCE) and the device's
// device/net/ directory (IPoIB).
type SysfsClass struct{ FS fs.FS }

// Devices implements SysClass.
func (c SysfsClass) Devices() []string { return dirNames(c.FS, "class/infiniband") }

// Ports implements SysClass.
func (c SysfsClass) Ports(device string) []int {
	return portNumbers(dirNames(c.FS, "class/infiniband/"+device+"/ports"))
}

// DeviceForNetdev implements SysClass.
func (c SysfsClass) DeviceForNetdev(name string) (string, error) {
	devs, _ := fs.ReadDir(c.FS, "class/infiniband")
	for _, d := range devs {
		dev := d.Name()
		for _, port := range dirNames(c.FS, "class/infiniband/"+dev+"/ports") {
			dir := "class/infiniband/" + dev + "/ports/" + port + "/gid_attrs/ndevs"
			for _, idx := range dirNames(c.FS, dir) {
				if readString(c.FS, dir+"/"+idx) == name {
					return dev, nil
				}
			}
		}
		for _, nd := range dirNames(c.FS, "class/infiniband/"+dev+"/device/net") {
			if nd == name {
				return dev, nil
			}
		}
	}
	return "", fmt.Errorf("rdma device of netdev %q: none", name)
}

// DevicesForPCI implements SysClass.
func (c SysfsClass) DevicesForPCI(addr string) []string {
	return dirNames(c.FS, "bus/pci/devices/"+addr+"/infiniband")
}

// PortCounters implements SysClass.
func (c SysfsClass) PortCounters(device string, port int) (PortCounters, error) {
	pc := PortCounters{Device: device, Port: port}
	dir := "class/infiniband/" + device + "/ports/" + strconv.Itoa(port)
	var err error
	if pc.Counters, err = readCounters(c.FS, dir+"/counters"); err != nil {
		return pc, fmt.Errorf("rdma port counters %s/%d: %w", device, port, err)
	}
	pc.HW, _ = readCounters(c.FS, dir+"/hw_counters")
	return pc, nil
}

// readCounters reads every file of dir as a decimal counter (rdmamap's
// reading: an unreadable or malformed file counts 0).
func readCounters(fsys fs.FS, dir string) (map[string]uint64, error) {
	ents, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	m := map[string]uint64{}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		v, _ := strconv.ParseUint(readString(fsys, path.Join(dir, e.Name())), 10, 64)
		m[e.Name()] = v
	}
	return m, nil
}

// dirNames lists dir's entries, sorted (none when it cannot be read).
func dirNames(fsys fs.FS, dir string) []string {
	ents, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// isPCIAddress reports whether s looks like a PCI function address
// (domain:bus:device.function, "0000:18:00.0").
func isPCIAddress(s string) bool {
	return strings.Count(s, ":") == 2 && strings.Contains(s, ".")
}

// errNoMatch: an MC_TE_FILTERS entry named no device, interface or PCI
// function of the host.
var errNoMatch = errors.New("matches no RDMA device, network interface or PCI function")

// filterDevices keeps the devices of names that keep selects, in names'
// order. An entry of keep is a device name (mlx5_0), a network interface
// (ens1f0, ib0: its RDMA device, through class) or a PCI address
// (0000:18:00.0: its RDMA devices). It also returns the entries that
// selected nothing, each with the reason.
func filterDevices(names, keep []string, class SysClass) ([]string, []error) {
	if len(keep) == 0 {
		return names, nil
	}
	want := map[string]bool{}
	var unmatched []error
	for _, k := range keep {
		if contains(names, k) {
			want[k] = true
			continue
		}
		var found []string
		var why error = errNoMatch
		if class != nil {
			if isPCIAddress(k) {
				found = class.DevicesForPCI(k)
			} else if dev, err := class.DeviceForNetdev(k); err == nil {
				found = []string{dev}
			} else {
				why = fmt.Errorf("%w (%w)", errNoMatch, err)
			}
		}
		n := 0
		for _, d := range found {
			if contains(names, d) {
				want[d] = true
				n++
			}
		}
		if n == 0 {
			unmatched = append(unmatched, fmt.Errorf("MC_TE_FILTERS entry %q: %w", k, why))
		}
	}
	var out []string
	for _, n := range names {
		if want[n] {
			out = append(out, n)
		}
	}
	return out, unmatched
}

// NICCounters reads the port counters of every opened NIC
// (engine.NICCounterReporter) through the configured SysClass.
func (t *Transport) NICCounters() []engine.NICCounters {
	out := make([]engine.NICCounters, len(t.nics))
	for i, n := range t.nics {
		pc, err := t.cfg.Class.PortCounters(n.name, int(t.cfg.Port))
		out[i] = nicCounters(n.name, int(t.cfg.Port), pc, err)
	}
	return out
}

// nicCounters turns a port's sysfs counters into the engine's figures.
func nicCounters(dev string, port int, pc PortCounters, err error) engine.NICCounters {
	c := engine.NICCounters{Device: dev, Port: port}
	if err != nil {
		c.Err = err.Error()
		return c
	}
	c.XmitBytes = pc.Counters["port_xmit_data"] * 4
	c.RcvBytes = pc.Counters["port_rcv_data"] * 4
	c.XmitPackets = pc.Counters["port_xmit_packets"]
	c.RcvPackets = pc.Counters["port_rcv_packets"]
	c.LinkDowned = pc.Counters["link_downed"]
	for _, name := range engine.NICErrorCounters {
		if v, ok := pc.Counters[name]; ok {
			if c.Errors == nil {
				c.Errors = map[string]uint64{}
			}
			c.Errors[name] = v
		}
	}
	for name, v := range pc.HW {
		if name == "lifespan" {
			continue
		}
		if c.HW == nil {
			c.HW = map[string]uint64{}
		}
		c.HW[name] = v
	}
	return c
}

// HostNIC is one RDMA device of the host as sysfs describes it, for
// operators (kvferry-ctl nics, kvferry-ctl hw): where it sits, its
// network interfaces and each port's counters.
type HostNIC struct {
	Device string `json:"device"`
	// PCI and NUMA as ReadNIC finds them ("" and -1 when unknown).
	PCI  string `json:"pci"`
	NUMA int    `json:"numa"`
	// Netdevs are the network interfaces of the device's GIDs (RoCE) and
	// of its device/net directory (IPoIB), sorted.
	Netdevs []string `json:"netdevs"`
	// Ports are the port counters (Err set where unreadable).
	Ports []engine.NICCounters `json:"ports"`
}

// Inventory lists the RDMA devices class knows, with what fsys (sysfs,
// rooted at /sys) says of their place and interfaces.
func Inventory(class SysClass, fsys fs.FS) []HostNIC {
	var out []HostNIC
	for _, dev := range class.Devices() {
		info := ReadNIC(fsys, dev, 1, -1)
		h := HostNIC{Device: dev, PCI: info.PCI, NUMA: info.NUMA, Netdevs: Netdevs(fsys, dev)}
		for _, port := range class.Ports(dev) {
			pc, err := class.PortCounters(dev, port)
			h.Ports = append(h.Ports, nicCounters(dev, port, pc, err))
		}
		out = append(out, h)
	}
	return out
}

// Netdevs lists the network interfaces of RDMA device dev in sysfs (fsys
// rooted at /sys): those its ports' GIDs name (RoCE) and those of its
// device/net directory (IPoIB, or the Ethernet function of a RoCE NIC).
func Netdevs(fsys fs.FS, dev string) []string {
	seen := map[string]bool{}
	base := "class/infiniband/" + dev
	for _, port := range dirNames(fsys, base+"/ports") {
		dir := base + "/ports/" + port + "/gid_attrs/ndevs"
		for _, idx := range dirNames(fsys, dir) {
			if nd := readString(fsys, dir+"/"+idx); nd != "" {
				seen[nd] = true
			}
		}
	}
	for _, nd := range dirNames(fsys, base+"/device/net") {
		seen[nd] = true
	}
	out := make([]string, 0, len(seen))
	for nd := range seen {
		out = append(out, nd)
	}
	sort.Strings(out)
	return out
}
