"""Authorization at the router (--authz-mode), over gRPC, with real sandboxd daemons behind it.

scoped-token: tokens minted here (our own HMAC and base64url, and one minted by the reference's
MintScopedToken) accepted for their sandbox only; missing, expired, forged, tampered, another
sandbox's or another namespace's refused, and a pod-IP or UID override refused with a valid
token. The router routes by the DNS form of (namespace, name), as the mode requires: it runs in
a mount namespace whose /etc/hosts leads those names to the daemons on loopback (root needed).
The client's credential never reaches sandboxd in that mode, nor a user's port in allow-all, and
reaches sandboxd's own port in allow-all (its token is sandboxd's business). Decisions counted
in sandbox_router_authz_decisions_total. Over HTTP/1.1, to an app standing for a user's port:
the reference's 401/403 {"detail": ...}; a token by header, by `token` query parameter (which
sets the router's cookie, scoped to the host or to the path-form preview URL) and by that
cookie; none of them reaching the app; headless Chromium opening a preview URL with a token
once, its fetch and WebSocket passing by the cookie. The API server's modes are in
test/controller."""

import base64
import hashlib
import hmac
import http.client
import json
import os
import random
import time

import grpc
import pytest

from conftest import DaemonProcess, free_port, routed_client, wait_until, with_hosts
from test_http_proxy import request
from test_ports import metric
from test_tls import ctx, pki, tls_args  # noqa: F401 - pki is a fixture
from test_preview import App, browser, page_text  # noqa: F401 - browser is a fixture

SECRET = b"0123456789abcdef0123456789abcdef-router-test-secret\n"
# MintScopedToken(SECRET, "team-a", "box-a", 50 years) by the reference (Go, v0.5.6).
GO_TOKEN = ("v1.eyJucyI6InRlYW0tYSIsIm5hbWUiOiJib3gtYSIsImV4cCI6MzM3Mjk5MzU5MX0."
            "YWPgKyWVJmgsFmYKNILohgNnn9W5PiLPcgVw-fqYjUE")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace needs root")


def b64(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def mint(ns, name, exp, secret=SECRET, payload=None):
    """A scoped token, written from the reference's description (not from our C)."""
    p = b64(payload or json.dumps({"ns": ns, "name": name, "exp": exp},
                                  separators=(",", ":")).encode())
    mac = hmac.new(secret.strip(), b"agent-sandbox/scoped-token/v1." + p.encode(),
                   hashlib.sha256).digest()
    return f"v1.{p}.{b64(mac)}"


@pytest.fixture
def scoped(router_factory, tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    return router_factory(["--authz-mode", "scoped-token",
                           "--authz-scoped-token-secret-file", str(secret)],
                          wrap=with_hosts(tmp_path / "hosts", {
                              f"{n}.svc.cluster.local": "127.0.0.1"
                              for n in ("box-a.team-a", "box-b.team-a", "box-a.team-b")}))


def call(router, d, protos, token=None, ns="team-a", name="box-a", **extra):
    """Execute `echo hi` through the router at sandbox (ns, name) on d's port; the output, or
    the refusal as (code, details)."""
    md = {"x-sandbox-id": name, "x-sandbox-namespace": ns, "x-sandbox-port": str(d.port)}
    if token:
        md["authorization"] = f"Bearer {token}"
    md.update(extra)
    c = routed_client(router.target, protos, tuple(md.items()))
    try:
        return c.execute(["echo", "hi"]).stdout
    except grpc.RpcError as e:
        return (e.code(), e.details())
    finally:
        c.close()


def decisions(router, which):
    return int(metric(router, f'sandbox_router_authz_decisions_total{{decision="{which}"}}')
               .split()[-1])


def test_scoped_token_opens_its_sandbox(scoped, sandboxd, protos):
    now = int(time.time())
    assert call(scoped, sandboxd, protos, mint("team-a", "box-a", now + 600)) == b"hi\n"
    assert call(scoped, sandboxd, protos, GO_TOKEN) == b"hi\n", "the reference's own token"
    assert call(scoped, sandboxd, protos, mint("team-a", "box-b", now + 600),
                name="box-b") == b"hi\n"
    assert decisions(scoped, "allow") == 3 and decisions(scoped, "deny") == 0


def test_scoped_token_refusals(scoped, sandboxd, protos):
    now = int(time.time())
    good = mint("team-a", "box-a", now + 600)
    unauth = (grpc.StatusCode.UNAUTHENTICATED, "router (scoped-token): unauthenticated")
    denied = (grpc.StatusCode.PERMISSION_DENIED, "router (scoped-token): forbidden")
    tampered = good.split(".")
    tampered[1] = b64(json.dumps({"ns": "team-a", "name": "box-b", "exp": now + 600},
                                 separators=(",", ":")).encode())
    cases = {
        "missing": (None, {}, unauth),
        "expired": (mint("team-a", "box-a", now - 1), {}, unauth),
        "forged (another secret)": (mint("team-a", "box-a", now + 600,
                                         secret=b"x" * 32 + b"another-secret"), {}, unauth),
        "tampered (claims changed, old signature)": (".".join(tampered), {"name": "box-b"},
                                                     unauth),
        "not a token": ("hello", {}, unauth),
        "another sandbox's": (mint("team-a", "box-b", now + 600), {}, denied),
        "another namespace's": (good, {"ns": "team-b"}, denied),
        "with a pod IP override": (good, {"x-sandbox-pod-ip": "127.0.0.1"}, denied),
        "with a UID override": (good, {"x-sandbox-uid": "0c0ffee0-1234-4321-aaaa-0123456789ab"},
                                denied),
    }
    for what, (tok, extra, want) in cases.items():
        kw = {k: v for k, v in extra.items() if k in ("ns", "name")}
        md = {k: v for k, v in extra.items() if k not in ("ns", "name")}
        assert call(scoped, sandboxd, protos, tok, **kw, **md) == want, what
    assert decisions(scoped, "deny") == len(cases) and decisions(scoped, "allow") == 0


def test_scoped_token_never_reaches_sandboxd(scoped, sandboxd_factory, protos, tmp_path):
    """sandboxd's own token is the scoped token itself: were the router to pass the client's
    authorization on, sandboxd would take it. It answers that none came."""
    tok = mint("team-a", "box-a", int(time.time()) + 600)
    f = tmp_path / "token"
    f.write_text(tok)
    d = sandboxd_factory(["--token-file", str(f)])
    assert call(scoped, d, protos, tok) == (grpc.StatusCode.UNAUTHENTICATED,
                                            "missing bearer token")


class ListeningSandboxd(DaemonProcess):
    """sandboxd on a given loopback address and port (the gRPC port the router defaults to)."""

    name = "sandboxd"

    def __init__(self, binary, root, host, port, token_file, env):
        super().__init__([binary, "--listen-host", host, "--grpc-port", str(port),
                          "--rest-port", "0", "--root-dir", root, "--token-file", token_file,
                          "--log-level", "debug"], env=env)
        self.wait_line(r"\bready\b")
        self.port = port


@pytest.fixture
def sandboxd_at_9090(sandboxd_bin, tmp_path, daemon_env):
    """sandboxd with a token on 9090 at a loopback address of its own (none else listens there:
    127.0.0.0/8 is all loopback), as a pod's sandboxd listens on its pod IP."""
    token = "t0k3n-" + os.urandom(8).hex()
    (tmp_path / "token").write_text(token)
    (tmp_path / "root").mkdir()
    for _ in range(5):
        host = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
        try:
            d = ListeningSandboxd(sandboxd_bin, tmp_path / "root", host, 9090,
                                  tmp_path / "token", daemon_env)
            break
        except RuntimeError as e:
            if "in use" not in str(e):
                raise
    d.host, d.token = host, token
    yield d
    assert d.stop(10) == 0, d.log()


def test_allow_all_passes_authorization_to_sandboxd_only(router, sandboxd_at_9090,
                                                          sandboxd_factory, protos, tmp_path):
    d = sandboxd_at_9090
    md = (("x-sandbox-id", "sb"), ("x-sandbox-pod-ip", d.host),
          ("authorization", f"Bearer {d.token}"))
    c = routed_client(router.target, protos, md)
    assert c.execute(["echo", "hi"]).stdout == b"hi\n", "sandboxd's port: its token went on"
    c.close()
    # The same port named by the client is a user's port (an app may hold 9090): not handed on.
    c = routed_client(router.target, protos, md + (("x-sandbox-port", "9090"),))
    with pytest.raises(grpc.RpcError) as e:
        c.execute(["true"])
    assert e.value.details() == "missing bearer token"
    c.close()
    # A port the client names is a user's port: no credential of the client's reaches it.
    (tmp_path / "t2").write_text(d.token)
    user = sandboxd_factory(["--token-file", str(tmp_path / "t2")])
    c = routed_client(router.target, protos, md[:1] + (
        ("x-sandbox-pod-ip", "127.0.0.1"), ("x-sandbox-port", str(user.port))) + md[2:])
    with pytest.raises(grpc.RpcError) as e:
        c.execute(["true"])
    assert (e.value.code(), e.value.details()) == (grpc.StatusCode.UNAUTHENTICATED,
                                                   "missing bearer token")
    c.close()


# ------------------------------------------------------------------------------------------------
# HTTP/1.1: the same decisions with the reference's answers, the browser's query token and cookie,
# and no credential of the client's reaching the app.

def app_saw(app, path):
    """The headers the app got with the last request for path (its query included)."""
    for p, h in reversed(app.seen):
        if p.split("?")[0] == path.split("?")[0]:
            return p, {k.lower(): v for k, v in h.items()}
    raise AssertionError(f"the app never saw {path}: {app.seen}")


@pytest.fixture(scope="module")
def app():
    a = App()
    yield a
    a.close()


def test_http_scoped_token_header_query_and_cookie(scoped, app):
    now = int(time.time())
    tok = mint("team-a", "box-a", now + 600)
    to = {"X-Sandbox-ID": "box-a", "X-Sandbox-Namespace": "team-a",
          "X-Sandbox-Port": str(app.port)}
    r, body = request(scoped, "GET", "/data.json", {**to, "Authorization": f"Bearer {tok}"})
    assert r.status == 200 and json.loads(body) == {"n": 42}
    assert "authorization" not in app_saw(app, "/data.json")[1]
    assert r.getheader("Set-Cookie") is None, "no cookie for a token in the header"

    r, body = request(scoped, "GET", f"/data.json?x=1&token={tok}", to)
    assert r.status == 200
    cookie = r.getheader("Set-Cookie")
    prefix = f"sandbox-router-token={tok}; Path=/; HttpOnly; SameSite=Lax; Max-Age="
    assert cookie.startswith(prefix) and 0 < int(cookie[len(prefix):]) <= 600, cookie
    path, _ = app_saw(app, "/data.json?x=1")
    assert path == "/data.json?x=1", "the token parameter was taken out"

    r, body = request(scoped, "GET", "/data.json",
                      {**to, "Cookie": f"a=1; sandbox-router-token={tok}"})
    assert r.status == 200
    assert app_saw(app, "/data.json")[1].get("cookie") == "a=1", "the router's cookie taken out"
    # The app's own cookies, however they are joined, go on (here longer than they came).
    r, body = request(scoped, "GET", "/data.json",
                      {**to, "Authorization": f"Bearer {tok}", "Cookie": "a=1;b=2"})
    assert r.status == 200 and app_saw(app, "/data.json")[1].get("cookie") == "a=1; b=2"


def test_http_scoped_token_refusals(scoped, app):
    now = int(time.time())
    to = {"X-Sandbox-ID": "box-a", "X-Sandbox-Namespace": "team-a",
          "X-Sandbox-Port": str(app.port)}
    cases = [
        ({}, 401, "unauthenticated"),
        ({"Authorization": f"Bearer {mint('team-a', 'box-a', now - 1)}"}, 401, "unauthenticated"),
        ({"Authorization": f"Bearer {mint('team-a', 'box-a', now + 60, secret=b'y' * 40)}"},
         401, "unauthenticated"),
        ({"Cookie": f"sandbox-router-token={mint('team-a', 'box-a', now - 1)}"}, 401,
         "unauthenticated"),
        ({"Authorization": f"Bearer {mint('team-a', 'box-b', now + 60)}"}, 403, "forbidden"),
        ({"Authorization": f"Bearer {mint('team-a', 'box-a', now + 60)}",
          "X-Sandbox-Pod-IP": "127.0.0.1"}, 403, "forbidden"),
    ]
    seen = len(app.seen)
    for extra, status, detail in cases:
        r, body = request(scoped, "GET", "/data.json", {**to, **extra})
        assert (r.status, json.loads(body)) == (status, {"detail": detail}), extra
    r, body = request(scoped, "GET", "/data.json?token=%zz", to)
    assert r.status == 400
    assert len(app.seen) == seen, "no refused request reached the app"


def test_http_scoped_token_path_form_cookie_is_that_ports(scoped, app):
    tok = mint("team-a", "box-a", int(time.time()) + 600)
    r, _ = request(scoped, "GET", f"/s/team-a/box-a/{app.port}/data.json?token={tok}",
                    {"Host": "router.test"})
    assert r.status == 200
    assert f"; Path=/s/team-a/box-a/{app.port}/;" in r.getheader("Set-Cookie")
    assert app_saw(app, "/data.json")[0] == "/data.json"


def test_browser_opens_a_scoped_preview_url_once(router_factory, tmp_path, app, browser):
    """Chromium opens http://<port>-box-a.team-a.localhost/?token=...: the page, its fetch and
    its WebSocket (which cannot carry a header) pass by the cookie the first answer set; the same
    URL without the token, in a fresh profile, is refused."""
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    r = router_factory(["--preview-domain", "localhost", "--authz-mode", "scoped-token",
                        "--authz-scoped-token-secret-file", str(secret)],
                       wrap=with_hosts(tmp_path / "hosts",
                                       {"box-a.team-a.svc.cluster.local": "127.0.0.1"}))
    tok = mint("team-a", "box-a", int(time.time()) + 600)
    base = f"http://{app.port}-box-a.team-a.localhost:{r.port}/"
    browser.get(base + f"?token={tok}")
    wait_until(lambda: page_text(browser) != "waiting", 30, interval=0.1, what="the page to run")
    assert page_text(browser) == "ok ping-42"
    ws_path, ws_headers = app_saw(app, "/ws")
    assert "sandbox-router-token" not in ws_headers.get("cookie", "") and \
        "authorization" not in ws_headers
    browser.delete_all_cookies()
    browser.get(base)
    assert "unauthenticated" in browser.page_source


def test_cookie_is_secure_over_tls(router_factory, tmp_path, app, pki):
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    port = free_port()
    r = router_factory(["--authz-mode", "scoped-token", "--authz-scoped-token-secret-file",
                        str(secret), *tls_args(pki, port)],
                       wrap=with_hosts(tmp_path / "hosts",
                                       {"box-a.team-a.svc.cluster.local": "127.0.0.1"}))
    tok = mint("team-a", "box-a", int(time.time()) + 600)
    to = {"X-Sandbox-ID": "box-a", "X-Sandbox-Namespace": "team-a",
          "X-Sandbox-Port": str(app.port)}
    c = http.client.HTTPSConnection("localhost", port, timeout=30, context=ctx(pki))
    c.request("GET", f"/data.json?token={tok}", headers=to)
    resp = c.getresponse()
    resp.read()
    c.close()
    assert resp.status == 200 and "; Secure" in resp.getheader("Set-Cookie")
    plain, _ = request(r, "GET", f"/data.json?token={tok}", to)
    assert "Secure" not in plain.getheader("Set-Cookie")
