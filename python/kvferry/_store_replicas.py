"""Where objects live and how they move: replica descriptors, copy and move
tasks (``_ReplicaMixin``)."""

import ctypes
import json
from ctypes import byref, c_int, c_int64, c_void_p

from . import _lib
from ._lib import lib
from ._store_args import _INVALID, _key, _keys, _name, log
from ._store_types import (
    Descriptor,
    DiskDescriptor,
    MemoryDescriptor,
    QueryTaskResponse,
    ReplicaDescriptor,
    ReplicaStatus,
    TaskStatus,
    TaskType,
)


class _ReplicaMixin:
    """get_replica_desc, batch_get_replica_desc, create_copy_task,
    create_move_task and query_task."""

    def _replicas(self, keys):
        n = len(keys)
        p = c_void_p()
        rc = lib.kvferry_store_replica_desc(self._h, _lib.c_strings(keys), n, byref(p))
        if rc < 0 or not p.value:
            log.error("replica desc failed (%s): %s", _name(rc), self.last_error())
            return None
        try:
            data = json.loads(ctypes.string_at(p.value, rc).decode())
        finally:
            lib.kvferry_store_free(p.value)
        out = []
        for ent in data:
            reps = []
            for r in ent.get("replicas") or []:
                try:
                    st = ReplicaStatus[r.get("status", "UNDEFINED")]
                except KeyError:
                    st = ReplicaStatus.UNDEFINED
                if r.get("disk"):
                    disk = DiskDescriptor(r.get("file_path", ""), r["size"], r["segment_name"])
                    reps.append(ReplicaDescriptor(st, None, r.get("protocol", ""), disk))
                    continue
                d = Descriptor(r["size"], r["address"], r["segment_name"])
                reps.append(ReplicaDescriptor(st, MemoryDescriptor(d), r.get("protocol", "")))
            out.append((ent.get("code", 0), ent.get("size", 0), reps))
        return out

    # ---- copy and move tasks ----

    def create_copy_task(self, key, targets):
        """Copy key's object to each segment in targets (segment names, as
        get_hostname returns them). Returns (task_id, 0) or ("", code)."""
        key = _key(key)
        targets = _keys(targets)
        if not self._h:
            return "", _INVALID
        buf = ctypes.create_string_buffer(64)
        rc = lib.kvferry_store_create_copy_task(self._h, key.encode(), _lib.c_strings(targets),
                                                len(targets), buf, len(buf))
        if rc != 0:
            log.error("create_copy_task %r failed (%s): %s", key, _name(rc), self.last_error())
            return "", rc
        return buf.value.decode(), 0

    def create_move_task(self, key, source, target):
        """Move key's replica on segment source to segment target. Returns
        (task_id, 0) or ("", code)."""
        key = _key(key)
        if not self._h:
            return "", _INVALID
        buf = ctypes.create_string_buffer(64)
        rc = lib.kvferry_store_create_move_task(self._h, key.encode(), _key(source, "source").encode(),
                                                _key(target, "target").encode(), buf, len(buf))
        if rc != 0:
            log.error("create_move_task %r failed (%s): %s", key, _name(rc), self.last_error())
            return "", rc
        return buf.value.decode(), 0

    def query_task(self, task_id):
        """Return (QueryTaskResponse, 0), or (None, code) for an unknown
        task."""
        if not self._h:
            return None, _INVALID
        typ, st = c_int(), c_int()
        created, updated = c_int64(), c_int64()
        assigned = ctypes.create_string_buffer(128)
        msg = ctypes.create_string_buffer(1024)
        rc = lib.kvferry_store_query_task(self._h, _key(task_id, "task_id").encode(), byref(typ),
                                          byref(st), byref(created), byref(updated), assigned,
                                          len(assigned), msg, len(msg))
        if rc != 0:
            return None, rc
        return QueryTaskResponse(task_id, TaskType(typ.value), TaskStatus(st.value), created.value,
                                 updated.value, assigned.value.decode(errors="replace"),
                                 msg.value.decode(errors="replace")), 0

    def get_replica_desc(self, key):
        """Return the object's replicas (list[ReplicaDescriptor]); [] on a miss."""
        key = _key(key)
        if not self._h:
            return []
        r = self._replicas([key])
        if not r or r[0][0] != 0:
            return []
        return r[0][2]

    def batch_get_replica_desc(self, keys):
        """Return {key: list[ReplicaDescriptor]} for the keys found."""
        keys = _keys(keys)
        if not self._h or not keys:
            return {}
        r = self._replicas(keys)
        if r is None:
            return {}
        return {k: reps for k, (code, _size, reps) in zip(keys, r) if code == 0}
