"""Metrics from a process that loads the library: KVFERRY_METRICS_ADDR
serves /metrics (and /debug/pprof/ with KVFERRY_METRICS_PPROF=1) on
loopback for a bare port; kvferry.metrics_text() returns the same
catalogue in process (docs/METRICS.md)."""

import os
import socket
import subprocess
import sys
import textwrap
import unittest
import urllib.request

import numpy as np

from _util import REPO, TIMEOUT

import kvferry
from kvferry.engine import TransferEngine

CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    from kvferry.engine import TransferEngine
    a, b = TransferEngine(), TransferEngine()
    assert a.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    assert b.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    src, dst = np.ones(1 << 20, np.uint8), np.zeros(1 << 20, np.uint8)
    assert a.register_memory(src.ctypes.data, src.nbytes) == 0
    assert b.register_memory(dst.ctypes.data, dst.nbytes) == 0
    assert a.transfer_sync_write(b.get_segment_name(), src.ctypes.data, dst.ctypes.data, 65536) == 0
    print("ready", b.get_segment_name(), flush=True)
    sys.stdin.read()
""")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def listening_addrs(port):
    """Local IPv4 addresses (hex, as /proc/net/tcp writes them) listening on port."""
    out = []
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            addr, p = fields[1].split(":")
            if int(p, 16) == port and fields[3] == "0A":  # LISTEN
                out.append(addr)
    return out


class MetricsEndpoint(unittest.TestCase):
    def has(self, text, want):
        if want not in text:
            lines = [l for l in text.splitlines() if l.startswith(want.split("{")[0].split(" ")[0])]
            self.fail("%r not in the exposition; its %s lines: %s" % (want, want.split("{")[0], lines[:12]))

    def test_listener_pprof_and_loopback(self):
        port = free_port()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
        env["KVFERRY_METRICS_ADDR"] = str(port)  # a bare port: loopback
        env["KVFERRY_METRICS_PPROF"] = "1"
        env["KVFERRY_TRANSPORT"] = "tcp"  # not "local" between the child's two engines
        p = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env=env, text=True)
        try:
            line = p.stdout.readline()
            self.assertTrue(line.startswith("ready "), line)
            peer = line.split()[1]
            self.assertEqual(listening_addrs(port), ["0100007F"])  # 127.0.0.1 only
            base = "http://127.0.0.1:%d" % port
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            text = opener.open(base + "/metrics", timeout=TIMEOUT).read().decode()
            want = 'kvferry_engine_transferred_bytes_total{op="write",peer="%s",transport="tcp"} 65536' % peer
            self.has(text, want)
            self.has(text, 'kvferry_engine_task_duration_seconds_bucket{size_class="<=64KiB",transport="tcp"')
            self.has(text, "kvferry_transport_connections{")
            self.has(text, 'kvferry_engine_registered_bytes{kind="host"} 2.097152e+06')
            self.has(text, "kvferry_engines 2")
            self.has(text, "go_goroutines")
            prof = opener.open(base + "/debug/pprof/goroutine?debug=1", timeout=TIMEOUT).read().decode()
            self.assertIn("goroutine profile", prof)
        finally:
            p.stdin.close()
            p.wait(TIMEOUT)
            p.stdout.close()

    def test_metrics_text_in_process(self):
        a, b = TransferEngine(), TransferEngine()
        self.assertEqual(a.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0)
        self.assertEqual(b.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0)
        try:
            src, dst = np.ones(4096, np.uint8), np.zeros(4096, np.uint8)
            self.assertEqual(a.register_memory(src.ctypes.data, 4096), 0)
            self.assertEqual(b.register_memory(dst.ctypes.data, 4096), 0)
            self.assertEqual(a.transfer_sync_write(b.get_segment_name(), src.ctypes.data, dst.ctypes.data, 4096), 0)
            text = kvferry.metrics_text()
            # Two engines of one process: the same-process transport.
            self.has(text, 'kvferry_engine_tasks_total{op="write",peer="%s",state="completed",transport="local"}'
                     % b.get_segment_name())
            self.has(text, 'kvferry_engine_errors_total{cause="timeout"')
        finally:
            a.close()
            b.close()


if __name__ == "__main__":
    unittest.main()
