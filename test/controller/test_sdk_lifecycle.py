"""The SDKs' sandbox lifecycle against the real control plane: claim a sandbox from a warm pool
(or make one from a template), wait until it is Ready, connect to its sandboxd, run a command,
delete it — in Python (sandboxd.k8s, its README example and the MCP server's claim tool), in Go
(sdk/go/k8s) and through `sbx claim` / `sbx exec --sandbox` / `sbx release`, also as the kubectl
plugin `kubectl sandbox`.

kwok's pods are not real, so the pods of these tests (label sandboxd.test/loopback) get the IP
127.0.0.1 (kwok-stages.yaml), the controller is told sandboxd's ports are those of a real
sandboxd the test runs on loopback, and that sandboxd is started with the token of the
sandbox's own Secret: what a client reads from the cluster is what lets it in.

Needs SANDBOXD_BIN (the daemon), Go for the Go parts and the Python SDK's virtualenv
(sdk/python/install.sh); ~/.cache/sandboxd/bin/kubectl for the plugin case."""

import base64
import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, TOOLS, Proc, free_port, wait_until
from test_pool import EXT, POOL, owned_by, pool, wait_pool_ready
from test_sandbox import SB, condition

CLAIM = (EXT, "SandboxClaim")
LOOPBACK = {"sandboxd.test/loopback": "true"}
RUN_TIMEOUT = 300  # a first Go build of the k8s client takes minutes on two busy cores


def sandboxd_bin():
    b = os.environ.get("SANDBOXD_BIN")
    if not b or not os.access(b, os.X_OK):
        pytest.skip("SANDBOXD_BIN is not set to the built sandboxd")
    return b


def loopback_template(k, ns, name):
    k.create({"apiVersion": EXT, "kind": "SandboxTemplate", "metadata": {"name": name, "namespace": ns},
              "spec": {"podTemplate": {"metadata": {"labels": dict(LOOPBACK)}, "spec": {
                  "containers": [{"name": "main", "image": "debian:12", "command": ["sleep", "infinity"]}]}}}})


class Daemon(Proc):
    """A real sandboxd on 127.0.0.1 at the ports the controller writes into the pods."""

    def __init__(self, site, token):
        tok = site.dir / "token"
        tok.write_text(token + "\n")
        tok.chmod(0o600)
        root = site.dir / "root"
        root.mkdir(exist_ok=True)
        super().__init__("sandboxd", [sandboxd_bin(), "--listen-host", "127.0.0.1",
                                      "--grpc-port", str(site.grpc_port), "--rest-port",
                                      str(site.rest_port), "--root-dir", str(root),
                                      "--token-file", str(tok), "--shutdown-timeout", "5s"],
                         site.dir)
        url = f"http://127.0.0.1:{site.rest_port}/readyz"

        def ready():
            if not self.alive():
                pytest.fail(f"sandboxd exited:\n{self.tail()}")
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status == 200
        wait_until(ready, 20, interval=0.05, what="sandboxd /readyz")


class Site:
    """One test's namespace: a controller told sandboxd's loopback ports, a loopback template,
    a warm pool of one, and the real sandboxd behind whichever sandbox is warm. With
    pod_ports, the controller is told other ports, which nothing listens on."""

    def __init__(self, cluster, namespace, start_controller, tmp_path, pod_ports=False):
        self.k, self.ns, self.dir = cluster.admin, namespace, tmp_path
        self.kubeconfig = str(cluster.kubeconfigs["admin"])
        self.grpc_port, self.rest_port = free_port(), free_port()
        self.pod_grpc, self.pod_rest = ((free_port(), free_port()) if pod_ports
                                        else (self.grpc_port, self.rest_port))
        self.controller = start_controller(f"--sandboxd-grpc-port={self.pod_grpc}",
                                           f"--sandboxd-rest-port={self.pod_rest}")
        self.daemon = None
        loopback_template(self.k, namespace, "tpl")
        pool(self.k, namespace, "p", 1)

    def token_of(self, sandbox):
        sec = self.k.get("v1", "Secret", self.ns, f"{sandbox}-sandboxd-token")
        return base64.b64decode(sec["data"]["token"]).decode()

    def serve(self, token):
        # Once per test: the ports of a daemon just stopped may not be bound again at once
        # (connections in TIME_WAIT), and each test has ports of its own.
        assert self.daemon is None, "one sandboxd per test"
        self.daemon = Daemon(self, token)

    def serve_warm(self):
        """Waits for the pool's ready sandbox and serves it; returns its name."""
        wait_pool_ready(self.k, self.ns, "p", 1)
        warm = owned_by(self.k, self.ns, "SandboxWarmPool", "p")[0]["metadata"]["name"]
        self.serve(self.token_of(warm))
        return warm

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items() if k not in ("SANDBOXD_TOKEN", "KUBECONFIG")}
        env.update(KUBECONFIG=self.kubeconfig, SANDBOX_NAMESPACE=self.ns, **extra)
        return env

    def claims(self):
        return [c["metadata"]["name"] for c in self.k.list(*CLAIM, self.ns)
                if "deletionTimestamp" not in c["metadata"]]

    def wait_gone(self, sandbox):
        wait_until(lambda: self.k.find(*SB, self.ns, sandbox) is None, 30,
                   what=f"sandbox {sandbox} deleted")

    def stop(self):
        if self.daemon:
            rc = self.daemon.stop()
            assert rc == 0, f"sandboxd exited {rc}:\n{self.daemon.tail()}"
            self.daemon = None


@pytest.fixture
def site(cluster, namespace, start_controller, tmp_path):
    s = Site(cluster, namespace, start_controller, tmp_path)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def sdk_python():
    """The Python SDK's virtualenv with the SDK (and its k8s extra) installed."""
    p = subprocess.run([str(REPO / "sdk" / "python" / "install.sh")], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return Path(p.stdout.strip()) / "bin" / "python"


@pytest.fixture(scope="module")
def go_bins(tmp_path_factory):
    """sbx, its kubectl-plugin name, and the Go lifecycle test binary, built from sdk/go."""
    if not shutil.which("go"):
        pytest.skip("go not found")
    d = tmp_path_factory.mktemp("gobin")
    env = dict(os.environ, GOFLAGS="-buildvcs=false")
    for argv in (["go", "build", "-o", str(d / "sbx"), "./cmd/sbx"],
                 ["go", "test", "-c", "-o", str(d / "k8s.test"), "./k8s"]):
        p = subprocess.run(argv, cwd=REPO / "sdk" / "go", env=env, capture_output=True, text=True,
                           timeout=900)
        assert p.returncode == 0, p.stderr
    (d / "kubectl-sandbox").symlink_to(d / "sbx")
    return d


def run(argv, env, timeout=RUN_TIMEOUT, ok=True):
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    if ok:
        assert p.returncode == 0, f"{argv}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def test_python_readme_example_claims_runs_and_releases(site, sdk_python):
    warm = site.serve_warm()
    p = run([str(sdk_python), str(REPO / "sdk" / "python" / "examples" / "lifecycle.py"), "p"],
            site.env())
    lines = p.stdout.splitlines()
    assert lines[0] == f"claimed {warm} at 127.0.0.1:{site.grpc_port}", p.stdout
    assert lines[1] == f"hello from {warm}", p.stdout
    # Leaving the block deleted the claim; the controller deleted the adopted sandbox.
    assert site.claims() == []
    site.wait_gone(warm)


PY_CASES = r"""
import asyncio, json, os
from sandboxd import errors
from sandboxd.k8s import AsyncSandboxClient, SandboxClient, name_hash

out = {"hash": name_hash("tpl")}
with SandboxClient(namespace=os.environ["SANDBOX_NAMESPACE"]) as client:  # $KUBECONFIG
    try:
        client.claim("no-such-pool")
    except errors.NotFoundError as e:
        out["missing_pool"] = e.code
    lease = client.create_sandbox(template="tpl", name="by-template")  # the pool of tpl
    out["kind"] = lease.kind
    lease.wait_ready(timeout=60)
    out["info"] = lease.info()
    with lease.connect() as sb:
        out["run"] = sb.processes.run("echo $((6 * 7))", seccomp="off").stdout.decode()
    again = client.get("by-template")
    out["again"] = again.wait_ready(30).sandbox_name
    try:
        with client.get(lease.sandbox_name, kind="Sandbox").connect(token="wrong") as sb:
            sb.run("true")
    except errors.UnauthenticatedError as e:
        out["wrong_token"] = e.code

    async def aio():
        async with AsyncSandboxClient(os.environ["SANDBOX_NAMESPACE"]) as ac:
            try:
                await ac.claim("no-such-pool")
            except errors.NotFoundError as e:
                out["aio_missing_pool"] = e.code
            async with await ac.get("by-template") as sb:  # not its own: left in place
                out["aio_run"] = [sb.sandbox_name, (await sb.run("echo aio")).stdout.decode()]
    asyncio.run(aio())
    out["kept"] = client.get("by-template").name
    lease.delete(wait=30)
print(json.dumps(out))
"""


def test_python_template_get_errors(site, sdk_python):
    warm = site.serve_warm()
    labels = site.k.get(*SB, site.ns, warm)["spec"]["podTemplate"]["metadata"]["labels"]
    p = run([str(sdk_python), "-c", PY_CASES], site.env())
    out = json.loads(p.stdout)
    assert out["missing_pool"] == "NOT_FOUND"
    # The SDK labels a Sandbox it makes from a template as the controller labels its own.
    assert labels["agents.x-k8s.io/sandbox-template-ref-hash"] == out["hash"]
    assert out["kind"] == "SandboxClaim", "a template with a pool is claimed from it"
    info = out["info"]
    assert (info["sandbox"], info["pod_ip"], info["ready"]) == (warm, "127.0.0.1", True)
    assert (info["grpc_port"], info["rest_port"]) == (site.grpc_port, site.rest_port)
    assert out["run"] == "42\n"
    assert out["again"] == warm
    assert out["wrong_token"] == "UNAUTHENTICATED"
    assert out["aio_missing_pool"] == "NOT_FOUND"
    assert out["aio_run"] == [warm, "aio\n"]
    assert out["kept"] == "by-template", "a lease from get() is not deleted on exit"
    assert site.claims() == []
    site.wait_gone(warm)


COLD = r"""
import os
from sandboxd.k8s import SandboxClient

with SandboxClient(os.environ["SANDBOX_NAMESPACE"]) as client:
    with client.create_sandbox(template="cold-tpl", name="cold-1", timeout=60) as sb:
        print(sb.kind, sb.sandbox_name, sb.run(["cat", "/proc/self/comm"]).stdout_text.strip())
"""


def test_python_sandbox_from_a_template_without_pool(site, sdk_python):
    loopback_template(site.k, site.ns, "cold-tpl")
    # The Secret made before the Sandbox: the controller keeps an existing token, so the
    # daemon can be started with it before the sandbox exists.
    token = "cold-token-0123456789"
    site.k.create({"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": "cold-1-sandboxd-token", "namespace": site.ns}, "stringData": {"token": token}})
    site.serve(token)
    p = run([str(sdk_python), "-c", COLD], site.env())
    assert p.stdout.split() == ["Sandbox", "cold-1", "cat"]
    site.wait_gone("cold-1")


def test_go_sdk(site, go_bins):
    warm = site.serve_warm()
    labels = site.k.get(*SB, site.ns, warm)["spec"]["podTemplate"]["metadata"]["labels"]
    # TestPortForward needs pods reached only through kwok: test_port_forward.py runs it.
    p = run([str(go_bins / "k8s.test"), "-test.v", "-test.count=1", "-test.skip", "^TestPortForward$"],
            site.env(SBX_TEST_POOL="p", SBX_TEST_WARM=warm,
                     SBX_TEST_TEMPLATE_HASH=labels["agents.x-k8s.io/sandbox-template-ref-hash"]))
    assert "--- PASS: TestClaimRunRelease" in p.stdout and "SKIP" not in p.stdout, p.stdout
    assert "--- PASS: TestErrorsAndNames" in p.stdout, p.stdout
    assert site.claims() == []


def test_sbx_claim_exec_release_and_kubectl_plugin(site, go_bins):
    warm = site.serve_warm()
    sbx = str(go_bins / "sbx")
    env = site.env()
    flags = ["--namespace", site.ns]
    c = json.loads(run([sbx, "claim", "--pool", "p", "--wait", "--output", "json", *flags], env).stdout)
    assert (c["kind"], c["sandbox"], c["ready"], c["pod_ip"]) == ("SandboxClaim", warm, True, "127.0.0.1")
    assert (c["grpc_port"], c["rest_port"]) == (site.grpc_port, site.rest_port)
    assert "token" not in json.dumps(c), "the token is not printed"
    name = c["name"]
    assert site.claims() == [name]
    # --sandbox finds the address and the token through the cluster (claim or Sandbox name).
    p = run([sbx, "exec", "--sandbox", name, *flags, "--", "sh", "-c", "echo hi; exit 3"], env, ok=False)
    assert (p.returncode, p.stdout) == (3, "hi\n"), p.stderr
    r = json.loads(run([sbx, "--output", "json", "--sandbox", warm, *flags, "exec", "--seccomp",
                        "off", "--", "echo", "x"], env).stdout)
    assert (r["exit_code"], r["stdout"]) == (0, "x\n")
    p = run([sbx, "exec", "--sandbox", "nope", *flags, "--", "true"], env, ok=False)
    assert p.returncode == 1 and "NOT_FOUND" in p.stderr, p.stderr
    p = run([sbx, "claim", *flags], env, ok=False)
    assert p.returncode == 2

    # kubectl finds kubectl-sandbox on PATH and runs it with the rest of its arguments.
    kubectl = TOOLS / "kubectl"
    if os.access(kubectl, os.X_OK):
        kenv = dict(env, PATH=f"{go_bins}:{env.get('PATH', '')}")
        p = run([str(kubectl), "plugin", "list"], kenv)
        assert str(go_bins / "kubectl-sandbox") in p.stdout, p.stdout
        p = run([str(kubectl), "sandbox", "exec", "--sandbox", name, *flags, "--", "cat", "/proc/self/comm"], kenv)
        assert p.stdout == "cat\n"
        p = run([str(kubectl), "sandbox"], kenv, ok=False)
        assert p.returncode == 2 and p.stderr.startswith("usage: kubectl sandbox "), p.stderr
        released = run([str(kubectl), "sandbox", "release", "--wait", "--output", "json", *flags, name], kenv)
    else:
        print(f"kubectl not found at {kubectl} (scripts/k8s-tools.sh builds it): the plugin "
              "is tested under its name kubectl-sandbox alone")
        released = run([str(go_bins / "kubectl-sandbox"), "release", "--wait", "--output", "json",
                        *flags, name], env)
    assert json.loads(released.stdout) == {"released": [{"kind": "SandboxClaim", "name": name}]}
    assert site.claims() == []
    site.wait_gone(warm)
    p = run([sbx, "release", *flags, name], env, ok=False)
    assert p.returncode == 1 and "NOT_FOUND" in p.stderr


MCP = r"""
import asyncio, json, os, sys
from mcp import Client
from mcp.client.stdio import StdioServerParameters

async def main(args):
    server = StdioServerParameters(command=sys.executable,
                                   args=["-m", "sandboxd.mcp_server", *args], env=dict(os.environ))
    out = {}
    async with Client(server, read_timeout_seconds=120) as c:
        out["tools"] = sorted(t.name for t in (await c.list_tools()).tools)

        async def call(name, **kw):
            r = await c.call_tool(name, kw)
            return ("error: " + r.content[0].text) if r.is_error else r.structured_content["result"]
        if "--pool" not in args:
            out["before"] = await call("run", command="true")
            out["claim"] = await call("claim_sandbox", pool="p", timeout_seconds=60)
            out["twice"] = await call("claim_sandbox", pool="p")
        out["run"] = await call("run", command="echo from $(cat /proc/self/comm)")
        if "--pool" not in args:
            out["release"] = await call("release_sandbox")
            out["after"] = await call("run", command="true")
    print(json.dumps(out))

asyncio.run(main(sys.argv[1:]))
"""


def test_mcp_server_claims_and_releases(site, sdk_python):
    warm = site.serve_warm()
    out = json.loads(run([str(sdk_python), "-c", MCP, "--namespace", site.ns], site.env()).stdout)
    assert {"claim_sandbox", "release_sandbox", "run", "upload"} <= set(out["tools"])
    assert out["before"].startswith("error: ") and "FAILED_PRECONDITION: no sandbox yet" in out["before"]
    assert (out["claim"]["sandbox"], out["claim"]["pod_ip"]) == (warm, "127.0.0.1")
    assert "FAILED_PRECONDITION" in out["twice"] and warm in out["twice"]
    assert (out["run"]["exit_code"], out["run"]["stdout"]) == (0, "from cat\n")
    assert out["release"]["sandbox"] == warm
    assert out["after"].startswith("error: ") and "FAILED_PRECONDITION" in out["after"]
    assert site.claims() == []
    site.wait_gone(warm)


def test_mcp_server_with_a_pool(site, sdk_python):
    """--pool: a sandbox claimed at start-up, released when the server exits."""
    warm = site.serve_warm()
    out = json.loads(run([str(sdk_python), "-c", MCP, "--namespace", site.ns, "--pool", "p"],
                         site.env()).stdout)
    assert out["run"]["stdout"] == "from cat\n"
    assert site.claims() == []
    site.wait_gone(warm)
