"""pub/sub across processes: a publisher process (embedded master, its own
segment) and subscribers in this and a third process, through the store and
straight through the transfer engine."""

import hashlib
import time
import unittest

import numpy as np

from _util import TIMEOUT, Peer

from kvferry.engine import TransferEngine
from kvferry.store import MooncakeDistributedStore
from kvferry.tensor import decode

from peer_store import tensor_for

N = 16


class PubSub(unittest.TestCase):
    def test_publish_subscribe(self):
        pub = Peer("peer_store.py", "publisher")
        sub2 = None
        s = MooncakeDistributedStore()
        s.tensor_format = "numpy"
        try:
            self.assertEqual(pub.info["rc"], 0)
            master = pub.info["master"]
            self.assertEqual(s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "",
                                     master), 0)
            # Nothing yet.
            self.assertEqual(s.is_exist("layer_0"), 0)
            self.assertEqual(pub.ask("publish", n=N)["results"], [0] * (N + 1))
            # Subscribe through the store.
            keys = ["layer_%d" % i for i in range(N)]
            self.assertEqual(s.batch_is_exist(keys), [1] * N)
            for i, t in enumerate(s.batch_get_tensor(keys)):
                self.assertTrue(np.array_equal(t, tensor_for(i)), i)
            shards = [s.get_tensor_with_tp("tp_weight", r, 4) for r in range(4)]
            self.assertTrue(np.array_equal(np.concatenate(shards, 1), tensor_for(99)))
            # Subscribe straight from the publisher's memory: the master only
            # says where the replicas are.
            reps = s.batch_get_replica_desc(keys)
            self.assertEqual(sorted(reps), sorted(keys))
            e = TransferEngine()
            self.assertEqual(e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0)
            try:
                descs = [reps[k][0].get_memory_descriptor().buffer_descriptor for k in keys]
                self.assertTrue(all(d.transport_endpoint == pub.info["hostname"] for d in descs))
                total = sum(d.size for d in descs)
                buf = np.zeros(total, np.uint8)
                self.assertEqual(e.register_memory(buf.ctypes.data, total), 0)
                offs = np.cumsum([0] + [d.size for d in descs[:-1]])
                self.assertEqual(e.batch_transfer_sync_read(
                    pub.info["hostname"], [buf.ctypes.data + int(o) for o in offs],
                    [d.buffer_address for d in descs], [d.size for d in descs]), 0)
                for i, (o, d) in enumerate(zip(offs, descs)):
                    t = decode(buf[int(o):int(o) + d.size], "numpy")
                    self.assertTrue(np.array_equal(t, tensor_for(i)), i)
            finally:
                e.close()
            # A third process subscribes too, and this process publishes back.
            sub2 = Peer("peer_store.py", "subscriber", master)
            self.assertEqual(sub2.info["rc"], 0)
            want = hashlib.sha256(tensor_for(3).tobytes()).hexdigest()
            self.assertEqual(sub2.ask("get", key="layer_3")["sha"], want)
            back = np.arange(1000, dtype=np.int64)
            self.assertEqual(s.pub_tensor("ack", back), 0)  # lands in the publisher's segment
            self.assertTrue(pub.ask("wait_key", key="ack")["ok"])
            self.assertEqual(pub.ask("get", key="ack")["sha"],
                             hashlib.sha256(back.tobytes()).hexdigest())
            self.assertEqual(sub2.ask("get", key="missing")["sha"], None)
            # The publisher (with the master and the segment) leaves:
            # readers get an error code, not a hang.
            pub.close()
            deadline = time.monotonic() + TIMEOUT
            rc = 0
            while time.monotonic() < deadline:
                rc = s.get_size("layer_0")
                if rc < 0:
                    break
                time.sleep(0.05)
            self.assertLess(rc, 0)
            self.assertIsNone(s.get_tensor("layer_1"))
            self.assertIn(s.health_check(), (0, 2))
        finally:
            s.close()
            if sub2 is not None:
                sub2.close()
            pub.close()


if __name__ == "__main__":
    unittest.main()
