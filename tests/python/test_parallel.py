"""Unified parallel tensor IO (issue 42): TP, DP+TP, PP+TP, EP (and EP+TP)
layouts whose every shard is written by a different process (four writer
peers lending their own segments, so reads cross processes), read back as
the stored shard, as another target shard (TP resharding) and as the full
tensor, bytes checked against numpy's own slicing; writer partitions,
_from and _into forms, batch forms, bad requests, and the *_with_tp calls
on the same path."""

import ctypes
import unittest

import numpy as np

import _layouts as L
from _util import HAVE_TORCH, Peer

from kvferry import tensor as T
from kvferry.store import MooncakeDistributedStore, ReadTarget, ReplicateConfig, TensorParallelism

INVALID = -600


def same(test, got, want, what=""):
    """got (numpy or torch) holds exactly want's dtype, shape and bytes."""
    test.assertIsNotNone(got, what)
    a = np.asarray(got.numpy() if hasattr(got, "numpy") else got)
    test.assertEqual(a.dtype, want.dtype, what)
    test.assertEqual(a.shape, want.shape, what)
    test.assertEqual(a.tobytes(), np.ascontiguousarray(want).tobytes(), what)


def shard(mode, *axes):
    return ReadTarget(mode, L.par(*axes) if axes else None)


class Layouts(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = MooncakeDistributedStore()
        cls.s.tensor_format = "numpy"
        assert cls.s.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", "embedded") == 0
        cls.peers = []
        try:
            for _ in range(4):
                cls.peers.append(Peer("peer_parallel.py", cls.s.master_address()))
                assert cls.peers[-1].info["rc"] == 0, cls.peers[-1].info
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for p in cls.peers:
            p.close()
        cls.s.close()

    def write(self, layout, key, upsert=False):
        """Each writer of layout is a different peer process."""
        for i in range(len(L.writes(layout))):
            self.assertEqual(self.peers[i].ask("put", layout=layout, index=i, key=key, upsert=upsert)["rc"], 0,
                             (layout, i))

    def test_tp(self):
        s, full = self.s, L.TP_FULL
        self.write("tp", "tp")
        for r in range(4):
            want = L.chunk(full, 4, 1, r)
            same(self, s.get_tensor_with_parallelism("tp_tp_%d" % r), want, "as stored")
            same(self, s.get_tensor_with_parallelism("tp", shard("shard", L.ax("tp", r, 4, 1))), want, "shard")
            same(self, s.get_tensor_with_tp("tp", r, 4, 1), want, "wrapper")
        # Another target shard: TP 2 cut out of the four stored shards.
        for r in range(2):
            same(self, s.get_tensor_with_parallelism("tp", shard("shard", L.ax("tp", r, 2, 1))), L.chunk(full, 2, 1, r))
        for rank in range(4):
            same(self, s.get_tensor_with_parallelism("tp", shard("full", L.ax("tp", rank, 4, 1))), full, "full")
        # The manifest records the layout; split_dim must agree with it.
        self.assertIsNone(s.get_tensor_with_parallelism("tp", shard("full", L.ax("tp", 0, 4, 0))))
        # The shard header says what it is.
        m = T.parse_metadata(s.get("tp_tp_2"))
        self.assertEqual((m.layout_kind, m.global_shape, m.local_shape), (T.LAYOUT_SHARD, (6, 8, 5), (6, 2, 5)))
        self.assertEqual([a.astuple() for a in m.axes], [(T.AXIS_TP, 0, 2, 4, 1, 0, 2)])

    def test_dp_tp(self):
        s = self.s
        self.write("dp_tp", "dp")
        for d in range(2):
            full = L.DP_FULL[d]
            for t in range(2):
                key = "dp__dp_%dof2__tp_%dof2_sd0" % (d, t)
                same(self, s.get_tensor_with_parallelism(key), L.chunk(full, 2, 0, t), "as stored")
                # Axes in another order name the same shard.
                same(self, s.get_tensor_with_parallelism("dp", shard("shard", L.ax("tp", t, 2, 0), L.ax("dp", d, 2))),
                     L.chunk(full, 2, 0, t))
            for r in range(4):
                same(self, s.get_tensor_with_parallelism("dp", shard("shard", L.ax("dp", d, 2), L.ax("tp", r, 4, 0))),
                     L.chunk(full, 4, 0, r), "TP 2 -> 4")
            same(self, s.get_tensor_with_parallelism("dp", shard("full", L.ax("dp", d, 2), L.ax("tp", 1, 2, 0))),
                 full, "full of DP rank %d" % d)
        # A DP rank nobody wrote.
        self.assertIsNone(s.get_tensor_with_parallelism("dp", shard("full", L.ax("dp", 1, 3), L.ax("tp", 0, 2, 0))))

    def test_pp_tp(self):
        s = self.s
        self.write("pp_tp", "pp")
        for st in range(2):
            full = L.PP_FULL[st]
            pp = L.ax("pp", st, 2, stage_id=10 + st)
            for t in range(2):
                same(self, s.get_tensor_with_parallelism("pp", shard("shard", pp, L.ax("tp", t, 2, 2))),
                     L.chunk(full, 2, 2, t))
                same(self, s.get_tensor_with_parallelism("pp__tp_%dof2_sd2__pp_%dof2_sid%d" % (t, st, 10 + st)),
                     L.chunk(full, 2, 2, t), "as stored")
            # Split along the last dim: every row of a shard is a piece of
            # one read, for targets of 1, 2 and 4 shards.
            for n in (1, 2, 4):
                for r in range(n):
                    same(self, s.get_tensor_with_parallelism("pp", shard("shard", pp, L.ax("tp", r, n, 2))),
                         L.chunk(full, n, 2, r), "TP 2 -> %d" % n)
            same(self, s.get_tensor_with_parallelism("pp", shard("full", L.ax("tp", 0, 2, 2), pp)), full)
        # The wrong stage id names no shard.
        bad = L.ax("pp", 0, 2, stage_id=99)
        self.assertIsNone(s.get_tensor_with_parallelism("pp", shard("full", bad, L.ax("tp", 0, 2, 2))))

    def test_ep(self):
        s = self.s
        self.write("ep", "moe")
        for e in range(4):
            ep = L.ax("ep", e, 4, expert_id=100 + e)
            same(self, s.get_tensor_with_parallelism("moe", shard("shard", ep)), L.EXPERTS[e])
            same(self, s.get_tensor_with_parallelism("moe__ep_%dof4_eid%d" % (e, 100 + e)), L.EXPERTS[e], "as stored")
            m = T.parse_metadata(s.get("moe__ep_%dof4_eid%d" % (e, 100 + e)))
            self.assertEqual(m.axes[0].astuple(), (T.AXIS_EP, 0, e, 4, -1, 100 + e, 0))
        # Another expert id, and full (which needs a TP axis, as in Mooncake).
        self.assertIsNone(s.get_tensor_with_parallelism("moe", shard("shard", L.ax("ep", 0, 4, expert_id=7))))
        self.assertIsNone(s.get_tensor_with_parallelism("moe", shard("full", L.ax("ep", 0, 4, expert_id=100))))

    def test_ep_tp(self):
        s = self.s
        self.write("ep_tp", "xp")
        for e in range(2):
            ep = L.ax("ep", e, 2, expert_id=100 + e)
            for t in range(2):
                same(self, s.get_tensor_with_parallelism("xp", shard("shard", ep, L.ax("tp", t, 2, 1))),
                     L.chunk(L.EXPERTS[e], 2, 1, t))
            # TP 1: the whole expert, as a target shard of the stored TP 2.
            same(self, s.get_tensor_with_parallelism("xp", shard("shard", ep, L.ax("tp", 0, 1, 1))), L.EXPERTS[e])
            same(self, s.get_tensor_with_parallelism("xp", shard("full", ep, L.ax("tp", 0, 2, 1))), L.EXPERTS[e])

    def test_writer_partitions(self):
        s, full = self.s, L.WRITER_FULL
        self.write("writer", "wp")
        same(self, s.get_tensor_with_parallelism("wp", shard("full")), full)
        for r in range(4):
            same(self, s.get_tensor_with_parallelism("wp", shard("shard", L.ax("tp", r, 4, 0))), L.chunk(full, 4, 0, r))
            same(self, s.get_tensor_with_parallelism("wp__writer_%dof4_sd0" % r), L.chunk(full, 4, 0, r))
        # Without a writer manifest, full is the object under the key.
        s.put_tensor("plain", full)
        same(self, s.get_tensor_with_parallelism("plain", shard("full")), full)

    def test_full_into_buffers(self):
        s, full = self.s, L.TP_FULL
        self.write("tp", "tpi")
        n = T.TENSOR_METADATA_SIZE + full.nbytes
        buf = np.zeros(n + 100, np.uint8)
        self.assertEqual(s.register_buffer(buf.ctypes.data, buf.nbytes), 0)
        try:
            got = s.get_tensor_with_parallelism_into("tpi", buf.ctypes.data, buf.nbytes,
                                                     shard("full", L.ax("tp", 0, 4, 1)))
            same(self, got, full)
            # The buffer holds a full tensor object, header first.
            m = T.parse_metadata(buf[:n])
            self.assertEqual((m.layout_kind, m.global_shape, m.local_shape), (T.LAYOUT_FULL, full.shape, full.shape))
            self.assertEqual(got.ctypes.data, buf.ctypes.data + T.TENSOR_METADATA_SIZE)
            got = s.get_tensor_with_parallelism_into("tpi", buf.ctypes.data, buf.nbytes,
                                                     shard("shard", L.ax("tp", 1, 2, 1)))
            same(self, got, L.chunk(full, 2, 1, 1))
            m = T.parse_metadata(buf[:T.TENSOR_METADATA_SIZE + got.nbytes])
            self.assertEqual((m.global_shape, m.local_shape, m.axes[0].shard_count), (full.shape, (6, 4, 5), 2))
            self.assertIsNone(s.get_tensor_with_parallelism_into("tpi", buf.ctypes.data, n - 1,
                                                                 shard("full", L.ax("tp", 0, 4, 1))))
            # Batch: as stored, a shard, the full tensor, a miss.
            half = n // 2 + 1024
            big = np.zeros(4 * n, np.uint8)
            ptrs = [big.ctypes.data + i * n for i in range(4)]
            got = s.batch_get_tensor_with_parallelism_into(
                ["tpi_tp_0", "tpi", "tpi", "nope"], ptrs, [n, half, n, n],
                [None, shard("shard", L.ax("tp", 3, 4, 1)), shard("full", L.ax("tp", 0, 4, 1)), None])
            same(self, got[0], L.chunk(full, 4, 1, 0))
            same(self, got[1], L.chunk(full, 4, 1, 3))
            same(self, got[2], full)
            self.assertIsNone(got[3])
            self.assertEqual(s.batch_get_tensor_with_parallelism_into(["tpi"], ptrs[:1], [n], [None, None]), [None])
        finally:
            self.assertEqual(s.unregister_buffer(buf.ctypes.data), 0)


class SingleProcess(unittest.TestCase):
    """Routes, conventions and errors, one process."""

    @classmethod
    def setUpClass(cls):
        cls.s = MooncakeDistributedStore()
        cls.s.tensor_format = "numpy"
        assert cls.s.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", "embedded") == 0

    @classmethod
    def tearDownClass(cls):
        cls.s.close()

    def test_plain_and_as_stored(self):
        s = self.s
        a = L.tensor(1, (16, 16), "float32")
        self.assertEqual(s.put_tensor_with_parallelism("plain_a", a), 0)
        same(self, s.get_tensor_with_parallelism("plain_a"), a)
        same(self, s.get_tensor_with_parallelism("plain_a", ReadTarget()), a)
        same(self, s.get_tensor_with_parallelism("plain_a", ReadTarget("AS_STORED")), a)
        # as_stored with a parallelism is no request Mooncake serves.
        self.assertIsNone(s.get_tensor_with_parallelism("plain_a", shard("as_stored", L.ax("tp", 0, 1, 0))))
        self.assertIsNone(s.get_tensor_with_parallelism("missing"))

    def test_with_tp_layout_reads_back(self):
        # put_tensor_with_tp writes no manifest: full and target shards
        # read the layout off the first shard's header.
        s = self.s
        a = L.tensor(2, (4, 12, 3), "int16")
        self.assertEqual(s.put_tensor_with_tp("w", a, tp_size=4, split_dim=1), 0)
        self.assertEqual(s.is_exist("w__parallelism_manifest"), 0)
        same(self, s.get_tensor_with_parallelism("w", shard("full", L.ax("tp", 2, 4, 1))), a)
        same(self, s.get_tensor_with_parallelism("w", shard("shard", L.ax("tp", 0, 3, 1))), L.chunk(a, 3, 1, 0))
        for r in range(4):
            same(self, s.get_tensor_with_tp("w", r, 4), L.chunk(a, 4, 1, r))
        # batch forms
        got = s.batch_get_tensor_with_parallelism(["w", "w_tp_1"], [shard("full", L.ax("tp", 0, 4, 1)), None])
        same(self, got[0], a)
        same(self, got[1], L.chunk(a, 4, 1, 1))
        self.assertEqual(s.batch_get_tensor_with_parallelism(["w"], [None, None]), [None])
        same(self, s.batch_get_tensor_with_parallelism(["w_tp_3"])[0], L.chunk(a, 4, 1, 3))

    def test_single_tp_shard_only(self):
        # Only rank 0 written: other ranks and the full tensor are None.
        s = self.s
        a = L.tensor(3, (4, 6), "float32")
        self.assertEqual(s.put_tensor_with_parallelism("one", np.ascontiguousarray(L.chunk(a, 3, 1, 0)),
                                                       L.par(L.ax("tp", 0, 3, 1))), 0)
        same(self, s.get_tensor_with_parallelism("one", shard("shard", L.ax("tp", 0, 3, 1))), L.chunk(a, 3, 1, 0))
        for r in (1, 2):
            self.assertIsNone(s.get_tensor_with_parallelism("one", shard("shard", L.ax("tp", r, 3, 1))))
            self.assertIsNone(s.get_tensor_with_tp("one", r, 3, 1))
        self.assertIsNone(s.get_tensor_with_parallelism("one", shard("full", L.ax("tp", 0, 3, 1))))
        m = T.parse_metadata(s.get("one_tp_0"))
        self.assertEqual((m.global_shape, m.local_shape), ((4, 6), (4, 2)))

    def test_from_buffers(self):
        s = self.s
        a = L.tensor(4, (8, 6), "float32")
        obj = T.encode(a)
        p, n = obj.ctypes.data, obj.nbytes
        # A TP parallelism stores every TP shard of the object.
        self.assertEqual(s.put_tensor_with_parallelism_from("f", p, n, L.par(L.ax("tp", 1, 3, 1))), 0)
        for r in range(3):
            same(self, s.get_tensor_with_tp("f", r, 3), L.chunk(a, 3, 1, r))
        same(self, s.get_tensor_with_parallelism("f", shard("full", L.ax("tp", 0, 3, 1))), a)
        # DP+TP: every TP shard under the DP rank's names.
        dp = L.par(L.ax("dp", 1, 2), L.ax("tp", 0, 2, 0))
        self.assertEqual(s.put_tensor_with_parallelism_from("fd", p, n, dp), 0)
        same(self, s.get_tensor("fd__dp_1of2__tp_1of2_sd0"), L.chunk(a, 2, 0, 1))
        # writer partition, plain, and a config.
        self.assertEqual(s.put_tensor_with_parallelism_from("fw", p, n, writer_partition=L.WriterPartition(1, 2, 0)), 0)
        same(self, s.get_tensor("fw__writer_1of2_sd0"), L.chunk(a, 2, 0, 1))
        self.assertEqual(s.put_tensor_with_parallelism_from("fp", p, n, config=ReplicateConfig()), 0)
        same(self, s.get_tensor("fp"), a)
        # Batch, with a None parallelism for plain.
        res = s.batch_put_tensor_with_parallelism_from(["b1", "b2"], [p, p], [n, n],
                                                       [None, L.par(L.ax("ep", 0, 2, expert_id=3))])
        self.assertEqual(res, [0, 0])
        same(self, s.get_tensor("b2__ep_0of2_eid3"), a)
        self.assertEqual(s.batch_upsert_tensor_with_parallelism_from(["b1"], [p], [n]), [0])
        # Not a tensor object.
        junk = np.zeros(400, np.uint8)
        self.assertEqual(s.put_tensor_with_parallelism_from("j", junk.ctypes.data, 400), INVALID)
        self.assertEqual(s.batch_put_tensor_with_parallelism_from(["j"], [junk.ctypes.data], [400]), [INVALID])

    def test_upsert_replaces(self):
        s = self.s
        a, b = L.tensor(5, (4, 4), "float32"), L.tensor(6, (4, 4), "float32")
        tp = L.par(L.ax("tp", 0, 2, 0), L.ax("dp", 0, 1))
        self.assertEqual(s.put_tensor_with_parallelism("u", a, tp), 0)
        self.assertEqual(s.put_tensor_with_parallelism("u", b, tp), 0)  # immutable: kept
        same(self, s.get_tensor_with_parallelism("u", shard("shard", *tp.axes)), L.chunk(a, 2, 0, 0))
        self.assertEqual(s.upsert_tensor_with_parallelism("u", b, tp), 0)
        same(self, s.get_tensor_with_parallelism("u", shard("shard", *tp.axes)), L.chunk(b, 2, 0, 0))

    def test_batch_writes(self):
        s = self.s
        a, b = L.tensor(7, (4, 2), "int64"), L.tensor(8, (6, 2), "int64")
        res = s.batch_put_tensor_with_parallelism(["ba", "bb"], [a, b], [None, L.par(L.ax("tp", 1, 3, 0))])
        self.assertEqual(res, [0, 0])
        same(self, s.get_tensor("ba"), a)
        same(self, s.get_tensor("bb_tp_1"), b)
        self.assertEqual(s.batch_put_tensor_with_parallelism(["c1", "c2"], [a, b]), [0, 0])
        w = [L.WriterPartition(0, 2, 0), L.WriterPartition(1, 2, 0)]
        self.assertEqual(s.batch_upsert_tensor_with_parallelism(["bw", "bw"], [a, a], writer_partitions=w), [0, 0])
        same(self, s.get_tensor_with_parallelism("bw", ReadTarget("full")), a)
        # Both request kinds, wrong lengths, a tuple, group ids of another length.
        self.assertEqual(s.batch_put_tensor_with_parallelism(["x"], [a], [None], writer_partitions=[None]), [INVALID])
        self.assertEqual(s.batch_put_tensor_with_parallelism(["x", "y"], [a, b], [None]), [INVALID, INVALID])
        self.assertEqual(s.batch_put_tensor_with_parallelism(["x"], [a, b]), [INVALID])
        self.assertEqual(s.batch_put_tensor_with_parallelism(["x"], [a], (None,)), [INVALID])
        cfg = ReplicateConfig()
        cfg.group_ids = ["g1", "g2"]
        self.assertEqual(s.batch_put_tensor_with_parallelism(["x"], [a], None, cfg), [INVALID])
        cfg.group_ids = ["g1", "g2"]
        self.assertEqual(s.batch_put_tensor_with_parallelism(["g_a", "g_b"], [a, b],
                                                             [L.par(L.ax("tp", 0, 2, 0)), None], cfg), [0, 0])
        self.assertEqual(s.is_exist("g_a__parallelism_manifest"), 1)

    def test_bad_requests(self):
        s = self.s
        a = L.tensor(9, (8, 8), "float32")
        bad = [
            L.par(),                                           # no axes
            L.par(L.ax("dp", 0, 2, split_dim=0)),              # DP with split_dim
            L.par(L.ax("tp", 0, 2)),                           # TP without split_dim
            L.par(L.ax("ep", 0, 2)),                           # EP without expert_id
            L.par(L.ax("ep", 0, 2, split_dim=1, expert_id=1)),  # EP with split_dim
            L.par(L.ax("pp", 0, 2)),                           # PP without stage_id
            L.par(L.ax("tp", 2, 2, 0)),                        # rank out of range
            L.par(L.ax("tp", 0, 0, 0)),                        # size 0
            L.par(L.ax("tp", 0, 2, 0), L.ax("tp", 1, 2, 1)),   # duplicate kinds
            L.par(L.ax("mixed", 0, 1)),                        # no such kind
            L.par(*[L.ax(k, 0, 1, stage_id=1, expert_id=1) for k in ("dp", "ep", "pp")] + [L.ax("tp", 0, 1, 0)] +
                  [L.ax("dp", 0, 1)]),                          # five axes
            L.par(L.ax("dp", 0, 2), L.ax("tp", 0, 3, 0)),      # 8 not divisible by 3
            L.par(L.ax("tp", 0, 2, 5)),                        # split_dim out of range
        ]
        for p in bad:
            with self.subTest(p=p):
                self.assertEqual(s.put_tensor_with_parallelism("bad", a, p), INVALID)
                self.assertIsNone(s.get_tensor_with_parallelism("bad", ReadTarget("shard", p)))
        self.assertEqual(s.put_tensor_with_parallelism("bad", a, L.par(L.ax("tp", 0, 2, 0)),
                                                       writer_partition=L.WriterPartition(0, 2, 0)), INVALID)
        self.assertEqual(s.put_tensor_with_parallelism("bad", a, writer_partition=L.WriterPartition(2, 2, 0)), INVALID)
        self.assertEqual(s.put_tensor_with_parallelism("bad", a, writer_partition=L.WriterPartition(0, 3, 0)), INVALID)
        self.assertEqual(s.put_tensor_with_parallelism("bad", a, object()), INVALID)
        self.assertIsNone(s.get_tensor_with_parallelism("bad", object()))
        with self.assertRaises(RuntimeError):
            ReadTarget("mixed")
        t = ReadTarget()
        with self.assertRaises(RuntimeError):
            t.mode = "stored"
        self.assertEqual(t.mode, "as_stored")
        t.mode = "FULL"
        self.assertEqual(t.mode, "full")
        with self.assertRaises(TypeError):
            s.put_tensor_with_parallelism("bad", b"bytes", L.par(L.ax("tp", 0, 1, 0)))
        for name in ("ParallelAxis", "TensorParallelism", "ReadTarget"):
            self.assertTrue(hasattr(__import__("mooncake.store", fromlist=[name]), name))
        self.assertEqual(TensorParallelism().axes, [])

    def test_not_set_up(self):
        s = MooncakeDistributedStore()
        a = L.tensor(1, (2, 2), "float32")
        self.assertEqual(s.put_tensor_with_parallelism("k", a), INVALID)
        self.assertEqual(s.put_tensor_with_parallelism("k", a, L.par(L.ax("tp", 0, 1, 0))), INVALID)
        self.assertIsNone(s.get_tensor_with_parallelism("k", ReadTarget("full", L.par(L.ax("tp", 0, 1, 0)))))
        self.assertEqual(s.batch_put_tensor_with_parallelism(["k"], [a]), [INVALID])


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class Torch(unittest.TestCase):
    def test_torch_tensors(self):
        import torch

        s = MooncakeDistributedStore()
        self.assertEqual(s.setup("127.0.0.1", "P2PHANDSHAKE", 32 << 20, 16 << 20, "tcp", "", "embedded"), 0)
        try:
            full = torch.arange(4 * 6 * 2, dtype=torch.float32).reshape(4, 6, 2).to(torch.bfloat16)
            for t in range(3):
                p = L.par(L.ax("dp", 0, 1), L.ax("tp", t, 3, 1))
                self.assertEqual(s.put_tensor_with_parallelism("tb", full, p), 0)
            got = s.get_tensor_with_parallelism("tb", ReadTarget("full", L.par(L.ax("dp", 0, 1), L.ax("tp", 0, 3, 1))))
            self.assertEqual(got.dtype, torch.bfloat16)
            self.assertTrue(torch.equal(got, full))
            got = s.get_tensor_with_parallelism("tb", ReadTarget("shard", L.par(L.ax("dp", 0, 1),
                                                                                L.ax("tp", 1, 3, 1))))
            self.assertTrue(torch.equal(got, full.chunk(3, 1)[1]))
            # A non-contiguous source is made contiguous first.
            nc = full.transpose(0, 1)
            self.assertEqual(s.put_tensor_with_parallelism("tn", nc, L.par(L.ax("dp", 0, 1), L.ax("tp", 0, 2, 0))), 0)
            got = s.get_tensor("tn__dp_0of1__tp_0of2_sd0")
            self.assertTrue(torch.equal(got, nc.chunk(2, 0)[0]))
        finally:
            s.close()


class ManyRows(unittest.TestCase):
    """A split along a late dim of a larger tensor: thousands of pieces in
    one read per shard, against numpy's slicing."""

    def test_rows(self):
        s = MooncakeDistributedStore()
        s.tensor_format = "numpy"
        self.assertEqual(s.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", "embedded"), 0)
        try:
            a = L.tensor(11, (64, 32, 24), "float32")
            for t in range(4):
                p = L.par(L.ax("pp", 0, 1, stage_id=0), L.ax("tp", t, 4, 2))
                self.assertEqual(s.put_tensor_with_parallelism("rows", a, p), 0)
            pp = L.ax("pp", 0, 1, stage_id=0)
            same(self, s.get_tensor_with_parallelism("rows", ReadTarget("full", L.par(pp, L.ax("tp", 0, 4, 2)))), a)
            for r in range(3):
                got = s.get_tensor_with_parallelism("rows", ReadTarget("shard", L.par(pp, L.ax("tp", r, 3, 2))))
                same(self, got, L.chunk(a, 3, 2, r))
            n = T.TENSOR_METADATA_SIZE + a.nbytes
            buf = (ctypes.c_uint8 * n)()
            got = s.get_tensor_with_parallelism_into("rows", ctypes.addressof(buf), n,
                                                     ReadTarget("full", L.par(pp, L.ax("tp", 3, 4, 2))))
            same(self, got, a)
        finally:
            s.close()


if __name__ == "__main__":
    unittest.main()


class Gpu(unittest.TestCase):
    """CUDA tensors through the store's CUDA path, on the fake driver: TP
    shards put from GPU memory, and the full tensor and a resharded
    target rebuilt straight into a GPU buffer (only headers touch the
    host)."""

    @classmethod
    def setUpClass(cls):
        import os

        import _fakecuda

        if not _fakecuda.available():
            raise unittest.SkipTest("no fake CUDA driver (KVFERRY_TEST_FAKECUDA)")
        cls.saved = {k: os.environ.get(k) for k in ("KVFERRY_CUDA_LIB", "KVFERRY_TRANSPORT")}
        os.environ["KVFERRY_CUDA_LIB"] = _fakecuda.PATH
        os.environ.pop("KVFERRY_TRANSPORT", None)
        cls.d = _fakecuda.Driver()
        cls.s = MooncakeDistributedStore()
        assert cls.s.setup("127.0.0.1", "P2PHANDSHAKE", 32 << 20, 16 << 20, "tcp", "", "embedded") == 0

    @classmethod
    def tearDownClass(cls):
        import os

        cls.s.close()
        for k, v in cls.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def test_rebuild_into_gpu(self):
        import types

        from _fakecuda import FakeCudaTensor

        from kvferry import allocator

        d, s = self.d, self.s
        full = L.tensor(50, (16, 64), "uint8")
        for r in range(4):
            part = np.ascontiguousarray(L.chunk(full, 4, 1, r))
            src = FakeCudaTensor(d.alloc(part.nbytes, 0), part.nbytes, 0, part.shape)
            d.h2d(src.data_ptr(), part.tobytes())
            self.assertEqual(s.put_tensor_with_parallelism("gpu", src, L.par(L.ax("tp", r, 4, 1))), 0)

        def as_tensor(obj, device=None):
            cai = obj.__cuda_array_interface__
            shape = cai["shape"]
            return FakeCudaTensor(cai["data"][0], int(np.prod(shape)), int(str(device).partition(":")[2]), shape)

        saved = T._torch
        T._torch = lambda: types.SimpleNamespace(as_tensor=as_tensor)
        n = T.TENSOR_METADATA_SIZE + full.nbytes
        buf = allocator.malloc(n, 1)
        try:
            self.assertEqual(s.register_buffer(buf, n), 0)
            got = s.get_tensor_with_parallelism_into("gpu", buf, n, ReadTarget("full", L.par(L.ax("tp", 0, 4, 1))))
            self.assertIsNotNone(got)
            self.assertEqual((got.shape, got.data_ptr()), (full.shape, buf + T.TENSOR_METADATA_SIZE))
            self.assertEqual(d.bytes_at(buf + T.TENSOR_METADATA_SIZE, full.nbytes), full.tobytes())
            m = T.parse_metadata(d.bytes_at(buf, n))
            self.assertEqual((m.layout_kind, m.local_shape), (T.LAYOUT_FULL, full.shape))
            want = np.ascontiguousarray(L.chunk(full, 2, 1, 1))
            got = s.get_tensor_with_parallelism_into("gpu", buf, n, ReadTarget("shard", L.par(L.ax("tp", 1, 2, 1))))
            self.assertIsNotNone(got)
            self.assertEqual(d.bytes_at(buf + T.TENSOR_METADATA_SIZE, want.nbytes), want.tobytes())
            # As stored, into GPU memory.
            got = s.get_tensor_with_parallelism_into("gpu_tp_3", buf, n)
            self.assertEqual(d.bytes_at(buf + T.TENSOR_METADATA_SIZE, 16 * 16),
                             np.ascontiguousarray(L.chunk(full, 4, 1, 3)).tobytes())
            self.assertEqual(s.unregister_buffer(buf), 0)
        finally:
            T._torch = saved
            allocator.free(buf, 1)
