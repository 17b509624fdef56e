"""initialize / initialize_ext with Redis metadata (issue 40): engines on a
real redis-server (requirepass) publish Mooncake's keys; a wrong password
and an unreachable Redis fail cleanly with -1."""

import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

from _util import TIMEOUT

from kvferry.engine import TransferEngine

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
PASSWORD = "py-secret"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def resp(port, *args):
    """One RESP command on a fresh connection; returns the first reply line
    and, for a bulk string, its payload."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        out = b""
        for cmd in (["AUTH", PASSWORD], list(args)):
            out = b"*%d\r\n" % len(cmd)
            for a in cmd:
                b = a.encode()
                out += b"$%d\r\n%s\r\n" % (len(b), b)
            c.sendall(out)
            f = c.makefile("rb")
            line = f.readline()
            if line.startswith(b"$") and line != b"$-1\r\n":
                return line, f.read(int(line[1:]))
        return line, None


@unittest.skipUnless(os.path.exists(REDIS), "redis-server absent (scripts/test-deps.sh installs it)")
class RedisMetadata(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.port = free_port()
        self.srv = subprocess.Popen(
            [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--requirepass", PASSWORD, "--dir", self.dir, "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + TIMEOUT
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > end:
                    self.fail("redis-server did not start")
                time.sleep(0.05)

    def tearDown(self):
        self.srv.kill()
        self.srv.wait(timeout=TIMEOUT)
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_initialize(self):
        os.environ["MC_TCP_BIND_ADDRESS"] = "127.0.0.1"
        try:
            a, b = TransferEngine(), TransferEngine()
            server = ":%s@127.0.0.1:%d" % (PASSWORD, self.port)
            self.assertEqual(a.initialize_ext("py-a", server, "tcp", "", "redis"), 0)
            self.assertEqual(b.initialize("py-b", "redis://" + server + "/0", "tcp", ""), 0)
            line, body = resp(self.port, "GET", "mooncake/rpc_meta/py-a")
            self.assertIsNotNone(body, line)
            self.assertIn(b'"rpc_port"', body)
            line, body = resp(self.port, "GET", "mooncake/ram/py-b")
            self.assertIsNotNone(body, line)
            self.assertIn(b'"name":"py-b"', body)
            a.close()
            b.close()
            line, body = resp(self.port, "GET", "mooncake/ram/py-a")
            self.assertIsNone(body, "entries left after close")

            c = TransferEngine()
            self.assertEqual(c.initialize_ext("py-c", ":wrong@127.0.0.1:%d" % self.port, "tcp", "", "redis"), -1)
            self.assertEqual(c.initialize("py-c", "redis://127.0.0.1:%d" % free_port(), "tcp", ""), -1)
            self.assertEqual(c.initialize("py-c", "redis://127.0.0.1:1/x", "tcp", ""), -1)
        finally:
            del os.environ["MC_TCP_BIND_ADDRESS"]


if __name__ == "__main__":
    unittest.main()
