"""Shared helpers of the Python suite (tests/python/run.sh sets the paths)."""

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

try:
    import importlib

    importlib.import_module("torch")
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

import numpy as np  # noqa: E402

# Every wait in this suite is bounded.
TIMEOUT = 30


def pattern(n, seed):
    """n deterministic bytes for seed (numpy uint8)."""
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


class Peer:
    """A helper process (tests/python/peer_*.py) that answers one JSON line
    per command on stdin, with a deadline on every exchange."""

    def __init__(self, script, *args):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
        self.p = subprocess.Popen([sys.executable, os.path.join(HERE, script)] + list(args),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                  text=True, bufsize=1)
        self.info = self.read()

    def read(self, timeout=TIMEOUT):
        import select

        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise TimeoutError("peer did not answer in %ss" % timeout)
            r, _, _ = select.select([self.p.stdout], [], [], left)
            if r:
                line = self.p.stdout.readline()
                if not line:
                    raise RuntimeError("peer exited with %s" % self.p.poll())
                return json.loads(line)

    def ask(self, cmd, **kw):
        kw["cmd"] = cmd
        self.p.stdin.write(json.dumps(kw) + "\n")
        self.p.stdin.flush()
        return self.read()

    def close(self):
        if self.p.poll() is None:
            try:
                self.ask("quit")
            except Exception:
                pass
            try:
                self.p.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()
        for f in (self.p.stdin, self.p.stdout):
            try:
                f.close()
            except Exception:
                pass

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(TIMEOUT)
