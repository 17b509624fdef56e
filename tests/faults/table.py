#!/usr/bin/env python3
"""Renders the fault suite's results (JSON lines from KVFERRY_FAULTS_RESULTS)
as the markdown table of docs/reports/reliability.md ("Network faults"): one
row per (fault, path)."""
import json
import sys

ORDER = ["tcp", "samehost", "rdma", "gpu"]


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    seen = {}
    for r in rows:  # the last run of a case wins
        seen[(r["fault"], r["path"])] = r
    faults = []
    for r in rows:
        if r["fault"] not in faults:
            faults.append(r["fault"])
    print("| fault | path | outcome | longest call | recovery |")
    print("|---|---|---|---|---|")
    for f in faults:
        for p in ORDER:
            r = seen.get((f, p))
            if r is None:
                continue
            print(f"| {f} | {p} | {r['outcome']} | {r['call_max_ms'] / 1000:.1f} s | {r['recovery_ms']:.0f} ms |")
    backends = sorted({r["backend"] for r in rows})
    print(f"\nImpairments made with: {', '.join(backends)}.")


if __name__ == "__main__":
    main()
