#!/usr/bin/env python3
"""Writes build/hw-report.md from scripts/hw-check.sh's results: one row per
part (passed, failed, skipped and why), then for each part that ran what its
log says: the Go tests' and unittest's passes, failures and skips with their
reasons, the benchmark tables, and the tail of a failed part's log.

usage: hw-report.py RESULTS REPORT MODE HWDIR GPU-LINE RDMA-LINE BUDGET ELAPSED"""

import json
import os
import platform
import re
import sys
import time

GO_RESULT = re.compile(r"^(\s*)--- (PASS|FAIL|SKIP): (\S+) \(([\d.]+)s\)")
GO_LOG = re.compile(r"^\s+\S+\.go:\d+: (.*)")
PY_RESULT = re.compile(r"^(\w+) \(([\w.]+)\) \.\.\. (ok|FAIL|ERROR|skipped '(.*)')$")


def go_summary(lines):
    """Counts and skip reasons from a go test -v log (subtests included)."""
    out = {"pass": 0, "fail": [], "skip": []}
    last_msg = {}
    current = None
    for line in lines:
        if line.startswith("=== RUN") or line.startswith("=== CONT"):
            current = line.split()[-1]
            continue
        m = GO_LOG.match(line)
        if m and current:
            last_msg[current] = m.group(1)
            continue
        m = GO_RESULT.match(line)
        if not m:
            continue
        status, name = m.group(2), m.group(3)
        if status == "PASS":
            out["pass"] += 1
        elif status == "FAIL":
            out["fail"].append(name)
        else:
            out["skip"].append((name, last_msg.get(name, "")))
    return out


def py_summary(lines):
    out = {"pass": 0, "fail": [], "skip": []}
    for line in lines:
        m = PY_RESULT.match(line.strip())
        if not m:
            continue
        where = m.group(2).split(".")  # module.Class.test (3.11+) or module.Class
        name = "%s.%s" % (where[-2] if where[-1] == m.group(1) else where[-1], m.group(1))
        if m.group(3) == "ok":
            out["pass"] += 1
        elif m.group(3) in ("FAIL", "ERROR"):
            out["fail"].append(name)
        else:
            out["skip"].append((name, m.group(4)))
    return out


def tables(lines):
    """The markdown tables of a bench log and the notes under them."""
    return [l for l in lines if l.startswith(("|", "ratio:", "machine:", "FAKE PROVIDER", "GPUDirect"))]


def main():
    results, report, mode, hwdir, gpu, rdma, budget, elapsed = sys.argv[1:9]
    rows = [json.loads(l) for l in open(results)] if os.path.exists(results) else []
    commit = open(os.path.join(hwdir, "commit")).read().strip() if os.path.exists(os.path.join(hwdir, "commit")) else "?"
    built = open(os.path.join(hwdir, "built")).read().strip() if os.path.exists(os.path.join(hwdir, "built")) else "?"
    n = {s: sum(1 for r in rows if r["status"] == s) for s in ("pass", "fail", "skip")}
    w = []
    w.append("# kvferry hardware check")
    w.append("")
    if mode == "rehearse":
        w.append("**REHEARSAL**: the fake CUDA driver and the fake verbs provider posed as the hardware "
                 "(scripts/hw-check.sh rehearse). This checks the script and the tests' hardware paths; "
                 "it says nothing of real GPUs or NICs, and its figures mean nothing.")
        w.append("")
    w.append("- host: %s, %d CPUs, %s %s" % (platform.node(), os.cpu_count() or 0, platform.system(), platform.release()))
    w.append("- %s" % gpu)
    w.append("- %s" % rdma)
    w.append("- tree: commit %s, test binaries built %s; run %s" % (commit, built, time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())))
    w.append("- %d parts passed, %d failed, %d skipped; %s s of the %s s budget" % (n["pass"], n["fail"], n["skip"], elapsed, budget))
    w.append("")
    w.append("| part | result | seconds | what | why / detail |")
    w.append("|---|---|---|---|---|")
    for r in rows:
        result = {"pass": "passed", "fail": "**FAILED**", "skip": "skipped"}[r["status"]]
        w.append("| %s | %s | %s | %s | %s |" % (r["section"], result, r["seconds"] if r["status"] != "skip" else "-",
                                                 r["what"].replace("|", "\\|"), r["detail"].replace("|", "\\|")))
    w.append("")
    for r in rows:
        if r["status"] == "skip" or not r["log"] or not os.path.exists(r["log"]):
            continue
        lines = open(r["log"], errors="replace").read().splitlines()
        w.append("## %s" % r["section"])
        w.append("")
        if r["section"].startswith("go-"):
            s = go_summary(lines)
        elif r["section"].startswith("python-"):
            s = py_summary(lines)
        else:
            s = None
        if s is not None:
            w.append("%d passed, %d failed, %d skipped (tests and subtests)." % (s["pass"], len(s["fail"]), len(s["skip"])))
            w.append("")
            for name in s["fail"]:
                w.append("- FAILED %s" % name)
            for name, why in s["skip"]:
                w.append("- skipped %s: %s" % (name, why or "(no reason printed)"))
            if s["fail"] or s["skip"]:
                w.append("")
        if s is None and not r["section"].startswith("bench-"):
            # A shell suite: its steps and their verdicts.
            steps = [l for l in lines if l.startswith("--- ") or re.search(r"(failures|passed|PASS)\b", l)]
            w.extend("    " + l for l in steps[:60])
            w.append("")
        if r["section"].startswith("bench-"):
            t = tables(lines)
            w.extend(t if t else ["(no table in the log)"])
            w.append("")
        if r["status"] == "fail":
            w.append("Last lines of %s:" % os.path.relpath(r["log"]))
            w.append("")
            w.append("```")
            w.extend(lines[-40:])
            w.append("```")
            w.append("")
    os.makedirs(os.path.dirname(report) or ".", exist_ok=True)
    with open(report, "w") as f:
        f.write("\n".join(w).rstrip() + "\n")


if __name__ == "__main__":
    main()
