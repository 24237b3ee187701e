#!/usr/bin/env python3
"""The table of bench/router.sh: its JSON lines (sbxbench records, labelled direct, ours, ref
and pf; router.sh's apicpu, rss and upstreams records) as rows of measure | ours | reference |
port-forward | floor | ratio | target | result, where ours is through our sandboxd-router,
reference through the reference router, port-forward through `kubectl port-forward` of the API
server (only with --cluster) and floor the same sandboxd reached directly. Each figure is the
median of its rounds; the API server's CPU is summed over them.

    bench/router_report.py [--sandboxes N] results.jsonl"""

import argparse
import json
import statistics
import sys


def load(path):
    by = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                by.setdefault((r.get("kind"), r.get("label")), []).append(r)
    return by


def med(by, kind, label, field):
    vals = [r[field] for r in by.get((kind, label), [])
            if isinstance(r.get(field), (int, float)) and not r.get("errors")
            and r.get("verified", True) is not False]
    return statistics.median(vals) if vals else None


def fmt(v, digits=0):
    if v is None:
        return "—"
    return f"{v:.{digits}f}"


def row(measure, ours, ref, pf, floor, ratio, target, ok, digits=0):
    result = "n/a" if ratio is None else ("info" if ok is None else ("PASS" if ok else "FAIL"))
    return [measure, fmt(ours, digits), fmt(ref, digits), fmt(pf, digits), fmt(floor, digits),
            "—" if ratio is None else f"{ratio:.2f}×", target, result]


def div(a, b):
    return a / b if a is not None and b else None


def check(r, pred):
    return None if r is None else pred(r)


LABELS = ("direct", "ours", "ref", "pf")


def api_cpu(by):
    """The API server's CPU seconds per MiB-sized unit moved by each path's transfers, less its
    background rate (CPU-s per second) over the direct runs, which touch no part of the cluster;
    and that background rate."""
    recs = {l: by.get(("apicpu", l), []) for l in LABELS}
    d = recs["direct"]
    bg = div(sum(x["cpu_s"] for x in d), sum(x["seconds"] for x in d)) if d else None
    out = {}
    for l, rs in recs.items():
        moved = sum(x["bytes"] for x in rs)
        if not rs or bg is None or not moved:
            out[l] = None
            continue
        above = sum(x["cpu_s"] - bg * x["seconds"] for x in rs)
        out[l] = max(above, 0.0) * 104857600 / moved
    return out, bg


def rows(by, n, mib):
    out = []
    p50 = {l: med(by, "exec", l, "p50_us") for l in LABELS}
    p99 = {l: med(by, "exec", l, "p99_us") for l in LABELS}
    r = div(p50["ours"], p50["direct"])
    out.append(row("Execute /bin/true, 1 client: p50 µs (floor: direct; the reference router "
                   "carries no gRPC)", p50["ours"], None, p50["pf"], p50["direct"], r, "≤ 1.25×",
                   check(r, lambda r: r <= 1.25)))
    r = div(p50["pf"], p50["ours"])
    out.append(row("Execute /bin/true, 1 client: p50, the port-forward's over ours", p50["ours"],
                   None, p50["pf"], p50["direct"], r, "≥ 1.6×", check(r, lambda r: r >= 1.6)))
    stall = None if None in (p99["ours"], p99["direct"]) else p99["ours"] - p99["direct"]
    out.append(row("Execute /bin/true, 1 client: p99 µs (target: at most 5 ms above direct's)",
                   p99["ours"], None, p99["pf"], p99["direct"], div(p99["ours"], p99["direct"]),
                   "≤ +5 ms", None if stall is None else stall <= 5000))
    s = {l: med(by, "stream", l, "mb_per_s") for l in LABELS}
    r = div(s["ours"], s["direct"])
    out.append(row(f"Start streaming {mib} MiB: MB/s vs direct", s["ours"], None, s["pf"],
                   s["direct"], r, "≥ 0.6×", check(r, lambda r: r >= 0.6)))
    for kind, what in (("rest_get", "Download (GET)"), ("rest_put", "Upload (PUT, fsync)")):
        v = {l: med(by, kind, l, "mb_per_s") for l in LABELS}
        r = div(v["ours"], v["direct"])
        out.append(row(f"{what} {mib} MiB: MB/s vs direct", v["ours"], v["ref"], v["pf"],
                       v["direct"], r, "≥ 0.7×", check(r, lambda r: r >= 0.7)))
        r = div(v["ours"], v["ref"])
        out.append(row(f"{what} {mib} MiB: MB/s vs the reference router", v["ours"], v["ref"],
                       v["pf"], v["direct"], r, "≥ 1.2×", check(r, lambda r: r >= 1.2)))
        r = div(v["ours"], v["pf"])
        goal = kind == "rest_get"  # the target is on downloads and stdin
        out.append(row(f"{what} {mib} MiB: MB/s vs the port-forward", v["ours"], v["ref"],
                       v["pf"], v["direct"], r, "≥ 3×" if goal else "—",
                       check(r, lambda r: r >= 3) if goal else None))
    v = {l: med(by, "stdin", l, "mb_per_s") for l in LABELS}
    r = div(v["ours"], v["pf"])
    out.append(row(f"stdin {mib} MiB into `wc -c` (WriteStdin, 1 MiB a call): MB/s vs the "
                   "port-forward", v["ours"], None, v["pf"], v["direct"], r, "≥ 3×",
                   check(r, lambda r: r >= 3)))
    r = div(v["ours"], v["direct"])
    out.append(row(f"stdin {mib} MiB: MB/s vs direct", v["ours"], None, v["pf"], v["direct"], r,
                   "—", None))
    cpu, bg = api_cpu(by)
    bgs = "no control plane" if bg is None else f"its background {bg:.3f} CPU-s/s, from the direct runs"
    # "No API server CPU": ours within the measurement's noise of its background (10 ms clock
    # ticks over transfers of a fraction of a second, kwok's Node heartbeats in bursts).
    out.append(row(f"API server CPU-s per 100 MiB moved (downloads, uploads, Start streams, stdin "
                   f"together) above its background ({bgs}); ratio ours / port-forward",
                   cpu["ours"], cpu["ref"], cpu["pf"], cpu["direct"], div(cpu["ours"], cpu["pf"]),
                   "≤ 0.05 (≈ 0)", check(cpu["ours"], lambda v: v <= 0.05), 3))
    v = {l: med(by, "rest_small", l, "req_per_s") for l in LABELS}
    r = div(v["ours"], v["ref"])
    out.append(row("GET /v1/files/small.txt (100 B): requests/s vs the reference router",
                   v["ours"], v["ref"], None, v["direct"], r, "≥ 1.5×",
                   check(r, lambda r: r >= 1.5)))
    fan = {}
    for l in ("direct", "ours"):
        recs = [x for x in by.get(("exec", f"fan-{l}"), []) if not x.get("errors")]
        fan[l] = (sum(x["calls_per_s"] for x in recs) if len(recs) == n else None,
                  statistics.median(x["p50_us"] for x in recs) if len(recs) == n else None)
    out.append(row(f"Execute, {n} clients on {n} sandboxes (one connection each): calls/s",
                   fan["ours"][0], None, None, fan["direct"][0],
                   div(fan["ours"][0], fan["direct"][0]), "—", None))
    out.append(row(f"Execute, {n} clients on {n} sandboxes: p50 µs", fan["ours"][1], None, None,
                   fan["direct"][1], div(fan["ours"][1], fan["direct"][1]), "—", None))
    up = (by.get(("upstreams", "ours")) or [{}])[-1].get("open")
    out.append(row(f"{n} clients on {n} sandboxes: the router's upstream connections "
                   "(sandbox_router_upstream_connections)", up, None, None, None,
                   None if up is None else up / n, f"≤ {n}", None if up is None else up <= n))
    rss = {l: (by.get(("rss", l)) or [{}])[-1] for l in ("ours", "ref")}
    mb = {l: None if rss[l].get("rss_kib") is None else rss[l]["rss_kib"] / 1024 for l in rss}
    known = {l: int(rss[l].get("known") or 0) for l in rss}
    # The targets are with 1,000 sandboxes known to both caches; fewer is shown as info.
    judged = min(known.values()) >= 1000
    if max(known.values()) == 0:
        what = f"router RSS MiB after the run ({n} sandboxes reached, no cache: the issue's " \
               "target is with 1,000 sandboxes known, --cluster)"
    else:
        what = (f"router RSS MiB after the run, caches on: {known['ours']:,} sandboxes known to "
                f"ours, {known['ref']:,} to the reference")
    out.append(row(f"{what}; vs 32 MiB", mb["ours"], mb["ref"], None, None,
                   div(mb["ours"], 32), "≤ 32 MiB",
                   check(mb["ours"], lambda v: v <= 32) if judged else None, 1))
    r = div(mb["ours"], mb["ref"])
    out.append(row(f"{what}; vs the reference router", mb["ours"], mb["ref"], None, None, r,
                   "≤ 0.5×", check(r, lambda r: r <= 0.5) if judged else None, 1))
    idle = {l: (by.get(("rss_idle", l)) or [{}])[-1].get("rss_kib") for l in ("ours", "ref")}
    idle = {l: None if v is None else v / 1024 for l, v in idle.items()}
    before = "caches filled" if max(known.values()) else "no cache"
    out.append(row(f"router RSS MiB before any traffic ({before}); vs the reference router",
                   idle["ours"], idle["ref"], None, None, div(idle["ours"], idle["ref"]), "—",
                   None, 1))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sandboxes", type=int, default=16)
    ap.add_argument("results")
    a = ap.parse_args()
    by = load(a.results)
    sizes = [r.get("want_bytes") for k, rs in by.items() if k[0] == "rest_get" for r in rs]
    mib = round((sizes[0] or 0) / 1048576) if sizes else 0
    head = ["measure", "ours", "reference", "port-forward", "floor", "ratio", "target", "result"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    table = rows(by, a.sandboxes, mib)
    for r in table:
        print("| " + " | ".join(r) + " |")
    met = sum(r[-1] == "PASS" for r in table)
    missed = sum(r[-1] == "FAIL" for r in table)
    print()
    print(f"{met} targets met, {missed} missed; ours: through our router, reference: through "
          "the reference router, port-forward: through `kubectl port-forward` of the API "
          "server (--cluster), floor: direct to sandboxd.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
