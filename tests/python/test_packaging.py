"""`pip install ./python` works offline, and the installed packages find
their library without any environment variable."""

import os
import subprocess
import sys
import tempfile
import unittest

from _util import REPO


class Packaging(unittest.TestCase):
    def test_pip_install_offline(self):
        lib = os.path.join(os.environ["KVFERRY_LIB_DIR"], "libkvferry.so.1")
        with tempfile.TemporaryDirectory() as tmp:
            target = os.path.join(tmp, "site")
            env = dict(os.environ, KVFERRY_LIB=lib, PIP_NO_INDEX="1",
                       PIP_DISABLE_PIP_VERSION_CHECK="1")
            r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target",
                                target, os.path.join(REPO, "python")],
                               env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertTrue(os.path.exists(os.path.join(target, "kvferry", "libkvferry.so.1")))
            env = {k: v for k, v in os.environ.items()
                   if k not in ("KVFERRY_LIB", "KVFERRY_LIB_DIR", "PYTHONPATH")}
            env["PYTHONPATH"] = target
            code = ("import kvferry, mooncake.engine, mooncake.store, mooncake.async_store;"
                    "e = mooncake.engine.TransferEngine();"
                    "assert e.initialize('127.0.0.1', 'P2PHANDSHAKE', 'tcp', '') == 0;"
                    "print(kvferry.library_path(), kvferry.api_version(), e.get_rpc_port() > 0)")
            r = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            path, version, ok = r.stdout.split()
            self.assertTrue(path.startswith(target), path)
            self.assertGreaterEqual(int(version), 2)
            self.assertEqual(ok, "True")


if __name__ == "__main__":
    unittest.main()
