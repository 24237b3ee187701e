"""E2B's control plane in sandboxd-router (--e2b-api, --e2b-domain) against the real control
plane: the unmodified `e2b` Python SDK from PyPI creates a sandbox (a SandboxClaim on the warm
pool its template ID names, in the namespace of its API key), reads it, lists it by metadata,
moves its timeout and kills it; raw HTTP covers the refusals (E2B's JSON error bodies and
status codes), and E2B's sandbox traffic (the E2b-Sandbox-Id / E2b-Sandbox-Port headers on the
router's own host, and hosts <port>-<sandboxid>.<domain>) reaches the claim's pod at that port,
here an echo server on the loopback address kwok gives the pods.

The site is test_sdk_lifecycle's (a controller, a loopback template, a warm pool "p" of one and a
real sandboxd behind the warm sandbox); the router test_router's, run as router/config's service
account with router/config/rbac/e2b.yaml's rights on top. envd (the sandbox side of commands and
files) is not here: E2B_SANDBOX_URL points the SDK's sandbox traffic at the router, and what
reaches the pod is checked by the echo server.

Needs SANDBOXD_BIN, SANDBOXD_CONTROLLER_BIN, SANDBOXD_ROUTER_BIN and PyPI (the SDK's virtualenv,
made once under ~/.cache/sandboxd/e2b-venv)."""

import base64
import http.client
import http.server
import json
import re
import socket
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from conftest import REPO, Proc, free_port, wait_until
from test_pool import EXT, owned_by, pool, wait_pool_ready
from test_router import POD_IP, new_ip, router_rbac, routers  # noqa: F401 - fixtures
from test_sdk_lifecycle import sandboxd_bin, site  # noqa: F401 - fixture

E2B_VERSION = "2.63.0"  # the newest e2b on PyPI when this was written
KEY = "e2b_0123456789abcdef"
OTHER_KEY = "e2b_another.team-key"  # another namespace's
DOMAIN = "e2b.test"
CLAIM = (EXT, "SandboxClaim")
ID_LABEL = "e2b.sandboxd.dev/sandbox-id"


@pytest.fixture(scope="module")
def e2b_python():
    """The Python of test/e2b's virtualenv: the e2b SDK pinned there (E2B_VERSION)."""
    p = subprocess.run([str(REPO / "test/e2b/venv.sh")], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, f"test/e2b/venv.sh: {p.stderr[-2000:]}"
    py = Path(p.stdout.strip()) / "bin" / "python"
    have = subprocess.run([str(py), "-c", "import e2b.api.metadata as m; print(m.package_version)"],
                          capture_output=True, text=True)
    assert have.stdout.strip() == E2B_VERSION, f"test/e2b pins e2b {have.stdout.strip()}"
    return py


@pytest.fixture
def e2b_routers(site, routers, router_rbac, cluster):  # noqa: F811
    """Starts routers with E2B on (and more flags), their keys' Secret mapping KEY to the site's
    namespace and OTHER_KEY to another."""
    for obj in yaml.safe_load_all((REPO / "router/config/rbac/e2b.yaml").read_text()):
        cluster.admin.apply(obj)
    site.k.create({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "e2b-keys", "namespace": site.ns},
                   "data": {KEY: base64.b64encode(site.ns.encode()).decode(),
                            OTHER_KEY: base64.b64encode(b"another-team").decode()}})

    def start(*extra):
        r = routers("--e2b-api", f"--e2b-domain={DOMAIN}",
                    f"--e2b-api-keys-secret={site.ns}/e2b-keys", "--e2b-create-timeout=5s",
                    "--http-head-timeout=2s", *extra)
        wait_until(r.ready, 30, what="router ready")
        return r
    return start


@pytest.fixture
def e2b_router(e2b_routers):
    return e2b_routers()


class Echo:
    """An HTTP server answering each request with what it got: method, target, headers (and
    GET /health with envd's 204, for the SDK's is_running)."""

    def __init__(self, ip="127.0.0.1", port=None):
        seen, bodies = self.seen, self.bodies = [], []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
                if self.path == "/health":
                    self.send_response(204)
                    self.end_headers()
                    return
                body = json.dumps({"path": self.path, "host": self.headers.get("Host")}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(n) if n else b""
                try:
                    bodies.append(json.loads(data) if data else None)
                except ValueError:
                    bodies.append(data)
                self.do_GET()

            def log_message(self, *args):
                pass

        self.port = port or free_port()
        self.srv = http.server.ThreadingHTTPServer((ip, self.port), Handler)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def call(port, method, path, body=None, headers=None, raw=None):
    """One request to the router: (status, headers, parsed JSON or text)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=90)
    try:
        h = dict(headers or {})
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        if data is not None and "Transfer-Encoding" not in h:
            h.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        text = r.read().decode()
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = text
        return r.status, dict(r.getheaders()), parsed
    finally:
        conn.close()


def api(r, method, path, body=None, key=KEY, **kw):
    return call(r.port, method, path, body, {"X-API-Key": key} if key else {}, **kw)


SDK = r"""
import json, os, sys
from datetime import datetime, timezone
from e2b import Sandbox, SandboxQuery
from e2b.connection_config import ConnectionConfig
from e2b.exceptions import AuthenticationException, NotFoundException, SandboxException

# envd's port, which the SDK names in E2b-Sandbox-Port: the stand-in's (another test's envd may
# hold *:49983 on this machine, which no other address can then bind).
ConnectionConfig.envd_port = int(sys.argv[1])
out = {}
sb = Sandbox.create(template="envd", timeout=120, metadata={"team": "a", "run": "1"},
                    envs={"GREETING": "hi there"})
out["id"], out["domain"] = sb.sandbox_id, sb.sandbox_domain
out["running"] = sb.is_running()  # GET /health at 49983, through the router by E2b-Sandbox-Id
out["connected"] = Sandbox.connect(sb.sandbox_id).sandbox_id
info = sb.get_info()
out["info"] = {"template": info.template_id, "metadata": info.metadata,
               "cpu": info.cpu_count, "mib": info.memory_mb,
               "state": str(info.state.value), "left": (info.end_at - datetime.now(timezone.utc)).total_seconds()}
out["listed_sizes"] = [(s.cpu_count, s.memory_mb) for s in Sandbox.list().next_items()]
out["listed"] = [s.sandbox_id for s in Sandbox.list(query=SandboxQuery(metadata={"team": "a"})).next_items()]
out["not_listed"] = [s.sandbox_id for s in Sandbox.list(query=SandboxQuery(metadata={"team": "b"})).next_items()]
sb.set_timeout(900)
out["left_after"] = (sb.get_info().end_at - datetime.now(timezone.utc)).total_seconds()
try:
    Sandbox.get_info("nosuchsandbox0")
except NotFoundException as e:
    out["missing"] = type(e).__name__
try:
    Sandbox.create(template="nosuchtemplate")
except SandboxException as e:
    out["no_template"] = [type(e).__name__, str(e)]
try:
    Sandbox.list(api_key="e2b_wrong").next_items()
except AuthenticationException as e:
    out["bad_key"] = type(e).__name__
out["claim_" + sb.sandbox_id] = True
print(json.dumps(out), flush=True)
sys.stdin.readline()  # the test looks at the cluster meanwhile
out2 = {"killed": sb.kill(), "killed_again": Sandbox.kill(sb.sandbox_id),
        "running": sb.is_running()}  # the router's 502 "... was not found": False
try:
    sb.get_info()
except NotFoundException as e:
    out2["after_kill"] = type(e).__name__
print(json.dumps(out2), flush=True)
"""


def envd_pool(site):  # noqa: F811
    """A template "envd" whose pods kwok puts on an address of their own, and its pool of one:
    a stand-in envd there answers the SDK's GET /health."""
    ip = new_ip()
    site.k.create({"apiVersion": EXT, "kind": "SandboxTemplate",
                   "metadata": {"name": "envd", "namespace": site.ns},
                   "spec": {"podTemplate": {"metadata": {"labels": {POD_IP: ip}}, "spec": {
                       "containers": [{"name": "main", "image": "debian:12", "resources": {
                           "limits": {"cpu": "1500m", "memory": "1Gi"}}}]}}}})
    pool(site.k, site.ns, "envd", 1, tpl="envd")
    wait_pool_ready(site.k, site.ns, "envd", 1)
    return Echo(ip)


def test_sdk_create_info_list_timeout_kill(site, e2b_routers, e2b_python):  # noqa: F811
    envd = envd_pool(site)
    r = e2b_routers(f"--e2b-envd-port={envd.port}")
    env = site.env(E2B_API_URL=f"http://127.0.0.1:{r.port}", E2B_API_KEY=KEY, E2B_DOMAIN=DOMAIN,
                   E2B_SANDBOX_URL=f"http://127.0.0.1:{r.port}")
    p = subprocess.Popen([str(e2b_python), "-c", SDK, str(envd.port)], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line, p.stderr.read() if p.poll() is not None else "no output"
        out = json.loads(line)
        sid = out["id"]
        assert sid.isalnum() and sid == sid.lower() and len(sid) == 20
        assert out["domain"] == DOMAIN and out["running"] is True and out["connected"] == sid
        # The env vars went to envd's /init, with its access token, before the create answered.
        init = [h for (m, path, h) in envd.seen if (m, path) == ("POST", "/init")]
        assert len(init) == 1 and init[0]["x-access-token"] == site.token_of(
            site.k.get(*CLAIM, site.ns, sid)["status"]["sandbox"]["name"])
        assert envd.bodies[0] == {"envVars": {"GREETING": "hi there"}}
        health = [h for (m, path, h) in envd.seen if path == "/health"]
        assert health and health[0].get("e2b-sandbox-id") == sid
        assert health[0].get("x-access-token") == site.token_of(
            site.k.get(*CLAIM, site.ns, sid)["status"]["sandbox"]["name"])
        assert out["info"]["template"] == "envd" and out["info"]["state"] == "running"
        assert out["info"]["metadata"] == {"team": "a", "run": "1"}
        # Its pod's limits, as E2B counts: whole CPUs, MiB.
        assert (out["info"]["cpu"], out["info"]["mib"]) == (2, 1024)
        assert out["listed_sizes"] == [[2, 1024]]
        assert 100 < out["info"]["left"] <= 121, out["info"]
        assert out["listed"] == [sid] and out["not_listed"] == []
        assert 880 < out["left_after"] <= 901
        assert out["missing"] == "SandboxNotFoundException"
        assert out["no_template"][0] == "SandboxException" and "404" in out["no_template"][1]
        assert out["bad_key"] == "AuthenticationException"

        # In the cluster: the claim named by the ID, on pool p, adopted the warm sandbox; its
        # end is the Sandbox's too; metadata and env vars kept in annotations.
        claim = site.k.get(*CLAIM, site.ns, sid)
        assert claim["metadata"]["labels"][ID_LABEL] == sid
        assert claim["spec"]["warmPoolRef"] == {"name": "envd"}
        ann = claim["metadata"]["annotations"]
        assert json.loads(ann["e2b.sandboxd.dev/env-vars"]) == {"GREETING": "hi there"}
        assert json.loads(ann["e2b.sandboxd.dev/metadata"]) == {"team": "a", "run": "1"}
        sb_name = claim["status"]["sandbox"]["name"]
        sandbox = site.k.get("agents.x-k8s.io/v1beta1", "Sandbox", site.ns, sb_name)
        assert sandbox["spec"]["shutdownTime"] == claim["spec"]["lifecycle"]["shutdownTime"]
        assert sandbox["spec"]["shutdownPolicy"] == "Delete"

        # The create's answer carried the sandbox's token as envd's access token.
        status, _, body = api(r, "POST", f"/v2/sandboxes/{sid}/connect", {"timeout": 60})
        assert status == 200 and body["sandboxID"] == sid
        assert body["envdAccessToken"] == site.token_of(sb_name)

        p.stdin.write("\n")
        p.stdin.flush()
        out2 = json.loads(p.stdout.readline())
        assert out2 == {"killed": True, "killed_again": False, "running": False,
                        "after_kill": "SandboxNotFoundException"}
        wait_until(lambda: site.k.find(*CLAIM, site.ns, sid) is None, 30, what="claim deleted")
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        envd.close()


def test_refusals_are_e2b_errors(site, e2b_router):  # noqa: F811
    r = e2b_router
    s, _, b = api(r, "GET", "/v2/sandboxes", key=None)
    assert s == 401 and b["code"] == 401 and "API key" in b["message"]
    s, _, b = api(r, "GET", "/sandboxes", key="e2b_nope")
    assert (s, b["code"]) == (401, 401)
    s, _, b = api(r, "POST", "/v2/sandboxes", raw=b"{not json")
    assert s == 400 and "JSON" in b["message"]
    s, _, b = api(r, "POST", "/v2/sandboxes", {"timeout": 10})
    assert s == 400 and "templateID" in b["message"]
    s, _, b = api(r, "POST", "/v2/sandboxes", {"templateID": "p", "timeout": -1})
    assert s == 400 and "timeout" in b["message"]
    s, _, b = api(r, "POST", "/v2/sandboxes", {"templateID": "p", "metadata": {"a": 1}})
    assert s == 400 and "metadata.a" in b["message"]
    s, _, b = api(r, "POST", "/v2/sandboxes", {"templateID": "p", "autoPause": True})
    assert s == 400 and "autoPause" in b["message"]
    s, _, b = api(r, "POST", "/v2/sandboxes", {"templateID": "nosuch"})
    assert s == 404 and "nosuch" in b["message"]
    s, _, b = api(r, "GET", "/sandboxes/NOT_AN_ID")
    assert s == 404
    s, _, b = api(r, "DELETE", "/sandboxes/nosuchsandbox")
    assert s == 404
    s, _, b = api(r, "POST", "/sandboxes/nosuchsandbox/timeout", {"timeout": "x"})
    assert s == 400
    s, _, b = api(r, "POST", "/sandboxes/nosuchsandbox/timeout", {"timeout": 30})
    assert s == 404
    s, _, b = api(r, "POST", "/sandboxes/abc/pause")
    assert s == 501 and b["code"] == 501
    s, _, b = api(r, "PUT", "/sandboxes/abc")
    assert s == 405
    s, _, b = api(r, "GET", "/v2/sandboxes?state=paused")
    assert (s, b) == (200, [])
    # Bounded bodies: chunked ones are read (the JS SDK's fetch sends its JSON so) up to the
    # same bound as one of a Content-Length; a large one 413, a malformed one 400.
    chunked = {"X-API-Key": KEY, "Transfer-Encoding": "chunked"}
    s, _, b = call(r.port, "POST", "/v2/sandboxes", headers=chunked,
                   raw=b"2\r\n{\"\r\n3;ext=1\r\ntim\r\na\r\neout\": 10}\r\n0\r\nX-T: 1\r\n\r\n")
    assert s == 400 and "templateID" in b["message"], b
    big = json.dumps({"templateID": "p", "metadata": {"a": "x" * 300000}}).encode()
    s, _, _ = call(r.port, "POST", "/v2/sandboxes", headers=chunked, raw=b"".join(
        b"%x\r\n%s\r\n" % (len(big[i:i + 4096]), big[i:i + 4096])
        for i in range(0, len(big), 4096)) + b"0\r\n\r\n")
    assert s == 413
    s, _, _ = call(r.port, "POST", "/v2/sandboxes", headers=chunked, raw=b"zz\r\n{}\r\n0\r\n\r\n")
    assert s == 400
    s, _, _ = api(r, "POST", "/v2/sandboxes", {"templateID": "p", "metadata": {"a": "x" * 300000}})
    assert s == 413
    # A body that stops coming: 408 once the head timeout passes; one cut short: nothing.
    with socket.create_connection(("127.0.0.1", r.port), timeout=30) as c:
        c.sendall(b"POST /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: " + KEY.encode() +
                  b"\r\nContent-Length: 100\r\n\r\n{\"templ")
        assert c.recv(4096).startswith(b"HTTP/1.1 408 ")
    with socket.create_connection(("127.0.0.1", r.port), timeout=30) as c:
        c.sendall(b"POST /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: " + KEY.encode() +
                  b"\r\nContent-Length: 100\r\n\r\n{\"templ")
        c.shutdown(socket.SHUT_WR)
        assert c.recv(4096) == b""
    # The API host answers only the API.
    s, _, b = call(r.port, "GET", "/v1/files/x", headers={"Host": f"api.{DOMAIN}", "X-API-Key": KEY})
    assert s == 404 and b["code"] == 404
    assert site.claims() == []
    assert r.get(r.probe, "/healthz")[0] == 200 and r.alive()


def test_a_sandbox_not_ready_in_time_is_504_and_gone(site, e2b_router):  # noqa: F811
    """A pool whose pods never turn Ready: the create gives up after --e2b-create-timeout with
    E2B's 504 (Should-Retry: false, so the SDK does not create again) and deletes its claim."""
    site.k.create({"apiVersion": EXT, "kind": "SandboxTemplate",
                   "metadata": {"name": "stuck", "namespace": site.ns},
                   "spec": {"podTemplate": {"metadata": {"labels": {
                       "sandboxd.test/never-ready": "true"}}, "spec": {
                       "containers": [{"name": "main", "image": "debian:12"}]}}}})
    pool(site.k, site.ns, "stuck", 1, tpl="stuck")
    s, h, b = api(e2b_router, "POST", "/v2/sandboxes", {"templateID": "stuck"})
    assert s == 504 and "not ready" in b["message"], (s, b)
    assert h.get("Should-Retry") == "false"
    wait_until(lambda: site.claims() == [], 30, what="the claim deleted")


def test_sandbox_traffic_reaches_the_claims_pod(site, e2b_router, e2b_routers):  # noqa: F811
    site.serve_warm()
    r, echo = e2b_router, Echo()
    try:
        s, _, b = api(r, "POST", "/sandboxes", {"templateID": "tpl", "timeout": 60})
        assert s == 201, b  # a template's name finds its pool too
        sid = b["sandboxID"]
        assert b["templateID"] == "tpl" and b["domain"] == DOMAIN

        # The shared host: E2B's headers, as the SDK sends them with E2B_SANDBOX_URL.
        s, _, got = call(r.port, "GET", "/health?x=1", headers={
            "E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": str(echo.port),
            "Authorization": "Basic dXNlcjo=", "X-Access-Token": "tok"})
        assert s == 200 and got["path"] == "/health?x=1", got
        # What names envd's user and carries its token reaches the sandbox.
        assert echo.seen[-1][2].get("authorization") == "Basic dXNlcjo="
        assert echo.seen[-1][2].get("x-access-token") == "tok"
        # The host form: <port>-<id>.<domain>, any port after it.
        s, _, got = call(r.port, "POST", "/process.Process/List", body={}, headers={
            "Host": f"{echo.port}-{sid}.{DOMAIN}:443"})
        assert s == 200 and got["path"] == "/process.Process/List", got
        assert echo.seen[-1][2].get("x-forwarded-host") == f"{echo.port}-{sid}.{DOMAIN}:443"

        # A sandbox that is not there: E2B's 502 "... was not found" (the SDK's
        # SandboxNotRunningException); a malformed ID or host 400.
        s, _, got = call(r.port, "GET", "/health", headers={"E2b-Sandbox-Id": "nosuchsandbox"})
        assert s == 502 and "was not found" in got["message"]
        s, _, got = call(r.port, "GET", "/health", headers={"E2b-Sandbox-Id": "Bad-Id"})
        assert s == 400
        s, _, got = call(r.port, "GET", "/", headers={"Host": f"x-{sid}.{DOMAIN}"})
        assert s == 400

        # Another key's namespace sees nothing of it, and cannot touch it.
        assert api(r, "GET", f"/sandboxes/{sid}", key=OTHER_KEY)[0] == 404
        assert api(r, "GET", "/v2/sandboxes", key=OTHER_KEY)[::2] == (200, [])
        assert api(r, "POST", f"/sandboxes/{sid}/timeout", {"timeout": 1}, key=OTHER_KEY)[0] == 404
        assert api(r, "DELETE", f"/sandboxes/{sid}", key=OTHER_KEY)[0] == 404
        assert [x["sandboxID"] for x in api(r, "GET", "/sandboxes")[2]] == [sid]

        s, _, _ = api(r, "DELETE", f"/sandboxes/{sid}")
        assert s == 204
        # Deleted through the API: its route is forgotten at once.
        s, _, got = call(r.port, "GET", "/health", headers={
            "E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": str(echo.port)})
        assert s == 502 and "was not found" in got["message"]

        # Env vars no envd took (nothing listens at that port): 500, not retried, no claim.
        r2 = e2b_routers(f"--e2b-envd-port={free_port()}")
        s, h, b = api(r2, "POST", "/sandboxes", {"templateID": "p", "envVars": {"A": "1"}})
        assert s == 500 and "env vars" in b["message"] and h.get("Should-Retry") == "false", b
        wait_until(lambda: site.claims() == [], 30, what="the claim deleted")
    finally:
        echo.close()


RUN = r"""
import json, sys
from e2b import Sandbox
from e2b.connection_config import ConnectionConfig

ConnectionConfig.envd_port = int(sys.argv[1])  # as in SDK above: the sandboxd's E2B port
sb = Sandbox.create(template="real", timeout=120, envs={"GREETING": "hi there"})
r = sb.commands.run("echo routed $GREETING; echo err >&2")
sb.files.write(sys.argv[2], "through the router")
out = {"stdout": r.stdout, "stderr": r.stderr, "exit": r.exit_code,
       "read": sb.files.read(sys.argv[2]), "killed": sb.kill()}
print(json.dumps(out))
"""


def real_envd(site, tmp_path, name="real", extra=(), port=None):  # noqa: F811
    """A template `name` whose pods kwok puts on an address of their own, its warm pool of one,
    and a real sandboxd with its E2B port there (port, or a free one), holding the warm sandbox's
    token (envd's access token, as the router hands it out). Returns the daemon (Proc) and its
    E2B port; the caller stops it."""
    ip = new_ip()
    site.k.create({"apiVersion": EXT, "kind": "SandboxTemplate",
                   "metadata": {"name": name, "namespace": site.ns},
                   "spec": {"podTemplate": {"metadata": {"labels": {POD_IP: ip}}, "spec": {
                       "containers": [{"name": "main", "image": "debian:12"}]}}}})
    pool(site.k, site.ns, name, 1, tpl=name)
    wait_pool_ready(site.k, site.ns, name, 1)
    warm = owned_by(site.k, site.ns, "SandboxWarmPool", name)[0]["metadata"]["name"]
    tok = tmp_path / "token"
    tok.write_text(site.token_of(warm) + "\n")
    tok.chmod(0o600)
    root = tmp_path / "root"
    root.mkdir()
    port = port or free_port()
    d = Proc("sandboxd-e2b", [sandboxd_bin(), "--listen-host", ip, "--grpc-port", "0",
                              "--rest-port", "0", "--e2b-port", str(port), "--root-dir",
                              str(root), "--token-file", str(tok), "--shutdown-timeout", "5s",
                              *extra], str(tmp_path))
    try:
        wait_until(lambda: d.alive() and re.search(r"e2b listening on \S+ port \d+",
                                                   d.log.read_text(errors="replace")),
                   20, what="sandboxd's E2B port")
    except BaseException:
        d.stop()
        raise
    return d, port


def test_sdk_commands_and_files_through_the_router(site, e2b_routers, e2b_python,  # noqa: F811
                                                   tmp_path):
    """The whole way: the SDK creates a sandbox through the router's API (its env vars pushed to
    envd's /init by the router), then runs a command that sees them and writes and reads a file
    through the router's sandbox routing, to a real sandboxd's E2B port (--e2b-port) at the
    pod's address, which checks the envd access token the create answered (the sandbox's
    Secret's token)."""
    d, port = real_envd(site, tmp_path)
    try:
        r = e2b_routers(f"--e2b-envd-port={port}")
        env = site.env(E2B_API_URL=f"http://127.0.0.1:{r.port}", E2B_API_KEY=KEY,
                       E2B_DOMAIN=DOMAIN, E2B_SANDBOX_URL=f"http://127.0.0.1:{r.port}")
        path = tmp_path / "files" / "routed.txt"
        p = subprocess.run([str(e2b_python), "-c", RUN, str(port), str(path)], env=env,
                           capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, p.stderr[-3000:] + d.tail()
        out = json.loads(p.stdout)
        assert out == {"stdout": "routed hi there\n", "stderr": "err\n", "exit": 0,
                       "read": "through the router", "killed": True}, out
        assert path.read_text() == "through the router"
        assert site.claims() == [] or all(
            "deletionTimestamp" in c["metadata"] for c in site.k.list(*CLAIM, site.ns))
    finally:
        assert d.stop() == 0, d.tail()
