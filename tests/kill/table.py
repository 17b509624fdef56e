#!/usr/bin/env python3
"""Renders the kill matrix's results (JSON lines from KVFERRY_KILL_RESULTS)
as the markdown table of docs/reports/reliability.md ("Kill matrix"): one row
per (victim, entry point)."""
import json
import sys


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    seen = {}
    for r in rows:  # the last run of a case wins
        seen[(r["victim"], r["entry"])] = r
    print("| killed (SIGKILL) | entry point | outcome | recovery |")
    print("|---|---|---|---|")
    for (victim, entry), r in sorted(seen.items()):
        rec = f"{r['recovery_ms'] / 1000:.1f} s" if r.get("recovery_ms") else "-"
        print(f"| {victim} | {entry} | {r['outcome']} | {rec} |")


if __name__ == "__main__":
    main()
