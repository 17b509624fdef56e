"""``bind_to_numa_node``: Mooncake's module-level NUMA binding (libnuma's
numa_run_on_node, then numa_set_preferred), done here with no libnuma:
the CPUs come from /sys/devices/system/node, the affinity from
sched_setaffinity and the memory preference from the set_mempolicy system
call."""

import ctypes
import os
import platform

from ._store_args import log

NODE_ROOT = "/sys/devices/system/node"

# set_mempolicy(2) and get_mempolicy(2) numbers and modes.
_SYSCALLS = {"x86_64": (238, 239), "aarch64": (237, 236), "ppc64le": (261, 260), "s390x": (270, 269)}
MPOL_DEFAULT = 0
MPOL_PREFERRED = 1

_libc = ctypes.CDLL(None, use_errno=True)


def parse_cpulist(text):
    """The CPUs of a sysfs cpu list ("0-3,8,10-11")."""
    cpus = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def node_cpus(node, root=NODE_ROOT):
    """The CPUs of NUMA node node, or None when the node does not exist."""
    try:
        with open(os.path.join(root, "node%d" % node, "cpulist")) as f:
            return parse_cpulist(f.read())
    except (OSError, ValueError):
        return None


def max_node(root=NODE_ROOT):
    """The highest NUMA node number, or -1 without NUMA information."""
    try:
        names = os.listdir(root)
    except OSError:
        return -1
    nodes = [int(n[4:]) for n in names if n.startswith("node") and n[4:].isdigit()]
    return max(nodes) if nodes else -1


def _set_mempolicy(mode, nodes):
    """set_mempolicy(mode, nodes); returns 0 or the errno."""
    nums = _SYSCALLS.get(platform.machine())
    if nums is None:
        return 38  # ENOSYS
    maxnode = max(list(nodes) + [0]) + 2
    words = (maxnode + 63) // 64
    mask = (ctypes.c_ulong * words)()
    for n in nodes:
        mask[n // 64] |= 1 << (n % 64)
    if _libc.syscall(ctypes.c_long(nums[0]), ctypes.c_int(mode), mask if nodes else None,
                     ctypes.c_ulong(maxnode if nodes else 0)) != 0:
        return ctypes.get_errno()
    return 0


def get_mempolicy():
    """(mode, nodes) of the calling thread's memory policy (get_mempolicy(2)),
    or None where the call is not available."""
    nums = _SYSCALLS.get(platform.machine())
    if nums is None:
        return None
    mode = ctypes.c_int()
    maxnode = 1024
    mask = (ctypes.c_ulong * (maxnode // 64))()
    if _libc.syscall(ctypes.c_long(nums[1]), ctypes.byref(mode), mask, ctypes.c_ulong(maxnode),
                     None, ctypes.c_ulong(0)) != 0:
        return None
    nodes = {w * 64 + b for w in range(len(mask)) for b in range(64) if mask[w] >> b & 1}
    return mode.value, nodes


def bind_to_numa_node(node):
    """Bind the calling thread to the CPUs of NUMA node node and prefer the
    node for its future memory allocations (falling back to other nodes
    when it is full), as Mooncake's bind_to_numa_node. Returns None; a
    machine without NUMA information, an invalid node or a refused call is
    logged as a warning and the binding skipped, as Mooncake does."""
    if isinstance(node, bool) or not isinstance(node, int):
        raise TypeError("node must be an int, not %s" % type(node).__name__)
    top = max_node()
    if top < 0:
        log.warning("NUMA is not available on this system; binding skipped")
        return None
    cpus = node_cpus(node) if 0 <= node <= top else None
    if cpus is None:
        log.warning("Invalid NUMA node: %d. Valid range: 0-%d", node, top)
        return None
    if not cpus:
        log.warning("NUMA node %d has no CPUs; binding skipped", node)
        return None
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as e:
        log.warning("sched_setaffinity to node %d failed: %s", node, e)
    err = _set_mempolicy(MPOL_PREFERRED, {node})
    if err:
        log.warning("set_mempolicy(MPOL_PREFERRED, node %d) failed: %s", node, os.strerror(err))
    return None
