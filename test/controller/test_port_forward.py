"""Connecting to a claimed sandbox through a port-forward, as from a laptop outside the cluster:
the SDK opens local listeners that reach the pod's sandboxd ports through the API server's
pods/portforward subresource. The API server dials the kubelet of the pod's Node, here kwok's
kubelet server (conftest.py: Nodes at 127.0.0.1 with kwok's port as their kubelet endpoint),
which forwards each port as a PortForward object says: to the real sandboxd on loopback.

That the bytes went through the API server and kwok, not to the pod IP, is checked from the
client's side (it dials only its own listeners) and from kwok's PortForward being the only way
from the pod's ports to sandboxd: the pod's ports are not sandboxd's."""

import json

import pytest

from test_sdk_lifecycle import MCP, Site, go_bins, run, sdk_python  # noqa: F401 (fixtures)


@pytest.fixture
def site(cluster, namespace, start_controller, tmp_path):
    """A Site whose pods advertise ports nothing listens on: only kwok's forward reaches
    sandboxd (which listens on ports of its own)."""
    s = Site(cluster, namespace, start_controller, tmp_path, pod_ports=True)
    yield s
    s.stop()


# Until kwok's informer has seen a PortForward, a stream to the pod's port ends at once: wait
# for one that reaches sandboxd's /healthz through the API server.
FORWARDED = r"""
import sys, time
from kubernetes import config
from sandboxd.portforward import Forwarder

kubeconfig, ns, pod, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
f = Forwarder(config.new_client_from_config(config_file=kubeconfig), ns, pod, port)
deadline, last = time.monotonic() + 30, None
while True:
    try:
        s = f.open_stream()
        s.settimeout(5)
        s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        answer = b""
        while b"\r\n" not in answer and (chunk := s.recv(4096)):
            answer += chunk
        s.close()
        if answer.split(b"\r\n", 1)[0].split(b" ")[1:2] == [b"200"]:
            break
        last = answer[:200]
    except Exception as e:
        last = e
    if time.monotonic() > deadline:
        sys.exit(f"no forward to {pod}:{port} after 30 s: {last!r}")
    time.sleep(0.2)
f.close()
"""


def forward_warm(site, sdk_python):
    """Serves the warm sandbox, tells kwok to forward its pod's ports to that sandboxd and waits
    until kwok does."""
    warm = site.serve_warm()
    target = "127.0.0.1"
    site.k.create({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "PortForward",
                   "metadata": {"name": warm, "namespace": site.ns},
                   "spec": {"forwards": [
                       {"ports": [site.pod_grpc], "target": {"address": target, "port": site.grpc_port}},
                       {"ports": [site.pod_rest], "target": {"address": target, "port": site.rest_port}},
                   ]}})
    run([str(sdk_python), "-c", FORWARDED, site.kubeconfig, site.ns, warm, str(site.pod_rest)], site.env(),
        timeout=60)
    return warm


PY = r"""
import asyncio, json, os, sys
from sandboxd import errors
from sandboxd.k8s import AsyncSandboxClient, SandboxClient
from sandboxd.portforward import Forwarder

ns = os.environ["SANDBOX_NAMESPACE"]
out = {}
with SandboxClient(ns, connect=sys.argv[1]) as client:  # $KUBECONFIG
    with client.claim("p", timeout=60) as sb:
        out["sandbox"] = sb.sandbox_name
        out["pod_ports"] = [sb.grpc_port, sb.rest_port]
        out["local_ports"] = [f.port for f in sb.forwarders]
        out["run"] = sb.processes.run("echo $((6 * 7))", seccomp="off").stdout.decode()
        sb.files.write_bytes("up.txt", b"through the API server\n")
        out["read"] = sb.files.read_bytes("up.txt").decode()
        out["stat"] = sb.files.stat("up.txt").size

        async def aio():  # the same claim (not its own), through a port-forward of its own
            async with AsyncSandboxClient(ns, connect="port-forward") as ac:
                async with await ac.get(sb.name) as asb:
                    out["aio"] = [len(asb.forwarders), (await asb.run("echo aio")).stdout.decode()]
                out["aio_closed"] = asb.forwarders
        asyncio.run(aio())
    out["closed"] = sb.forwarders
    try:
        Forwarder(client.api_client, ns, "no-such-pod", 1).open_stream()
    except errors.NotFoundError as e:
        out["no_pod"] = e.message
    # The pool's next sandbox: kwok forwards nothing of its pod, each stream ends at once.
    with client.claim("p", timeout=60) as sb:
        try:
            sb.run("true")
            out["unforwarded"] = "ran"
        except errors.UnavailableError as e:
            out["unforwarded"] = e.code
print(json.dumps(out))
"""


def test_python_claim_through_port_forward(site, sdk_python):
    warm = forward_warm(site, sdk_python)
    # The pod IP (127.0.0.1) answers nothing at the pod's ports: "auto" falls back too.
    p = run([str(sdk_python), "-c", PY, "auto"], site.env(), timeout=120)
    out = json.loads(p.stdout)
    assert out["sandbox"] == warm
    assert out["pod_ports"] == [site.pod_grpc, site.pod_rest]
    assert len(out["local_ports"]) == 2
    assert not set(out["local_ports"]) & {site.grpc_port, site.rest_port, site.pod_grpc, site.pod_rest}
    assert out["run"] == "42\n"
    assert out["read"] == "through the API server\n"
    assert out["stat"] == len("through the API server\n")
    assert (site.dir / "root" / "up.txt").read_text() == "through the API server\n"
    assert out["aio"] == [2, "aio\n"] and out["aio_closed"] == [] and out["closed"] == []
    assert out["no_pod"].endswith('pods "no-such-pod" not found'), out["no_pod"]
    assert out["unforwarded"] == "UNAVAILABLE"
    assert site.claims() == []
    site.wait_gone(warm)


DENIED = r"""
import json, sys
from kubernetes import config
from sandboxd import errors
from sandboxd.portforward import Forwarder

api = config.new_client_from_config(config_file=sys.argv[1])
try:
    Forwarder(api, sys.argv[2], sys.argv[3], int(sys.argv[4])).open_stream()
    print(json.dumps({"opened": True}))
except errors.SandboxError as e:
    print(json.dumps({"error": type(e).__name__, "code": e.code, "message": e.message}))
"""


def test_port_forward_refused_by_rbac_is_permission_denied(site, sdk_python, cluster):
    """A user the API server knows but whose roles lack pods/portforward: the WebSocket
    handshake's 403 reaches the SDK's caller as PERMISSION_DENIED with the server's reason."""
    pod = forward_warm(site, sdk_python)  # kwok forwards the pod named after the sandbox
    argv = [str(sdk_python), "-c", DENIED, str(cluster.kubeconfigs["nobody"]), site.ns, pod,
            str(site.pod_grpc)]
    out = json.loads(run(argv, site.env(), timeout=60).stdout)
    assert out.get("error") == "PermissionDeniedError", out
    assert out["code"] == "PERMISSION_DENIED"
    assert "forbidden" in out["message"] and "pods/portforward" in out["message"], out["message"]
    # The same stream as admin opens: the refusal was the user's, not the pod's.
    argv[3] = site.kubeconfig
    assert json.loads(run(argv, site.env(), timeout=60).stdout) == {"opened": True}


def test_go_claim_through_port_forward(site, go_bins, sdk_python):
    warm = forward_warm(site, sdk_python)
    p = run([str(go_bins / "k8s.test"), "-test.v", "-test.count=1", "-test.run", "^TestPortForward$"],
            site.env(SBX_TEST_POOL="p", SBX_TEST_WARM=warm, SBX_TEST_PORT_FORWARD="1"), timeout=120)
    assert "--- PASS: TestPortForward" in p.stdout and "SKIP" not in p.stdout, p.stdout
    assert (site.dir / "root" / "go.txt").read_text() == "from go\n"
    assert site.claims() == []


def test_sbx_through_port_forward(site, go_bins, sdk_python, tmp_path):
    warm = forward_warm(site, sdk_python)
    sbx = str(go_bins / "sbx")
    env = site.env()
    flags = ["--namespace", site.ns]
    c = json.loads(run([sbx, "claim", "--pool", "p", "--wait", "--output", "json", *flags], env).stdout)
    assert (c["sandbox"], c["grpc_port"]) == (warm, site.pod_grpc)
    name = c["name"]
    flags += ["--sandbox", name]
    p = run([sbx, "exec", *flags, "--connect", "port-forward", "--", "sh", "-c", "echo hi; exit 3"],
            env, ok=False)
    assert (p.returncode, p.stdout) == (3, "hi\n"), p.stderr
    local = tmp_path / "up.txt"
    local.write_text("sbx through the API server\n")
    run([sbx, "cp", *flags, str(local), ":sbx.txt"], env)  # "auto": the pod IP does not answer
    assert (site.dir / "root" / "sbx.txt").read_text() == "sbx through the API server\n"
    p = run([sbx, "cp", *flags, "--connect", "port-forward", ":sbx.txt", str(tmp_path / "down.txt")], env)
    assert p.stderr == "", p.stderr  # client-go's own logging is not sbx's output
    assert (tmp_path / "down.txt").read_text() == "sbx through the API server\n"
    p = run([sbx, "exec", *flags, "--connect", "ssh", "--", "true"], env, ok=False)
    assert p.returncode == 1 and "connect must be" in p.stderr, p.stderr
    run([sbx, "release", "--namespace", site.ns, name], env)
    assert site.claims() == []
    site.wait_gone(warm)


def test_mcp_server_claims_through_port_forward(site, sdk_python):
    warm = forward_warm(site, sdk_python)
    out = json.loads(run([str(sdk_python), "-c", MCP, "--namespace", site.ns, "--connect", "port-forward"],
                         site.env(), timeout=120).stdout)
    assert out["claim"]["sandbox"] == warm
    assert (out["run"]["exit_code"], out["run"]["stdout"]) == (0, "from cat\n")
    assert out["release"]["sandbox"] == warm
    assert site.claims() == []
    site.wait_gone(warm)
