package engine

import (
	"os"
	"strings"
	"syscall"

	"github.com/kvferry/kvferry/engine/descriptor"
)

// localHost reads the identity of this process's host: the kernel boot id,
// the namespace inodes, pid and uid. Two engines share memory-level
// transports only when these match (never decided from an IP address).
func localHost() *descriptor.Host {
	h := &descriptor.Host{PID: os.Getpid(), UID: os.Geteuid()}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		h.BootID = strings.TrimSpace(string(b))
	}
	h.MountNS = nsInode("mnt")
	h.PIDNS = nsInode("pid")
	h.NetNS = nsInode("net")
	h.UserNS = nsInode("user")
	return h
}

func nsInode(name string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/"+name, &st); err != nil {
		return 0
	}
	return st.Ino
}
