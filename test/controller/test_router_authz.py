"""sandboxd-router's authorization modes that ask the API server, against the real control plane,
with real sandboxd daemons behind the router on loopback, called over gRPC.

tokenreview: a ServiceAccount's token (kubectl create token) is reviewed and let through, as any
token the API server authenticates, over gRPC and HTTP (header, query parameter setting the
cookie, cookie); garbage, a changed token and a revoked one (its ServiceAccount deleted) are
refused; no token passes unless required; --authz-tokenreview-audiences holds a token to its
audiences; a router whose own identity may not create TokenReviews (RBAC) answers UNAVAILABLE; a
decision is cached by the token: once the router has lost that right, a token it reviewed before
still passes.

sandbox-token: Sandboxes made by the controller each get a token Secret; a sandboxd holding that
token listens where the sandbox's DNS name leads (the router runs in a mount namespace whose
/etc/hosts says so, root needed) on sandboxd's default gRPC port. The sandbox's token passes the
router and then sandboxd itself, over gRPC and over HTTP to sandboxd's REST port (by header, by
`token` query parameter, which sets the router's cookie, and by that cookie: sandboxd gets it as
its header); another sandbox's, a forged or a missing token, a sandbox without
a Secret and a pod-IP override are refused at the router; a user's port never sees the token; a
router that may not read Secrets answers UNAVAILABLE; a deleted sandbox's token stops opening it.

Needs SANDBOXD_ROUTER_BIN and SANDBOXD_BIN, kubectl in the tools directory."""

import base64
import http.client
import json
import os
import random
import re
import subprocess

import grpc
import pytest
import yaml

from conftest import REPO, TOOLS, Proc, wait_until, write_kubeconfig
from test_sandbox import SB, sandbox

RBAC = "rbac.authorization.k8s.io/v1"
RBAC_DIR = REPO / "router" / "config" / "rbac"
EXECUTE = "/process.v1.ProcessService/Execute"
# ExecuteRequest{config: {command: ["echo", "hi"]}}, encoded by hand (no generated code here).
ECHO = bytes([0x0A, 0x0A, 0x0A, 0x04]) + b"echo" + bytes([0x0A, 0x02]) + b"hi"


def binary(var):
    b = os.environ.get(var)
    if not b or not os.access(b, os.X_OK):
        pytest.skip(f"{var} is not set to the built binary")
    return b


def kubectl(cluster, *args):
    k = TOOLS / "kubectl"
    if not k.exists():
        pytest.skip(f"kubectl not found at {k}: run scripts/k8s-tools.sh")
    out = subprocess.run([str(k), f"--kubeconfig={cluster.kubeconfigs['admin']}", *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def stdout_of(reply):
    """ExecuteResponse.stdout (field 2) from its bytes."""
    i = 0
    while i < len(reply):
        key, i = reply[i], i + 1
        if key & 7 == 0:
            while reply[i] & 0x80:
                i += 1
            i += 1
            continue
        n, shift = 0, 0
        while True:
            b, i = reply[i], i + 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if key >> 3 == 2:
            return reply[i:i + n]
        i += n
    return b""


class Router(Proc):
    def __init__(self, d, name, args, hosts=None):
        prefix = []
        if hosts:
            prefix = ["unshare", "--mount", "sh", "-c",
                      'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts)]
        super().__init__(name, [*prefix, binary("SANDBOXD_ROUTER_BIN"),
                                "--http-bind-address", "127.0.0.1:0",
                                "--health-probe-bind-address", "", "--metrics-bind-address", "",
                                "--allow-loopback-pod-ip", "--log-level", "debug", *args], d)
        m = wait_until(lambda: re.search(r"listening on \S+ port (\d+)",
                                         self.log.read_text(errors="replace")), 30,
                       what=f"{name} listening")
        wait_until(lambda: "ready" in self.log.read_text(errors="replace"), 30,
                   what=f"{name} ready")
        self.port = int(m.group(1))

    def call(self, md):
        """Execute `echo hi` with metadata md: its stdout, or the refusal (code, details)."""
        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as ch:
            f = ch.unary_unary(EXECUTE, request_serializer=None, response_deserializer=None)
            try:
                return stdout_of(f(ECHO, metadata=tuple(md.items()), timeout=30))
            except grpc.RpcError as e:
                return (e.code(), e.details())


def http_get(router, path, headers):
    """(status, {set-cookie when sent}, JSON body of a refusal or None) of GET path."""
    c = http.client.HTTPConnection("127.0.0.1", router.port, timeout=30)
    c.request("GET", path, headers=headers)
    resp = c.getresponse()
    body = resp.read()
    c.close()
    extra = {"set-cookie": resp.getheader("Set-Cookie")} if resp.getheader("Set-Cookie") else {}
    return resp.status, extra, json.loads(body) if resp.status >= 400 else None


def start_sandboxd(d, name, host, port, token=None, rest_port=0):
    args = [binary("SANDBOXD_BIN"), "--listen-host", host, "--grpc-port", str(port),
            "--rest-port", str(rest_port), "--root-dir", str(d / f"{name}-root"),
            "--log-level", "debug"]
    (d / f"{name}-root").mkdir()
    if token:
        (d / f"{name}-token").write_text(token + "\n")
        args += ["--token-file", str(d / f"{name}-token")]
    p = Proc(name, args, d)
    m = wait_until(lambda: re.search(r"grpc listening on \S+ port (\d+)",
                                     p.log.read_text(errors="replace")) or not p.alive(), 30,
                   what=f"{name} listening")
    assert p.alive(), p.tail()
    p.port = int(m.group(1))
    p.rest_port = int(wait_until(lambda: re.search(r"rest listening on \S+ port (\d+)",
                                                   p.log.read_text(errors="replace")), 30,
                                 what=f"{name} REST listening").group(1))
    return p


@pytest.fixture
def procs():
    started = []
    yield started
    for p in reversed(started):
        rc = p.stop()
        assert rc == 0, f"{p.name} exited {rc}:\n{p.tail()}"


def router_identity(cluster, ns, d, manifest):
    """A ServiceAccount for the router with the rights a file of router/config/rbac grants (its
    ClusterRole's rules as a Role of the test's namespace; a binding to a built-in ClusterRole as
    it is), and a kubeconfig of its token."""
    k = cluster.admin
    k.create({"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": "router", "namespace": ns}})
    subject = [{"kind": "ServiceAccount", "name": "router", "namespace": ns}]
    docs = [o for o in yaml.safe_load_all((RBAC_DIR / manifest).read_text()) if o]
    own = {o["metadata"]["name"] for o in docs if o["kind"] == "ClusterRole"}
    for o in docs:
        if o["kind"] == "ClusterRole":
            k.create({"apiVersion": RBAC, "kind": "Role", "rules": o["rules"],
                      "metadata": {"name": o["metadata"]["name"], "namespace": ns}})
        elif o["roleRef"]["name"] in own:
            k.create({"apiVersion": RBAC, "kind": "RoleBinding", "subjects": subject,
                      "metadata": {"name": o["metadata"]["name"], "namespace": ns},
                      "roleRef": {**o["roleRef"], "kind": "Role"}})
        else:
            k.create({"apiVersion": RBAC, "kind": "ClusterRoleBinding", "subjects": subject,
                      "metadata": {"name": f"router-{ns}"}, "roleRef": o["roleRef"]})
    token = kubectl(cluster, "-n", ns, "create", "token", "router", "--duration=1h")
    return write_kubeconfig(d / "router.kubeconfig", cluster.server, cluster.ca, token)


UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


def test_authz_rbac_manifests_apply(cluster):
    """The optional rights of router/config/rbac, as a user applies them, accepted as they are."""
    for f in ("authz-tokenreview.yaml", "authz-sandbox-token.yaml"):
        kubectl(cluster, "apply", "--dry-run=server", "--validate=strict", "-f",
                str(RBAC_DIR / f))


def test_tokenreview(cluster, namespace, tmp_path, procs):
    ns, k = namespace, cluster.admin
    cfg = router_identity(cluster, ns, tmp_path, "authz-tokenreview.yaml")
    k.create({"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": "caller", "namespace": ns}})
    caller = kubectl(cluster, "-n", ns, "create", "token", "caller")
    box = start_sandboxd(tmp_path, "sandboxd", "127.0.0.1", 0)
    procs.append(box)
    r = Router(tmp_path, "router", ["--authz-mode", "tokenreview", "--kubeconfig", str(cfg),
                                    "--authz-tokenreview-ttl", "10m"])
    procs.append(r)
    to = {"x-sandbox-id": "sb", "x-sandbox-namespace": ns, "x-sandbox-pod-ip": "127.0.0.1",
          "x-sandbox-port": str(box.port)}

    assert r.call({**to, "authorization": f"Bearer {caller}"}) == b"hi\n"
    assert r.call({**to, "authorization": f"Bearer {cluster.tokens['nobody']}"}) == b"hi\n", \
        "any token the API server authenticates (authentication only, as the reference's)"
    unauth = (grpc.StatusCode.UNAUTHENTICATED, "router (tokenreview): unauthenticated")
    assert r.call({**to, "authorization": "Bearer not-a-token"}) == unauth
    assert r.call({**to, "authorization": f"Bearer {caller}x"}) == unauth, "forged"
    assert r.call(to) == b"hi\n", "no token: allowed unless required"

    # A revoked token (its ServiceAccount deleted), once the API server says so itself.
    k.create({"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": "gone", "namespace": ns}})
    gone = kubectl(cluster, "-n", ns, "create", "token", "gone")
    k.delete("v1", "ServiceAccount", ns, "gone")
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
              "spec": {"token": gone}}
    wait_until(lambda: not k.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews",
                                     review)["status"].get("authenticated"), 30, interval=0.2,
               what="the API server to refuse the revoked token")
    assert r.call({**to, "authorization": f"Bearer {gone}"}) == unauth, "revoked"

    # The same over HTTP (sandboxd's REST port standing for any port): by header, by query
    # parameter (which sets the cookie) and by that cookie; the reference's 401.
    h = {"X-Sandbox-ID": "sb", "X-Sandbox-Namespace": ns, "X-Sandbox-Pod-IP": "127.0.0.1",
         "X-Sandbox-Port": str(box.rest_port)}
    assert http_get(r, "/v1/metadata", {**h, "Authorization": f"Bearer {caller}"})[0] == 200
    status, headers, _ = http_get(r, f"/v1/metadata?token={caller}", h)
    assert status == 200 and headers["set-cookie"].startswith(
        f"sandbox-router-token={caller}; Path=/; HttpOnly; SameSite=Lax"), headers
    assert http_get(r, "/v1/metadata", {**h, "Cookie": f"sandbox-router-token={caller}"})[0] == 200
    assert http_get(r, "/v1/metadata", {**h, "Authorization": "Bearer not-a-token"}) == (
        401, {}, {"detail": "unauthenticated"})
    assert http_get(r, "/v1/metadata", {**h, "Authorization": f"Bearer {gone}"}) == (
        401, {}, {"detail": "unauthenticated"})

    strict = Router(tmp_path, "router-strict", ["--authz-mode", "tokenreview", "--kubeconfig",
                                                str(cfg), "--authz-tokenreview-require-token",
                                                "--authz-tokenreview-audiences", "sbx-a, sbx-b"])
    procs.append(strict)
    assert strict.call(to) == unauth
    # Audiences: a token for one of them passes, one for another audience or for the API server
    # (kubectl's default) does not.
    for aud, want in (("sbx-b", b"hi\n"), ("other", unauth), (None, unauth)):
        t = kubectl(cluster, "-n", ns, "create", "token", "caller",
                    *([f"--audience={aud}"] if aud else []))
        assert strict.call({**to, "authorization": f"Bearer {t}"}) == want, aud

    # The router loses the right to review: new tokens cannot be decided, a reviewed one is
    # still decided by the cache (keyed by its digest) until its TTL.
    k.delete(RBAC, "ClusterRoleBinding", None, f"router-{ns}")

    def refused():
        fresh = kubectl(cluster, "-n", ns, "create", "token", "caller")
        got = r.call({**to, "authorization": f"Bearer {fresh}"})
        return got if isinstance(got, tuple) and got[0] == UNAVAILABLE else None
    code, details = wait_until(refused, 60, interval=0.5, what="the router's review refused")
    assert "TokenReview answered 403" in details, details
    assert r.call({**to, "authorization": f"Bearer {caller}"}) == b"hi\n", "cached"
    fresh = kubectl(cluster, "-n", ns, "create", "token", "caller")
    status, _, body = http_get(r, "/v1/metadata", {**h, "Authorization": f"Bearer {fresh}"})
    assert status == 500 and body["detail"].startswith("tokenreview: TokenReview answered 403"), \
        body


def loopback_ip():
    return f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"


def secret_token(k, ns, name):
    s = wait_until(lambda: k.find("v1", "Secret", ns, f"{name}-sandboxd-token"), 30,
                   what=f"{name}'s token Secret")
    return base64.b64decode(s["data"]["token"]).decode()


@pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace needs root")
def test_sandbox_token(cluster, namespace, controller, tmp_path, procs):
    ns, k = namespace, cluster.admin
    for name in ("sb-a", "sb-b"):
        k.create(sandbox(name, ns))
    tok = {name: secret_token(k, ns, name) for name in ("sb-a", "sb-b")}
    ip = {"sb-a": loopback_ip(), "sb-b": loopback_ip()}
    while ip["sb-b"] == ip["sb-a"]:
        ip["sb-b"] = loopback_ip()
    box = {n: start_sandboxd(tmp_path, n, ip[n], 9090, tok[n], rest_port=8080)
           for n in ("sb-a", "sb-b")}
    procs.extend(box.values())
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n" + "".join(
        f"{ip[n]} {n}.{ns}.svc.cluster.local\n" for n in ip))
    cfg = router_identity(cluster, ns, tmp_path, "authz-sandbox-token.yaml")
    r = Router(tmp_path, "router", ["--authz-mode", "sandbox-token", "--kubeconfig", str(cfg),
                                    "--authz-sandbox-token-ttl", "1s"], hosts=hosts)
    procs.append(r)

    def to(name, token=None, **extra):
        md = {"x-sandbox-id": name, "x-sandbox-namespace": ns, **extra}
        if token:
            md["authorization"] = f"Bearer {token}"
        return md

    # Its own token: through the router, and then through sandboxd's own check.
    assert r.call(to("sb-a", tok["sb-a"])) == b"hi\n"
    assert r.call(to("sb-b", tok["sb-b"])) == b"hi\n"
    unauth = (grpc.StatusCode.UNAUTHENTICATED, "router (sandbox-token): unauthenticated")
    assert r.call(to("sb-a", tok["sb-b"])) == unauth, "another sandbox's token"
    assert r.call(to("sb-a", os.urandom(32).hex())) == unauth, "forged"
    assert r.call(to("sb-a")) == unauth, "missing"
    assert r.call(to("nothing-here", tok["sb-a"])) == unauth, "a sandbox without a Secret"
    assert r.call(to("sb-a", tok["sb-a"], **{"x-sandbox-pod-ip": ip["sb-a"]})) == (
        grpc.StatusCode.PERMISSION_DENIED, "router (sandbox-token): forbidden"), "pod IP override"
    # A user's port of the sandbox (here another sandboxd holding the same token, on a port the
    # client names) never sees the client's credential.
    user = start_sandboxd(tmp_path, "user-port", ip["sb-a"], 0, tok["sb-a"])
    procs.append(user)
    assert r.call(to("sb-a", tok["sb-a"], **{"x-sandbox-port": str(user.port)})) == (
        grpc.StatusCode.UNAUTHENTICATED, "missing bearer token")

    # Over HTTP to sandboxd's REST port (8080, the default): the token by header, by query
    # parameter (a browser's) or by the cookie that sets reaches sandboxd as its header.
    h = {"X-Sandbox-ID": "sb-a", "X-Sandbox-Namespace": ns}
    assert http_get(r, "/v1/metadata", {**h, "Authorization": f"Bearer {tok['sb-a']}"})[0] == 200
    status, headers, _ = http_get(r, f"/v1/metadata?token={tok['sb-a']}", h)
    assert status == 200 and headers["set-cookie"].startswith(
        f"sandbox-router-token={tok['sb-a']}; Path=/; HttpOnly; SameSite=Lax"), headers
    assert http_get(r, "/v1/metadata", {**h, "Cookie": f"sandbox-router-token={tok['sb-a']}"})[
        0] == 200
    assert http_get(r, "/v1/metadata", {**h, "Authorization": f"Bearer {tok['sb-b']}"}) == (
        401, {}, {"detail": "unauthenticated"}), "another sandbox's token"
    assert http_get(r, "/v1/metadata", h) == (401, {}, {"detail": "unauthenticated"})

    # A router that may not read Secrets cannot decide.
    blind = Router(tmp_path, "router-blind", [
        "--authz-mode", "sandbox-token", "--kubeconfig", str(cluster.kubeconfigs["nobody"])],
        hosts=hosts)
    procs.append(blind)
    code, details = blind.call(to("sb-a", tok["sb-a"]))
    assert code == UNAVAILABLE and "answered 403" in details, details

    # A deleted sandbox's Secret goes with it; its token stops opening it once the cached copy
    # (1s here) is past.
    k.delete(*SB, ns, "sb-b")
    wait_until(lambda: k.find("v1", "Secret", ns, "sb-b-sandboxd-token") is None, 30,
               what="sb-b's Secret deleted")
    wait_until(lambda: r.call(to("sb-b", tok["sb-b"])) == unauth, 30, interval=0.2,
               what="sb-b's token refused")
