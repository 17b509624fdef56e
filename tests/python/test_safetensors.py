"""save_tensor_to_safetensor / load_tensor_from_safetensor (issue 42):
files kvferry writes are read by this test's own reading of the format
(8-byte little-endian header length, JSON header, raw bytes), and files
this test writes by hand are read by kvferry; bad files are refused."""

import json
import os
import struct
import tempfile
import unittest

import numpy as np

import _util  # noqa: F401  (puts python/ on sys.path)
from _util import pattern

from kvferry import tensor as T
from kvferry.store import MooncakeDistributedStore

# The format's dtype names, and numpy types of the same size.
NP = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
      "U8": "u1", "BOOL": "?", "U16": "<u2", "U32": "<u4", "U64": "<u8", "BF16": "<u2", "F8_E4M3": "u1",
      "F8_E5M2": "u1"}


def read_file(path):
    """This test's own reader: {name: (dtype, shape, bytes)}, metadata."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = head.pop("__metadata__", None)
    out = {}
    for name, e in head.items():
        b, end = e["data_offsets"]
        out[name] = (e["dtype"], tuple(e["shape"]), data[b:end])
    return out, meta, n


def write_file(path, tensors, metadata=None, pad=True):
    """This test's own writer: tensors is [(name, dtype, shape, bytes)], laid
    out in the order given."""
    head, off, blobs = {}, 0, []
    if metadata is not None:
        head["__metadata__"] = metadata
    for name, dtype, shape, b in tensors:
        head[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    text = json.dumps(head).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


class Safetensors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = MooncakeDistributedStore()
        cls.s.tensor_format = "numpy"
        assert cls.s.setup("127.0.0.1", "P2PHANDSHAKE", 32 << 20, 8 << 20, "tcp", "", "embedded") == 0
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.s.close()
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def test_written_files_read_by_hand(self):
        s = self.s
        cases = [("f32", np.arange(24, dtype=np.float32).reshape(2, 3, 4), "F32"),
                 ("i64", np.array([-1, 5, 1 << 40], np.int64), "I64"),
                 ("u8", pattern(1000, 3).reshape(10, 100), "U8"),
                 ("b", np.array([[True, False]]), "BOOL"),
                 ("scalar", np.array(2.5, np.float64), "F64")]
        for key, a, dtype in cases:
            with self.subTest(key=key):
                self.assertEqual(s.put_tensor(key, a), 0)
                p = self.path(key + ".safetensors")
                self.assertEqual(s.save_tensor_to_safetensor(key, p), 0)
                tensors, meta, n = read_file(p)
                self.assertEqual(n % 8, 0)
                self.assertIsNone(meta)
                self.assertEqual(list(tensors), [key])
                dt, shape, data = tensors[key]
                self.assertEqual((dt, shape, data), (dtype, a.shape, a.tobytes()))
        # bfloat16 needs no torch: the object's raw bytes go to the file.
        raw = pattern(64, 5).view(np.uint16)
        obj = T.encode(raw, dtype="bfloat16")
        self.assertEqual(s.put_from("bf", obj.ctypes.data, obj.nbytes), 0)
        p = self.path("bf.safetensors")
        self.assertEqual(s.save_tensor_to_safetensor("bf", p), 0)
        self.assertEqual(read_file(p)[0]["bf"], ("BF16", (32,), raw.tobytes()))
        # file_name defaults to the key (relative to the working directory).
        cwd = os.getcwd()
        os.chdir(self.tmp.name)
        try:
            self.assertEqual(s.save_tensor_to_safetensor("u8"), 0)
            self.assertTrue(os.path.exists("u8"))
        finally:
            os.chdir(cwd)
        self.assertEqual(s.save_tensor_to_safetensor("missing", self.path("m")), -1100)
        self.assertEqual(s.save_tensor_to_safetensor("u8", os.path.join(self.tmp.name, "no", "dir")), -600)

    def test_hand_made_files_read(self):
        s = self.s
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        b = np.array([1, 2, 3], np.int16)
        c = pattern(10, 1).view(np.uint16)
        p = self.path("many.safetensors")
        write_file(p, [("zeta", "F32", a.shape, a.tobytes()), ("beta", "I16", b.shape, b.tobytes()),
                       ("gamma", "BF16", c.shape, c.tobytes())], metadata={"format": "pt"})
        got = s.load_tensor_from_safetensor("zeta", p)
        np.testing.assert_array_equal(got, a)
        np.testing.assert_array_equal(s.get_tensor("zeta"), a)
        # A key the file lacks: the first tensor by name (a warning).
        with self.assertLogs("kvferry.store", "WARNING"):
            got = s.load_tensor_from_safetensor(key="other", file_name=p)
        np.testing.assert_array_equal(got, b)
        np.testing.assert_array_equal(s.get_tensor("other"), b)
        # No key: stored under the file name.
        got = s.load_tensor_from_safetensor(file_name=p)
        np.testing.assert_array_equal(s.get_tensor(p), b)
        # bfloat16 without torch comes back as its raw 16-bit values.
        got = s.load_tensor_from_safetensor("gamma", p)
        self.assertEqual(np.asarray(got).tobytes(), c.tobytes())
        self.assertEqual(T.parse_metadata(s.get("gamma")).dtype_name, "bfloat16")
        # Unpadded headers are fine too.
        write_file(self.path("u.safetensors"), [("x", "U8", (3,), b"abc")], pad=False)
        self.assertEqual(bytes(s.load_tensor_from_safetensor("x", self.path("u.safetensors"))), b"abc")
        # And our own files round-trip.
        self.assertEqual(s.save_tensor_to_safetensor("zeta", self.path("z2")), 0)
        self.assertEqual(s.remove("zeta", force=True), 0)
        np.testing.assert_array_equal(s.load_tensor_from_safetensor("zeta", self.path("z2")), a)

    def test_bad_files(self):
        s = self.s
        good = np.arange(4, dtype=np.float32).tobytes()
        bad = {
            "short": b"\x01\x00",
            "huge header": struct.pack("<Q", 1 << 40) + b"{}",
            "not json": struct.pack("<Q", 4) + b"{{{{",
            "not an object": struct.pack("<Q", 2) + b"[]",
        }
        for name, raw in bad.items():
            with open(self.path(name), "wb") as f:
                f.write(raw)
        write_file(self.path("dtype"), [("t", "F33", (4,), good)])
        write_file(self.path("size"), [("t", "F32", (5,), good)])
        write_file(self.path("hole"), [("t", "F32", (4,), good)])
        with open(self.path("hole"), "ab") as f:
            f.write(b"trailing")
        write_file(self.path("shape"), [("t", "F32", (-4,), good)])
        write_file(self.path("meta"), [("t", "F32", (4,), good)], metadata={"n": 1})
        # Overlapping tensors.
        head = json.dumps({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                           "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}).encode()
        with open(self.path("overlap"), "wb") as f:
            f.write(struct.pack("<Q", len(head)) + head + b"123456")
        write_file(self.path("empty"), [])
        for name in list(bad) + ["dtype", "size", "hole", "shape", "meta", "overlap", "empty", "absent"]:
            with self.subTest(file=name):
                self.assertIsNone(s.load_tensor_from_safetensor("t", self.path(name)))
        with self.assertRaises(TypeError):
            s.load_tensor_from_safetensor("t")
        self.assertIsNone(MooncakeDistributedStore().load_tensor_from_safetensor("t", self.path("size")))


if __name__ == "__main__":
    unittest.main()
