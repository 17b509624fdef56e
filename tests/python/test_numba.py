"""Third-party driver code on the fake CUDA driver: numba's CUDA binding
(Debian's python3-numba drives the driver API through ctypes) runs on
tests/fakecuda, pointed at it with NUMBA_CUDA_DRIVER, with no kernels (they
need libNVVM): devices, device arrays, copies host<->device and
device<->device, streams and events as numba uses them, memory info, numba
IPC handles opened in a second process; then kvferry moves numba device
memory to another process and back over TCP staging and over the same-host
IPC path (nvlink). kvferry (KVFERRY_CUDA_LIB) and numba load the same file,
so both drive one driver."""

import asyncio
import base64
import hashlib
import os
import pickle
import re
import unittest

import numpy as np

import _fakecuda
from _util import Peer, pattern

APT = "apt-get install python3-numba"
_saved = {}
cuda = None


def setUpModule():
    global cuda
    if not _fakecuda.available():
        raise unittest.SkipTest("no fake CUDA driver (KVFERRY_TEST_FAKECUDA)")
    # numba reads NUMBA_CUDA_DRIVER when it is imported; the peers inherit
    # all of these.
    env = {"NUMBA_CUDA_DRIVER": _fakecuda.PATH, "KVFERRY_CUDA_LIB": _fakecuda.PATH}
    for k in list(env) + ["KVFERRY_TRANSPORT", "MC_FORCE_TCP", "CUDA_VISIBLE_DEVICES"]:
        _saved[k] = os.environ.get(k)
    os.environ.update(env)
    for k in ("KVFERRY_TRANSPORT", "MC_FORCE_TCP", "CUDA_VISIBLE_DEVICES"):
        os.environ.pop(k, None)
    try:
        from numba import cuda as numba_cuda
    except ImportError as e:
        raise RuntimeError("numba is missing (%s): %s" % (e, APT)) from e
    cuda = numba_cuda


def tearDownModule():
    for k, v in _saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


class NumbaDriver(unittest.TestCase):
    """numba's driver binding in this process."""

    def test_driver_and_devices(self):
        from numba.cuda.cudadrv import driver as drv
        from numba.cuda.cudadrv import nvvm
        from numba.cuda.cudadrv.drvapi import API_PROTOTYPES

        # Every entry point numba binds exists (the old "Driver missing
        # function: cuDeviceGetUuid"), in the variant numba looks for.
        import ctypes

        lib = ctypes.CDLL(_fakecuda.PATH)
        missing = [n for n in API_PROTOTYPES if not any(hasattr(lib, n + v) for v in ("_v2", ""))]
        self.assertEqual(missing, [])
        self.assertTrue(drv.driver.is_available)
        self.assertIsNone(drv.driver.initialization_error)
        # cuda.is_available() also needs libNVVM (the kernel compiler), which
        # is not part of the driver: it is available exactly when NVVM is.
        self.assertEqual(cuda.is_available(), nvvm.is_available())
        self.assertEqual(drv.driver.get_version(), (12, 8))
        self.assertTrue(cuda.detect())
        self.assertEqual(len(cuda.gpus), 2)
        devs = cuda.list_devices()
        self.assertEqual([d.compute_capability for d in devs], [(9, 0), (9, 0)])
        uuids = {d.uuid for d in devs}
        self.assertEqual(len(uuids), 2)
        for u in uuids:
            self.assertRegex(u, r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
        dev = cuda.get_current_device()
        self.assertEqual((dev.WARP_SIZE, dev.MAX_THREADS_PER_BLOCK, dev.MULTIPROCESSOR_COUNT), (32, 1024, 132))
        self.assertEqual(dev.UNIFIED_ADDRESSING, 1)
        self.assertEqual(dev.CAN_MAP_HOST_MEMORY, 1)
        self.assertEqual(dev.get_device_identity()["pci_bus_id"], dev.id + 1)
        # The kernel side fails with a CUDA error, never a missing symbol.
        with self.assertRaises(drv.CudaAPIError) as e:
            cuda.current_context().create_module_ptx(".version 8.0\n.target sm_90\n")
        self.assertEqual(e.exception.code, 801)

    def test_arrays_and_copies(self):
        n = 3 << 20
        host = pattern(n, 1)
        d = cuda.to_device(host)
        self.assertTrue(np.array_equal(d.copy_to_host(), host))
        # Device to device, both ways numba offers.
        e = cuda.device_array(n, np.uint8)
        e.copy_to_device(d)
        self.assertTrue(np.array_equal(e.copy_to_host(), host))
        f = cuda.device_array_like(e)
        f.copy_to_device(e)
        self.assertEqual(sha(f.copy_to_host()), sha(host))
        # Multi-dimensional, other dtypes, into a given host array.
        m = np.arange(64 * 1024, dtype=np.float32).reshape(256, 256)
        dm = cuda.to_device(m)
        out = np.empty_like(m)
        dm.copy_to_host(out)
        self.assertTrue(np.array_equal(out, m))
        # Small arrays next to each other stay apart when one is freed.
        a, b = cuda.to_device(np.full(100, 1, np.uint8)), cuda.to_device(np.full(100, 2, np.uint8))
        del a
        cuda.current_context().deallocations.clear()
        self.assertTrue((b.copy_to_host() == 2).all())
        # Pinned and mapped host memory.
        p = cuda.pinned_array(n, np.uint8)
        p[:] = host
        dp = cuda.to_device(p)
        self.assertEqual(sha(dp.copy_to_host()), sha(host))
        # Mapped host memory is device memory to numba: a device-to-device
        # copy (cuMemcpyDtoD) reads it through its device pointer.
        from numba.cuda.cudadrv import driver as drv

        mp = cuda.mapped_array(4096, np.uint8)
        mp[:] = 5
        dm = cuda.device_array(4096, np.uint8)
        drv.device_to_device(dm, mp, 4096)
        self.assertTrue((dm.copy_to_host() == 5).all())

        drv.device_memset(dp, 0x3C, 4096)
        self.assertTrue((dp.copy_to_host()[:4096] == 0x3C).all())
        self.assertEqual(sha(dp.copy_to_host()[4096:]), sha(host[4096:]))

    def test_memory_info(self):
        ctx = cuda.current_context()
        free0, total = ctx.get_memory_info()
        self.assertEqual(total, cuda.get_current_device().primary_context.get_memory_info().total)
        self.assertLessEqual(free0, total)
        big = cuda.device_array(16 << 20, np.uint8)
        free1, _ = ctx.get_memory_info()
        self.assertLessEqual(free1, free0 - (16 << 20))
        del big
        ctx.deallocations.clear()
        self.assertEqual(ctx.get_memory_info().free, free0)

    def test_streams_and_events(self):
        n = 2 << 20
        host = pattern(n, 2)
        s1, s2 = cuda.stream(), cuda.stream()
        start, mid, end = cuda.event(), cuda.event(), cuda.event()
        start.record(s1)
        d = cuda.to_device(host, stream=s1)
        mid.record(s1)
        mid.wait(s2)  # s2 waits for s1's copy
        out = d.copy_to_host(stream=s2)
        end.record(s2)
        end.synchronize()
        self.assertTrue(end.query())
        self.assertTrue(np.array_equal(out, host))
        self.assertGreaterEqual(start.elapsed_time(mid), 0.0)
        untimed = cuda.event(timing=False)
        untimed.record(s1)
        untimed.synchronize()
        from numba.cuda.cudadrv import driver as drv

        with self.assertRaises(drv.CudaAPIError):
            untimed.elapsed_time(end)
        # Callbacks and async_done run once the work before them has.
        seen = []
        with s1.auto_synchronize():
            d2 = cuda.to_device(host, stream=s1)
            s1.add_callback(lambda stream, status, arg: seen.append((stream, status, arg)), "cb")
        self.assertEqual(seen, [(s1, 0, "cb")])

        async def done():
            fut = s2.async_done()
            return await asyncio.wait_for(fut, 30)

        self.assertIs(asyncio.run(done()), s2)
        # A memset on a stream.
        # d2's copies run on s1, its stream: copy_to_host returns before
        # the bytes are there, as on a GPU, until s1 is synchronized.
        drv.device_memset(d2, 7, 1024, stream=s1)
        got = d2.copy_to_host()
        s1.synchronize()
        self.assertTrue((got[:1024] == 7).all())
        self.assertEqual(sha(got[1024:]), sha(host[1024:]))
        # The default streams.
        for st in (cuda.default_stream(), cuda.legacy_default_stream(), cuda.per_thread_default_stream()):
            x = cuda.to_device(host, stream=st)
            y = x.copy_to_host(stream=st)
            st.synchronize()
            self.assertEqual(sha(y), sha(host))
        cuda.synchronize()

    def test_legacy_stream_orders_synchronous_copies(self):
        # A synchronous copy runs on the legacy default stream, which waits
        # for the work queued before on numba's (blocking) streams: the
        # copy_to_host below sees the bytes of the slow stream copy without
        # a synchronize, as on a GPU.
        n = 1 << 20
        drv = _fakecuda.Driver()
        d = cuda.to_device(np.zeros(n, np.uint8))
        s = cuda.stream()
        host = pattern(n, 3)
        drv.copy_delay(200000)
        try:
            d.copy_to_device(host, stream=s)
        finally:
            drv.copy_delay(0)
        self.assertEqual(sha(d.copy_to_host()), sha(host))


# numba's own tests of its driver binding that need no kernels (the rest
# compile device code with libNVVM), run on the fake as they run on a GPU.
NUMBA_OWN = ["test_cuda_memory", "test_events", "test_streams", "test_host_alloc", "test_pinned",
             "test_deallocations", "test_emm_plugins", "test_array_attr", "test_reset_device",
             "test_select_device", "test_profiler", "test_cuda_auto_context", "test_detect", "test_runtime"]


class NumbaOwnTests(unittest.TestCase):
    def test_numba_driver_tests(self):
        import subprocess
        import sys

        mods = ["numba.cuda.tests.cudadrv." + m for m in NUMBA_OWN]
        r = subprocess.run([sys.executable, "-m", "unittest"] + mods, env=dict(os.environ),
                           capture_output=True, text=True, timeout=300, cwd="/")
        self.assertEqual(r.returncode, 0, r.stderr[-4000:])
        self.assertRegex(r.stderr, r"Ran [1-9][0-9]+ tests")


def metric(name, transport):
    import kvferry

    total = 0.0
    pat = re.compile(r'^%s\{[^}]*transport="%s"[^}]*\} (\S+)$' % (re.escape(name), transport))
    for line in kvferry.metrics_text().splitlines():
        m = pat.match(line)
        if m:
            total += float(m.group(1))
    return total


class TwoProcesses(unittest.TestCase):
    """numba arrays and a peer process with its own (tests/python/peer_numba.py)."""

    def peer(self, transport=None):
        saved = os.environ.get("KVFERRY_TRANSPORT")
        if transport:
            os.environ["KVFERRY_TRANSPORT"] = transport
        p = Peer("peer_numba.py")
        self.addCleanup(p.close)
        return p, saved

    def test_ipc_handles(self):
        peer, _ = self.peer()
        self.assertEqual(peer.info["devices"], 2)
        n = 1 << 20
        want = pattern(n, 4)
        mine = cuda.to_device(want)
        # This process's handle, opened in the peer: it reads the bytes and
        # writes new ones, which this process sees.
        h = base64.b64encode(pickle.dumps(mine.get_ipc_handle())).decode()
        r = peer.ask("open", handle=h, seed=5)
        self.assertEqual(r["sha"], sha(want))
        self.assertEqual(sha(mine.copy_to_host()), r["wrote"])
        # The peer's handle, opened here.
        theirs = peer.ask("alloc", n=n, seed=6)
        h = pickle.loads(base64.b64decode(peer.ask("export", ptr=theirs["ptr"])["handle"]))
        with h as a:
            self.assertEqual(sha(a.copy_to_host()), sha(pattern(n, 6)))
            a.copy_to_device(pattern(n, 7))
            cuda.synchronize()
        self.assertEqual(peer.ask("sha", ptr=theirs["ptr"])["sha"], sha(pattern(n, 7)))
        # A second open after close works, through open()/close().
        a = h.open()
        self.assertEqual(sha(a.copy_to_host()), sha(pattern(n, 7)))
        h.close()

    def move(self, transport):
        from kvferry.engine import TransferEngine

        peer, saved = self.peer(transport)
        e = TransferEngine()
        try:
            self.assertEqual(e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0)
            n = 4 << 20
            src = cuda.to_device(pattern(n, 10))
            back = cuda.device_array(n, np.uint8)
            for a in (src, back):
                self.assertEqual(e.register_memory(a.device_ctypes_pointer.value, n, "cuda:0"), 0)
            seg = peer.info["segment"]
            for dev in (0, 1):
                remote = peer.ask("alloc", n=n, seed=11 + dev, dev=dev)
                self.assertEqual(remote["rc"], 0)
                before = metric("kvferry_engine_slices_total", transport)
                # Write: this process's numba array into the peer's.
                rc = e.batch_transfer_sync_write(seg, [src.device_ctypes_pointer.value], [remote["ptr"]], [n])
                self.assertEqual(rc, 0, e.last_error())
                self.assertEqual(peer.ask("sha", ptr=remote["ptr"])["sha"], sha(pattern(n, 10)))
                # Read: the peer's new bytes back into another numba array.
                want = peer.ask("fill", ptr=remote["ptr"], seed=20 + dev)["sha"]
                rc = e.batch_transfer_sync_read(seg, [back.device_ctypes_pointer.value], [remote["ptr"]], [n])
                self.assertEqual(rc, 0, e.last_error())
                self.assertEqual(sha(back.copy_to_host()), want)
                self.assertGreater(metric("kvferry_engine_slices_total", transport), before,
                                   "no slices went over %s" % transport)
                self.assertEqual(peer.ask("unregister", ptr=remote["ptr"])["rc"], 0)
        finally:
            e.close()
            if saved is None:
                os.environ.pop("KVFERRY_TRANSPORT", None)
            else:
                os.environ["KVFERRY_TRANSPORT"] = saved

    def test_kvferry_over_tcp(self):
        self.move("tcp")

    def test_kvferry_over_cuda_ipc(self):
        # Forced to the same-host IPC path: this process maps the peer's
        # numba allocations through their legacy IPC handles.
        import ctypes

        calls = _fakecuda.Driver().cu.fakecuda_calls
        calls.restype = ctypes.c_ulonglong
        before = calls(b"cuIpcOpenMemHandle")
        self.move("nvlink")
        self.assertGreater(calls(b"cuIpcOpenMemHandle"), before, "kvferry did not open the peer's IPC handle")


if __name__ == "__main__":
    unittest.main()
