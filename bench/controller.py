"""The controller at scale, on the real control plane of test/controller (etcd, kube-apiserver,
kube-scheduler, kwok): a pool of N warm sandboxes, N claims against it, then M Suspended
Sandboxes listed. Prints one table; a benchmark, not a test: it never fails on a figure.

Figures:
  claim latency   client side: from sending the claim's POST to its Ready=True event on a watch
                  the driver holds (p50/p90/p99, nearest rank); controller side: the
                  sandboxd_controller_claim_ready_seconds histogram (bucket bounds)
  floor           one raw API write round trip (a merge patch of a ConfigMap on a kept-alive
                  connection), measured in the same run, and a claim's latency as a multiple of it
  writes          claim writes per claim (the controller's counter) and every API write of the
                  controller during the claims (refills included), per claim; 429s
  RSS, CPU        the controller's VmRSS and utime+stime from /proc
  10k             M Sandboxes with operatingMode Suspended (no Pod each: kwok and the scheduler stay
                  idle, so 2 cores cope), listed by a freshly started controller: RSS once its queue
                  is empty; with --baseline-bin, the same for another controller build
"""

import argparse
import concurrent.futures
import http.client
import json
import os
import shutil
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "test" / "controller"))

from conftest import Controller, missing_binaries, start_cluster, wait_until  # noqa: E402
from kube import ApiError  # noqa: E402
from test_pool import CLAIM, EXT, pool, template  # noqa: E402

CLAIM_HIST, WARM = "sandboxd_controller_claim_ready_seconds", 'start="warm"'
LAG_HIST, SANDBOXES = "sandboxd_controller_watch_lag_seconds", 'resource="sandboxes"'
CLAIMS_PATH = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{ns}/sandboxclaims"


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(q * len(xs) + 0.999999) - 1))] if xs else float("nan")


def proc_rss_cpu(pid):
    """(VmRSS in MiB, utime+stime in seconds) of pid."""
    rss = 0
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return rss, (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


class Conn:
    """One kept-alive HTTPS connection to the API server (the Kube helper opens one a call)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.ctx = ssl.create_default_context(cafile=str(cluster.ca))
        self.c = None

    def request(self, method, path, body=None, ctype="application/json"):
        for attempt in (0, 1):
            if self.c is None:
                self.c = http.client.HTTPSConnection("127.0.0.1", self.cluster.port,
                                                     context=self.ctx, timeout=30)
            try:
                hdr = {"Authorization": f"Bearer {self.cluster.tokens['admin']}",
                       "Accept": "application/json"}
                data = json.dumps(body).encode() if body is not None else None
                if data:
                    hdr["Content-Type"] = ctype
                self.c.request(method, path, body=data, headers=hdr)
                r = self.c.getresponse()
                raw = r.read()
                if r.status >= 300:
                    raise ApiError(r.status, raw[:200])
                return json.loads(raw) if raw else None
            except (OSError, http.client.HTTPException):
                self.c.close()
                self.c = None
                if attempt:
                    raise


class ClaimWatch(threading.Thread):
    """Watches the namespace's claims; records when each was first seen Ready=True."""

    def __init__(self, cluster, ns, rv):
        super().__init__(daemon=True)
        self.cluster, self.ns, self.rv = cluster, ns, rv
        self.ready = {}
        self.cond = threading.Condition()

    def run(self):
        try:
            self.watch()
        except (OSError, http.client.HTTPException, ValueError):
            pass  # the cluster stopped (the waits time out should it stop early)

    def watch(self):
        ctx = ssl.create_default_context(cafile=str(self.cluster.ca))
        while True:
            c = http.client.HTTPSConnection("127.0.0.1", self.cluster.port, context=ctx, timeout=600)
            c.request("GET", CLAIMS_PATH.format(ns=self.ns) +
                      f"?watch=1&allowWatchBookmarks=true&resourceVersion={self.rv}",
                      headers={"Authorization": f"Bearer {self.cluster.tokens['admin']}"})
            r = c.getresponse()
            for line in r:
                ev = json.loads(line)
                obj = ev.get("object", {})
                self.rv = obj.get("metadata", {}).get("resourceVersion", self.rv)
                if ev.get("type") not in ("ADDED", "MODIFIED"):
                    continue
                conds = obj.get("status", {}).get("conditions", [])
                if any(x["type"] == "Ready" and x["status"] == "True" for x in conds):
                    now = time.monotonic()
                    with self.cond:
                        self.ready.setdefault(obj["metadata"]["name"], now)
                        self.cond.notify_all()

    def wait(self, name, timeout):
        with self.cond:
            if not self.cond.wait_for(lambda: name in self.ready, timeout):
                raise TimeoutError(f"claim {name} not Ready in {timeout} s")
            return self.ready[name]


class Floor(threading.Thread):
    """Merge patches of one ConfigMap on a kept-alive connection, one after the other: n of
    them (after 20 warm-ups), or until stopped, 20 a second; their latencies."""

    def __init__(self, cluster, ns, name, n=None):
        super().__init__(daemon=True)
        self.conn = Conn(cluster)
        self.path = f"/api/v1/namespaces/{ns}/configmaps/{name}"
        self.conn.request("POST", f"/api/v1/namespaces/{ns}/configmaps",
                          {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
        self.n, self.lat, self.done = n, [], threading.Event()

    def run(self):
        i = 0
        while not self.done.is_set() and (self.n is None or len(self.lat) < self.n):
            t = time.monotonic()
            self.conn.request("PATCH", self.path, {"data": {"i": str(i)}},
                              "application/merge-patch+json")
            if i >= 20:
                self.lat.append(time.monotonic() - t)
                if self.n is None:
                    self.done.wait(0.05)
            i += 1

    def stop(self):
        self.done.set()
        self.join(60)
        return pct(self.lat, 0.5)


def hist_bound(m, name, labels, q, base):
    prefix = f"{name}_bucket{{{labels},le=\""
    b = sorted((float(k[len(prefix):-2]) if "Inf" not in k else float("inf"), v - base.get(k, 0))
               for k, v in m.items() if k.startswith(prefix))
    total = b[-1][1] if b else 0
    return next(le for le, n in b if n >= q * total) if total else float("nan")


def settle(ctrl, timeout):
    """Waits until the controller's queues are empty three samples in a row."""
    quiet = [0]

    def idle():
        quiet[0] = quiet[0] + 1 if ctrl.metrics()["sandboxd_controller_queue_depth"] == 0 else 0
        return quiet[0] >= 3
    wait_until(idle, timeout, interval=0.5, what="an idle controller")


def listed_rss(cluster, ns, binary, flags, label):
    """Starts `binary` on the namespace, waits for its informers and an empty queue, returns
    (RSS MiB, CPU s, seconds to ready)."""
    os.environ["SANDBOXD_CONTROLLER_BIN"] = binary
    t = time.monotonic()
    ctrl = Controller(cluster, ns, *flags, name=label)
    try:
        wait_until(lambda: ctrl.http("/readyz")[0] == 200, 300, interval=0.2,
                   what=f"{label} ready")
        ready_s = time.monotonic() - t
        settle(ctrl, 600)
        rss, cpu = proc_rss_cpu(ctrl.p.pid)
        return rss, cpu, ready_s
    finally:
        ctrl.stop()


def create_suspended(cluster, ns, m, threads=8):
    local = threading.local()

    def make(i):
        if not hasattr(local, "c"):
            local.c = Conn(cluster)
        local.c.request("POST", f"/apis/agents.x-k8s.io/v1beta1/namespaces/{ns}/sandboxes", {
            "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
            "metadata": {"name": f"idle-{i:05d}", "labels": {"bench": "10k"}},
            "spec": {"operatingMode": "Suspended", "podTemplate": {"spec": {"containers": [
                {"name": "main", "image": "python:3.12", "command": ["sleep", "inf"]}]}}}})
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        list(ex.map(make, range(m)))


def claims_phase(args, cluster, ctrl):
    """The pool fills; the claims; their rows."""
    k, ns = cluster.admin, "bench"
    # The pool.
    template(k, ns)
    t = time.monotonic()
    pool(k, ns, "bench", args.pool)
    wait_until(lambda: k.get(EXT, "SandboxWarmPool", ns, "bench").get("status", {})
               .get("readyReplicas") == args.pool, 900, interval=1, what=f"{args.pool} ready")
    fill_s = time.monotonic() - t
    settle(ctrl, 300)
    rss_pool, _ = proc_rss_cpu(ctrl.p.pid)

    idle_floor = Floor(cluster, ns, "floor-idle", 200)
    idle_floor.run()
    floor = pct(idle_floor.lat, 0.5)
    busy_floor = Floor(cluster, ns, "floor-busy")
    busy_floor.start()

    # The claims: `concurrency` clients, each waiting for its claim's Ready before the next.
    claims_rv = k.request("GET", CLAIMS_PATH.format(ns=ns))["metadata"]["resourceVersion"]
    watch = ClaimWatch(cluster, ns, claims_rv)
    watch.start()
    before = ctrl.metrics()
    _, cpu0 = proc_rss_cpu(ctrl.p.pid)
    lat = []
    local = threading.local()

    def one(i):
        if not hasattr(local, "c"):
            local.c = Conn(cluster)
        name = f"c{i:04d}"
        t0 = time.monotonic()
        local.c.request("POST", CLAIMS_PATH.format(ns=ns), {
            "apiVersion": EXT, "kind": "SandboxClaim", "metadata": {"name": name},
            "spec": {"warmPoolRef": {"name": "bench"}}})
        lat.append(watch.wait(name, 300) - t0)
    t = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.concurrency) as ex:
        list(ex.map(one, range(args.claims)))
    claims_s = time.monotonic() - t
    busy = busy_floor.stop()
    after = ctrl.metrics()
    rss_claims, cpu1 = proc_rss_cpu(ctrl.p.pid)

    def d(name):
        return after.get(name, 0) - before.get(name, 0)
    warm = d('sandboxd_controller_claims_total{start="warm"}')
    cold = d('sandboxd_controller_claims_total{start="cold"}')
    p50 = pct(lat, 0.5)
    return [
        ("pool fill", f"{args.pool} ready in {fill_s:.1f} s ({args.pool / fill_s:.0f}/s)"),
        ("claims", f"{args.claims} with {args.concurrency} clients in {claims_s:.1f} s "
                   f"({args.claims / claims_s:.0f}/s): {warm:.0f} warm, {cold:.0f} cold"),
        ("floor: one API write p50, idle / during the claims",
         f"{floor * 1e3:.1f} / {busy * 1e3:.1f} ms (a merge patch on a kept-alive connection; "
         f"{len(busy_floor.lat)} during the claims)"),
        ("claim latency (client) p50/p90/p99",
         f"{p50 * 1e3:.1f} / {pct(lat, 0.9) * 1e3:.1f} / {pct(lat, 0.99) * 1e3:.1f} ms"),
        ("  p50 as writes of the floor, idle / during",
         f"{p50 / floor:.1f} / {p50 / busy:.1f}"),
        ("claim latency (controller) p50/p90/p99 <=",
         " / ".join(f"{hist_bound(after, CLAIM_HIST, WARM, q, before) * 1e3:g}"
                    for q in (0.5, 0.9, 0.99)) + " ms (bucket bounds, warm)"),
        ("claim writes per claim", f"{d('sandboxd_controller_claim_writes_total') / args.claims:.2f}"),
        ("API writes per claim (refills included)",
         f"{d('sandboxd_controller_api_writes_total') / args.claims:.2f}"),
        ("429s", f"{after['sandboxd_controller_api_throttled_total']:.0f}"),
        ("watch lag p50/p99 <= (sandboxes)",
         " / ".join(f"{hist_bound(after, LAG_HIST, SANDBOXES, q, before) * 1e3:g}"
                    for q in (0.5, 0.99)) + " ms"),
        ("controller CPU during claims",
         f"{cpu1 - cpu0:.2f} s ({(cpu1 - cpu0) / args.claims * 1e3:.2f} ms a claim)"),
        ("controller RSS", f"{rss_pool:.1f} MiB with the pool, {rss_claims:.1f} MiB after the claims"),
    ]


def run(args, cluster):
    k = cluster.admin
    ns = "bench"
    k.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    k.create({"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": "default", "namespace": ns}})
    rows = []
    flags = [f"--kube-api-qps={args.qps}", f"--kube-api-burst={args.burst}",
             f"--api-connections={args.connections}", f"--log-level={args.log_level}",
             f"--sandbox-warm-pool-max-refill-rate={args.refill_rate}", *args.flag]
    os.environ["SANDBOXD_CONTROLLER_BIN"] = args.bin
    ctrl = Controller(cluster, ns, *flags)
    wait_until(lambda: ctrl.http("/readyz")[0] == 200, 60, interval=0.2, what="controller ready")

    if args.pool:
        rows += claims_phase(args, cluster, ctrl)
    settle(ctrl, 600)
    ctrl.stop()

    # M Suspended Sandboxes, listed by a fresh controller.
    t = time.monotonic()
    create_suspended(cluster, ns, args.idle)
    create_s = time.monotonic() - t
    sandboxes = args.idle + (2 * args.pool if args.pool else 0)
    # A first controller writes their status (Suspended); the measured ones find them settled.
    rss_w, cpu_w, _ = listed_rss(cluster, ns, args.bin, flags, "controller-statuses")
    rss, cpu, ready_s = listed_rss(cluster, ns, args.bin, flags, "controller-10k")
    rows.append((f"{args.idle} Suspended Sandboxes",
                 f"created in {create_s:.0f} s; their statuses written with {cpu_w:.1f} s of "
                 f"controller CPU (RSS then {rss_w:.1f} MiB)"))
    rows.append((f"RSS with {sandboxes} Sandboxes listed",
                 f"{rss:.1f} MiB (ours; listed and synced in {ready_s:.1f} s, {cpu:.1f} s CPU "
                 f"until idle)"))
    if args.baseline_bin:
        base_flags = [f for f in flags if not f.startswith("--api-connections")]
        rss_b, cpu_b, ready_b = listed_rss(cluster, ns, args.baseline_bin, base_flags,
                                           "baseline-10k")
        rows.append((f"RSS with {sandboxes} Sandboxes listed (baseline)",
                     f"{rss_b:.1f} MiB ({args.baseline_label}; synced in {ready_b:.1f} s, "
                     f"{cpu_b:.1f} s CPU)"))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="sandboxd-controller to measure")
    ap.add_argument("--baseline-bin", help="another build, for the RSS of the listed case")
    ap.add_argument("--baseline-label", default="baseline")
    ap.add_argument("--pool", type=int, default=500)
    ap.add_argument("--claims", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--idle", type=int, default=10000, help="Suspended Sandboxes for the RSS case")
    ap.add_argument("--qps", type=float, default=500)
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--refill-rate", type=float, default=100)
    ap.add_argument("--log-level", default="info", help="the controller's")
    ap.add_argument("--flag", action="append", default=[],
                    help="another flag for the controller, e.g. --flag=--api-connections=16")
    ap.add_argument("--keep", action="store_true", help="keep the cluster's directory")
    args = ap.parse_args()
    missing = missing_binaries()
    if missing:
        sys.exit(f"missing {', '.join(missing)}: run scripts/k8s-tools.sh")
    d = tempfile.mkdtemp(prefix="sbx-bench-ctrl-")
    cluster = start_cluster(d)
    try:
        rows = run(args, cluster)
    finally:
        cluster.stop()
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)
        else:
            print(f"logs in {d}")
    w = max(len(r[0]) for r in rows)
    print(f"\n{'figure':<{w}}  value\n{'-' * w}  -----")
    for name, value in rows:
        print(f"{name:<{w}}  {value}")


if __name__ == "__main__":
    main()
