"""sandboxd-router's cache against the real control plane: it watches sandboxes' Pods and
Sandboxes as its own service account, bound by router/config's RBAC alone, and resolves requests
as the reference router does: by Sandbox UID, then by namespace/name (an unclaimed warm-pool Pod
by UID only), sandboxd's ports found by their names on the Pod. It evicts an entry whose address
proved dead (not one that refused), wakes a Suspended sandbox for a request, and is not ready
before its first list.

kwok's pods are not real: each pod of these tests is labelled sandboxd.test/pod-ip=<address>
(kwok-stages.yaml gives it that IP), a loopback address on which the test runs a real sandboxd
at the ports the Pod names. Which sandboxd answered is told by the MARK variable each one passes
to what it runs.

Needs SANDBOXD_ROUTER_BIN (the router), SANDBOXD_BIN (the daemon) and grpcurl."""

import base64
import concurrent.futures
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from conftest import REPO, TOOLS, Proc, free_port, wait_until
from test_sandbox import SB, condition

HASH = "agents.x-k8s.io/sandbox-name-hash"
POOL = "agents.x-k8s.io/warm-pool-sandbox"
POD_IP = "sandboxd.test/pod-ip"
CALL = 60  # seconds a grpcurl call may take (a dead host's dial takes gRPC's 20 s)
_net = f"127.{random.randint(100, 250)}.{random.randint(0, 250)}"
_hosts = iter(range(2, 250))


def binary(var):
    b = os.environ.get(var)
    if not b or not os.access(b, os.X_OK):
        pytest.skip(f"{var} is not set to the built binary")
    return b


def grpcurl():
    g = TOOLS / "grpcurl"
    if not os.access(g, os.X_OK):
        pytest.skip(f"no grpcurl in {TOOLS}")
    return str(g)


def proto():
    """grpcurl's flags for process.v1 from its .proto: one call per grpcurl, no reflection."""
    return ["-import-path", str(REPO / "proto"), "-proto", "process/v1/process.proto"]


def new_ip():
    return f"{_net}.{next(_hosts)}"


@pytest.fixture(scope="module")
def router_rbac(cluster):
    """router/config's ClusterRole, ServiceAccount and binding (the router's token is that
    service account's)."""
    for f in ("role.yaml", "binding.yaml"):
        for obj in yaml.safe_load_all((REPO / "router" / "config" / "rbac" / f).read_text()):
            if obj:
                cluster.admin.apply(obj)


class Daemon(Proc):
    """A real sandboxd on one loopback address; what it runs sees MARK=mark."""

    def __init__(self, cluster, mark, ip=None):
        self.ip, self.mark = ip or new_ip(), mark
        self.grpc, self.http = free_port(), free_port()
        root = Path(cluster.dir) / f"root-{self.ip}"
        root.mkdir(exist_ok=True)
        (root / "mark").write_text(mark)  # what GET /v1/files/mark answers
        super().__init__(f"sandboxd-{self.ip}", [
            binary("SANDBOXD_BIN"), "--listen-host", self.ip, "--grpc-port", str(self.grpc),
            "--rest-port", str(self.http), "--root-dir", str(root), "--shutdown-timeout", "5s"],
            cluster.dir, env=dict(os.environ, MARK=mark))

        def ready():
            if not self.alive():
                pytest.fail(f"sandboxd exited:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"http://{self.ip}:{self.http}/readyz",
                                            timeout=5) as r:
                    return r.status == 200
            except http.client.HTTPException:
                return False  # not ours yet: another process's listener on that port
        wait_until(ready, 20, what=f"sandboxd on {self.ip} ready")


class Router(Proc):
    """sandboxd-router with its cache on, as the router service account (or `token`)."""

    def __init__(self, cluster, ns, *extra, token="router"):
        self.probe, self.metrics_port = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        super().__init__(f"router-{ns}-{free_port()}", [
            binary("SANDBOXD_ROUTER_BIN"), "--http-bind-address", "127.0.0.1:0",
            "--health-probe-bind-address", f"127.0.0.1:{self.probe}",
            "--metrics-bind-address", f"127.0.0.1:{self.metrics_port}", "--cache-enabled",
            f"--cache-namespace={ns}", f"--kubeconfig={cluster.kubeconfigs[token]}",
            "--log-level", "debug", *extra], cluster.dir, env=env)
        m = wait_until(lambda: self.alive() and re.search(
            r"router: listening on \S+ port (\d+)", self.log.read_text(errors="replace")),
            20, what="the router's listening line")
        self.port = int(m.group(1))

    def get(self, port, path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def ready(self):
        return self.get(self.probe, "/readyz")[0] == 200

    def metric(self, name):
        status, body = self.get(self.metrics_port, "/metrics")
        assert status == 200
        for line in body.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"no {name} in /metrics")

    def call(self, **keys):
        """Execute of `echo $MARK` through the router, routed by keys (x-sandbox-<key>)."""
        h = [a for k, v in keys.items() for a in ("-H", f"x-sandbox-{k}: {v}")]
        return subprocess.run([grpcurl(), "-plaintext", "-max-time", str(CALL), *proto(), *h, "-d",
                               '{"config":{"command":["sh","-c","echo $MARK"]}}',
                               f"127.0.0.1:{self.port}", "process.v1.ProcessService/Execute"],
                              capture_output=True, text=True, timeout=CALL + 30)

    def mark(self, **keys):
        """The MARK of the sandboxd that answered, or the failure's text."""
        out = self.call(**keys)
        if out.returncode != 0:
            return out.stderr.strip()
        return base64.b64decode(json.loads(out.stdout)["stdout"]).decode().strip()

    def fetch(self, **keys):
        """GET /v1/files/mark through the router's HTTP/1.1 side, routed by keys
        (X-Sandbox-<Key>): (status, headers, body)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=CALL)
        try:
            conn.request("GET", "/v1/files/mark",
                         headers={f"X-Sandbox-{k.upper() if k in ('id', 'uid') else k.title()}":
                                  v for k, v in keys.items()})
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read().decode()
        finally:
            conn.close()

    def stop_and_check(self):
        rc = self.stop(40)
        assert rc == 0, f"router exited {rc}:\n{self.tail(80)}"


@pytest.fixture
def routers(cluster, namespace, router_rbac):
    started = []

    def start(*extra, token="router"):
        r = Router(cluster, namespace, *extra, token=token)
        started.append(r)
        return r

    yield start
    for r in started:
        print(f"--- {r.name} log tail ---\n{r.tail(60)}")
        r.stop_and_check()


@pytest.fixture
def daemons(cluster):
    started = []

    def start(mark, ip=None):
        d = Daemon(cluster, mark, ip)
        started.append(d)
        return d

    yield start
    for d in started:
        assert d.stop() == 0, d.tail()


def inert_sandbox(k, ns, name, labels=None):
    """A Sandbox no controller runs (none watches this namespace): its Pod is the test's."""
    return k.create({"apiVersion": SB[0], "kind": SB[1],
                     "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
                     "spec": {"podTemplate": {"spec": {"containers": [
                         {"name": "main", "image": "debian:12"}]}}}})


def sandbox_pod(k, ns, sb, ip, grpc=None, http=None, labels=None):
    """The Pod of Sandbox sb (its controller ownerReference) at ip, sandboxd's ports named as the
    controller names them."""
    ports = [p for p in ({"name": "sandboxd-grpc", "containerPort": grpc} if grpc else None,
                         {"name": "sandboxd-http", "containerPort": http} if http else None) if p]
    name = sb["metadata"]["name"]
    k.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": ns, "labels": {HASH: "0", POD_IP: ip, **(labels or {})},
        "ownerReferences": [{"apiVersion": SB[0], "kind": "Sandbox", "name": name,
                             "uid": sb["metadata"]["uid"], "controller": True}]},
        "spec": {"containers": [{"name": "main", "image": "debian:12", "ports": ports}]}})

    def ready():
        p = k.get("v1", "Pod", ns, name)
        return p["status"].get("podIP") == ip and condition(p)["status"] == "True"
    wait_until(ready, 30, what=f"pod {name} Ready at {ip}")


def test_routes_by_uid_then_name_to_named_ports(cluster, namespace, routers, daemons):
    k = cluster.admin
    a, b, warm = daemons("A"), daemons("B"), daemons("W")
    sa, sb = inert_sandbox(k, namespace, "sb-a"), inert_sandbox(k, namespace, "sb-b")
    sw = inert_sandbox(k, namespace, "sb-warm")
    sandbox_pod(k, namespace, sa, a.ip, a.grpc, a.http)
    sandbox_pod(k, namespace, sb, b.ip, b.grpc, b.http)
    sandbox_pod(k, namespace, sw, warm.ip, warm.grpc, warm.http, labels={POOL: "p"})
    r = routers()
    wait_until(r.ready, 30, what="router ready")
    wait_until(lambda: r.metric("sandbox_router_cache_entries") == 3, 30, what="3 cache entries")

    # By name, each to its own pod, at the port named sandboxd-grpc (no port key given).
    assert r.mark(id="sb-a", namespace=namespace) == "A"
    assert r.mark(id="sb-b", namespace=namespace) == "B"
    # The UID comes first: it names sb-a whatever the id says.
    assert r.mark(id="sb-b", namespace=namespace, uid=sa["metadata"]["uid"]) == "A"
    # An unclaimed warm-pool pod: by UID only; by name the DNS form, which does not resolve here.
    assert r.mark(id="sb-warm", namespace=namespace, uid=sw["metadata"]["uid"]) == "W"
    refused = r.mark(id="sb-warm", namespace=namespace)
    assert "Unavailable" in refused and f"sb-warm.{namespace}.svc" in refused, refused
    # A port key wins over the named port.
    assert r.mark(id="sb-a", namespace=namespace, port=str(a.grpc)) == "A"
    # HTTP/1.1 to the port named sandboxd-http, by name and by UID.
    assert r.fetch(id="sb-b", namespace=namespace)[::2] == (200, "B")
    assert r.fetch(id="sb-b", namespace=namespace, uid=sa["metadata"]["uid"])[::2] == (200, "A")
    assert r.metric('sandbox_router_resolutions_total{source="cache"}') == 3
    assert r.metric('sandbox_router_resolutions_total{source="cache-name"}') == 4
    assert r.metric('sandbox_router_resolutions_total{source="dns"}') == 1

    # Claimed: the label goes (as adoption removes it) and the name reaches it too.
    k.patch("v1", "Pod", namespace, "sb-warm", {"metadata": {"labels": {POOL: None}}})
    wait_until(lambda: r.mark(id="sb-warm", namespace=namespace) == "W", 30,
               what="the claimed pod reachable by name")


def test_not_ready_before_the_first_list(cluster, namespace, routers, daemons):
    """As a user bound to nothing the router cannot list: /readyz says so (healthz is fine);
    once bound to router/config's role in the namespace it lists, turns ready and routes."""
    k = cluster.admin
    d = daemons("N")
    sandbox_pod(k, namespace, inert_sandbox(k, namespace, "sb-n"), d.ip, d.grpc)
    r = routers(token="nobody")
    assert r.get(r.probe, "/healthz")[0] == 200
    wait_until(lambda: "forbidden" in r.log.read_text(errors="replace").lower() or
               "403" in r.log.read_text(errors="replace"), 30, what="the list refused")
    status, body = r.get(r.probe, "/readyz")
    assert (status, body) == (503, "cache not synced")
    assert r.metric("sandbox_router_cache_synced") == 0
    k.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
              "metadata": {"name": "nobody-router", "namespace": namespace},
              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                          "name": "sandboxd-router"},
              "subjects": [{"kind": "User", "name": "nobody"}]})
    wait_until(r.ready, 60, what="router ready once it may list")
    assert r.metric("sandbox_router_cache_synced") == 1
    assert r.mark(id="sb-n", namespace=namespace) == "N"


def dead_host(ip, port):
    """A listener whose accept queue is full: the kernel drops further SYNs, so a dial hangs as
    it does to a host that is gone (a refusal would prove a live host)."""
    srv = socket.socket()
    srv.bind((ip, port))
    srv.listen(0)
    fill = []
    for _ in range(2):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex((ip, port))
        fill.append(s)
    return srv, fill


def test_dead_address_evicted_refusing_one_kept_and_moved_pod_found(cluster, namespace, routers,
                                                                    daemons):
    k = cluster.admin
    dead_ip, refusing_ip, port = new_ip(), new_ip(), free_port()
    live = daemons("LIVE")
    srv, fill = dead_host(dead_ip, port)
    try:
        s_dead = inert_sandbox(k, namespace, "sb-dead")
        s_gone = inert_sandbox(k, namespace, "sb-gone")
        s_ref = inert_sandbox(k, namespace, "sb-refusing")
        sandbox_pod(k, namespace, s_dead, dead_ip, port)
        sandbox_pod(k, namespace, s_gone, dead_ip, port, port)
        sandbox_pod(k, namespace, s_ref, refusing_ip, port)
        sandbox_pod(k, namespace, inert_sandbox(k, namespace, "sb-live"), live.ip, live.grpc,
                    live.http)
        # HTTP dials time out in a second, once (gRPC's take its own 20 s).
        r = routers("--upstream-dial-timeout=1s", "--upstream-max-retries=0")
        wait_until(r.ready, 30, what="router ready")
        wait_until(lambda: r.metric("sandbox_router_cache_entries") == 4, 30, what="4 entries")

        # Refused: a live host (a wrong port, say); the entry stays and is tried again.
        for _ in range(2):
            out = r.mark(id="sb-refusing", namespace=namespace)
            assert "refused" in out.lower(), out
        assert r.metric("sandbox_router_cache_invalidations_total") == 0
        assert r.metric("sandbox_router_cache_entries") == 4

        # Dead: the dial times out, the entry goes; the next request no longer dials it.
        out = r.mark(id="sb-dead", namespace=namespace)
        assert "Unavailable" in out and "refused" not in out.lower(), out
        assert r.metric("sandbox_router_cache_invalidations_total") == 1
        assert r.metric("sandbox_router_cache_entries") == 3
        out = r.mark(id="sb-dead", namespace=namespace)
        assert f"sb-dead.{namespace}.svc.cluster.local" in out, out

        # HTTP, from a client holding the UID of a sandbox whose address is dead (as one
        # recreated under another name leaves it): the dial times out, the entry goes, and the
        # same request is resolved again — by its name, to the live sandbox it names.
        status, _, body = r.fetch(id="sb-live", namespace=namespace, uid=s_gone["metadata"]["uid"])
        assert (status, body) == (200, "LIVE")
        assert r.metric("sandbox_router_cache_invalidations_total") == 2
        assert r.metric("sandbox_router_cache_entries") == 2
    finally:
        srv.close()
        for s in fill:
            s.close()

    # The sandbox's pod comes back elsewhere (a new Pod, a new IP): found there.
    moved = daemons("MOVED")
    k.delete("v1", "Pod", namespace, "sb-dead")
    wait_until(lambda: k.find("v1", "Pod", namespace, "sb-dead") is None, 30, what="pod gone")
    sandbox_pod(k, namespace, s_dead, moved.ip, moved.grpc)
    wait_until(lambda: r.mark(id="sb-dead", namespace=namespace) == "MOVED", 30,
               what="the moved pod reached")


def wake_site(k, ns, name, ip, labels=None):
    k.create({"apiVersion": SB[0], "kind": SB[1], "metadata": {"name": name, "namespace": ns},
              "spec": {"operatingMode": "Suspended", "podTemplate": {
                  "metadata": {"labels": {POD_IP: ip, **(labels or {})}},
                  "spec": {"containers": [{"name": "main", "image": "debian:12",
                                           "command": ["sleep", "infinity"]}]}}}})
    wait_until(lambda: (condition(k.get(*SB, ns, name)) or {}).get("reason") == "SandboxSuspended",
               30, what=f"{name} suspended")


def test_a_request_wakes_a_suspended_sandbox_once(cluster, namespace, routers, daemons,
                                                   start_controller):
    k = cluster.admin
    d = daemons("AWAKE")
    start_controller(f"--sandboxd-grpc-port={d.grpc}", f"--sandboxd-rest-port={d.http}")
    wake_site(k, namespace, "sleeper", d.ip)
    wake_site(k, namespace, "napper", d.ip)
    assert k.find("v1", "Pod", namespace, "sleeper") is None
    r = routers("--wake-timeout=120s")
    wait_until(r.ready, 30, what="router ready")

    # Three calls at once: one patch wakes it, each is held until it is Ready, then relayed.
    h = ["-H", "x-sandbox-id: sleeper", "-H", f"x-sandbox-namespace: {namespace}"]
    procs = [subprocess.Popen([grpcurl(), "-plaintext", "-max-time", "150", *proto(), *h, "-d",
                               '{"config":{"command":["sh","-c","echo $MARK"]}}',
                               f"127.0.0.1:{r.port}", "process.v1.ProcessService/Execute"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        assert base64.b64decode(json.loads(out)["stdout"]).decode().strip() == "AWAKE"
    assert k.get(*SB, namespace, "sleeper")["spec"]["operatingMode"] == "Running"
    assert r.metric("sandbox_router_wakes_total") == 1
    assert r.metric("sandbox_router_wake_timeouts_total") == 0
    # Awake: the next call goes straight through.
    assert r.mark(id="sleeper", namespace=namespace) == "AWAKE"
    assert r.metric("sandbox_router_wakes_total") == 1

    # HTTP/1.1 wakes the other, two requests at once, one patch.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda _: r.fetch(id="napper", namespace=namespace), range(2)))
    assert [(st, body) for st, _, body in got] == [(200, "AWAKE")] * 2, got
    assert k.get(*SB, namespace, "napper")["spec"]["operatingMode"] == "Running"
    assert r.metric("sandbox_router_wakes_total") == 2


def test_a_sandbox_not_ready_in_time_is_unavailable(cluster, namespace, routers, start_controller):
    k = cluster.admin
    start_controller()
    for name in ("never", "never-h"):
        wake_site(k, namespace, name, new_ip(), labels={"sandboxd.test/never-ready": "true"})
    r = routers("--wake-timeout=2s")
    wait_until(r.ready, 30, what="router ready")
    out = r.mark(id="never", namespace=namespace)
    assert "Unavailable" in out and "waking up" in out, out
    assert k.get(*SB, namespace, "never")["spec"]["operatingMode"] == "Running"
    assert r.metric("sandbox_router_wake_timeouts_total") == 1
    assert r.metric("sandbox_router_wakes_total") == 1
    status, headers, body = r.fetch(id="never-h", namespace=namespace)
    assert status == 503 and headers.get("Retry-After") == "5", (status, headers, body)
    assert "waking up" in json.loads(body)["detail"], body
    assert r.metric("sandbox_router_wake_timeouts_total") == 2


def test_a_refused_request_wakes_nothing(cluster, namespace, routers, start_controller, tmp_path):
    """Authorization comes first: without a token a scoped-token router refuses, over gRPC and
    HTTP, and the sandbox stays Suspended."""
    k = cluster.admin
    start_controller()
    wake_site(k, namespace, "guarded", new_ip())
    secret = tmp_path / "secret"
    secret.write_text("s" * 40)
    r = routers("--authz-mode=scoped-token", f"--authz-scoped-token-secret-file={secret}")
    wait_until(r.ready, 30, what="router ready")
    out = r.mark(id="guarded", namespace=namespace)
    assert "Unauthenticated" in out, out
    assert r.fetch(id="guarded", namespace=namespace)[0] == 401
    assert k.get(*SB, namespace, "guarded")["spec"]["operatingMode"] == "Suspended"
    assert r.metric("sandbox_router_wakes_total") == 0


def test_an_evicted_entry_comes_back_with_the_resync(cluster, namespace, routers):
    """An address evicted after a dead dial is not gone for good: the cache applies what the
    informer holds again every --cache-resync-period (the reference's informer resyncs), so a
    sandbox whose address was only unreachable for a while is found again by name."""
    k = cluster.admin
    ip, port = new_ip(), free_port()
    srv, fill = dead_host(ip, port)
    try:
        sandbox_pod(k, namespace, inert_sandbox(k, namespace, "sb-blip"), ip, port, port)
        r = routers("--upstream-dial-timeout=1s", "--upstream-max-retries=0",
                    "--cache-resync-period=2s")
        wait_until(r.ready, 30, what="router ready")
        wait_until(lambda: r.metric("sandbox_router_cache_entries") == 1, 30, what="the entry")
        assert r.fetch(id="sb-blip", namespace=namespace)[0] == 502
        assert r.metric("sandbox_router_cache_invalidations_total") == 1
        wait_until(lambda: r.metric("sandbox_router_cache_entries") == 1, 30,
                   what="the entry back after a resync")
    finally:
        srv.close()
        for s in fill:
            s.close()


def test_sigterm_ends_a_wait_for_a_wake_after_the_grace(cluster, namespace, routers,
                                                         start_controller):
    """A request held for a sandbox that does not wake is answered when the router drains
    (after --shutdown-timeout, not the wake timeout), and the router exits cleanly."""
    k = cluster.admin
    start_controller()
    wake_site(k, namespace, "stuck", new_ip(), labels={"sandboxd.test/never-ready": "true"})
    r = routers("--wake-timeout=10m", "--shutdown-timeout=1s")
    wait_until(r.ready, 30, what="router ready")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        got = pool.submit(r.fetch, id="stuck", namespace=namespace)
        wait_until(lambda: r.metric("sandbox_router_wakes_total") == 1, 30, what="the wake")
        r.p.send_signal(signal.SIGTERM)
        status, _, body = got.result(timeout=CALL)
    assert status == 503 and "shutting down" in json.loads(body)["detail"], (status, body)
    assert r.p.wait(CALL) == 0, r.tail()
