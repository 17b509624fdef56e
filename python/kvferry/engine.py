"""Mooncake's ``mooncake.engine`` Python surface over libkvferry.so.

``TransferEngine`` has the methods, argument names, defaults and return
conventions of Mooncake's pybind module (specs/mooncake.md §5), so a
connector written for Mooncake (vLLM's and SGLang's MooncakeConnector) runs
on kvferry by changing one import. Addresses are plain ints, as in
Mooncake; results are 0 / negative codes, batch ids (0 on failure), or
values, never exceptions, except for arguments of the wrong type (TypeError)
or shape (ValueError), which pybind11 would also reject.

Waiting never spins in Python: synchronous transfers block in
``kvferry_batch_wait`` with the GIL released.
"""

import ctypes
import enum
import json
import logging
import mmap
import os
import threading
import time
from ctypes import byref, c_int, c_size_t, c_uint64, c_void_p

from . import _lib
from ._lib import (
    BufferEntry,
    NotifyMsg,
    TransferRequest,
    lib,
)
from .errors import TransferError

__all__ = [
    "TransferEngine",
    "TransferOpcode",
    "TransferNotify",
    "InnerTransferEngine",
    "SUPPORT_EFA",
    "SUPPORT_HIP",
    "SUPPORT_MNNVL",
    "SUPPORT_MUSA",
    "SUPPORT_INTRA_NVLINK",
    "SUPPORT_CUDA",
]

log = logging.getLogger("kvferry.engine")

# Build flags Mooncake's module exposes. kvferry finds hardware at run time;
# none of these vendor-specific Python paths exist here.
SUPPORT_EFA = False
SUPPORT_HIP = False
SUPPORT_MNNVL = False
SUPPORT_MUSA = False
SUPPORT_INTRA_NVLINK = False
SUPPORT_CUDA = False

_WILDCARD = "*"
_NS = 1_000_000_000

# Managed-buffer size classes (8 KiB ... 256 MiB) carved from 2 GiB slabs,
# as Mooncake's allocate_managed_buffer.
_SLAB_BYTES = 2 << 30
_CLASS_BYTES = [(8 << 10) << i for i in range(16)]


class TransferOpcode(enum.IntEnum):
    """Direction of a transfer: Read copies remote -> local, Write local -> remote."""

    Read = 0
    Write = 1


class TransferNotify:
    """A notification sent with a transfer: an opaque name and message."""

    def __init__(self, name="", msg=""):
        self.name = name
        self.msg = msg

    def __repr__(self):
        return "TransferNotify(name=%r, msg=%r)" % (self.name, self.msg)

    def __eq__(self, other):
        return (isinstance(other, TransferNotify) and self.name == other.name
                and self.msg == other.msg)

    def __hash__(self):
        return hash((self.name, self.msg))


class InnerTransferEngine:
    """An opaque reference to a live engine (``TransferEngine.get_engine()``),
    accepted by ``MooncakeDistributedStore.setup(engine=...)``. It keeps the
    TransferEngine that made it alive."""

    __slots__ = ("_owner",)

    def __init__(self, owner):
        self._owner = owner

    @property
    def handle(self):
        """The engine's C handle (transfer_engine_t) as an int, or 0."""
        return self._owner._h or 0

    def __repr__(self):
        return "<InnerTransferEngine %s>" % (self._owner.get_segment_name() or "closed")


def _as_int(v, what):
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if not isinstance(v, (bool, float)) and hasattr(v, "__index__"):
        return v.__index__()  # numpy integers
    raise TypeError("%s must be an int, not %s" % (what, type(v).__name__))


def _as_str(v, what):
    if isinstance(v, bytes):
        return v.decode()
    if not isinstance(v, str):
        raise TypeError("%s must be a str, not %s" % (what, type(v).__name__))
    return v


def _int_list(v, what):
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise TypeError("%s must be a list of ints, not %s" % (what, type(v).__name__))
    return [_as_int(x, what + " item") for x in v]


class _Map:
    """One anonymous mapping and the ctypes view that gives its address."""

    __slots__ = ("m", "anchor", "addr", "length")

    def __init__(self, length):
        self.m = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.anchor = ctypes.c_char.from_buffer(self.m)
        self.addr = ctypes.addressof(self.anchor)
        self.length = length

    def release(self):
        self.anchor = None
        try:
            self.m.close()
        except BufferError:
            pass  # still exported somewhere; the mapping goes with the process


class _Managed:
    """Mooncake's managed-buffer allocator: power-of-two classes from 8 KiB
    to 256 MiB carved (buddy split, no merge) from registered 2 GiB slabs;
    larger requests get their own registered mapping."""

    def __init__(self):
        self.mu = threading.Lock()
        self.free = [[] for _ in _CLASS_BYTES]
        self.slabs = []  # _Map
        self.large = {}  # addr -> _Map

    @staticmethod
    def class_of(length):
        if length > _CLASS_BYTES[-1]:
            return -1
        for i, n in enumerate(_CLASS_BYTES):
            if length <= n:
                return i
        return -1


class TransferEngine:
    """A transfer engine (Mooncake ``mooncake.engine.TransferEngine``)."""

    TransferOpcode = TransferOpcode

    def __init__(self):
        self._h = None
        self._mu = threading.Lock()
        self._segments = {}  # target hostname -> segment id
        self._async = {}  # batch id -> (total bytes, start ns)
        self._managed = _Managed()
        t = os.environ.get("MC_TRANSFER_TIMEOUT")
        try:
            sec = max(5, int(t)) if t else 30
        except ValueError:
            sec = 30
        self._timeout_ns = sec * _NS

    # ---- lifecycle ----

    def initialize(self, local_hostname, metadata_server, protocol, device_name):
        """Start the engine; metadata_server is "P2PHANDSHAKE",
        "http://host:port/metadata", "etcd://host:port", a bare etcd
        "host:port" or "redis://[:password@]host:port[/db]". Returns 0, or
        -1 on failure."""
        metadata_server = _as_str(metadata_server, "metadata_server")
        proto, sep, domain = metadata_server.partition("://")
        if sep:
            mtype, server = proto, domain
        elif metadata_server == "P2PHANDSHAKE":
            mtype, server = "", metadata_server
        else:
            mtype, server = "etcd", metadata_server
        return self.initialize_ext(local_hostname, server, protocol, device_name, mtype)

    def initialize_ext(self, local_hostname, metadata_server, protocol, device_name,
                       metadata_type):
        """As initialize, with the metadata type ("etcd", "http", "redis",
        "p2p") given apart from the server. Returns 0 or -1."""
        local_hostname = _as_str(local_hostname, "local_hostname")
        metadata_server = _as_str(metadata_server, "metadata_server")
        protocol = _as_str(protocol if protocol is not None else "", "protocol")
        device_name = _as_str(device_name if device_name is not None else "", "device_name")
        metadata_type = _as_str(metadata_type if metadata_type is not None else "",
                                "metadata_type")
        if protocol == "xgmi":
            log.error("protocol 'xgmi' is not exposed in the Python API; use 'hip'")
            return -1
        if metadata_server == "P2PHANDSHAKE" or metadata_type == "p2p":
            conn = "P2PHANDSHAKE"
        elif "://" in metadata_server:
            conn = metadata_server
        else:
            conn = "%s://%s" % (metadata_type, metadata_server)
        keys = ["metadata", "auto_discover"]
        vals = [conn, "1"]
        if local_hostname:
            keys.append("local_server_name")
            vals.append(local_hostname)
        if device_name:
            # Mooncake's NIC whitelist for RDMA auto-discovery.
            keys.append("rdma_devices")
            vals.append(device_name)
        if protocol:
            # Installed when it can run here; otherwise the library logs
            # once which transport it uses instead, and why.
            keys.append("protocol")
            vals.append(protocol)
        h = lib.kvferry_engine_create(_lib.c_strings(keys), _lib.c_strings(vals), len(keys))
        if not h:
            log.error("initialize failed: metadata=%s local_hostname=%s", conn, local_hostname)
            return -1
        old, self._h = self._h, h
        with self._mu:
            self._segments.clear()
        if old:
            lib.destroyTransferEngine(old)
        return 0

    def close(self):
        """Destroy the engine (kvferry addition; Mooncake frees it with the
        object). Managed buffers are unregistered and freed. Idempotent."""
        h, self._h = self._h, None
        if not h:
            return
        with self._managed.mu:
            maps = self._managed.slabs + list(self._managed.large.values())
            self._managed = _Managed()
        for mp in maps:
            lib.unregisterLocalMemory(h, mp.addr)
        lib.destroyTransferEngine(h)
        for mp in maps:
            mp.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass

    def get_rpc_port(self):
        """Return the engine's RPC (handshake) port; peers address a P2P
        engine as f"{host}:{port}". -1 when not initialized."""
        if not self._h:
            return -1
        return lib.kvferry_engine_rpc_port(self._h)

    def get_segment_name(self):
        """Return the engine's segment name ("host:port" in P2P mode), the
        name peers pass as target_hostname (kvferry addition)."""
        if not self._h:
            return ""
        return _lib.read_string(lib.kvferry_engine_segment_name, self._h) or ""

    def get_local_ip_and_port(self):
        """Return "ip:port" as getLocalIpAndPort does (kvferry addition)."""
        if not self._h:
            return ""
        buf = ctypes.create_string_buffer(256)
        if lib.getLocalIpAndPort(self._h, buf, len(buf)) != 0:
            return ""
        return buf.value.decode()

    def last_error(self):
        """Return the text of the last error the engine recorded (kvferry addition)."""
        if not self._h:
            return "engine not initialized"
        return _lib.read_string(lib.kvferry_engine_last_error, self._h) or ""

    def get_local_topology(self, device_name=None):
        """Return the NIC priority matrix as JSON. kvferry discovers no
        vendor topology for TCP-only hosts and then returns "{}"."""
        if device_name is not None:
            _as_str(device_name, "device_name")
        return json.dumps({})

    def get_engine(self):
        """Return an InnerTransferEngine to share this engine with a store."""
        return InnerTransferEngine(self)

    def get_engine_ptr(self):
        """Return the engine's C handle (transfer_engine_t) as an int."""
        return self._h or 0

    def get_notifies(self):
        """Drain and return the received notifications (list[TransferNotify])."""
        if not self._h:
            return []
        n = c_int(0)
        arr = lib.getNotifsFromEngine(self._h, byref(n))
        out = []
        if not arr or n.value <= 0:
            return out
        try:
            for i in range(n.value):
                m = arr[i]
                name = ctypes.string_at(m.name).decode(errors="replace") if m.name else ""
                msg = ctypes.string_at(m.msg).decode(errors="replace") if m.msg else ""
                out.append(TransferNotify(name, msg))
        finally:
            lib.freeNotifsMsgBuf(arr, n.value)
        return out

    def send_notify(self, target_hostname, notify):
        """Send notify to a peer at once, independent of transfers
        (genNotifyInEngine; kvferry addition). Returns 0 or a negative code."""
        target_hostname = _as_str(target_hostname, "target_hostname")
        if not isinstance(notify, TransferNotify):
            raise TypeError("notify must be a TransferNotify")
        seg = self._open(target_hostname)
        if seg < 0:
            return TransferError.METADATA
        m, keep = _notify_msg(notify)
        return lib.genNotifyInEngine(self._h, seg, m)

    def send_probe(self, peer_server_name):
        """Probe a peer's RPC endpoint: 0 when it answered, else non-zero."""
        peer_server_name = _as_str(peer_server_name, "peer_server_name")
        if not self._h:
            return -1
        return lib.kvferry_engine_probe(self._h, peer_server_name.encode())

    def warmup_efa_segment(self, segment_name):
        """EFA only in Mooncake; a no-op returning 0 here."""
        _as_str(segment_name, "segment_name")
        return 0

    def get_first_buffer_address(self, segment_name):
        """Return the address of the first buffer a segment registered, or 0."""
        segment_name = _as_str(segment_name, "segment_name")
        seg = self._open(segment_name)
        if seg < 0:
            return 0
        out = (BufferEntry * 1)()
        n = lib.kvferry_segment_buffers(self._h, seg, out, 1)
        if n <= 0:
            return 0
        return out[0].addr or 0

    def segment_buffers(self, segment_name):
        """Return [(addr, length), ...] registered by a segment (kvferry addition)."""
        segment_name = _as_str(segment_name, "segment_name")
        seg = self._open(segment_name)
        if seg < 0:
            return []
        cap = 64
        while True:
            out = (BufferEntry * cap)()
            n = lib.kvferry_segment_buffers(self._h, seg, out, cap)
            if n < 0:
                return []
            if n <= cap:
                return [(out[i].addr or 0, out[i].length) for i in range(n)]
            cap = n

    def show_links(self, as_json=False):
        """Return the engine's link table (kvferry addition)."""
        if not self._h:
            return ""
        n = 1 << 16
        buf = ctypes.create_string_buffer(n)
        if lib.showLinks(self._h, buf, n, 1 if as_json else 0) != 0:
            return ""
        return buf.value.decode(errors="replace")

    # ---- memory ----

    def register_memory(self, buffer_addr, capacity, location=_WILDCARD):
        """Register [buffer_addr, +capacity) for transfers. 0 or negative."""
        buffer_addr = _as_int(buffer_addr, "buffer_addr")
        capacity = _as_int(capacity, "capacity")
        location = _as_str(location, "location")
        if not self._h:
            return TransferError.INVALID_ARGUMENT
        if buffer_addr <= 0 or capacity < 0:
            return TransferError.INVALID_ARGUMENT
        return lib.registerLocalMemory(self._h, buffer_addr, capacity, location.encode(), 1)

    def unregister_memory(self, buffer_addr):
        """Unregister the region starting at buffer_addr. 0 or negative."""
        buffer_addr = _as_int(buffer_addr, "buffer_addr")
        if not self._h or buffer_addr <= 0:
            return TransferError.INVALID_ARGUMENT
        return lib.unregisterLocalMemory(self._h, buffer_addr)

    def batch_register_memory(self, buffer_addresses, capacities, location=_WILDCARD):
        """Register several regions with one metadata update. 0 or negative."""
        addrs = _int_list(buffer_addresses, "buffer_addresses")
        caps = _int_list(capacities, "capacities")
        location = _as_str(location, "location")
        if len(addrs) != len(caps):
            raise ValueError("buffer_addresses and capacities differ in length (%d, %d)"
                             % (len(addrs), len(caps)))
        if not self._h:
            return TransferError.INVALID_ARGUMENT
        if not addrs:
            return 0
        if any(a <= 0 for a in addrs) or any(c < 0 for c in caps):
            return TransferError.INVALID_ARGUMENT
        arr = (BufferEntry * len(addrs))()
        for i, (a, c) in enumerate(zip(addrs, caps)):
            arr[i].addr = a
            arr[i].length = c
        return lib.registerLocalMemoryBatch(self._h, arr, len(addrs), location.encode())

    def batch_unregister_memory(self, buffer_addresses):
        """Unregister several regions. 0 or the first negative code."""
        addrs = _int_list(buffer_addresses, "buffer_addresses")
        if not self._h:
            return TransferError.INVALID_ARGUMENT
        if not addrs:
            return 0
        if any(a <= 0 for a in addrs):
            return TransferError.INVALID_ARGUMENT
        arr = (c_void_p * len(addrs))(*addrs)
        return lib.unregisterLocalMemoryBatch(self._h, arr, len(addrs))

    def allocate_managed_buffer(self, length):
        """Allocate registered memory from the engine's pool; returns the
        address, or 0 on failure. Free it with free_managed_buffer."""
        length = _as_int(length, "length")
        if not self._h or length <= 0:
            return 0
        m = self._managed
        with m.mu:
            cls = m.class_of(length)
            if cls < 0:
                try:
                    mp = _Map(length)
                except (OSError, ValueError, OverflowError):
                    return 0
                if lib.registerLocalMemory(self._h, mp.addr, length, _WILDCARD.encode(), 1) != 0:
                    mp.release()
                    return 0
                m.large[mp.addr] = mp
                return mp.addr
            if not m.free[cls] and self._split(cls) != 0:
                return 0
            return m.free[cls].pop()

    def _split(self, cls):
        # Called with the managed lock held: make m.free[cls] non-empty.
        m = self._managed
        top = len(_CLASS_BYTES) - 1
        if cls == top:
            try:
                mp = _Map(_SLAB_BYTES)
            except (OSError, ValueError, OverflowError):
                return -1
            if lib.registerLocalMemory(self._h, mp.addr, _SLAB_BYTES, _WILDCARD.encode(), 1) != 0:
                mp.release()
                return -1
            m.slabs.append(mp)
            for off in range(0, _SLAB_BYTES, _CLASS_BYTES[top]):
                m.free[top].append(mp.addr + off)
            return 0
        if not m.free[cls + 1] and self._split(cls + 1) != 0:
            return -1
        b = m.free[cls + 1].pop()
        m.free[cls].append(b)
        m.free[cls].append(b + _CLASS_BYTES[cls])
        return 0

    def free_managed_buffer(self, buffer_addr, length):
        """Return memory from allocate_managed_buffer to the pool. 0."""
        buffer_addr = _as_int(buffer_addr, "buffer_addr")
        length = _as_int(length, "length")
        m = self._managed
        with m.mu:
            cls = m.class_of(length)
            if cls < 0:
                mp = m.large.pop(buffer_addr, None)
                if mp is None:
                    return TransferError.INVALID_ARGUMENT
                if self._h:
                    lib.unregisterLocalMemory(self._h, buffer_addr)
                mp.release()
                return 0
            m.free[cls].append(buffer_addr)
        return 0

    def write_bytes_to_buffer(self, dest_address, src, length):
        """Copy length bytes of src (bytes-like) to dest_address. 0."""
        dest_address = _as_int(dest_address, "dest_address")
        length = _as_int(length, "length")
        data = src if isinstance(src, bytes) else memoryview(src).tobytes()
        if length < 0 or length > len(data):
            raise ValueError("length %d exceeds the %d bytes of src" % (length, len(data)))
        if dest_address <= 0:
            return TransferError.INVALID_ARGUMENT
        if length:
            ctypes.memmove(dest_address, data, length)
        return 0

    def read_bytes_from_buffer(self, source_address, length):
        """Return length bytes read at source_address."""
        source_address = _as_int(source_address, "source_address")
        length = _as_int(length, "length")
        if source_address <= 0 or length < 0:
            raise ValueError("bad address or length")
        return ctypes.string_at(source_address, length)

    # ---- transfers ----

    def _open(self, target):
        if not self._h:
            return -1
        with self._mu:
            seg = self._segments.get(target)
            if seg is not None:
                return seg
        seg = lib.openSegment(self._h, target.encode())
        if seg < 0:
            log.warning("open segment %s failed: %s", target, self.last_error())
            return -1
        with self._mu:
            self._segments[target] = seg
        return seg

    def _forget(self, target):
        with self._mu:
            self._segments.pop(target, None)
        if self._h:
            lib.removeLocalSegment(self._h, target.encode())

    def open_segment(self, target_hostname):
        """Return the segment id of target_hostname (cached), or -1 (kvferry addition)."""
        return self._open(_as_str(target_hostname, "target_hostname"))

    @staticmethod
    def _requests(opcode, seg, buffers, peers, lengths):
        n = len(buffers)
        arr = (TransferRequest * n)()
        for i in range(n):
            r = arr[i]
            r.opcode = opcode
            r.source = buffers[i]
            r.target_id = seg
            r.target_offset = peers[i]
            r.length = lengths[i]
        return arr

    def _submit(self, target, buffers, peers, lengths, opcode, notify, awaited=False):
        """Allocate and submit one batch; returns (batch id, total bytes) or (0, 0).
        awaited: the caller waits for it at once (kvferry_batch_await)."""
        if not self._h:
            return 0, 0
        seg = self._open(target)
        if seg < 0:
            return 0, 0
        n = len(buffers)
        reqs = self._requests(int(opcode), seg, buffers, peers, lengths)
        bid = lib.allocateBatchID(self._h, max(n, 1))
        if bid in (0, _lib.INVALID_BATCH):
            return 0, 0
        if awaited:
            lib.kvferry_batch_await(self._h, bid)  # a hint: a failure changes nothing
        if notify is not None:
            m, keep = _notify_msg(notify)
            rc = lib.submitTransferWithNotify(self._h, bid, reqs, n, m)
        else:
            rc = lib.submitTransfer(self._h, bid, reqs, n)
        if rc != 0:
            log.warning("submit to %s failed (status %d): %s", target, rc, self.last_error())
            self._drop(bid)
            if rc not in (1, 2, 3):  # not the caller's mistake: re-resolve the peer next time
                self._forget(target)
            return 0, 0
        return bid, sum(lengths)

    def _drop(self, bid):
        # Cancel (bounded) and free a batch whatever its state.
        if not self._h:
            return
        lib.kvferry_batch_cancel(self._h, bid)
        lib.freeBatchID(self._h, bid)

    def _wait(self, bid, deadline_ns):
        """Block (GIL released) until bid is terminal or the deadline; returns
        the batch state, or STATUS_TIMEOUT."""
        left_ms = max(0, (deadline_ns - time.monotonic_ns()) // 1_000_000)
        state = c_int(-1)
        rc = lib.kvferry_batch_wait(self._h, bid, left_ms, byref(state))
        if rc == _lib.KVFERRY_ERR_TIMEOUT:
            return _lib.STATUS_TIMEOUT
        if rc != 0:
            return _lib.STATUS_FAILED
        return state.value

    def _sync(self, target, buffers, peers, lengths, opcode, notify):
        start = time.monotonic_ns()
        # Reads are declared awaited: the waiting thread reads the answers
        # itself (kvferry-bench --await: 14-33 % less CPU per 1 MiB read);
        # single large writes measured no better that way.
        bid, total = self._submit(target, buffers, peers, lengths, opcode, notify,
                                  awaited=int(opcode) == TransferOpcode.Read)
        if not bid:
            return -1
        state = self._wait(bid, start + self._timeout_ns + total)
        if state == _lib.STATUS_COMPLETED:
            lib.freeBatchID(self._h, bid)
            return 0
        log.warning("transfer to %s ended in state %d: %s", target, state, self.last_error())
        self._drop(bid)
        return -1

    def _check_one(self, target_hostname, buffer, peer_buffer_address, length):
        return (_as_str(target_hostname, "target_hostname"), [_as_int(buffer, "buffer")],
                [_as_int(peer_buffer_address, "peer_buffer_address")],
                [_as_int(length, "length")])

    def _check_batch(self, target_hostname, buffers, peer_buffer_addresses, lengths):
        t = _as_str(target_hostname, "target_hostname")
        b = _int_list(buffers, "buffers")
        p = _int_list(peer_buffer_addresses, "peer_buffer_addresses")
        n = _int_list(lengths, "lengths")
        if not (len(b) == len(p) == len(n)):
            log.error("buffers, peer_buffer_addresses and lengths have different sizes")
            return None
        if any(x < 0 for x in n):
            log.error("negative length")
            return None
        return t, b, p, n

    @staticmethod
    def _check_notify(notify):
        if notify is not None and not isinstance(notify, TransferNotify):
            raise TypeError("notify must be a TransferNotify or None")
        return notify

    @staticmethod
    def _check_opcode(opcode):
        try:
            return TransferOpcode(int(opcode))
        except (TypeError, ValueError):
            raise TypeError("opcode must be a TransferOpcode") from None

    def transfer_sync_write(self, target_hostname, buffer, peer_buffer_address, length,
                            transport_hint=""):
        """Write length bytes from local buffer to peer_buffer_address of
        target_hostname; blocks. 0 or -1."""
        t, b, p, n = self._check_one(target_hostname, buffer, peer_buffer_address, length)
        return self._sync(t, b, p, n, TransferOpcode.Write, None)

    def transfer_sync_read(self, target_hostname, buffer, peer_buffer_address, length,
                           transport_hint=""):
        """Read length bytes at peer_buffer_address of target_hostname into
        local buffer; blocks. 0 or -1."""
        t, b, p, n = self._check_one(target_hostname, buffer, peer_buffer_address, length)
        return self._sync(t, b, p, n, TransferOpcode.Read, None)

    def transfer_sync(self, target_hostname, buffer, peer_buffer_address, length, opcode,
                      notify=None, transport_hint=""):
        """One blocking transfer in either direction, with an optional
        notification sent when it completes. 0 or -1."""
        t, b, p, n = self._check_one(target_hostname, buffer, peer_buffer_address, length)
        return self._sync(t, b, p, n, self._check_opcode(opcode), self._check_notify(notify))

    def batch_transfer_sync_write(self, target_hostname, buffers, peer_buffer_addresses,
                                  lengths, transport_hint=""):
        """Write several ranges to one peer as one batch; blocks. 0 or -1."""
        c = self._check_batch(target_hostname, buffers, peer_buffer_addresses, lengths)
        return -1 if c is None else self._sync(*c, TransferOpcode.Write, None)

    def batch_transfer_sync_read(self, target_hostname, buffers, peer_buffer_addresses,
                                 lengths, transport_hint=""):
        """Read several ranges from one peer as one batch; blocks. 0 or -1."""
        c = self._check_batch(target_hostname, buffers, peer_buffer_addresses, lengths)
        return -1 if c is None else self._sync(*c, TransferOpcode.Read, None)

    def batch_transfer_sync(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                            opcode, notify=None, transport_hint=""):
        """A blocking batch in either direction, with an optional notification. 0 or -1."""
        c = self._check_batch(target_hostname, buffers, peer_buffer_addresses, lengths)
        op = self._check_opcode(opcode)
        notify = self._check_notify(notify)
        return -1 if c is None else self._sync(*c, op, notify)

    def _async_submit(self, c, opcode):
        if c is None:
            return 0
        start = time.monotonic_ns()
        bid, total = self._submit(*c, opcode, None)
        if bid:
            with self._mu:
                self._async[bid] = (total, start)
        return bid

    def batch_transfer_async_write(self, target_hostname, buffers, peer_buffer_addresses,
                                   lengths, transport_hint=""):
        """Submit a write batch; returns its batch id, or 0 on failure."""
        return self._async_submit(
            self._check_batch(target_hostname, buffers, peer_buffer_addresses, lengths),
            TransferOpcode.Write)

    def batch_transfer_async_read(self, target_hostname, buffers, peer_buffer_addresses,
                                  lengths, transport_hint=""):
        """Submit a read batch; returns its batch id, or 0 on failure."""
        return self._async_submit(
            self._check_batch(target_hostname, buffers, peer_buffer_addresses, lengths),
            TransferOpcode.Read)

    def batch_transfer_async(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                             opcode, transport_hint=""):
        """Submit a batch in either direction; returns its batch id, or 0."""
        op = self._check_opcode(opcode)
        return self._async_submit(
            self._check_batch(target_hostname, buffers, peer_buffer_addresses, lengths), op)

    def transfer_submit_write(self, target_hostname, buffer, peer_buffer_address, length,
                              transport_hint=""):
        """Submit one write; returns its batch id, or 0 on failure."""
        return self._async_submit(
            self._check_one(target_hostname, buffer, peer_buffer_address, length),
            TransferOpcode.Write)

    def get_batch_transfer_status(self, batch_ids):
        """Block until every batch completed (each is freed): 0. If one
        fails or times out, the rest are canceled and freed: -1."""
        ids = _int_list(batch_ids, "batch_ids")
        if not self._h:
            return -1
        failed = False
        left = list(ids)
        while left and not failed:
            bid = left.pop(0)
            with self._mu:
                total, start = self._async.pop(bid, (0, time.monotonic_ns()))
            if bid == 0:
                failed = True
                break
            state = self._wait(bid, start + self._timeout_ns + total)
            if state == _lib.STATUS_COMPLETED:
                lib.freeBatchID(self._h, bid)
            else:
                log.warning("batch %#x ended in state %d: %s", bid, state, self.last_error())
                self._drop(bid)
                failed = True
        if failed:
            for bid in left:
                with self._mu:
                    self._async.pop(bid, None)
                if bid:
                    self._drop(bid)
            return -1
        return 0

    def transfer_check_status(self, batch_id):
        """Poll one batch without blocking: 1 completed (freed), 0 running,
        -1 failed (freed), -2 timed out."""
        batch_id = _as_int(batch_id, "batch_id")
        if not self._h or batch_id == 0:
            return -1
        state = c_int(-1)
        if lib.kvferry_batch_status(self._h, batch_id, byref(state), None, None) != 0:
            return -1
        s = state.value
        if s == _lib.STATUS_COMPLETED:
            lib.freeBatchID(self._h, batch_id)
            with self._mu:
                self._async.pop(batch_id, None)
            return 1
        if s in (_lib.STATUS_FAILED, _lib.STATUS_CANCELED, _lib.STATUS_INVALID):
            self._drop(batch_id)
            with self._mu:
                self._async.pop(batch_id, None)
            return -1
        if s == _lib.STATUS_TIMEOUT:
            return -2
        with self._mu:
            total, start = self._async.get(batch_id, (0, None))
        if start is not None and time.monotonic_ns() - start > self._timeout_ns + total:
            return -2
        return 0

    def batch_status(self, batch_id):
        """Return (state, transferred_bytes, task_count) of a batch, or None
        (kvferry addition; never frees)."""
        batch_id = _as_int(batch_id, "batch_id")
        if not self._h:
            return None
        state, nbytes, tasks = c_int(0), c_uint64(0), c_size_t(0)
        if lib.kvferry_batch_status(self._h, batch_id, byref(state), byref(nbytes),
                                    byref(tasks)) != 0:
            return None
        return state.value, nbytes.value, tasks.value

    def cancel_batch(self, batch_id):
        """Cancel and free a batch (kvferry addition). 0 or negative."""
        batch_id = _as_int(batch_id, "batch_id")
        if not self._h:
            return TransferError.INVALID_ARGUMENT
        rc = lib.kvferry_batch_cancel(self._h, batch_id)
        if rc == 0:
            lib.freeBatchID(self._h, batch_id)
        with self._mu:
            self._async.pop(batch_id, None)
        return rc

    # CUDA-stream variants (Mooncake's transfer_*_on_cuda): the transfer is
    # queued on the caller's stream and runs once the work queued on it
    # before has finished; work queued after it waits for the transfer.
    # They return None at once, as Mooncake's do; a failure is logged and
    # recorded as the engine's last error (last_error).

    def transfer_write_on_cuda(self, target_hostname, buffer, peer_buffer_address, length,
                               stream_ptr=0, transport_hint=""):
        """Write, ordered on CUDA stream stream_ptr (0: the default stream)."""
        self._on_stream(target_hostname, [buffer], [peer_buffer_address], [length], stream_ptr, 1)

    def transfer_read_on_cuda(self, target_hostname, buffer, peer_buffer_address, length,
                              stream_ptr=0, transport_hint=""):
        """Read, ordered on CUDA stream stream_ptr (0: the default stream)."""
        self._on_stream(target_hostname, [buffer], [peer_buffer_address], [length], stream_ptr, 0)

    def batch_transfer_write_on_cuda(self, target_hostname, buffers, peer_buffer_addresses,
                                     lengths, stream_ptr=0, transport_hint=""):
        """Batch write, ordered on CUDA stream stream_ptr."""
        self._on_stream(target_hostname, buffers, peer_buffer_addresses, lengths, stream_ptr, 1)

    def batch_transfer_read_on_cuda(self, target_hostname, buffers, peer_buffer_addresses,
                                    lengths, stream_ptr=0, transport_hint=""):
        """Batch read, ordered on CUDA stream stream_ptr."""
        self._on_stream(target_hostname, buffers, peer_buffer_addresses, lengths, stream_ptr, 0)

    def _on_stream(self, target, buffers, peers, lengths, stream, opcode):
        target = _as_str(target, "target_hostname")
        bufs = _int_list(buffers, "buffers")
        peers = _int_list(peers, "peer_buffer_addresses")
        lens = _int_list(lengths, "lengths")
        stream = _as_int(stream, "stream_ptr")
        if not (len(bufs) == len(peers) == len(lens)):
            raise ValueError("buffers, peer_buffer_addresses and lengths differ in length")
        if not self._h:
            log.error("transfer on a CUDA stream: engine not initialized")
            return
        n = len(bufs)
        rc = lib.kvferry_transfer_on_stream(self._h, stream or None, target.encode(),
                                            (c_void_p * max(n, 1))(*bufs),
                                            (c_uint64 * max(n, 1))(*peers),
                                            (c_size_t * max(n, 1))(*lens), n, opcode)
        if rc != 0:
            log.error("transfer on CUDA stream %#x to %s not queued (%d): %s", stream, target, rc,
                      self.last_error())


def _notify_msg(notify):
    """Return (notify_msg struct, keepalive): the strings stay alive as long
    as the keepalive does (the library copies them during the call)."""
    name = ctypes.create_string_buffer(notify.name.encode())
    msg = ctypes.create_string_buffer(notify.msg.encode())
    m = NotifyMsg(ctypes.addressof(name), ctypes.addressof(msg))
    return m, (name, msg)


