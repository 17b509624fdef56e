package rdma

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"sort"
	"strings"
	"syscall"

	"github.com/kvferry/kvferry/engine/transport/rdma/ibv"
)

// gidClass ranks an auto-selection candidate as Mooncake's rdma_gid_probe
// does, best first.
type gidClass int

const (
	gidNetworkRoutable   gidClass = iota // RoCE v2 / IB with a network device
	gidNoNetworkRoutable                 // the same without a network device
	gidNetworkPrivateV4                  // RFC 1918 / CGNAT IPv4 with a network device
	gidNetworkDegraded                   // overlay interface or link-local IPv6, with a network device
	gidNoNetworkPrivateV4
	gidNoNetworkDegraded
	gidFallbackNonzero // the first readable non-null entry, whatever its type
)

func (c gidClass) String() string {
	return [...]string{"network-routable", "no-network-routable", "network-private-v4", "network-degraded",
		"no-network-private-v4", "no-network-degraded", "fallback-nonzero"}[c]
}

// gidCandidate is one GID table entry as selection sees it.
type gidCandidate struct {
	index   int
	gid     ibv.GID
	typ     uint32 // ibv_gid_type
	typeOK  bool   // the type could be read (ibv_query_gid_ex)
	queryOK bool   // the entry could be read at all
	ndev    string // its network device (sysfs gid_attrs/ndevs), "" when none
}

// gidChoice is a selected GID.
type gidChoice struct {
	index int
	gid   ibv.GID
	class gidClass
}

// overlayPrefixes are the interface names Mooncake demotes as overlay
// networks (plus tunl0).
var overlayPrefixes = []string{"flannel", "cni", "calico", "vxlan", "docker"}

func isOverlayNetdev(ndev string) bool {
	if ndev == "tunl0" {
		return true
	}
	for _, p := range overlayPrefixes {
		if strings.HasPrefix(ndev, p) {
			return true
		}
	}
	return false
}

// v4Mapped reports an IPv4-mapped GID (::ffff:a.b.c.d, or the IPv4
// multicast encoding ff0e::ffff:a.b.c.d).
func v4Mapped(g ibv.GID) bool {
	head := [8]byte(g[0:8])
	return [4]byte(g[8:12]) == [4]byte{0, 0, 0xff, 0xff} && (head == [8]byte{} || head == [8]byte{0xff, 0x0e})
}

// privateV4 reports a mapped IPv4 address in 10/8, 172.16/12 or 100.64/10.
func privateV4(g ibv.GID) bool {
	if !v4Mapped(g) {
		return false
	}
	a, b := g[12], g[13]
	return a == 10 || (a == 172 && b >= 16 && b <= 31) || (a == 100 && b >= 64 && b <= 127)
}

// classify returns c's class, or false when c may only be a fallback: it
// could not be read, is null, or is neither RoCE v2 nor InfiniBand.
func (c gidCandidate) classify() (gidClass, bool) {
	if !c.queryOK || c.index < 0 || c.gid.IsZero() || !c.typeOK {
		return 0, false
	}
	if c.typ != ibv.GIDTypeRoCEv2 && c.typ != ibv.GIDTypeIB {
		return 0, false
	}
	rocev2 := c.typ == ibv.GIDTypeRoCEv2
	overlay := rocev2 && c.ndev != "" && isOverlayNetdev(c.ndev)
	private := rocev2 && !overlay && privateV4(c.gid)
	linkLocal := rocev2 && !v4Mapped(c.gid) && net.IP(c.gid[:]).IsLinkLocalUnicast()
	degraded := overlay || linkLocal
	switch {
	case c.ndev != "" && degraded:
		return gidNetworkDegraded, true
	case c.ndev != "" && private:
		return gidNetworkPrivateV4, true
	case c.ndev != "":
		return gidNetworkRoutable, true
	case degraded:
		return gidNoNetworkDegraded, true
	case private:
		return gidNoNetworkPrivateV4, true
	}
	return gidNoNetworkRoutable, true
}

// rankGIDs orders the candidates as Mooncake's auto selection does: by
// class, then index; the first readable non-null entry that fits no class
// comes last, as a fallback.
func rankGIDs(cands []gidCandidate) []gidChoice {
	var out []gidChoice
	fallback := -1
	for i, c := range cands {
		if cl, ok := c.classify(); ok {
			out = append(out, gidChoice{index: c.index, gid: c.gid, class: cl})
			continue
		}
		if c.queryOK && !c.gid.IsZero() && fallback < 0 {
			fallback = i
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].class != out[j].class {
			return out[i].class < out[j].class
		}
		return out[i].index < out[j].index
	})
	if fallback >= 0 {
		out = append(out, gidChoice{index: cands[fallback].index, gid: cands[fallback].gid, class: gidFallbackNonzero})
	}
	return out
}

// gidCandidates reads port's GID table of dev (types from
// ibv_query_gid_ex, network devices from sysfs).
func gidCandidates(dev *ibv.Context, port uint8, tableLen int, sys fs.FS, name string) []gidCandidate {
	out := make([]gidCandidate, 0, tableLen)
	for i := 0; i < tableLen; i++ {
		c := gidCandidate{index: i}
		g, err := dev.QueryGID(port, i)
		if err == nil {
			c.queryOK, c.gid = true, g
			c.typ, _, c.typeOK = dev.QueryGIDType(port, i)
			c.ndev = readString(sys, fmt.Sprintf("class/infiniband/%s/ports/%d/gid_attrs/ndevs/%d", name, port, i))
		}
		out = append(out, c)
	}
	return out
}

// selectGID picks a GID index as Mooncake's auto selection ranks them.
func selectGID(dev *ibv.Context, port uint8, tableLen int, sys fs.FS, name string) (gidChoice, error) {
	r := rankGIDs(gidCandidates(dev, port, tableLen, sys, name))
	if len(r) == 0 {
		return gidChoice{}, errors.New("no usable GID")
	}
	return r[0], nil
}

// setupError is a failed QP transition of a connection setup.
type setupError struct {
	stage string // "reset", "init", "rtr", "rts"
	err   error
}

func (e *setupError) Error() string { return e.err.Error() }
func (e *setupError) Unwrap() error { return e.err }

// gidRetryable reports a setup that failed where another GID may help: at
// INIT->RTR with EINVAL, while the GID is auto-selected (Mooncake's
// shouldAttemptAutoGidHandshakeRetry).
func (n *nic) gidRetryable(err error, tries int) bool {
	var se *setupError
	return !n.t.cfg.FixedGID && tries < n.t.cfg.AutoGIDRetries && errors.As(err, &se) && se.stage == "rtr" &&
		errors.Is(se.err, syscall.EINVAL)
}

// reprobeGID re-reads the GID table after a setup with used failed and
// switches to the best entry not tried yet (Mooncake's reprobeAutoGid).
// It reports whether a retry may use another GID: true also when another
// caller switched meanwhile. The new GID is published.
func (n *nic) reprobeGID(used gidChoice, tried []gidChoice) bool {
	n.gidMu.Lock()
	cur := n.gidSel
	if cur.index != used.index || cur.gid != used.gid {
		n.gidMu.Unlock()
		return true // switched by someone else: retry with it
	}
	pa, err := n.dev.QueryPort(n.t.cfg.Port)
	if err != nil {
		n.gidMu.Unlock()
		return false
	}
	var next *gidChoice
	for _, c := range rankGIDs(gidCandidates(n.dev, n.t.cfg.Port, pa.GIDTableLen, n.t.cfg.SysFS, n.name)) {
		if c.index == cur.index && c.gid == cur.gid {
			continue
		}
		seen := false
		for _, t := range tried {
			seen = seen || (t.index == c.index && t.gid == c.gid)
		}
		if !seen {
			next = &c
			break
		}
	}
	if next == nil {
		n.gidMu.Unlock()
		return false
	}
	n.gidSel = *next
	n.gidMu.Unlock()
	n.t.log.Warn("rdma auto GID reprobe switched the NIC's GID after a failed RTR", "device", n.name,
		"from_index", cur.index, "from", cur.gid.String(), "to_index", next.index, "to", next.gid.String(), "class", next.class.String())
	n.t.republish()
	return true
}

// gid returns the NIC's GID selection.
func (n *nic) gid() gidChoice {
	n.gidMu.RLock()
	defer n.gidMu.RUnlock()
	return n.gidSel
}
