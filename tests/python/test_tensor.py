"""kvferry.tensor: Mooncake's 304-byte tensor object format (specs/mooncake.md
§6.3). Header bytes are checked against offsets written from the spec, not
against our own packer."""

import struct
import unittest

import numpy as np

from _util import HAVE_TORCH

from kvferry import tensor as T

NUMPY_DTYPES = ["float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                "int64", "uint64", "bool", "float16"]
SPEC_CODES = {"float32": 0, "float64": 1, "int8": 2, "uint8": 3, "int16": 4, "uint16": 5,
              "int32": 6, "uint32": 7, "int64": 8, "uint64": 9, "bool": 10, "float16": 11,
              "bfloat16": 12, "float8_e4m3fn": 13, "float8_e5m2": 14}


def sample(dtype, shape=(3, 4, 5)):
    a = np.random.default_rng(0).integers(0, 100, int(np.prod(shape)))
    if dtype == "bool":
        return (a % 2 == 0).reshape(shape)
    return a.astype(dtype).reshape(shape)


class Golden(unittest.TestCase):
    def test_header_offsets_from_spec(self):
        a = np.zeros((2, 3), np.float16)
        obj = T.encode(a).tobytes()
        self.assertEqual(len(obj), 304 + 12)
        self.assertEqual(obj[0:4], bytes([0x4E, 0x4F, 0x4F, 0x4D]))  # magic in memory
        u32 = lambda o: struct.unpack_from("<I", obj, o)[0]  # noqa: E731
        i32 = lambda o: struct.unpack_from("<i", obj, o)[0]  # noqa: E731
        u64 = lambda o: struct.unpack_from("<Q", obj, o)[0]  # noqa: E731
        i64 = lambda o: struct.unpack_from("<q", obj, o)[0]  # noqa: E731
        self.assertEqual(u32(0), 0x4D4F4F4E)
        self.assertEqual(struct.unpack_from("<H", obj, 4)[0], 1)  # version
        self.assertEqual(struct.unpack_from("<H", obj, 6)[0], 304)  # header_size
        self.assertEqual(i32(8), 11)  # dtype f16
        self.assertEqual(i32(12), 2)  # ndim
        self.assertEqual(u32(16), 0)  # FULL
        self.assertEqual(u32(20), 0)  # reserved_flags
        self.assertEqual(u64(24), 304)  # data_offset
        self.assertEqual(u64(32), 12)  # data_bytes
        self.assertEqual([i64(40 + 8 * i) for i in range(8)], [2, 3] + [-1] * 6)  # global
        self.assertEqual([i64(104 + 8 * i) for i in range(8)], [2, 3] + [-1] * 6)  # local
        self.assertEqual(u32(168), 0)  # axis_count
        self.assertEqual(u32(172), 0)
        self.assertEqual(obj[176:304], bytes(128))

    def test_shard_header_from_spec(self):
        a = np.arange(48, dtype=np.int32).reshape(4, 12)
        shard, meta = T.tp_split(a, 4, 1)[3]
        obj = T.encode(shard, meta).tobytes()
        i32 = lambda o: struct.unpack_from("<i", obj, o)[0]  # noqa: E731
        i64 = lambda o: struct.unpack_from("<q", obj, o)[0]  # noqa: E731
        self.assertEqual(struct.unpack_from("<I", obj, 16)[0], 1)  # SHARD
        self.assertEqual([i64(40), i64(48), i64(56)], [4, 12, -1])
        self.assertEqual([i64(104), i64(112), i64(120)], [4, 3, -1])
        self.assertEqual(struct.unpack_from("<I", obj, 168)[0], 1)
        # axes[0]: kind TP, axis_index 0, shard_rank 3, shard_count 4, split_dim 1
        self.assertEqual([i32(176 + 4 * i) for i in range(6)], [1, 0, 3, 4, 1, 0])
        self.assertEqual(np.frombuffer(obj[304:], np.int32).reshape(4, 3).tolist(),
                         a[:, 9:12].tolist())

    def test_dtype_codes(self):
        for name, code in SPEC_CODES.items():
            self.assertEqual(T.DTYPE_CODES[name][0], code, name)
        for name in NUMPY_DTYPES:
            self.assertEqual(T.dtype_code(np.dtype(name)), SPEC_CODES[name], name)
        self.assertEqual(T.dtype_code(np.dtype("complex64")), -1)
        self.assertEqual(T.TENSOR_METADATA_SIZE, 304)


class RoundTrip(unittest.TestCase):
    def test_numpy_every_dtype(self):
        for name in NUMPY_DTYPES:
            for shape in [(), (7,), (3, 4, 5), (2, 1, 2, 1, 2, 1, 2, 3), (0, 4)]:
                a = sample(name, shape)
                obj = T.encode(a)
                b = T.decode(obj, "numpy")
                self.assertEqual(b.dtype, a.dtype, name)
                self.assertEqual(b.shape, a.shape, (name, shape))
                self.assertTrue(np.array_equal(a, b), (name, shape))
                c = T.decode(obj.tobytes(), "numpy")  # from read-only bytes
                self.assertTrue(np.array_equal(a, c))

    def test_non_contiguous_input(self):
        a = np.arange(64, dtype=np.int16).reshape(8, 8)[:, ::2]
        self.assertTrue(np.array_equal(T.decode(T.encode(a), "numpy"), a))

    def test_raw_float8(self):
        raw = np.arange(32, dtype=np.uint8).reshape(4, 8)
        for name in ("float8_e4m3fn", "float8_e5m2"):
            obj = T.encode(raw, dtype=name)
            meta, data = T.decode_raw(obj)
            self.assertEqual(meta.dtype, SPEC_CODES[name])
            self.assertEqual(meta.local_shape, (4, 8))
            self.assertTrue(np.array_equal(data, raw.reshape(-1)))
        with self.assertRaises(ValueError):
            T.encode(np.zeros(4, np.float32), dtype="float16")

    def test_too_many_dims(self):
        with self.assertRaises(ValueError):
            T.encode(np.zeros((1,) * 9, np.uint8))

    def test_bad_type(self):
        with self.assertRaises(TypeError):
            T.encode([1, 2, 3])
        with self.assertRaises(TypeError):
            T.encode(np.zeros(3, np.complex64))

    @unittest.skipUnless(HAVE_TORCH, "torch not installed")
    def test_torch_every_dtype(self):
        import torch

        names = ["float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool",
                 "float16", "bfloat16"] + [n for n in ("float8_e4m3fn", "float8_e5m2", "uint16",
                                                        "uint32", "uint64") if hasattr(torch, n)]
        for name in names:
            dt = getattr(torch, name)
            base = torch.arange(60).reshape(3, 4, 5)
            t = (base % 2 == 0) if name == "bool" else base.to(dt)
            obj = T.encode(t)
            self.assertEqual(T.parse_metadata(obj).dtype, SPEC_CODES[name])
            b = T.decode(obj, "torch")
            self.assertEqual(b.dtype, t.dtype, name)
            self.assertEqual(tuple(b.shape), (3, 4, 5))
            self.assertTrue(torch.equal(b, t), name)
        # numpy and torch agree on the bytes of a shared dtype.
        a = sample("float32")
        self.assertEqual(T.encode(a).tobytes(), T.encode(torch.from_numpy(a)).tobytes())

    @unittest.skipUnless(HAVE_TORCH, "torch not installed")
    def test_torch_non_contiguous(self):
        import torch

        t = torch.arange(64, dtype=torch.float32).reshape(8, 8).t()
        self.assertTrue(torch.equal(T.decode(T.encode(t), "torch"), t))


class Validation(unittest.TestCase):
    def setUp(self):
        self.obj = bytearray(T.encode(np.arange(6, dtype=np.int32).reshape(2, 3)).tobytes())

    def corrupt(self, fmt, off, value, length_delta=0):
        b = bytearray(self.obj)
        struct.pack_into(fmt, b, off, value)
        if length_delta:
            b = b[:length_delta] if length_delta < 0 else b + bytes(length_delta)
        return T.parse_metadata(b)

    def test_valid(self):
        self.assertIsNotNone(T.parse_metadata(self.obj))

    def test_every_field_is_checked(self):
        cases = [("<I", 0, 0x12345678), ("<H", 4, 2), ("<H", 6, 300), ("<i", 8, 15),
                 ("<i", 8, -1), ("<i", 12, 9), ("<i", 12, 3), ("<I", 16, 2),
                 ("<Q", 24, 100), ("<Q", 24, 10 ** 6), ("<Q", 32, 20), ("<q", 40, -5),
                 ("<q", 104 + 16, 7), ("<q", 40 + 16, 1), ("<I", 168, 5)]
        for fmt, off, value in cases:
            self.assertIsNone(self.corrupt(fmt, off, value), (fmt, off, value))

    def test_bad_axes(self):
        b = bytearray(self.obj)
        struct.pack_into("<I", b, 168, 1)
        struct.pack_into("<iiiiiiq", b, 176, 1, 0, 0, 2, 1, 0, 0)
        self.assertIsNotNone(T.parse_metadata(b))
        for axis in [(9, 0, 0, 2, 1), (1, 0, 2, 2, 1), (1, 0, 0, 0, 1), (1, 0, 0, 2, 2),
                     (1, 0, 0, 2, -2)]:
            struct.pack_into("<iiiii", b, 176, *axis)
            self.assertIsNone(T.parse_metadata(b), axis)

    def test_truncated_and_padded(self):
        self.assertIsNone(T.parse_metadata(self.obj[:-1]))
        self.assertIsNone(T.parse_metadata(self.obj + b"\0"))
        self.assertIsNone(T.parse_metadata(self.obj[:100]))
        self.assertIsNone(T.parse_metadata(b""))
        self.assertIsNone(T.decode(b"\0" * 400, "numpy"))


class TPSplit(unittest.TestCase):
    def test_split_dims_and_sizes(self):
        a = np.arange(8 * 12 * 2, dtype=np.float32).reshape(8, 12, 2)
        for tp in (1, 2, 4):
            for dim in (0, 1):
                shards = T.tp_split(a, tp, dim)
                self.assertEqual(len(shards), tp)
                self.assertTrue(np.array_equal(np.concatenate([s for s, _ in shards], axis=dim),
                                               a))
                for r, (s, m) in enumerate(shards):
                    self.assertTrue(s.flags.c_contiguous)
                    self.assertEqual(m.global_shape, a.shape)
                    self.assertEqual(m.local_shape, s.shape)
                    self.assertEqual(m.axes[0].shard_rank, r)
                    self.assertEqual(m.axes[0].shard_count, tp)
                    self.assertEqual(m.axes[0].split_dim, dim)
                    self.assertEqual(m.layout_kind, T.LAYOUT_SHARD)
        self.assertIsNone(T.tp_split(a, 3, 0))  # 8 % 3
        self.assertIsNone(T.tp_split(a, 2, 3))  # no dim 3
        self.assertEqual(T.tp_key("w", 2), "w_tp_2")


if __name__ == "__main__":
    unittest.main()
