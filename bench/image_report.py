"""Prints the tables of bench/image.sh from its results.jsonl (sbxbench records plus sizes).

Latencies are pooled over the rounds (nearest-rank percentiles of all samples); calls/s is the
sum of completed calls over the sum of the windows; ready and RSS are medians of cold starts.
"""

import json
import math
import statistics
import sys
from collections import defaultdict


def pct(samples, p):
    if not samples:
        return float("nan")
    s = sorted(samples)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def main(path):
    recs = [json.loads(line) for line in open(path) if line.strip()]
    sizes = {r["label"]: r for r in recs if r["kind"] == "size"}
    mib = 1 << 20
    print("## Size (stripped)")
    print()
    print("| binary | file | with what it needs at run time |")
    print("|---|---:|---:|")
    s, d, ref = sizes["static"], sizes["dynamic"], sizes["ref"]
    print(f"| sandboxd-static | {s['bytes'] / mib:.2f} MiB | {s['bytes'] / mib:.2f} MiB (nothing else) |")
    total = (d["bytes"] + d["libs_bytes"]) / mib
    print(f"| sandboxd (dynamic) | {d['bytes'] / mib:.2f} MiB | {total:.2f} MiB ({d['libs']} shared libraries) |")
    print(f"| reference (Go, static) | {ref['bytes'] / mib:.2f} MiB | {ref['bytes'] / mib:.2f} MiB (unstripped as built: {ref['unstripped'] / mib:.2f} MiB) |")
    print()

    ready = defaultdict(list)
    for r in recs:
        if r["kind"] == "ready":
            ready[r["label"]].append(r)
    print("## Idle RSS and start-to-ready (median of cold starts)")
    print()
    print("| daemon | idle VmRSS | anonymous | threads | start to first answer |")
    print("|---|---:|---:|---:|---:|")
    for label in ("static", "dynamic", "ref"):
        rs = ready.get(label, [])
        if not rs:
            continue
        med = lambda k: statistics.median(x[k] for x in rs)  # noqa: E731
        print(f"| {label} | {med('rss_kb') / 1024:.1f} MiB | {med('rss_anon_kb') / 1024:.1f} MiB"
              f" | {med('threads'):.0f} | {med('ready_ms'):.1f} ms |")
    print()

    groups = defaultdict(lambda: {"samples": [], "completed": 0, "window": 0.0, "errors": 0})
    for r in recs:
        if r["kind"] == "exec":
            key = (f"Execute {r['prog']}, {r['clients']} client(s)", r["label"])
        elif r["kind"] == "rtt":
            key = ("gRPC round trip (health Check)", r["label"])
        else:
            continue
        g = groups[key]
        g["samples"] += r["samples_us"]
        g["completed"] += r["completed"]
        g["window"] += r["window_s"]
        g["errors"] += r["errors"]
    print("## Native against gVisor (sandboxd-static, same tree)")
    print()
    print("| measurement | native p50 / p99 | gVisor p50 / p99 | native calls/s | gVisor calls/s | gVisor tax (p50, calls/s) |")
    print("|---|---:|---:|---:|---:|---:|")
    whats = sorted({k[0] for k in groups}, key=lambda w: (not w.startswith("gRPC"), w))
    for what in whats:
        n, g = groups.get((what, "native")), groups.get((what, "gvisor"))
        if not n or not g:
            continue
        row = [what]
        for x in (n, g):
            row.append(f"{pct(x['samples'], 50):.0f} / {pct(x['samples'], 99):.0f} µs")
        cps = [x["completed"] / x["window"] for x in (n, g)]
        row += [f"{cps[0]:.0f}", f"{cps[1]:.0f}"]
        tax = pct(g["samples"], 50) / pct(n["samples"], 50)
        row.append(f"{tax:.1f}x slower, {cps[1] / cps[0]:.2f}x the calls")
        errs = n["errors"] + g["errors"]
        if errs:
            row[0] += f" ({errs} errors)"
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
