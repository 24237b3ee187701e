"""The cluster half of bench/router.sh --cluster: the real control plane of test/controller
(etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok) holding --known Sandboxes,
each with its Pod (owned by it, labelled with the sandbox-name hash both routers' caches select
on, Running with an IP from kwok), and a `kubectl port-forward` of the first sandbox's Pod,
whose ports kwok forwards (a PortForward object) to the real sandboxd that router.sh runs on
loopback: every byte through it crosses the API server and kwok's kubelet server.

Once all of it is up, it writes --env-file (shell assignments: the API server's pid, the
routers' kubeconfig, the namespace, the port-forward's local ports) and then holds everything up
until SIGTERM or SIGINT, restarting `kubectl port-forward` should it exit (it ends on some
stream errors); then it stops what it started and removes its directory.

    router_cluster.py --grpc-port G --rest-port R --env-file F [--known N] [--dir D]"""

import argparse
import concurrent.futures
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "test" / "controller"))

from conftest import (REPO, TOOLS, NODES, Proc, free_port, missing_binaries,  # noqa: E402
                      start_cluster, wait_until)

NS = "rbench"
SB = ("agents.x-k8s.io/v1beta1", "Sandbox")
HASH = "agents.x-k8s.io/sandbox-name-hash"  # what both routers' Pod informers select on
POD_IP = "sandboxd.test/pod-ip"  # kwok-stages.yaml: the Pod gets this IP
CREATE_THREADS = 8


def log(msg):
    print(f"router_cluster: {msg}", file=sys.stderr, flush=True)


def apply_router_rbac(c):
    """router/config's ClusterRole and binding: the routers run as its service account."""
    for f in ("role.yaml", "binding.yaml"):
        for obj in yaml.safe_load_all((REPO / "router" / "config" / "rbac" / f).read_text()):
            if obj:
                c.admin.apply(obj)


def make_sandbox(k, i, grpc, rest):
    """Sandbox sb-i (inert: no controller watches the namespace) and its Pod, bound to a kwok
    Node at once (no scheduler round). sb-0's Pod is at 127.0.0.1 and names sandboxd's real
    ports; the others get kwok's addresses, which nothing answers (they are only known)."""
    name = f"sb-{i}"
    sb = k.create({"apiVersion": SB[0], "kind": SB[1],
                   "metadata": {"name": name, "namespace": NS},
                   "spec": {"podTemplate": {"spec": {"containers": [
                       {"name": "main", "image": "debian:12"}]}}}})
    labels = {HASH: f"{i:08x}"}
    ports = []
    if i == 0:
        labels[POD_IP] = "127.0.0.1"
        ports = [{"name": "sandboxd-grpc", "containerPort": grpc},
                 {"name": "sandboxd-http", "containerPort": rest}]
    k.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": NS, "labels": labels,
        "ownerReferences": [{"apiVersion": SB[0], "kind": SB[1], "name": name,
                             "uid": sb["metadata"]["uid"], "controller": True}]},
        "spec": {"nodeName": NODES[i % len(NODES)],
                 "containers": [{"name": "main", "image": "debian:12", "ports": ports}]}})


def with_ip(k):
    pods = k.list("v1", "Pod", NS, selector=HASH)
    return sum(1 for p in pods if (p.get("status") or {}).get("podIP"))


def populate(c, n, grpc, rest):
    k = c.admin
    k.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    k.create({"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": "default", "namespace": NS}})
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(CREATE_THREADS) as ex:
        for f in [ex.submit(make_sandbox, k, i, grpc, rest) for i in range(n)]:
            f.result()
    log(f"{n} Sandboxes and Pods created in {time.monotonic() - t0:.1f} s")
    wait_until(lambda: with_ip(k) >= n, 600, interval=1, what=f"{n} Pods with an IP")
    log(f"{n} Pods Running with an IP after {time.monotonic() - t0:.1f} s")


class PortForward:
    """`kubectl port-forward` of sb-0's Pod to two local ports, as a user outside the cluster
    runs it (admin's kubeconfig: pods/portforward)."""

    def __init__(self, c, d, grpc, rest):
        self.c, self.d, self.grpc, self.rest = c, d, grpc, rest
        self.lg, self.lr = free_port(), free_port()
        self.proc = None

    def start(self):
        self.proc = Proc("kubectl-port-forward", [
            str(TOOLS / "kubectl"), f"--kubeconfig={self.c.kubeconfigs['admin']}", "-n", NS,
            "port-forward", "--address=127.0.0.1", "pod/sb-0",
            f"{self.lg}:{self.grpc}", f"{self.lr}:{self.rest}"], self.d)

    def answers(self):
        if not self.proc.alive():
            self.start()
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.lr}/v1/health", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def up(self):
        """Until sandboxd's health answers through the forward (kwok forwards nothing before
        its informer has seen the PortForward: kubectl may exit meanwhile, and is restarted)."""
        self.start()
        wait_until(self.answers, 60, interval=0.3, what="sandboxd through kubectl port-forward")

    def stop(self):
        if self.proc:
            self.proc.stop()


def forward(c, grpc, rest):
    """kwok's PortForward: sb-0's Pod ports (sandboxd's own numbers) to sandboxd on loopback."""
    c.admin.create({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "PortForward",
                    "metadata": {"name": "sb-0", "namespace": NS},
                    "spec": {"forwards": [
                        {"ports": [grpc], "target": {"address": "127.0.0.1", "port": grpc}},
                        {"ports": [rest], "target": {"address": "127.0.0.1", "port": rest}}]}})


def write_env(path, c, pf, n):
    env = {"CL_APISERVER_PID": c.procs["kube-apiserver"].p.pid,
           "CL_KUBECONFIG": c.kubeconfigs["router"], "CL_NS": NS, "CL_KNOWN": n,
           "CL_PF_GRPC": pf.lg, "CL_PF_REST": pf.lr, "CL_DIR": c.dir}
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        for k, v in env.items():
            f.write(f"{k}={shlex.quote(str(v))}\n")
    os.rename(tmp, path)


def stop_on_signal(signum, frame):
    raise SystemExit(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grpc-port", type=int, required=True, help="sandboxd's gRPC port (sb-0)")
    ap.add_argument("--rest-port", type=int, required=True, help="sandboxd's REST port (sb-0)")
    ap.add_argument("--env-file", required=True)
    ap.add_argument("--known", type=int, default=1000, help="Sandboxes (and Pods) made")
    ap.add_argument("--dir", help="the control plane's directory (default: a new one in /tmp)")
    a = ap.parse_args()
    if a.known < 1 or a.known > 20000:
        ap.error("--known must be in [1, 20000]")
    missing = missing_binaries() + [b for b in ("kubectl",) if not os.access(TOOLS / b, os.X_OK)]
    if missing:
        sys.exit(f"router_cluster: {', '.join(missing)} not found in {TOOLS}")
    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGINT, stop_on_signal)
    d = a.dir or tempfile.mkdtemp(prefix="sbx-rbench-")
    c = pf = None
    try:
        t0 = time.monotonic()
        c = start_cluster(d)
        log(f"control plane up in {time.monotonic() - t0:.1f} s (in {d})")
        apply_router_rbac(c)
        populate(c, a.known, a.grpc_port, a.rest_port)
        forward(c, a.grpc_port, a.rest_port)
        pf = PortForward(c, d, a.grpc_port, a.rest_port)
        pf.up()
        write_env(a.env_file, c, pf, a.known)
        log(f"ready: port-forward on 127.0.0.1:{pf.lg} (gRPC) and :{pf.lr} (REST)")
        while True:
            time.sleep(0.5)
            if not pf.proc.alive():
                log("kubectl port-forward exited; restarting it on the same ports")
                pf.start()
    finally:
        if pf:
            pf.stop()
        if c:
            c.stop()
        if not a.dir:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
