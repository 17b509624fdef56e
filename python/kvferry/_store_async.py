"""``MooncakeDistributedStoreAsync`` (spec §6.4): ``async_<name>``
awaitables, the data calls on the library's worker pool completing through
an eventfd the event loop watches."""

import asyncio
import concurrent.futures
import ctypes
import functools
import os
from ctypes import c_int64, c_uint64, c_void_p

from . import _lib
from . import tensor as _tensor
from ._lib import lib
from ._store_args import _INVALID, _buffer, _config, _grouped, _int, _ints, _key, _keys, _malloc_array
from ._store_client import MooncakeDistributedStore
from ._store_types import BufferHandle, ReplicateConfig


class _Queue:
    """A library completion queue bound to one event loop: calls are
    submitted to the library's worker pool, and the loop learns of
    completions through the queue's eventfd."""

    _POLL = 256

    def __init__(self, h, loop, workers, depth):
        q = lib.kvferry_store_queue_create(h, workers, depth)
        if not q:
            raise RuntimeError("kvferry: cannot create the store completion queue")
        self.q = q
        self.fd = lib.kvferry_store_queue_fd(q)
        self.loop = loop
        self.depth = depth
        self.sem = asyncio.Semaphore(depth)
        self.pending = {}  # tag -> (future, keepalive)
        self.tag = 0
        self.tags = (c_uint64 * self._POLL)()
        self.results = (c_int64 * self._POLL)()
        self.data = (c_void_p * self._POLL)()
        loop.add_reader(self.fd, self._ready)

    async def call(self, op, key, addr=0, size=0, config=None, flags=0, keep=None):
        await self.sem.acquire()
        self.tag += 1
        tag = self.tag
        fut = self.loop.create_future()
        cfg, ckeep = _config(config)
        rc = lib.kvferry_store_queue_submit(self.q, op, tag, key.encode(), addr, size, cfg, flags)
        if rc != 0:
            self.sem.release()
            return (rc if rc != _lib.KVFERRY_ERR_CLOSED else _INVALID), None
        # The entry (and with it the buffers) stays until the library has
        # finished with the call, even if the awaiting task is cancelled.
        self.pending[tag] = (fut, (keep, ckeep))
        return await fut

    def _ready(self):
        try:
            os.read(self.fd, 8)
        except (BlockingIOError, InterruptedError):
            pass
        while True:
            n = lib.kvferry_store_queue_poll(self.q, self.tags, self.results, self.data,
                                             self._POLL)
            if n <= 0:
                return
            for i in range(n):
                ent = self.pending.pop(self.tags[i], None)
                self.sem.release()
                res, data = self.results[i], self.data[i]
                if ent is None or ent[0].done():
                    if data:
                        lib.kvferry_store_free(data)
                    continue
                ent[0].set_result((res, data))
            if n < self._POLL:
                return

    def close(self):
        try:
            if not self.loop.is_closed():
                self.loop.remove_reader(self.fd)
        except Exception:
            pass
        lib.kvferry_store_queue_destroy(self.q)
        for fut, _keep in self.pending.values():
            if not fut.done() and not self.loop.is_closed():
                fut.set_result((_INVALID, None))
        self.pending.clear()


def _grouped_runs_sync(fn):
    """A native async put whose config names group_ids runs its synchronous
    method on the thread pool instead (the completion queue carries no
    group ids); the answer is the same."""
    name = fn.__name__[len("_a_"):]

    @functools.wraps(fn)
    async def wrapper(self, *args, **kwargs):
        cfg = kwargs.get("config")
        if cfg is None:
            cfg = next((a for a in args if isinstance(a, ReplicateConfig)), None)
        if _grouped(cfg):
            return await self._threaded(getattr(self, name))(*args, **kwargs)
        return await fn(self, *args, **kwargs)

    return wrapper


class MooncakeDistributedStoreAsync(MooncakeDistributedStore):
    """MooncakeDistributedStore with ``async_<method>`` awaitables (spec §6.4).

    Data calls (put*, upsert*, get*, is_exist, get_size, remove and their
    batch and tensor forms) run on the library's worker pool and complete
    through an eventfd the event loop watches: no Python thread per call,
    and thousands of requests may be in flight. Other methods run on a
    small bounded thread pool.

    queue_workers (default 16) and queue_depth (default 4096) size the
    library's pool and the number of calls in flight.
    """

    def __init__(self, queue_workers=16, queue_depth=4096):
        super().__init__()
        self._queue = None
        self._queue_workers = queue_workers
        self._queue_depth = queue_depth
        self._pool = None

    def __getattr__(self, name):
        if not name.startswith("async_"):
            raise AttributeError("'%s' object has no attribute '%s'" % (type(self).__name__, name))
        sync_name = name[6:]
        sync = getattr(self, sync_name, None)
        if sync is None or not callable(sync):
            raise AttributeError("'%s' object has no attribute '%s' (nor '%s')"
                                 % (type(self).__name__, name, sync_name))
        native = getattr(self, "_a_" + sync_name, None)
        wrapper = native if native is not None else self._threaded(sync)
        setattr(self, name, wrapper)
        return wrapper

    def _threaded(self, sync):
        @functools.wraps(sync)
        async def wrapper(*args, **kwargs):
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=4, thread_name_prefix="kvferry-store")
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._pool, functools.partial(sync, *args, **kwargs))

        return wrapper

    def _q(self):
        loop = asyncio.get_running_loop()
        q = self._queue
        if q is not None and q.loop is not loop:
            if q.pending:
                raise RuntimeError("store used from two event loops at once")
            q.close()
            self._queue = q = None
        if q is None:
            if not self._h:
                return None
            q = self._queue = _Queue(self._h, loop, self._queue_workers, self._queue_depth)
        return q

    def _on_close(self):
        q, self._queue = self._queue, None
        if q is not None:
            q.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    # Native async calls. Each mirrors its synchronous method's checks and
    # results.

    @_grouped_runs_sync
    async def _a_put(self, key, value, config=None):
        return await self._aput(key, value, config, False)

    @_grouped_runs_sync
    async def _a_upsert(self, key, value, config=None):
        return await self._aput(key, value, config, True)

    async def _aput(self, key, value, config, upsert):
        key = _key(key)
        addr, n, keep = _buffer(value)
        q = self._q()
        if q is None or n == 0:
            return _INVALID
        rc, _ = await q.call(_lib.QOP_PUT, key, addr, n, config,
                             _lib.QFLAG_UPSERT if upsert else 0, keep)
        return rc

    @_grouped_runs_sync
    async def _a_put_from(self, key, buffer_ptr, size, config=None):
        return await self._aput_from(key, buffer_ptr, size, config, False)

    @_grouped_runs_sync
    async def _a_upsert_from(self, key, buffer_ptr, size, config=None):
        return await self._aput_from(key, buffer_ptr, size, config, True)

    async def _aput_from(self, key, buffer_ptr, size, config, upsert):
        key = _key(key)
        buffer_ptr, size = _int(buffer_ptr, "buffer_ptr"), _int(size, "size")
        q = self._q()
        if q is None or buffer_ptr <= 0 or size <= 0:
            return _INVALID
        rc, _ = await q.call(_lib.QOP_PUT, key, buffer_ptr, size, config,
                             _lib.QFLAG_UPSERT if upsert else 0)
        return rc

    @_grouped_runs_sync
    async def _a_batch_put_from(self, keys, buffer_ptrs, sizes, config=None):
        return await self._abatch_from(keys, buffer_ptrs, sizes, config, False)

    @_grouped_runs_sync
    async def _a_batch_upsert_from(self, keys, buffer_ptrs, sizes, config=None):
        return await self._abatch_from(keys, buffer_ptrs, sizes, config, True)

    async def _abatch_from(self, keys, buffer_ptrs, sizes, config, upsert):
        keys = _keys(keys)
        ptrs, sizes = _ints(buffer_ptrs, "buffer_ptrs"), _ints(sizes, "sizes")
        if len(ptrs) != len(keys) or len(sizes) != len(keys):
            return [_INVALID] * len(keys)
        return list(await asyncio.gather(*[self._aput_from(k, p, s, config, upsert)
                                           for k, p, s in zip(keys, ptrs, sizes)]))

    @_grouped_runs_sync
    async def _a_put_batch(self, keys, values, config=None):
        keys = _keys(keys)
        values = list(values)
        if len(keys) != len(values):
            return _INVALID
        res = await asyncio.gather(*[self._aput(k, v, config, False)
                                     for k, v in zip(keys, values)])
        return next((r for r in res if r != 0), 0)

    async def _a_get(self, key):
        key = _key(key)
        q = self._q()
        if q is None:
            return b""
        n, p = await q.call(_lib.QOP_GET_ALLOC, key)
        if n < 0 or not p:
            return b""
        try:
            return ctypes.string_at(p, n)
        finally:
            lib.kvferry_store_free(p)

    async def _a_get_batch(self, keys):
        return list(await asyncio.gather(*[self._a_get(k) for k in _keys(keys)]))

    async def _a_get_buffer(self, key):
        key = _key(key)
        q = self._q()
        if q is None:
            return None
        n, p = await q.call(_lib.QOP_GET_ALLOC, key)
        if n < 0 or not p:
            return None
        return BufferHandle(p, n)

    async def _a_get_into(self, key, buffer_ptr, size):
        key = _key(key)
        buffer_ptr, size = _int(buffer_ptr, "buffer_ptr"), _int(size, "size")
        q = self._q()
        if q is None or buffer_ptr <= 0 or size < 0:
            return _INVALID
        n, _ = await q.call(_lib.QOP_GET_INTO, key, buffer_ptr, size)
        return n

    async def _a_batch_get_into(self, keys, buffer_ptrs, sizes):
        keys = _keys(keys)
        ptrs, sizes = _ints(buffer_ptrs, "buffer_ptrs"), _ints(sizes, "sizes")
        if len(ptrs) != len(keys) or len(sizes) != len(keys):
            return [_INVALID] * len(keys)
        return list(await asyncio.gather(*[self._a_get_into(k, p, s)
                                           for k, p, s in zip(keys, ptrs, sizes)]))

    async def _a_is_exist(self, key):
        key = _key(key)
        q = self._q()
        if q is None:
            return _INVALID
        return (await q.call(_lib.QOP_IS_EXIST, key))[0]

    async def _a_batch_is_exist(self, keys):
        return list(await asyncio.gather(*[self._a_is_exist(k) for k in _keys(keys)]))

    async def _a_get_size(self, key):
        key = _key(key)
        q = self._q()
        if q is None:
            return _INVALID
        return (await q.call(_lib.QOP_GET_SIZE, key))[0]

    async def _a_remove(self, key, force=False):
        key = _key(key)
        q = self._q()
        if q is None:
            return _INVALID
        return (await q.call(_lib.QOP_REMOVE, key, flags=_lib.QFLAG_FORCE if force else 0))[0]

    async def _a_batch_remove(self, keys, force=False):
        return list(await asyncio.gather(*[self._a_remove(k, force) for k in _keys(keys)]))

    async def _aput_tensor(self, key, tensor, config, upsert):
        key = _key(key)
        obj = self._encode(tensor)
        q = self._q()
        if q is None:
            return _INVALID
        rc, _ = await q.call(_lib.QOP_PUT, key, obj.ctypes.data, obj.nbytes, config,
                             _lib.QFLAG_UPSERT if upsert else 0, obj)
        return rc

    async def _a_put_tensor(self, key, tensor):
        return await self._aput_tensor(key, tensor, None, False)

    async def _a_upsert_tensor(self, key, tensor):
        return await self._aput_tensor(key, tensor, None, True)

    @_grouped_runs_sync
    async def _a_pub_tensor(self, key, tensor, config=None):
        return await self._aput_tensor(key, tensor, config, False)

    @_grouped_runs_sync
    async def _a_upsert_pub_tensor(self, key, tensor, config=None):
        return await self._aput_tensor(key, tensor, config, True)

    async def _abatch_tensor(self, keys, tensors_list, config, upsert):
        keys = _keys(keys)
        tensors = list(tensors_list)
        if len(keys) != len(tensors) or not keys:
            return [_INVALID] * len(keys)
        return list(await asyncio.gather(*[self._aput_tensor(k, t, config, upsert)
                                           for k, t in zip(keys, tensors)]))

    async def _a_batch_put_tensor(self, keys, tensors_list):
        return await self._abatch_tensor(keys, tensors_list, None, False)

    @_grouped_runs_sync
    async def _a_batch_pub_tensor(self, keys, tensors_list, config=None):
        return await self._abatch_tensor(keys, tensors_list, config, False)

    async def _a_batch_upsert_tensor(self, keys, tensors_list):
        return await self._abatch_tensor(keys, tensors_list, None, True)

    async def _a_get_tensor(self, key):
        key = _key(key)
        q = self._q()
        if q is None:
            return None
        n, p = await q.call(_lib.QOP_GET_ALLOC, key)
        if n < 0 or not p:
            return None
        return self._decode(_malloc_array(p, n))

    async def _a_batch_get_tensor(self, keys):
        return list(await asyncio.gather(*[self._a_get_tensor(k) for k in _keys(keys)]))

    async def _a_get_tensor_with_tp(self, key, tp_rank=0, tp_size=1, split_dim=0):
        key = _key(key)
        tp_rank, tp_size = _int(tp_rank, "tp_rank"), _int(tp_size, "tp_size")
        if tp_size <= 1:
            return await self._a_get_tensor(key)
        if not 0 <= tp_rank < tp_size:
            return None
        return await self._a_get_tensor(_tensor.tp_key(key, tp_rank))

    async def _a_batch_get_tensor_with_tp(self, base_keys, tp_rank=0, tp_size=1):
        return list(await asyncio.gather(*[self._a_get_tensor_with_tp(k, tp_rank, tp_size)
                                           for k in _keys(base_keys, "base_keys")]))
