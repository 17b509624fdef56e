"""RDMA through the Python API and the C ABI, between two processes whose
libibverbs is the test suite's fake provider (tests/rdma/fakeverbs),
loaded by the library's real shim through KVFERRY_IBVERBS_LIB. With
KVFERRY_HW=1 (make hw-check) on the machine's libibverbs and the NICs
KVFERRY_HW_NICS names (comma-separated), where the showLinks figures also
carry the ports' kernel counters."""

import os
import shutil
import subprocess
import tempfile
import unittest

from _util import REPO, Peer

SIZE = 8 << 20
HW = os.environ.get("KVFERRY_HW") == "1"
HW_NICS = os.environ.get("KVFERRY_HW_NICS", "")


@unittest.skipUnless(shutil.which("cc"), "no C compiler for the fake verbs provider")
@unittest.skipIf(HW and not HW_NICS, "KVFERRY_HW=1 without RDMA NICs (KVFERRY_HW_NICS)")
class RDMA(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kvferry-rdma-")
        if HW:
            cls.nics = HW_NICS
            cls.env = {"KVFERRY_TRANSPORT": "rdma"}
            cls.saved = {k: os.environ.get(k) for k in cls.env}
            os.environ.update(cls.env)
            return
        cls.nics = "fake_mlx5_0,fake_mlx5_1"
        lib = os.path.join(cls.dir, "libibverbs.so.1")
        src = os.path.join(REPO, "tests", "rdma", "fakeverbs", "c", "fake_ibverbs.c")
        mapfile = os.path.join(os.path.dirname(src), "libibverbs.map")
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-Wl,--version-script=" + mapfile,
                        "-Wl,-soname,libibverbs.so.1", "-o", lib, src, "-lpthread", "-ldl"], check=True)
        cls.env = {"KVFERRY_IBVERBS_LIB": lib, "FAKEVERBS_DIR": cls.dir,
                   "FAKEVERBS_DEVICES": "fake_mlx5_0,fake_mlx5_1",
                   # Both peers are on this host: keep the selector off cma.
                   "KVFERRY_TRANSPORT": "rdma"}
        cls.saved = {k: os.environ.get(k) for k in cls.env}
        os.environ.update(cls.env)  # for the peers only; this process never loads it

    @classmethod
    def tearDownClass(cls):
        for k, v in cls.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_write_read_and_links(self):
        owner = Peer("peer_rdma.py", "owner", self.nics, str(SIZE), "1")
        init = Peer("peer_rdma.py", "initiator", self.nics, str(SIZE), "2")
        try:
            seg, addr = owner.info["segment"], owner.info["addr"]
            mine = init.ask("sha")["sha"]
            self.assertEqual(init.ask("write", segment=seg, addr=addr)["rc"], 0)
            self.assertEqual(owner.ask("sha")["sha"], mine)
            theirs = owner.ask("sha")["sha"]
            r = init.ask("read", segment=seg, addr=addr)
            self.assertEqual(r["rc"], 0)
            self.assertEqual(r["sha"], theirs)
            links = init.ask("links")
            self.assertIn("rdma", links["transports"])
            self.assertTrue(links["rdma"].startswith("installed"), links["rdma"])
            nics = {n["Device"]: n for n in links["nics"]}
            self.assertEqual(sorted(nics), sorted(self.nics.split(",")))
            self.assertEqual(sum(n["BytesCompleted"] for n in nics.values()), 2 * SIZE)
            self.assertTrue(all(n["BytesCompleted"] > 0 for n in nics.values()), nics)
            if HW:
                # The ports' kernel counters saw at least what moved.
                ports = [c for c in links["nic_counters"] if not c["Err"]]
                for c in ports:
                    self.assertGreaterEqual(c["XmitBytes"] + c["RcvBytes"], nics[c["Device"]]["BytesCompleted"], c)
            self.assertTrue(any(l["transport"] == "rdma" for l in links["links"]), links["links"])
        finally:
            init.close()
            owner.close()


if __name__ == "__main__":
    unittest.main()
