package rdma

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/kvferry/kvferry/engine/transport/rdma/priority"
)

// NIC is one RDMA device as discovery sees it in sysfs.
type NIC struct {
	Name string
	// PCI is the device's PCI address ("0000:03:00.0"), "" when unknown.
	PCI string
	// NUMA is the NUMA node of the device, -1 when unknown.
	NUMA int
	// Netdev is the network interface of the port's GIDs ("" for InfiniBand
	// or when unknown).
	Netdev string
}

// GPU is one GPU as topology sees it: its CUDA ordinal and PCI address.
type GPU struct {
	Ordinal int
	PCI     string
}

// readLinkFS is fs.ReadLinkFS, spelled here so older trees compile.
type readLinkFS interface {
	fs.FS
	ReadLink(name string) (string, error)
}

// realpath resolves symbolic links in p (relative to the root of fsys, as
// a path under /sys); it fails when fsys cannot read links.
func realpath(fsys fs.FS, p string) (string, error) {
	rl, ok := fsys.(readLinkFS)
	if !ok {
		return "", fmt.Errorf("realpath %s: file system cannot read links", p)
	}
	parts := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	cur := ""
	for hops := 0; len(parts) > 0; {
		next := path.Join(cur, parts[0])
		parts = parts[1:]
		fi, err := fs.Lstat(fsys, next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("realpath %s: too many links", p)
		}
		target, err := rl.ReadLink(next)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			// Absolute targets name the real root; the tree is rooted at
			// /sys, so they start with /sys.
			target = strings.TrimPrefix(target, "/sys")
			cur = ""
		}
		rest := strings.Split(strings.Trim(target, "/"), "/")
		parts = append(rest, parts...)
		// Resolve ".." against what is resolved so far.
		for len(parts) > 0 && (parts[0] == ".." || parts[0] == "." || parts[0] == "") {
			if parts[0] == ".." {
				cur = path.Dir(cur)
				if cur == "." {
					cur = ""
				}
			}
			parts = parts[1:]
		}
	}
	return cur, nil
}

func readInt(fsys fs.FS, p string, def int) int {
	b, err := fs.ReadFile(fsys, p)
	if err != nil {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return def
	}
	return n
}

func readString(fsys fs.FS, p string) string {
	b, err := fs.ReadFile(fsys, p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ReadNIC reads what sysfs (fsys rooted at /sys) tells of the device name:
// its PCI address and NUMA node (through the class link, as Mooncake's
// realpath of /sys/class/infiniband/<dev>/../..) and the netdev of GID
// index gidIndex on port.
func ReadNIC(fsys fs.FS, name string, port, gidIndex int) NIC {
	n := NIC{Name: name, NUMA: -1}
	if fsys == nil {
		return n
	}
	if dir, err := realpath(fsys, "class/infiniband/"+name); err == nil {
		pci := path.Dir(path.Dir(dir))
		if b := path.Base(pci); strings.Count(b, ":") == 2 {
			n.PCI = b
			n.NUMA = readInt(fsys, pci+"/numa_node", -1)
		}
	}
	if n.PCI == "" {
		n.NUMA = readInt(fsys, "class/infiniband/"+name+"/device/numa_node", -1)
	}
	if gidIndex >= 0 {
		n.Netdev = readString(fsys, fmt.Sprintf("class/infiniband/%s/ports/%d/gid_attrs/ndevs/%d", name, port, gidIndex))
	}
	return n
}

// NUMANodes lists the NUMA nodes of /sys/devices/system/node.
func NUMANodes(fsys fs.FS) []int {
	ents, err := fs.ReadDir(fsys, "devices/system/node")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "node") {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "node")); err == nil {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out
}

// GPUsFromSysfs lists NVIDIA display and 3D controllers (PCI vendor 0x10de,
// class 0x03xxxx) by PCI address, numbered in that order, which is CUDA's
// order under CUDA_DEVICE_ORDER=PCI_BUS_ID.
func GPUsFromSysfs(fsys fs.FS) []GPU {
	ents, err := fs.ReadDir(fsys, "bus/pci/devices")
	if err != nil {
		return nil
	}
	var pcis []string
	for _, e := range ents {
		dir := "bus/pci/devices/" + e.Name()
		if readString(fsys, dir+"/vendor") != "0x10de" || !strings.HasPrefix(readString(fsys, dir+"/class"), "0x03") {
			continue
		}
		pcis = append(pcis, e.Name())
	}
	sort.Strings(pcis)
	out := make([]GPU, len(pcis))
	for i, p := range pcis {
		out[i] = GPU{Ordinal: i, PCI: p}
	}
	return out
}

// pciDistance counts the path components between two PCI devices in the
// sysfs device tree (Mooncake's getPciDistance), -1 when either is unknown.
func pciDistance(fsys fs.FS, a, b string) int {
	pa, err1 := realpath(fsys, "bus/pci/devices/"+a)
	pb, err2 := realpath(fsys, "bus/pci/devices/"+b)
	if err1 != nil || err2 != nil {
		return -1
	}
	i := 0
	for i < len(pa) && i < len(pb) && pa[i] == pb[i] {
		i++
	}
	return strings.Count(pa[i:], "/") + strings.Count(pb[i:], "/")
}

// Discover builds the priority matrix Mooncake's discoverTopology builds:
// for each NUMA node N, "cpu:N" prefers the NICs on node N; for each GPU i,
// "cuda:i" prefers the NICs at the least PCIe distance among those on the
// GPU's NUMA node (all NICs when none is), and every other NIC is
// available.
func Discover(fsys fs.FS, nics []NIC, gpus []GPU) priority.Matrix {
	m := priority.Matrix{}
	nodes := NUMANodes(fsys)
	if len(nodes) == 0 {
		nodes = []int{0}
	}
	for _, node := range nodes {
		pair := [2][]string{{}, {}}
		for _, n := range nics {
			if n.NUMA == node {
				pair[0] = append(pair[0], n.Name)
			} else {
				pair[1] = append(pair[1], n.Name)
			}
		}
		m["cpu:"+strconv.Itoa(node)] = pair
	}
	for _, g := range gpus {
		gnuma := readInt(fsys, "bus/pci/devices/"+g.PCI+"/numa_node", -1)
		var cands []NIC
		for _, n := range nics {
			if gnuma != -1 && n.NUMA == gnuma {
				cands = append(cands, n)
			}
		}
		if len(cands) == 0 {
			cands = nics
		}
		best := -1
		nearest := map[string]bool{}
		for _, n := range cands {
			d := pciDistance(fsys, n.PCI, g.PCI)
			if d < 0 {
				continue
			}
			if best < 0 || d < best {
				best = d
				clear(nearest)
			}
			if d == best {
				nearest[n.Name] = true
			}
		}
		pair := [2][]string{{}, {}}
		for _, n := range nics {
			if nearest[n.Name] {
				pair[0] = append(pair[0], n.Name)
			} else {
				pair[1] = append(pair[1], n.Name)
			}
		}
		m["cuda:"+strconv.Itoa(g.Ordinal)] = pair
	}
	return m
}
