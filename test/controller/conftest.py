"""Fixtures of the controller's tests: a real control plane on loopback.

The session starts etcd, kube-apiserver (token auth file, RBAC authorization, a service-account
signing key, TLS from a CA made here), kube-scheduler, kube-controller-manager (only its garbage
collector and the controllers that bind PersistentVolumes and guard claims in use, as in a cluster)
and kwok (which plays the kubelet of fake Nodes, so scheduled Pods become Running with IPs, and
serves their kubelet API on loopback for pods/portforward). Every port is picked free on 127.0.0.1; every
wait is bounded; every process is stopped at the end. The controller runs as its service account
with exactly the rights its manifests (controller/config) grant.

Environment:
  SANDBOXD_CONTROLLER_BIN  the controller (set by CTest)
  SANDBOXD_TOOLS           directory of kube-apiserver, kube-scheduler, kube-controller-manager,
                           etcd, kwok
                           (default ~/.cache/sandboxd/bin; scripts/k8s-tools.sh builds them)
"""

import http.client
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
import yaml

from kube import ApiError, Kube

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
import sbxtest  # noqa: E402

REPO = sbxtest.REPO
CONFIG = REPO / "controller" / "config"
HERE = Path(__file__).resolve().parent
TOOLS = sbxtest.tools_dir()
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok")
# What kube-controller-manager runs here: owner-reference garbage collection, PV binding, and the
# finalizers that keep a claim or volume in use from going (the API server puts them on).
KCM_CONTROLLERS = ("garbage-collector-controller", "persistentvolume-binder-controller",
                   "persistentvolumeclaim-protection-controller",
                   "persistentvolume-protection-controller")

CONTROLLER_NS = "sandboxd-system"
CONTROLLER_SA = "sandboxd-controller"
NODES = ("kwok-node-0", "kwok-node-1")
RUNTIME_CLASS = "gvisor"


def wait_until(pred, timeout, interval=0.05, what="condition"):
    """Polls pred until it returns a truthy value; fails the test after timeout seconds. API and
    socket errors count as "not yet": the server may be starting or restarting."""
    return sbxtest.wait_until(pred, timeout, interval=interval, what=what,
                              retry=(ApiError, OSError))


free_port = sbxtest.free_port


def missing_binaries():
    return [b for b in BINARIES if not os.access(TOOLS / b, os.X_OK)]


class Proc:
    """A child process with its output in a log file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, name, argv, logdir, env=None):
        self.name = name
        self.argv = argv
        self.log = Path(logdir) / f"{name}.log"
        self.env = env
        self.p = None
        self.start()

    def start(self):
        with open(self.log, "ab") as out:
            self.p = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=self.env,
                                      start_new_session=True)

    def alive(self):
        return self.p.poll() is None

    def stop(self, timeout=15):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)
        return self.p.returncode

    def tail(self, n=40):
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return ""


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(d):
    """A CA, a serving certificate for 127.0.0.1 and a service-account signing key."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "7",
            "-subj", "/CN=sandboxd-test-ca", cwd=d)
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=kube-apiserver",
            cwd=d)
    (Path(d) / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.crt", "-days", "7", "-extfile", "san.ext", cwd=d)
    openssl("ecparam", "-genkey", "-name", "prime256v1", "-noout", "-out", "sa.key", cwd=d)
    openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)


def write_kubeconfig(path, server, ca_file, token):
    cfg = {
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": "test", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
    }
    Path(path).write_text(yaml.safe_dump(cfg))
    return path


class Cluster:
    """etcd + kube-apiserver + kube-scheduler + kube-controller-manager + kwok, on loopback."""

    def __init__(self, d):
        self.dir = Path(d)
        self.procs = {}
        make_pki(d)
        self.tokens = {name: secrets.token_hex(16)
                       for name in ("admin", "controller", "scheduler", "kcm", "kwok", "nobody",
                                    "router")}
        sa_user = f"system:serviceaccount:{CONTROLLER_NS}:{CONTROLLER_SA}"
        router_user = f"system:serviceaccount:{CONTROLLER_NS}:sandboxd-router"
        rows = [
            # sandboxd-router, bound by router/config's RBAC alone (test_router.py applies it).
            f'{self.tokens["router"]},{router_user},router-uid,'
            f'"system:serviceaccounts,system:serviceaccounts:{CONTROLLER_NS},system:authenticated"',
            f'{self.tokens["admin"]},admin,admin-uid,"system:masters"',
            f'{self.tokens["controller"]},{sa_user},controller-uid,'
            f'"system:serviceaccounts,system:serviceaccounts:{CONTROLLER_NS},system:authenticated"',
            f'{self.tokens["scheduler"]},system:kube-scheduler,scheduler-uid,"system:authenticated"',
            # The garbage collector reads and deletes objects of every resource, custom ones too.
            f'{self.tokens["kcm"]},system:kube-controller-manager,kcm-uid,"system:masters"',
            # kwok plays every kubelet; it may write any node and pod status.
            f'{self.tokens["kwok"]},kwok,kwok-uid,"system:masters"',
            # Authenticated and bound to nothing: refused whatever it asks.
            f'{self.tokens["nobody"]},nobody,nobody-uid,"system:authenticated"',
        ]
        (self.dir / "tokens.csv").write_text("\n".join(rows) + "\n")
        self.etcd_port, self.etcd_peer = free_port(), free_port()
        self.port, self.kwok_port = free_port(), free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.ca = self.dir / "ca.crt"
        self.admin = Kube("127.0.0.1", self.port, str(self.ca), self.tokens["admin"])
        self.kubeconfigs = {
            n: write_kubeconfig(self.dir / f"{n}.kubeconfig", self.server, self.ca, t)
            for n, t in self.tokens.items()
        }

    def start_etcd(self):
        url, peer = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{self.etcd_peer}"
        self.procs["etcd"] = Proc("etcd", [
            str(TOOLS / "etcd"), "--name=test", f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=test={peer}", "--unsafe-no-fsync", "--log-level=warn",
        ], self.dir)

    def start_apiserver(self):
        d = self.dir
        self.procs["kube-apiserver"] = Proc("kube-apiserver", [
            str(TOOLS / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
            f"--tls-cert-file={d / 'server.crt'}", f"--tls-private-key-file={d / 'server.key'}",
            f"--cert-dir={d / 'certs'}",
            f"--token-auth-file={d / 'tokens.csv'}", "--authorization-mode=RBAC",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16", "--allow-privileged=true",
            # No node lifecycle controller runs to lift the not-ready taint this plugin puts on
            # new Nodes; kwok's Nodes are Ready at once.
            "--disable-admission-plugins=TaintNodesByCondition",
            # pods/portforward reaches kwok's kubelet server at the Nodes' InternalIP; its
            # self-signed certificate goes unchecked (no --kubelet-certificate-authority).
            "--kubelet-preferred-address-types=InternalIP",
            "--profiling=false", "--v=0",
        ], d)

    def ready(self):
        try:
            return self.admin.request("GET", "/readyz") is not None or True
        except (ApiError, OSError):
            return False

    def wait_ready(self, timeout=120):
        def ok():
            for name, p in self.procs.items():
                if not p.alive():
                    pytest.fail(f"{name} exited:\n{p.tail()}")
            return self.ready()
        wait_until(ok, timeout, interval=0.2, what="kube-apiserver /readyz")
        # RBAC's bootstrap roles are there once the default cluster roles are.
        wait_until(lambda: self.admin.find("rbac.authorization.k8s.io/v1", "ClusterRole", None,
                                           "system:kube-scheduler"),
                   60, interval=0.2, what="bootstrap RBAC roles")

    def start_scheduler(self):
        self.procs["kube-scheduler"] = Proc("kube-scheduler", [
            str(TOOLS / "kube-scheduler"), f"--kubeconfig={self.kubeconfigs['scheduler']}",
            "--leader-elect=false", "--secure-port=0", "--v=0",
        ], self.dir)

    def start_controller_manager(self):
        self.procs["kube-controller-manager"] = Proc("kube-controller-manager", [
            str(TOOLS / "kube-controller-manager"), f"--kubeconfig={self.kubeconfigs['kcm']}",
            f"--controllers={','.join(KCM_CONTROLLERS)}", "--leader-elect=false",
            "--secure-port=0", "--use-service-account-credentials=false", "--v=0",
        ], self.dir)

    def stop_controller_manager(self):
        """Stops kube-controller-manager: no garbage collection nor binding until restarted."""
        self.procs["kube-controller-manager"].stop()

    def restart_controller_manager(self):
        if not self.procs["kube-controller-manager"].alive():
            self.start_controller_manager()

    def start_kwok(self):
        self.procs["kwok"] = Proc("kwok", [
            str(TOOLS / "kwok"), f"--kubeconfig={self.kubeconfigs['kwok']}",
            "--manage-all-nodes=true", f"--config={HERE / 'kwok-stages.yaml'}",
            # kwok's Nodes are at 127.0.0.1 with their kubelet API on kwok's own server, so the
            # API server's pods/portforward reaches kwok, which forwards as PortForward
            # objects (kwok-crds.yaml) say.
            "--cidr=10.0.0.0/16", "--node-ip=127.0.0.1", f"--node-port={self.kwok_port}",
            f"--server-address=127.0.0.1:{self.kwok_port}", "--enable-crds=PortForward",
        ], self.dir)

    def restart_apiserver(self):
        self.procs["kube-apiserver"].stop()
        self.start_apiserver()
        self.wait_ready()

    def stop(self):
        for name in ("kwok", "kube-controller-manager", "kube-scheduler", "kube-apiserver", "etcd"):
            if name in self.procs:
                self.procs[name].stop()


def load_manifests():
    """Every object the kustomization lists, in order."""
    kust = yaml.safe_load((CONFIG / "kustomization.yaml").read_text())
    objs = []
    for res in kust["resources"]:
        objs += [o for o in yaml.safe_load_all((CONFIG / res).read_text()) if o]
    return objs


def established(c, crd):
    obj = c.admin.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, crd)
    return any(cond["type"] == "Established" and cond["status"] == "True"
               for cond in (obj.get("status") or {}).get("conditions") or [])


def start_cluster(d):
    """Starts the control plane in directory d, applies the manifests, a RuntimeClass and the
    kwok Nodes, and returns the Cluster (stop it when done; on failure it is stopped here)."""
    c = Cluster(d)
    try:
        c.start_etcd()
        c.start_apiserver()
        c.wait_ready()
        c.start_scheduler()
        c.start_controller_manager()
        for obj in yaml.safe_load_all((HERE / "kwok-crds.yaml").read_text()):
            c.admin.apply(obj)
        wait_until(lambda: established(c, "portforwards.kwok.x-k8s.io"), 30,
                   what="CRD portforwards.kwok.x-k8s.io established")
        c.start_kwok()
        for obj in load_manifests():
            c.admin.apply(obj)
        for crd in ("sandboxes.agents.x-k8s.io", "sandboxtemplates.extensions.agents.x-k8s.io",
                    "sandboxclaims.extensions.agents.x-k8s.io",
                    "sandboxwarmpools.extensions.agents.x-k8s.io"):
            wait_until(lambda: established(c, crd), 30, what=f"CRD {crd} established")
        c.admin.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                       "metadata": {"name": RUNTIME_CLASS}, "handler": "runsc"})
        for n in NODES:
            c.admin.apply({"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": n, "labels": {"type": "kwok"},
                                        "annotations": {"kwok.x-k8s.io/node": "fake"}}})
        wait_until(lambda: all(any(cond["type"] == "Ready" and cond["status"] == "True"
                                   for cond in (c.admin.get("v1", "Node", None, n).get("status", {})
                                                .get("conditions") or []))
                               for n in NODES), 60, interval=0.2, what="kwok nodes Ready")
        return c
    except BaseException:
        for name, p in c.procs.items():
            print(f"--- {name} log tail ---\n{p.tail()}")
        c.stop()
        raise


@pytest.fixture(scope="session")
def cluster():
    missing = missing_binaries()
    if missing:
        pytest.skip(f"{', '.join(missing)} not found in {TOOLS}: run scripts/k8s-tools.sh")
    if not shutil.which("openssl"):
        pytest.skip("openssl not found")
    d = tempfile.mkdtemp(prefix="sbx-ctrl-")
    try:
        c = start_cluster(d)
        try:
            yield c
        finally:
            c.stop()
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def namespace(cluster):
    """A fresh namespace with its default service account (no controller-manager makes it)."""
    ns = f"t-{uuid.uuid4().hex[:8]}"
    cluster.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    cluster.admin.create({"apiVersion": "v1", "kind": "ServiceAccount",
                          "metadata": {"name": "default", "namespace": ns}})
    yield ns


def controller_bin():
    b = os.environ.get("SANDBOXD_CONTROLLER_BIN")
    if not b or not os.access(b, os.X_OK):
        pytest.skip("SANDBOXD_CONTROLLER_BIN is not set to the built sandboxd-controller")
    return b


class Controller(Proc):
    """The controller for one namespace; with in_cluster it finds the API server as a pod does
    (KUBERNETES_SERVICE_HOST/PORT and a service-account directory) instead of a kubeconfig."""

    def __init__(self, cluster, namespace, *extra, name="controller", in_cluster=None):
        argv = [controller_bin(), f"--namespace={namespace}",
                f"--default-runtime-class={RUNTIME_CLASS}",
                "--sandboxd-image=sandboxd-injector:test", "--metrics-bind-address=127.0.0.1:0",
                # One Lease per test: replicas of one test contend, tests do not.
                f"--leader-election-id=lease-{namespace}",
                # No registry is reachable here: a main container without a command runs what
                # the tests give (test_entrypoint.py and test_examples.py turn lookups on against
                # registries of their own).
                "--image-entrypoint-lookup=false",
                "--log-level=debug", *extra]
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        if in_cluster:
            env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(cluster.port))
            argv.append(f"--service-account-dir={in_cluster}")
        else:
            argv.append(f"--kubeconfig={cluster.kubeconfigs['controller']}")
        super().__init__(f"{name}-{namespace}", argv, cluster.dir, env=env)
        self._port = None

    def port(self):
        """The port of /metrics, /healthz and /readyz, from the start-up line."""
        if self._port is None:
            m = wait_until(lambda: re.search(r"metrics on port (\d+)", self.log.read_text(errors="replace")),
                           10, what=f"{self.name} start-up line")
            self._port = int(m.group(1))
        return self._port

    def http(self, path):
        """(status, body) of GET path on the controller's own endpoint."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port(), timeout=10)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, r.read().decode()
        finally:
            conn.close()

    def metrics(self):
        """Prometheus samples as {"name{labels}": value}."""
        status, body = self.http("/metrics")
        assert status == 200
        out = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out


@pytest.fixture
def start_controller(cluster, namespace):
    """Starts controllers for the test's namespace; each must exit 0 on SIGTERM at the end."""
    procs = []

    def start(*extra, name="controller", in_cluster=None):
        c = Controller(cluster, namespace, *extra, name=name, in_cluster=in_cluster)
        procs.append(c)
        return c

    yield start
    for p in procs:
        rc = p.stop()
        print(f"--- {p.name} log tail (shown when the test fails) ---\n{p.tail()}")
        assert rc == 0, f"{p.name} exited {rc}:\n{p.tail()}"


@pytest.fixture
def controller(start_controller):
    return start_controller()
