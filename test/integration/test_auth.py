"""Bearer-token authentication (--token-file, or SANDBOXD_TOKEN): every gRPC method and every
REST route without a token, with a wrong one, with a malformed header and with the right one;
the health services stay open, reflection too; /metrics follows --metrics-auth; the token never
shows in the daemon's log; grpcurl with -H works; bad token configuration stops the start-up."""

import base64
import json
import os
import secrets
import subprocess

import grpc
import pytest

from conftest import Sandboxd, _RUNNING, _make_root, http_request, status_of, wait_until

SC = grpc.StatusCode
TOKEN = "sbx-" + secrets.token_urlsafe(24)
WRONG = "sbx-" + secrets.token_urlsafe(24)
START_TIMEOUT = 10


@pytest.fixture(scope="module")
def authd(sandboxd_bin, protos, tmp_path_factory, daemon_env):
    """One daemon with a token file (the token followed by a newline, as `echo` writes it)."""
    tf = tmp_path_factory.mktemp("token") / "token"
    tf.write_text(TOKEN + "\n")
    tf.chmod(0o600)
    d = Sandboxd(sandboxd_bin, _make_root(tmp_path_factory, "root"), protos,
                 extra_args=["--token-file", tf], env=daemon_env)
    _RUNNING.append(d)
    try:
        yield d
    finally:
        _RUNNING.remove(d)
        d.stop_and_check()
        assert_not_logged(d)


def assert_not_logged(d):
    log = d.log()
    assert TOKEN not in log, "the token is in the daemon's log"
    assert WRONG not in log, "a presented (wrong) token is in the daemon's log"


CREDENTIALS = {
    "none": None,
    "wrong": f"Bearer {WRONG}",
    "malformed": f"Basic {base64.b64encode(TOKEN.encode()).decode()}",
    "bare": TOKEN,
    "right": f"Bearer {TOKEN}",
}


def md(cred):
    return [("authorization", CREDENTIALS[cred])] if CREDENTIALS[cred] else []


# ---------------------------------------------------------------------------------------------
# gRPC


def process_calls(c):
    """Every process.v1 method, with a request that is fine once authenticated: (name, fn(md),
    the status expected with the right token)."""
    pb = c.pb

    def start(m):
        call = c._start(pb.StartRequest(config=c.config(["echo", "started"])), timeout=10,
                        metadata=m)
        return list(call)

    return [
        ("Execute", lambda m: c._execute(
            pb.ExecuteRequest(config=c.config(["touch", "executed"])), timeout=10, metadata=m),
         SC.OK),
        ("Start", start, SC.OK),
        # No process 999999: NOT_FOUND once past authentication.
        ("WriteStdin", lambda m: c._write(
            pb.WriteStdinRequest(process_id=999999, input=b"x"), timeout=10, metadata=m),
         SC.NOT_FOUND),
        ("SendSignal", lambda m: c._signal(
            pb.SendSignalRequest(process_id=999999, signal=15), timeout=10, metadata=m),
         SC.NOT_FOUND),
        ("ResizeTTY", lambda m: c._resize(
            pb.ResizeTTYRequest(process_id=999999, rows=10, cols=10), timeout=10, metadata=m),
         SC.NOT_FOUND),
    ]


@pytest.mark.parametrize("cred", ["none", "wrong", "malformed", "bare"])
def test_grpc_refused_without_the_token(authd, cred):
    c = authd.client()
    for name, fn, _ in process_calls(c):
        code, details, _ = status_of(lambda: fn(md(cred)))
        assert code == SC.UNAUTHENTICATED, (name, cred, code, details)
        assert details in ("missing bearer token", "invalid bearer token",
                           'malformed authorization: expected "Bearer <token>"'), details
    # Nothing ran: Execute would have created this file.
    assert not (authd.root / "executed").exists()


def test_grpc_accepted_with_the_token(authd):
    c = authd.client()
    for name, fn, want in process_calls(c):
        code, details, r = status_of(lambda: fn(md("right")))
        assert code == want, (name, code, details)
        if name == "Execute":
            assert r.exit_code == 0
        if name == "Start":
            kinds = [m.WhichOneof("event") for m in r]
            assert kinds[0] == "init" and kinds[-1] == "exit", kinds
            assert b"".join(m.stdout for m in r) == b"started\n"
    assert (authd.root / "executed").exists()


def test_grpc_scheme_is_case_insensitive(authd):
    c = authd.client()
    req = c.pb.ExecuteRequest(config=c.config(["true"]))
    r = c._execute(req, timeout=10, metadata=[("authorization", f"bearer  {TOKEN}")])
    assert r.exit_code == 0


def test_grpc_two_authorization_entries_are_refused(authd):
    c = authd.client()
    req = c.pb.ExecuteRequest(config=c.config(["true"]))
    code, _, _ = status_of(lambda: c._execute(req, timeout=10, metadata=[
        ("authorization", f"Bearer {TOKEN}"), ("authorization", f"Bearer {TOKEN}")]))
    assert code == SC.UNAUTHENTICATED


def test_grpc_unknown_method(authd):
    c = authd.client()
    code, _, _ = status_of(lambda: c.raw_unary("/process.v1.ProcessService/Nope", b""))
    assert code == SC.UNAUTHENTICATED, "without the token, not even UNIMPLEMENTED"
    f = c.channel.unary_unary("/process.v1.ProcessService/Nope")
    code, _, _ = status_of(lambda: f(b"", timeout=5, metadata=md("right")))
    assert code == SC.UNIMPLEMENTED


def test_grpc_health_stays_open(authd, tools):
    c = authd.client()
    assert c.health(timeout=5).status == 1  # SERVING, no credentials
    w = c.watch(timeout=5)
    assert next(w).status == 1
    w.cancel()
    c.raw_unary("/grpc.health.v1.Health/List", b"")  # an empty HealthListRequest: OK
    p = subprocess.run([str(tools["grpc-health-probe"]), "-addr", authd.target],
                       capture_output=True, timeout=15)
    assert p.returncode == 0, p


def test_reflection_stays_open(authd, tools):
    """grpcurl discovers the services without a token; calls need it (-H)."""
    g = [str(tools["grpcurl"]), "-plaintext", "-max-time", "10"]
    p = subprocess.run(g + [authd.target, "list"], capture_output=True, timeout=15)
    assert p.returncode == 0, p
    assert "process.v1.ProcessService" in p.stdout.decode()
    p = subprocess.run(g + ["-d", '{"config":{"command":["echo","via grpcurl"]}}', authd.target,
                            "process.v1.ProcessService/Execute"], capture_output=True, timeout=15)
    assert p.returncode != 0
    assert "Unauthenticated" in p.stderr.decode(), p.stderr


def test_grpcurl_with_header(authd, tools):
    g = [str(tools["grpcurl"]), "-plaintext", "-max-time", "10", "-H",
         f"authorization: Bearer {TOKEN}"]
    p = subprocess.run(g + ["-d", '{"config":{"command":["echo","via grpcurl"]}}', authd.target,
                            "process.v1.ProcessService/Execute"], capture_output=True, timeout=15)
    assert p.returncode == 0, p
    out = json.loads(p.stdout)
    assert base64.b64decode(out["stdout"]) == b"via grpcurl\n"


# ---------------------------------------------------------------------------------------------
# REST


def rest_calls(d):
    """Every route and method the daemon serves: (method, path, body, status with the token)."""
    (d.root / "f.txt").write_bytes(b"hello")
    (d.root / "gone.txt").write_bytes(b"bye")
    return [
        ("GET", "/v1/files/f.txt", None, 200),
        ("HEAD", "/v1/files/f.txt", None, 200),
        ("GET", "/v1/files/", None, 200),
        ("GET", "/v1/files", None, 200),
        ("PUT", "/v1/files/new.txt", b"x" * 100000, 204),
        ("DELETE", "/v1/files/gone.txt", None, 204),
        ("GET", "/v1/stat/f.txt", None, 200),
        ("HEAD", "/v1/stat/f.txt", None, 200),
        ("PUT", "/v1/dirs/newdir", None, 201),
        ("POST", "/v1/move", json.dumps({"from": "f.txt", "to": "moved.txt"}).encode(), 204),
        ("GET", "/v1/metadata", None, 200),
        ("HEAD", "/v1/metadata", None, 200),
        ("GET", "/metrics", None, 200),
        ("HEAD", "/metrics", None, 200),
        ("GET", "/no/such/route", None, 404),
        ("PATCH", "/v1/files/f.txt", None, 405),
    ]


def headers(cred):
    return {"Authorization": CREDENTIALS[cred]} if CREDENTIALS[cred] else {}


@pytest.mark.parametrize("cred", ["none", "wrong", "malformed", "bare"])
def test_rest_refused_without_the_token(authd, cred):
    for method, path, body, _ in rest_calls(authd):
        r = http_request(authd.rest_port, method, path, body=body, headers=headers(cred))
        assert r.status == 401, (method, path, cred, r)
        www = r.header("WWW-Authenticate")
        assert www and www.startswith('Bearer realm="sandboxd"'), r
        assert ('error="invalid_token"' in www) == (cred != "none"), www
        if method != "HEAD":
            assert r.header("Content-Type") == "application/json"
            assert r.json()["code"] == "UNAUTHENTICATED"
            assert set(r.json()) == {"code", "message"}
    # Nothing was touched.
    assert (authd.root / "f.txt").exists() and (authd.root / "gone.txt").exists()
    assert not (authd.root / "new.txt").exists() and not (authd.root / "newdir").exists()
    assert not (authd.root / "moved.txt").exists()
    assert not list(authd.root.glob(".sandboxd-tmp-*"))


def test_rest_accepted_with_the_token(authd):
    for method, path, body, want in rest_calls(authd):
        r = http_request(authd.rest_port, method, path, body=body, headers=headers("right"))
        assert r.status == want, (method, path, r)
    assert (authd.root / "new.txt").read_bytes() == b"x" * 100000
    assert (authd.root / "moved.txt").read_bytes() == b"hello"
    assert not (authd.root / "gone.txt").exists()
    (authd.root / "moved.txt").unlink()
    (authd.root / "newdir").rmdir()
    (authd.root / "new.txt").unlink()


def test_rest_matches_the_openapi_security(authd):
    """api/openapi.yaml says which operations need the token: the live daemon agrees, and its
    401 answers are what the document describes."""
    yaml = pytest.importorskip("yaml", reason="PyYAML (Debian python3-yaml) reads the document")
    from conftest import REPO
    with open(REPO / "api" / "openapi.yaml") as f:
        doc = yaml.safe_load(f)
    scheme = doc["components"]["securitySchemes"]["bearerAuth"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    codes = doc["components"]["schemas"]["Error"]["properties"]["code"]["enum"]
    checked = 0
    for path, item in doc["paths"].items():
        for method in ("get", "head", "put", "post", "delete"):
            if method not in item:
                continue
            op = item[method]
            protected = bool(op.get("security", doc.get("security", [])))
            assert ("401" in op["responses"]) == protected, (path, method)
            url = path.replace("{path}", "f.txt")
            r = http_request(authd.rest_port, method.upper(), url)
            assert (r.status == 401) == protected, (method, url, r)
            if protected and method != "head":
                assert r.json()["code"] in codes
            checked += 1
    assert checked >= 25, checked


def test_rest_health_stays_open(authd):
    for path in ("/healthz", "/readyz", "/v1/health"):
        for method in ("GET", "HEAD"):
            r = http_request(authd.rest_port, method, path)
            assert r.status == 200, (method, path, r)


def test_rest_two_authorization_headers_are_refused(authd):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", authd.rest_port, timeout=10)
    try:
        c.putrequest("GET", "/v1/files/")
        c.putheader("Authorization", f"Bearer {TOKEN}")
        c.putheader("Authorization", f"Bearer {TOKEN}")
        c.endheaders()
        r = c.getresponse()
        r.read()
        assert r.status == 401
    finally:
        c.close()


def test_rest_keep_alive_after_401(authd):
    """A refused request does not spoil the connection for the next, authenticated one."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", authd.rest_port, timeout=10)
    try:
        c.request("PUT", "/v1/files/ka.txt", body=b"y" * 1000)
        r = c.getresponse()
        r.read()
        assert r.status == 401
        c.request("GET", "/v1/files/", headers=headers("right"))
        r = c.getresponse()
        r.read()
        assert r.status == 200
    finally:
        c.close()
    assert not (authd.root / "ka.txt").exists()


def test_rest_refused_before_100_continue(authd):
    """A client that waits for 100 Continue is refused before it sends a byte of its body."""
    import socket
    with socket.create_connection(("127.0.0.1", authd.rest_port), timeout=10) as s:
        s.sendall(b"PUT /v1/files/huge.bin HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n"
                  b"Expect: 100-continue\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            assert chunk, f"connection closed after {data!r}"
            data += chunk
    assert data.startswith(b"HTTP/1.1 401 "), data
    assert not (authd.root / "huge.bin").exists()
    # The same with the token: the daemon asks for the body.
    with socket.create_connection(("127.0.0.1", authd.rest_port), timeout=10) as s:
        s.sendall(b"PUT /v1/files/small.bin HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                  b"Expect: 100-continue\r\nAuthorization: Bearer " + TOKEN.encode() +
                  b"\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 100 Continue"), "100 Continue"
        s.sendall(b"abc")
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            assert chunk, f"connection closed after {data!r}"
            data += chunk
    assert data.startswith(b"HTTP/1.1 204 "), data
    assert (authd.root / "small.bin").read_bytes() == b"abc"
    (authd.root / "small.bin").unlink()


def test_curl_with_header(authd):
    from conftest import run_curl
    url = f"{authd.rest_url}/v1/files/"
    p = run_curl(["-o", "/dev/null", "-w", "%{http_code}", url])
    assert p.stdout == b"401", p
    p = run_curl(["-H", f"Authorization: Bearer {TOKEN}", "-o", "/dev/null", "-w",
                  "%{http_code}", url])
    assert p.stdout == b"200", p
    p = run_curl(["--oauth2-bearer", TOKEN, "-T", "-", f"{url}curl.txt"], input=b"via curl")
    assert p.returncode == 0, p
    assert (authd.root / "curl.txt").read_bytes() == b"via curl"


def test_metrics_open_with_flag(sandboxd_factory, tmp_path):
    tf = tmp_path / "token"
    tf.write_text(TOKEN)
    d = sandboxd_factory(["--token-file", tf, "--metrics-auth", "false"])
    assert http_request(d.rest_port, "GET", "/metrics").status == 200
    assert http_request(d.rest_port, "GET", "/v1/files/").status == 401
    assert http_request(d.rest_port, "GET", "/v1/metadata").status == 401


def test_token_from_environment(sandboxd_factory):
    """SANDBOXD_TOKEN works like the file, and the processes we spawn do not inherit it."""
    d = sandboxd_factory(env={"SANDBOXD_TOKEN": TOKEN})
    assert http_request(d.rest_port, "GET", "/v1/files/").status == 401
    assert http_request(d.rest_port, "GET", "/v1/files/", headers=headers("right")).status == 200
    c = d.client()
    req = c.pb.ExecuteRequest(config=c.config(["env"]))
    r = c._execute(req, timeout=10, metadata=md("right"))
    assert b"SANDBOXD_TOKEN" not in r.stdout and TOKEN.encode() not in r.stdout
    assert_not_logged(d)


def test_no_token_means_open(sandboxd_factory):
    d = sandboxd_factory(env={"SANDBOXD_TOKEN": None})
    assert http_request(d.rest_port, "GET", "/v1/files/").status == 200
    assert d.client().execute(["true"]).exit_code == 0
    # A header sent anyway is ignored.
    assert http_request(d.rest_port, "GET", "/v1/files/", headers=headers("wrong")).status == 200


def start_fails(sandboxd_bin, tmp_path, args, env=None):
    e = dict(os.environ)
    e.pop("SANDBOXD_TOKEN", None)
    e.update(env or {})
    p = subprocess.run([str(sandboxd_bin), "--listen-host", "127.0.0.1", "--grpc-port", "0",
                        "--rest-port", "0", "--root-dir", str(tmp_path / "root"), *map(str, args)],
                       capture_output=True, timeout=START_TIMEOUT, env=e)
    assert p.returncode != 0, p
    return p.stderr.decode()


def test_bad_token_configuration_stops_the_start(sandboxd_bin, tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    spaced = tmp_path / "spaced"
    spaced.write_text(f"{TOKEN} {TOKEN}\n")
    err = start_fails(sandboxd_bin, tmp_path, ["--token-file", empty])
    assert f"token file '{empty}'" in err and "empty" in err, err
    err = start_fails(sandboxd_bin, tmp_path, ["--token-file", tmp_path / "missing"])
    assert "No such file" in err, err
    err = start_fails(sandboxd_bin, tmp_path, ["--token-file", tmp_path])
    assert "not a regular file" in err, err
    err = start_fails(sandboxd_bin, tmp_path, ["--token-file", spaced])
    assert "not visible ASCII" in err and TOKEN not in err, err
    err = start_fails(sandboxd_bin, tmp_path, [], env={"SANDBOXD_TOKEN": ""})
    assert "SANDBOXD_TOKEN" in err and "empty" in err, err
    tf = tmp_path / "token"
    tf.write_text(TOKEN)
    err = start_fails(sandboxd_bin, tmp_path, ["--token-file", tf], env={"SANDBOXD_TOKEN": TOKEN})
    assert "both --token-file and SANDBOXD_TOKEN" in err and TOKEN not in err, err
    if os.geteuid() == 0:
        print("unreadable file not checked: root reads any file")
    else:
        tf.chmod(0)
        err = start_fails(sandboxd_bin, tmp_path, ["--token-file", tf])
        assert "Permission denied" in err, err


def test_refusals_do_not_flood_the_log(sandboxd_factory, tmp_path):
    """A client hammering the daemon without the token: a few log lines a second, not one a
    request (the bound is computed from the time the burst took, whatever it was), and the
    refusals left out are counted in the next line logged."""
    import time
    tf = tmp_path / "token"
    tf.write_text(TOKEN)
    d = sandboxd_factory(["--token-file", tf])
    c = d.client()

    def refusal_lines():
        return [ln for ln in d.lines if "unauthenticated" in ln]

    t0 = time.monotonic()
    for _ in range(150):
        assert http_request(d.rest_port, "GET", "/v1/files/").status == 401
        assert status_of(lambda: c.execute(["true"], timeout=5))[0] == SC.UNAUTHENTICATED
    seconds = int(time.monotonic() - t0) + 2  # clock seconds the burst touched, at most
    time.sleep(1.1)  # a new second: the next refusal is logged, with the count left out
    assert http_request(d.rest_port, "GET", "/v1/files/").status == 401
    wait_until(lambda: any("not logged before" in ln for ln in refusal_lines()), 5,
               what="the count of refusals not logged")
    logged = len(refusal_lines())
    assert logged <= 5 * seconds + 1, (logged, seconds)  # and the last refusal's line


def test_token_never_in_the_log(authd):
    """After every call above (the log is at debug level), once more at the end."""
    assert_not_logged(authd)
    assert any("unauthenticated" in ln for ln in authd.lines), "refusals are logged"
