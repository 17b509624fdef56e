"""kvferry.store.MooncakeDistributedStore: every method of Mooncake's
binding that kvferry serves (specs/mooncake.md §6.2-6.6), with an embedded
master and P2P metadata in this process."""

import ctypes
import unittest

import numpy as np

from _util import HAVE_TORCH, pattern

from kvferry.engine import TransferEngine
from kvferry.errors import ErrorCode
from kvferry.store import (
    BufferHandle,
    MooncakeDistributedStore,
    ReplicaStatus,
    ReplicateConfig,
    SoftPinAction,
    _deserialize_tensor,
    _serialize_tensor,
    _tensor_metadata_size,
)

MiB = 1 << 20
DTYPES = ["float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
          "uint64", "bool", "float16"]


def arr(dtype, shape, seed=0):
    a = np.random.default_rng(seed).integers(0, 120, int(np.prod(shape)))
    if dtype == "bool":
        return (a % 3 == 0).reshape(shape)
    return a.astype(dtype).reshape(shape)


class Store(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = MooncakeDistributedStore()
        # The 7 positional arguments, as SGLang and vLLM pass them.
        rc = cls.s.setup("127.0.0.1", "P2PHANDSHAKE", 256 * MiB, 16 * MiB, "tcp", "", "embedded")
        assert rc == 0, rc
        cls.s.tensor_format = "numpy"

    @classmethod
    def tearDownClass(cls):
        cls.s.close()

    def setUp(self):
        self.s.tensor_format = "numpy"
        self.s.remove_all(force=True)

    # ---- lifecycle / info ----

    def test_info(self):
        s = self.s
        self.assertEqual(s.health_check(), 0)
        self.assertRegex(s.get_hostname(), r"^127\.0\.0\.1:\d+$")
        self.assertRegex(s.master_address(), r"^127\.0\.0\.1:\d+$")
        self.assertEqual(s.last_error() is not None, True)
        self.assertEqual(_tensor_metadata_size(), 304)

    def test_setup_twice_fails(self):
        self.assertEqual(self.s.setup("127.0.0.1", "P2PHANDSHAKE", MiB, MiB, "tcp", "", "embedded"),
                         ErrorCode.INVALID_PARAMS)

    # ---- bytes ----

    def test_put_get(self):
        s = self.s
        self.assertEqual(s.put("k", b"hello"), 0)
        self.assertEqual(s.get("k"), b"hello")
        self.assertEqual(s.get_size("k"), 5)
        self.assertEqual(s.is_exist("k"), 1)
        # Objects are immutable: a second put keeps the first value.
        self.assertEqual(s.put("k", b"other"), 0)
        self.assertEqual(s.get("k"), b"hello")
        self.assertEqual(s.upsert("k", b"replaced!"), 0)
        self.assertEqual(s.get("k"), b"replaced!")
        self.assertEqual(s.put("ba", bytearray(b"abc")), 0)
        self.assertEqual(s.put("mv", memoryview(b"xyzw")[1:3]), 0)
        self.assertEqual(s.put("np", np.arange(10, dtype=np.int32)), 0)
        self.assertEqual(s.get("ba"), b"abc")
        self.assertEqual(s.get("mv"), b"yz")
        self.assertEqual(np.frombuffer(s.get("np"), np.int32).tolist(), list(range(10)))
        big = pattern(40 * MiB, 3).tobytes()  # larger than the 16 MiB staging buffer
        self.assertEqual(s.put("big", big), 0)
        self.assertEqual(s.get("big"), big)

    def test_parts_and_batches(self):
        s = self.s
        self.assertEqual(s.put_parts("p", b"ab", bytearray(b"cd"), memoryview(b"ef")), 0)
        self.assertEqual(s.get("p"), b"abcdef")
        self.assertEqual(s.upsert_parts("p", b"x", b"y"), 0)
        self.assertEqual(s.get("p"), b"xy")
        self.assertEqual(s.put_batch(["b1", "b2"], [b"one", b"two"]), 0)
        self.assertEqual(s.get_batch(["b1", "b2", "zz"]), [b"one", b"two", b""])
        self.assertEqual(s.upsert_batch(["b1", "b3"], [b"ONE", b"three"]), 0)
        self.assertEqual(s.get_batch(["b1", "b3"]), [b"ONE", b"three"])
        self.assertEqual(s.batch_is_exist(["b1", "zz", "b3"]), [1, 0, 1])
        self.assertEqual(s.put_batch(["x"], [b"1", b"2"]), ErrorCode.INVALID_PARAMS)
        with self.assertRaises(TypeError):
            s.put_parts("p", np.zeros((2, 2), np.uint8))

    def test_zero_copy_registered(self):
        s = self.s
        n = 8 * MiB
        src = pattern(n, 5)
        dst = np.zeros(n, np.uint8)
        self.assertEqual(s.register_buffer(src.ctypes.data, n), 0)
        self.assertEqual(s.register_buffer(dst.ctypes.data, n), 0)
        try:
            self.assertEqual(s.put_from("zc", src.ctypes.data, n), 0)
            self.assertEqual(s.get_into("zc", dst.ctypes.data, n), n)
            self.assertTrue(np.array_equal(src, dst))
            keys = ["zc%d" % i for i in range(8)]
            step = n // 8
            ptrs = [src.ctypes.data + i * step for i in range(8)]
            self.assertEqual(s.batch_put_from(keys, ptrs, [step] * 8), [0] * 8)
            dst[:] = 0
            out = [dst.ctypes.data + (7 - i) * step for i in range(8)]
            self.assertEqual(s.batch_get_into(keys, out, [step] * 8), [step] * 8)
            for i in range(8):
                self.assertTrue(np.array_equal(dst[(7 - i) * step:(8 - i) * step],
                                               src[i * step:(i + 1) * step]))
            self.assertEqual(s.upsert_from("zc", src.ctypes.data + 1, 100), 0)
            self.assertEqual(s.get_size("zc"), 100)
            self.assertEqual(s.batch_upsert_from(keys[:2], ptrs[:2], [10, 10]), [0, 0])
            self.assertEqual(s.get_size(keys[0]), 10)
        finally:
            self.assertEqual(s.unregister_buffer(src.ctypes.data), 0)
            self.assertEqual(s.unregister_buffer(dst.ctypes.data), 0)

    def test_unregistered_pointers(self):
        s = self.s
        src = pattern(3 * MiB, 9)
        dst = np.zeros(3 * MiB, np.uint8)
        self.assertEqual(s.put_from("u", src.ctypes.data, src.nbytes), 0)
        self.assertEqual(s.get_into("u", dst.ctypes.data, dst.nbytes), src.nbytes)
        self.assertTrue(np.array_equal(src, dst))

    def test_metadata_and_multi_buffers(self):
        s = self.s
        meta = np.frombuffer(b"META", np.uint8).copy()
        data = np.frombuffer(b"-data-", np.uint8).copy()
        self.assertEqual(s.put_from_with_metadata("wm", data.ctypes.data, meta.ctypes.data,
                                                  data.nbytes, meta.nbytes), 0)
        self.assertEqual(s.get("wm"), b"META-data-")
        a, b = np.frombuffer(b"hello ", np.uint8).copy(), np.frombuffer(b"world", np.uint8).copy()
        self.assertEqual(s.batch_put_from_multi_buffers(
            ["mb"], [[a.ctypes.data, b.ctypes.data]], [[a.nbytes, b.nbytes]]), [0])
        self.assertEqual(s.get("mb"), b"hello world")
        x, y = np.zeros(4, np.uint8), np.zeros(7, np.uint8)
        self.assertEqual(s.batch_get_into_multi_buffers(
            ["mb"], [[x.ctypes.data, y.ctypes.data]], [[4, 7]]), [11])
        self.assertEqual(x.tobytes() + y.tobytes(), b"hello world")
        self.assertEqual(s.batch_get_into_multi_buffers(
            ["mb"], [[x.ctypes.data]], [[4]]), [ErrorCode.INVALID_PARAMS])

    def test_get_buffer(self):
        s = self.s
        self.assertEqual(s.put("gb", b"0123456789"), 0)
        h = s.get_buffer("gb")
        self.assertIsInstance(h, BufferHandle)
        self.assertEqual(h.size(), 10)
        self.assertEqual(len(h), 10)
        self.assertNotEqual(h.ptr(), 0)
        self.assertEqual(bytes(h), b"0123456789")
        self.assertEqual(np.asarray(h).tobytes(), b"0123456789")
        self.assertEqual(h.view()[2:4].tobytes(), b"23")
        h.release()
        hs = s.batch_get_buffer(["gb", "nope"])
        self.assertIsNotNone(hs[0])
        self.assertIsNone(hs[1])
        self.assertIsNone(s.get_buffer("nope"))

    def test_remove(self):
        s = self.s
        for k in ("r1", "r2", "r3", "q1"):
            self.assertEqual(s.put(k, b"v"), 0)
        self.assertEqual(s.remove("r1"), 0)
        self.assertEqual(s.remove("r1"), ErrorCode.OBJECT_NOT_FOUND)
        self.assertEqual(s.batch_remove(["r2", "zz"]), [0, ErrorCode.OBJECT_NOT_FOUND])
        self.assertEqual(s.remove_by_regex("^r"), 1)
        self.assertEqual(s.remove_by_regex("("), ErrorCode.INVALID_PARAMS)
        # A read lease (is_exist) blocks removal unless forced.
        self.assertEqual(s.is_exist("q1"), 1)
        self.assertEqual(s.remove("q1"), ErrorCode.OBJECT_HAS_LEASE)
        self.assertEqual(s.remove("q1", force=True), 0)
        self.assertEqual(s.put("a1", b"v"), 0)
        self.assertEqual(s.remove_all(), 1)
        self.assertEqual(s.remove_all(force=True), 0)

    def test_replicas(self):
        s = self.s
        self.assertEqual(s.put("rep", b"x" * 1000), 0)
        reps = s.get_replica_desc("rep")
        self.assertEqual(len(reps), 1)
        r = reps[0]
        self.assertTrue(r.is_memory_replica())
        self.assertFalse(r.is_disk_replica())
        self.assertEqual(r.status, ReplicaStatus.COMPLETE)
        d = r.get_memory_descriptor().buffer_descriptor
        self.assertEqual(d.size, 1000)
        self.assertEqual(d.transport_endpoint, s.get_hostname())
        # The replica lives in this process's segment: read it in place.
        self.assertEqual(ctypes.string_at(d.buffer_address, 1000), b"x" * 1000)
        self.assertEqual(s.get_replica_desc("none"), [])
        m = s.batch_get_replica_desc(["rep", "none"])
        self.assertEqual(list(m), ["rep"])

    def test_replicate_config(self):
        s = self.s
        c = ReplicateConfig()
        self.assertEqual(c.replica_num, 1)
        self.assertEqual(c.soft_pin_action, SoftPinAction.PRESERVE)
        c.with_soft_pin = True
        self.assertEqual(c.soft_pin_action, SoftPinAction.ENABLE)
        c.with_hard_pin = True
        c.preferred_segments = [s.get_hostname()]
        self.assertIn("replica_num", str(c))
        self.assertEqual(s.put("cfg", b"pinned", c), 0)
        self.assertEqual(s.get("cfg"), b"pinned")
        c.replica_num = 0
        self.assertEqual(s.put("cfg0", b"v", c), ErrorCode.INVALID_PARAMS)
        with self.assertRaises(TypeError):
            s.put("cfg1", b"v", {"replica_num": 1})

    # ---- errors ----

    def test_error_codes(self):
        s = self.s
        buf = np.zeros(16, np.uint8)
        self.assertEqual(s.get("missing"), b"")
        self.assertEqual(s.get_size("missing"), ErrorCode.OBJECT_NOT_FOUND)
        self.assertEqual(s.get_into("missing", buf.ctypes.data, 16), ErrorCode.OBJECT_NOT_FOUND)
        self.assertEqual(s.is_exist("missing"), 0)
        self.assertEqual(s.batch_get_into(["missing"], [buf.ctypes.data], [16]),
                         [ErrorCode.OBJECT_NOT_FOUND])
        self.assertIsNone(s.get_tensor("missing"))
        self.assertEqual(s.put("small", b"x" * 100), 0)
        # Buffer too small: INVALID_PARAMS and nothing written.
        self.assertEqual(s.get_into("small", buf.ctypes.data, 16), ErrorCode.INVALID_PARAMS)
        self.assertEqual(buf.tobytes(), bytes(16))
        self.assertEqual(s.put("", b"x"), ErrorCode.INVALID_PARAMS)
        self.assertEqual(s.put("empty", b""), ErrorCode.INVALID_PARAMS)
        self.assertEqual(s.put("huge", np.zeros(300 * MiB, np.uint8)),
                         ErrorCode.NO_AVAILABLE_HANDLE)
        self.assertEqual(s.put_from("p", 0, 10), ErrorCode.INVALID_PARAMS)
        self.assertEqual(s.batch_put_from(["a", "b"], [1], [1]), [ErrorCode.INVALID_PARAMS] * 2)
        self.assertEqual(s.register_buffer(0, 10), ErrorCode.INTERNAL_ERROR)
        self.assertEqual(s.unregister_buffer(12345), ErrorCode.INTERNAL_ERROR)
        self.assertNotEqual(s.last_error(), "")
        # The store still works.
        self.assertEqual(s.get("small"), b"x" * 100)

    def test_wrong_types(self):
        s = self.s
        for call in (lambda: s.put(1, b"x"), lambda: s.put("k", "text"),
                     lambda: s.put("k", 12), lambda: s.get(None), lambda: s.get_into("k", "p", 1),
                     lambda: s.batch_get_into("k", [1], [1]), lambda: s.is_exist(3.5),
                     lambda: s.put_tensor("t", [1, 2, 3]), lambda: s.batch_is_exist("abc"),
                     lambda: s.remove(["k"])):
            with self.assertRaises(TypeError):
                call()

    def test_closed_store(self):
        t = MooncakeDistributedStore()
        self.assertEqual(t.health_check(), 1)
        self.assertEqual(t.put("k", b"v"), ErrorCode.INVALID_PARAMS)
        self.assertEqual(t.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "",
                                 "embedded"), 0)
        self.assertEqual(t.put("k", b"v"), 0)
        self.assertEqual(t.close(), 0)
        self.assertEqual(t.close(), 0)
        self.assertEqual(t.health_check(), 1)
        self.assertEqual(t.put("k", b"v"), ErrorCode.INVALID_PARAMS)
        self.assertEqual(t.get("k"), b"")
        self.assertEqual(t.get_size("k"), ErrorCode.INVALID_PARAMS)
        self.assertEqual(t.is_exist("k"), ErrorCode.INVALID_PARAMS)
        self.assertEqual(t.batch_is_exist(["k"]), [ErrorCode.INVALID_PARAMS])
        self.assertIsNone(t.get_tensor("k"))
        self.assertEqual(t.get_hostname(), "")
        self.assertEqual(t.remove_all(), ErrorCode.INVALID_PARAMS)

    def test_bad_master(self):
        t = MooncakeDistributedStore()
        self.assertEqual(t.setup("127.0.0.1", "P2PHANDSHAKE", 0, MiB, "tcp", "", "127.0.0.1:1"),
                         ErrorCode.RPC_FAIL)
        self.assertEqual(t.health_check(), 1)

    def test_dict_setup_and_shared_engine(self):
        t = MooncakeDistributedStore()
        self.assertEqual(t.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                                  "global_segment_size": "32mb", "local_buffer_size": "4MB",
                                  "master_server_addr": self.s.master_address()}), 0)
        try:
            self.assertEqual(t.put("from-dict", b"v"), 0)
            self.assertEqual(self.s.get("from-dict"), b"v")
        finally:
            t.close()
        e = TransferEngine()
        self.assertEqual(e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0)
        u = MooncakeDistributedStore()
        try:
            self.assertEqual(u.setup("127.0.0.1", "P2PHANDSHAKE", 32 * MiB, 4 * MiB, "tcp", "",
                                     self.s.master_address(), engine=e.get_engine()), 0)
            self.assertEqual(u.get_hostname(), e.get_segment_name())
            self.assertEqual(u.put("shared", b"engine"), 0)
            self.assertEqual(self.s.get("shared"), b"engine")
        finally:
            u.close()
            e.close()
        with self.assertRaises(TypeError):
            MooncakeDistributedStore().setup("127.0.0.1", "P2PHANDSHAKE", MiB, MiB, "tcp", "",
                                             "embedded", engine=object())

    # ---- tensors ----

    def test_tensor_every_dtype(self):
        s = self.s
        for d in DTYPES:
            a = arr(d, (4, 6, 8))
            self.assertEqual(s.put_tensor("t_" + d, a), 0, d)
            b = s.get_tensor("t_" + d)
            self.assertEqual(b.dtype, a.dtype, d)
            self.assertTrue(np.array_equal(a, b), d)
        keys = ["bt_" + d for d in DTYPES]
        arrays = [arr(d, (3, 5), i) for i, d in enumerate(DTYPES)]
        self.assertEqual(s.batch_put_tensor(keys, arrays), [0] * len(keys))
        for a, b in zip(arrays, s.batch_get_tensor(keys + ["nope"])):
            self.assertTrue(np.array_equal(a, b))
        self.assertIsNone(s.batch_get_tensor(["nope"])[0])
        # Raw object bytes are the Mooncake format.
        raw = s.get("t_float32")
        self.assertEqual(raw[:4], b"NOOM")
        self.assertTrue(np.array_equal(_deserialize_tensor(raw), arr("float32", (4, 6, 8)))
                        if not HAVE_TORCH else True)
        meta, ptr, nbytes, owner = _serialize_tensor(arr("int16", (2, 2)))
        self.assertEqual((len(meta), nbytes), (304, 8))

    def test_tensor_tp(self):
        s = self.s
        for d in DTYPES:
            a = arr(d, (8, 12, 3))
            for tp in (1, 2, 4):
                for dim in (0, 1):
                    key = "tp_%s_%d_%d" % (d, tp, dim)
                    self.assertEqual(s.put_tensor_with_tp(key, a, tp_rank=0, tp_size=tp,
                                                          split_dim=dim), 0)
                    parts = [s.get_tensor_with_tp(key, r, tp, dim) for r in range(tp)]
                    for p in parts:
                        self.assertEqual(p.shape[dim], a.shape[dim] // tp)
                    self.assertTrue(np.array_equal(np.concatenate(parts, axis=dim), a),
                                    (d, tp, dim))
                    if tp > 1:
                        self.assertEqual(s.is_exist(key), 0)  # only the shards exist
                        self.assertEqual(s.is_exist("%s_tp_%d" % (key, tp - 1)), 1)
        # Not divisible: INVALID_PARAMS.
        self.assertEqual(s.put_tensor_with_tp("bad", arr("int8", (6, 5)), tp_size=4),
                         ErrorCode.INVALID_PARAMS)
        self.assertEqual(s.put_tensor_with_tp("bad", arr("int8", (8, 5)), tp_size=2,
                                              split_dim=2), ErrorCode.INVALID_PARAMS)
        self.assertIsNone(s.get_tensor_with_tp("tp_int8_2_0", 2, 2))
        # Batch and pub forms.
        a1, a2 = arr("float16", (4, 8), 1), arr("int32", (4, 8), 2)
        self.assertEqual(s.batch_put_tensor_with_tp(["B1", "B2"], [a1, a2], tp_size=2,
                                                    split_dim=1), [0, 0])
        got = s.batch_get_tensor_with_tp(["B1", "B2"], tp_rank=1, tp_size=2)
        self.assertTrue(np.array_equal(got[0], a1[:, 4:]))
        self.assertTrue(np.array_equal(got[1], a2[:, 4:]))
        c = ReplicateConfig()
        self.assertEqual(s.pub_tensor_with_tp("P", a1, c, tp_size=4, split_dim=0), 0)
        self.assertEqual(s.batch_pub_tensor_with_tp(["P2"], [a2], c, tp_size=2), [0])
        self.assertTrue(np.array_equal(s.get_tensor_with_tp("P", 3, 4), a1[3:]))

    def test_tensor_pub_upsert_and_pointers(self):
        s = self.s
        a = arr("float32", (16, 16))
        c = ReplicateConfig()
        self.assertEqual(s.pub_tensor("pt", a, c), 0)
        self.assertEqual(s.upsert_pub_tensor("pt", a * 2, c), 0)
        self.assertTrue(np.array_equal(s.get_tensor("pt"), a * 2))
        self.assertEqual(s.upsert_tensor("pt", a * 3), 0)
        self.assertTrue(np.array_equal(s.get_tensor("pt"), a * 3))
        self.assertEqual(s.batch_pub_tensor(["pa", "pb"], [a, a + 1], c), [0, 0])
        self.assertEqual(s.batch_upsert_tensor(["pa"], [a + 5]), [0])
        self.assertEqual(s.batch_upsert_pub_tensor(["pb"], [a + 6], c), [0])
        self.assertTrue(np.array_equal(s.get_tensor("pa"), a + 5))
        self.assertTrue(np.array_equal(s.get_tensor("pb"), a + 6))
        # get_tensor_into: a view over the caller's buffer.
        n = s.get_size("pa")
        buf = np.zeros(n, np.uint8)
        t = s.get_tensor_into("pa", buf.ctypes.data, n)
        self.assertTrue(np.array_equal(t, a + 5))
        buf[304:308] = 0
        self.assertEqual(float(t.reshape(-1)[0]), 0.0)  # it is a view
        self.assertIsNone(s.get_tensor_into("pa", buf.ctypes.data, 10))
        ts = s.batch_get_tensor_into(["pa", "pb"], [buf.ctypes.data, buf.ctypes.data], [n, 0])
        self.assertIsNotNone(ts[0])
        self.assertIsNone(ts[1])
        # put_tensor_from: the buffer holds [TensorMetadata][data].
        self.assertEqual(s.put_tensor_from("pf", buf.ctypes.data, n), 0)
        self.assertEqual(s.get("pf"), buf.tobytes())
        self.assertEqual(s.upsert_tensor_from("pf", buf.ctypes.data, n), 0)
        self.assertEqual(s.batch_put_tensor_from(["pf2"], [buf.ctypes.data], [n]), [0])
        self.assertEqual(s.batch_upsert_tensor_from(["pf2"], [buf.ctypes.data], [n]), [0])
        junk = np.zeros(400, np.uint8)
        self.assertEqual(s.put_tensor_from("junk", junk.ctypes.data, 400),
                         ErrorCode.INVALID_PARAMS)
        # TP from a full tensor object.
        full = s.get_size("pt")
        fb = np.zeros(full, np.uint8)
        self.assertEqual(s.get_into("pt", fb.ctypes.data, full), full)
        self.assertEqual(s.put_tensor_with_tp_from("ptf", fb.ctypes.data, full, tp_size=2,
                                                   split_dim=1), 0)
        self.assertTrue(np.array_equal(s.get_tensor_with_tp("ptf", 1, 2), (a * 3)[:, 8:]))
        self.assertEqual(s.batch_put_tensor_with_tp_from(["ptf2"], [fb.ctypes.data], [full],
                                                         tp_size=4), [0])
        shard = s.get_size("ptf2_tp_2")
        sb = np.zeros(shard, np.uint8)
        t = s.get_tensor_with_tp_into("ptf2", sb.ctypes.data, shard, 2, 4)
        self.assertTrue(np.array_equal(t, (a * 3)[8:12]))
        self.assertEqual(len(s.batch_get_tensor_with_tp_into(["ptf2"], [sb.ctypes.data],
                                                             [shard], 3, 4)), 1)
        # get_tensor_into_cuda works for any destination with matching layout.
        dst = np.zeros((16, 16), np.float32)
        self.assertEqual(s.get_tensor_into_cuda("pa", dst), 16 * 16 * 4)
        self.assertTrue(np.array_equal(dst, a + 5))
        self.assertEqual(s.get_tensor_into_cuda("pa", np.zeros((16, 16), np.int32)),
                         ErrorCode.INVALID_PARAMS)

    @unittest.skipUnless(HAVE_TORCH, "torch not installed")
    def test_torch_tensors(self):
        import torch

        s = self.s
        s.tensor_format = "torch"
        dtypes = [torch.float32, torch.float64, torch.int8, torch.uint8, torch.int16,
                  torch.int32, torch.int64, torch.bool, torch.float16, torch.bfloat16]
        for dt in dtypes:
            base = torch.arange(96).reshape(8, 12)
            t = (base % 2 == 0) if dt == torch.bool else base.to(dt)
            key = "torch_%s" % str(dt)[6:]
            self.assertEqual(s.put_tensor(key, t), 0)
            b = s.get_tensor(key)
            self.assertEqual(b.dtype, dt)
            self.assertTrue(torch.equal(b, t))
            for tp in (2, 4):
                for dim in (0, 1):
                    k2 = "%s_%d_%d" % (key, tp, dim)
                    self.assertEqual(s.put_tensor_with_tp(k2, t, tp_size=tp, split_dim=dim), 0)
                    parts = [s.get_tensor_with_tp(k2, r, tp) for r in range(tp)]
                    self.assertTrue(torch.equal(torch.cat(parts, dim), t))
        # numpy-stored objects read back as torch tensors and vice versa.
        s.put_tensor("np_obj", np.arange(6, dtype=np.int64))
        self.assertTrue(torch.equal(s.get_tensor("np_obj"), torch.arange(6)))
        dst = torch.zeros(8, 12, dtype=torch.bfloat16)
        self.assertEqual(s.get_tensor_into_cuda("torch_bfloat16", dst), 8 * 12 * 2)
        self.assertTrue(torch.equal(dst, torch.arange(96).reshape(8, 12).to(torch.bfloat16)))
        s.tensor_format = "numpy"


if __name__ == "__main__":
    unittest.main()
