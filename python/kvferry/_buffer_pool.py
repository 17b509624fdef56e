"""``BufferPool``, ``BufferLease`` and ``BufferLeaseView``: registered host
buffers handed out as leases (Mooncake's ``mooncake.store`` classes of the
same names, from its buffer_pool.cpp).

A pool serves a store: ``acquire(size)`` returns a lease on at least size
bytes of host memory registered with that store, so ``put_from`` /
``get_into`` and the ranged calls use it with no copy. Memory comes from
``posix_memalign`` (the pool's ``alignment``), is registered with the
store's ``register_buffer``, and, when a lease is released, goes back to
the pool's idle list, sized by class (``min_size_class`` rounded up to
powers of two up to ``max_size_class``; larger requests exactly); a later
acquire of the same class reuses it with no new registration. The bytes
the pool holds (leased and idle) never exceed ``max_bytes``: idle regions
are unregistered and freed to make room, and past that an acquire waits
(``block_on_exhaustion``, ``timeout``) or raises. ``prewarm(size, count)``
registers count idle regions ahead. Mooncake's pool takes its memory from
the client's local buffer first; kvferry's local buffer is the library's
own staging area, so every region here is a registration of its own.

``lease.buffer`` is a writable ``memoryview`` over exactly ``size`` bytes,
exported through a ``BufferLeaseView``; while any view (or an array made
from one) is alive, ``release()`` raises, as Mooncake's does."""

import ctypes
import threading
import time
import weakref

from ._store_args import log

_libc = ctypes.CDLL(None, use_errno=True)
_posix_memalign = _libc.posix_memalign
_posix_memalign.restype = ctypes.c_int
_posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
_free = _libc.free
_free.restype = None
_free.argtypes = [ctypes.c_void_p]


class BufferLeaseView(ctypes.c_ubyte * 1):
    """The buffer-protocol export of a lease: ``memoryview(view)`` (or
    ``view.buffer``) gives its bytes. Each view is an instance of a subclass
    sized to its lease; it keeps the lease's memory alive, and the lease
    counts it as an export until it (and every memoryview or array made
    from it) is gone."""

    @property
    def buffer(self):
        """A writable memoryview of the bytes (format "B")."""
        return memoryview(self).cast("B")


def _view_type(n):
    return type("BufferLeaseView", (BufferLeaseView,), {"_length_": n, "_type_": ctypes.c_ubyte,
                                                        "__module__": __name__})


class _Region:
    """One registered allocation: addr, its size class in bytes."""

    __slots__ = ("addr", "size")

    def __init__(self, addr, size):
        self.addr = addr
        self.size = size


class BufferLease:
    """A lease on registered memory from a BufferPool: ``ptr`` and ``size``
    (the bytes asked for), ``buffer`` (a memoryview), ``release()``, and the
    context-manager protocol (``with pool.acquire(n) as lease:``, released
    on exit). A lease not released goes back to its pool when collected."""

    def __init__(self, pool, region, size):
        self._pool = pool
        self._region = region
        self._size = size
        self._exports = 0
        self._mu = threading.Lock()
        self._fin = weakref.finalize(self, pool._give_back, region)

    @property
    def ptr(self):
        """The address of the leased memory (RuntimeError once released)."""
        if self._region is None:
            raise RuntimeError("buffer lease is closed")
        return self._region.addr

    @property
    def size(self):
        """The size asked for, in bytes."""
        return self._size

    @property
    def buffer(self):
        """A writable memoryview over the size bytes (one new export)."""
        if self._region is None:
            raise RuntimeError("buffer lease is closed")
        view = _view_type(max(self._size, 1)).from_address(self._region.addr)
        view._lease = self  # the memory stays leased while the view lives
        with self._mu:
            self._exports += 1
        weakref.finalize(view, self._drop_export)
        mv = memoryview(view).cast("B")
        return mv[:self._size]

    def _drop_export(self):
        with self._mu:
            self._exports -= 1

    def release(self):
        """Give the memory back to the pool. RuntimeError while a view of
        it is alive; a second release does nothing."""
        if self._region is None:
            return
        with self._mu:
            if self._exports != 0:
                raise RuntimeError("cannot release buffer while exported views exist")
        self._region = None
        self._fin()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class BufferPool:
    """A pool of host buffers registered with a store, handed out as
    BufferLease (Mooncake's BufferPool, with its arguments and defaults).

    store: a set-up MooncakeDistributedStore with a local buffer.
    max_bytes: the most bytes held, leased or idle (0: twice the store's
    local_buffer_size; never less than it). min_size_class /
    max_size_class: the smallest size class and the largest (None:
    max_bytes); requests above it get their exact size. alignment: of every
    region (a power of two, at least the pointer size).
    block_on_exhaustion / default_timeout: what acquire does when the pool
    is full (wait, for at most default_timeout seconds; None: no limit).
    max_regions: the most regions leased at once (None: no limit).
    prewarm_size / prewarm_count: regions registered at once.
    """

    def __init__(self, store, max_bytes=0, min_size_class=64 * 1024, max_size_class=None,
                 alignment=8 * 1024 * 1024, block_on_exhaustion=True, default_timeout=None,
                 max_regions=None, prewarm_size=None, prewarm_count=0):
        if store is None or not callable(getattr(store, "_get_pyclient_capsule", None)):
            raise RuntimeError("BufferPool store parameter must be a store that implements "
                               "_get_pyclient_capsule()")
        if store._get_pyclient_capsule() is None:
            raise RuntimeError("MooncakeDistributedStore is not initialized")
        if min_size_class <= 0 or alignment <= 0:
            raise RuntimeError("min_size_class and alignment must be positive")
        if alignment < ctypes.sizeof(ctypes.c_void_p) or alignment & (alignment - 1):
            raise RuntimeError("alignment must be a power of two and at least sizeof(void*)")
        capacity = int(getattr(store, "_local_buffer_size", 0))
        if capacity <= 0:
            raise RuntimeError("BufferPool requires a store configured with a local buffer")
        self._store = store
        self._max_bytes = 2 * capacity if max_bytes == 0 else max(int(max_bytes), capacity)
        self._min_class = int(min_size_class)
        self._max_class = self._max_bytes if max_size_class is None else int(max_size_class)
        self._alignment = int(alignment)
        self._block = bool(block_on_exhaustion)
        self._timeout = None if default_timeout is None else float(default_timeout)
        self._max_regions = None if max_regions is None else int(max_regions)
        # _cv's lock guards everything below.
        self._cv = threading.Condition()
        self._idle = {}  # size class -> [_Region]
        self._leased = 0  # regions leased
        self._reserving = 0  # regions being allocated and registered
        self._bytes = 0  # bytes of every region held, leased, idle or being made
        self._closed = False
        if prewarm_size is not None and prewarm_count > 0:
            self.prewarm(prewarm_size, prewarm_count)

    def _class_of(self, size):
        size = max(int(size), 1)
        if size > self._max_class:
            return size
        c = self._min_class
        while c < size:
            c <<= 1
        return c if c <= self._max_bytes else size

    def _raise_if_closed(self):
        if self._closed:
            raise RuntimeError("buffer pool is closed")

    def _room_locked(self, n):
        """Free idle regions until n more bytes fit; report whether they do."""
        while self._bytes + n > self._max_bytes:
            victim = next((c for c, rs in self._idle.items() if rs), None)
            if victim is None:
                return False
            r = self._idle[victim].pop()
            self._bytes -= r.size
            self._destroy(r)
        return True

    def _make(self, size):
        """Allocate and register one region of size bytes (no lock held)."""
        p = ctypes.c_void_p()
        if _posix_memalign(ctypes.byref(p), self._alignment, size) != 0 or not p.value:
            raise MemoryError("buffer pool: cannot allocate %d bytes" % size)
        rc = self._store.register_buffer(p.value, size)
        if rc != 0:
            _free(p.value)
            raise RuntimeError("overflow buffer registration failed (%d)" % rc)
        return _Region(p.value, size)

    def _destroy(self, r):
        rc = self._store.unregister_buffer(r.addr)
        if rc != 0 and self._store._get_pyclient_capsule() is not None:
            log.warning("buffer pool: unregister of %#x failed (%d)", r.addr, rc)
        _free(r.addr)

    def acquire(self, size, block=None, timeout=None):
        """Lease at least size bytes of registered memory. When the pool is
        full: wait (block, default block_on_exhaustion) for at most timeout
        seconds (default default_timeout; None: no limit), else raise
        RuntimeError ("buffer pool is exhausted", "timed out waiting for
        buffer"); RuntimeError for a size over the pool's capacity."""
        if size < 0:
            raise RuntimeError("size must be non-negative")
        should_block = self._block if block is None else bool(block)
        t = self._timeout if timeout is None else float(timeout)
        if t is not None and t < 0:
            raise RuntimeError("timeout must be non-negative")
        cls = self._class_of(size)
        if cls > self._max_bytes:
            raise RuntimeError("requested buffer size exceeds pool capacity")
        deadline = None if t is None else time.monotonic() + t
        with self._cv:
            while True:
                self._raise_if_closed()
                busy = self._leased + self._reserving
                if self._max_regions is None or busy < self._max_regions:
                    idle = self._idle.get(cls)
                    if idle:
                        self._leased += 1
                        return BufferLease(self, idle.pop(), size)
                    if self._room_locked(cls):
                        self._reserving += 1
                        self._bytes += cls
                        break
                if not should_block:
                    raise RuntimeError("buffer pool is exhausted")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise RuntimeError("timed out waiting for buffer")
                self._cv.wait(left)
        try:
            region = self._make(cls)
        except BaseException:
            with self._cv:
                self._reserving -= 1
                self._bytes -= cls
                self._cv.notify_all()
            raise
        with self._cv:
            self._reserving -= 1
            if self._closed:
                self._bytes -= cls
                self._cv.notify_all()
                self._destroy(region)
                raise RuntimeError("buffer pool is closing")
            self._leased += 1
            return BufferLease(self, region, size)

    def buffer(self, size, block=None, timeout=None):
        """The same as acquire."""
        return self.acquire(size, block, timeout)

    def prewarm(self, size, count):
        """Register count idle regions of size's class ahead of use, as far
        as max_bytes allows; returns how many were made."""
        cls = self._class_of(size)
        made = 0
        for _ in range(int(count)):
            with self._cv:
                self._raise_if_closed()
                if self._bytes + cls > self._max_bytes:
                    break
                self._bytes += cls
                self._reserving += 1
            try:
                r = self._make(cls)
            except BaseException:
                with self._cv:
                    self._bytes -= cls
                    self._reserving -= 1
                    self._cv.notify_all()
                raise
            with self._cv:
                self._reserving -= 1
                self._idle.setdefault(cls, []).append(r)
                self._cv.notify_all()
            made += 1
        return made

    def _give_back(self, region):
        """A lease's memory back to the idle list (or freed once closed)."""
        with self._cv:
            self._leased -= 1
            if self._closed:
                self._bytes -= region.size
                self._destroy(region)
            else:
                self._idle.setdefault(region.size, []).append(region)
            self._cv.notify_all()

    def close(self):
        """Unregister and free the idle regions; RuntimeError while leases
        are out ("cannot close buffer pool with active leases"). A second
        close does nothing."""
        with self._cv:
            if self._closed:
                return
            while self._reserving:
                self._cv.wait()
            if self._leased:
                raise RuntimeError("cannot close buffer pool with active leases")
            self._closed = True
            for rs in self._idle.values():
                for r in rs:
                    self._destroy(r)
            self._idle.clear()
            self._bytes = 0
            self._cv.notify_all()

    @property
    def stats(self):
        """{"leased", "idle", "bytes", "max_bytes"} now (kvferry addition)."""
        with self._cv:
            return {"leased": self._leased, "idle": sum(map(len, self._idle.values())),
                    "bytes": self._bytes, "max_bytes": self._max_bytes}


# Mooncake's other names for the same classes.
RegisteredBufferPool = BufferPool
RegisteredBufferLease = BufferLease
RegisteredBufferLeaseView = BufferLeaseView
