"""Run the PD-disaggregation demo: one prefill and one decode process on
this host, with the prefill's embedded master and P2P handshake (no server
to start). Extra arguments (--layers, --blocks, ...) go to both sides.
Exits non-zero when either side fails or the KV does not verify."""

import json
import os
import select
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    extra = sys.argv[1:]
    timeout = 300
    py = sys.executable
    prefill = subprocess.Popen([py, os.path.join(HERE, "prefill.py")] + extra,
                               stdout=subprocess.PIPE, text=True)
    decode = None
    try:
        r, _, _ = select.select([prefill.stdout], [], [], 60)
        line = prefill.stdout.readline() if r else ""
        if not line:
            print("prefill did not start", file=sys.stderr)
            return 1
        info = json.loads(line)
        if "master" not in info:
            print("prefill failed: %s" % info, file=sys.stderr)
            return 1
        decode = subprocess.Popen([py, os.path.join(HERE, "decode.py"), "--master",
                                   info["master"]] + extra, stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout
        out, _ = decode.communicate(timeout=timeout)
        rc_p = prefill.wait(max(1, deadline - time.monotonic()))
        if decode.returncode != 0 or rc_p != 0:
            print("demo failed: decode exit %s, prefill exit %s" % (decode.returncode, rc_p),
                  file=sys.stderr)
            return 1
        result = json.loads(out.strip().splitlines()[-1])
        if not result.get("verified"):
            return 1
        return 0
    except subprocess.TimeoutExpired:
        print("demo timed out", file=sys.stderr)
        return 1
    finally:
        for proc in (decode, prefill):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    raise SystemExit(main())
