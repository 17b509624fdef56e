"""The efa (libfabric) transport through the Python API and the C ABI,
protocol="efa", between two processes over the real libfabric with the
tcp;ofi_rxm software provider on loopback (EFA itself needs AWS)."""

import os
import unittest

from _util import Peer

SIZE = 8 << 20


def _have_libfabric():
    try:
        import ctypes
        ctypes.CDLL("libfabric.so.1")
        return True
    except OSError:
        return False


@unittest.skipUnless(_have_libfabric(), "libfabric is not installed (apt-get install libfabric1)")
class EFA(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.env = {"KVFERRY_LIBFABRIC_PROVIDER": "tcp;ofi_rxm",
                   # Both peers are on this host: keep the selector off cma.
                   "KVFERRY_TRANSPORT": "efa"}
        cls.saved = {k: os.environ.get(k) for k in cls.env}
        os.environ.update(cls.env)  # for the peers only

    @classmethod
    def tearDownClass(cls):
        for k, v in cls.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def test_write_read_and_links(self):
        owner = Peer("peer_efa.py", "owner", str(SIZE), "1")
        init = Peer("peer_efa.py", "initiator", str(SIZE), "2")
        try:
            seg, addr = owner.info["segment"], owner.info["addr"]
            mine = init.ask("sha")["sha"]
            self.assertEqual(init.ask("write", segment=seg, addr=addr)["rc"], 0)
            self.assertEqual(owner.ask("sha")["sha"], mine)
            theirs = owner.ask("sha")["sha"]
            r = init.ask("read", segment=seg, addr=addr)
            self.assertEqual(r["rc"], 0)
            self.assertEqual(r["sha"], theirs)
            self.assertLess(init.ask("bad", segment=seg, addr=addr)["rc"], 0)
            self.assertEqual(owner.ask("sha")["sha"], theirs)
            links = init.ask("links")
            self.assertIn("efa", links["transports"])
            self.assertTrue(links["efa"].startswith("installed: provider tcp;ofi_rxm"), links["efa"])
            nics = [n for n in links["nics"] if n["Transport"] == "efa"]
            self.assertEqual(len(nics), 1, links["nics"])
            self.assertIn("tcp;ofi_rxm", nics[0]["LinkLayer"])
            self.assertEqual(nics[0]["BytesCompleted"], 2 * SIZE)
            self.assertTrue(any(l["transport"] == "efa" for l in links["links"]), links["links"])
        finally:
            init.close()
            owner.close()


if __name__ == "__main__":
    unittest.main()
