"""Sandbox.connect(router=...) and Router against a real sandboxd-router with real sandboxd
daemons behind it (routed by X-Sandbox-Pod-IP to loopback, which the router allows with
--allow-loopback-pod-ip): processes over gRPC, files over REST, a terminal over WebSocket, many
sandboxes over one client connection (the router's metrics count it). The HTTP tests skip,
saying so, against a router that answers HTTP/1.1 with 501 (before its proxy)."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
from pathlib import Path

import httpx
import pytest

import sandboxd
from sandboxd import errors
from sandboxd.aio import AsyncSandbox
from sandboxd.router import AsyncRouter, Router, parse_url


def root_of(sb) -> Path:
    return Path(sb.run("pwd", timeout=30).stdout_text.strip()).resolve()


def h2_connections(router) -> float:
    return router.metric('sandbox_router_connections_total{protocol="h2"}')


def proxies_http(router, d) -> bool:
    """Whether this router carries HTTP/1.1 to sandboxes (its proxy answered 501 before)."""
    r = httpx.get(router.url + "/v1/health", trust_env=False, timeout=20,
                  headers={"X-Sandbox-ID": "sb", "X-Sandbox-Pod-IP": "127.0.0.1",
                           "X-Sandbox-Port": str(d.rest_port)})
    return r.status_code != 501


def test_processes_through_the_router(router, daemon):
    with sandboxd.Sandbox.connect(**router.keys(daemon)) as sb:
        assert sb.endpoint.grpc_target == f"127.0.0.1:{router.port}"
        r = sb.execute(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (r.exit_code, r.stdout, r.stderr) == (3, b"out\n", b"err\n")
        assert root_of(sb) == daemon.root.resolve()
        with sb.start("while read l; do echo got-$l; done") as p:   # streaming Start, stdin
            p.write("one\n")
            assert p.read(timeout=20).data == b"got-one\n"
            p.close_stdin()
            assert p.wait(timeout=20).exit_code == 0
        n = 8 << 20
        big = sb.run(["head", "-c", str(n), "/dev/zero"], timeout=60, max_output=n)
        assert len(big.stdout) == n and not big.stdout_truncated
        sp = sb.processes.spawn(["sh", "-c", "echo spawned"], tag="routed")  # sandboxd.v1
        assert sp.wait(timeout=20).exit_code == 0
        assert [p.id for p in sb.processes.list(tag="routed")] == [sp.id]


def test_the_router_s_refusals_are_typed_errors(router, daemon):
    keys = router.keys(daemon)
    with pytest.raises(ValueError, match="sandbox name"):
        sandboxd.Sandbox.connect(**{**keys, "name": ""})
    with sandboxd.Sandbox.connect(**{**keys, "name": "Not_A_Label"}) as sb:
        with pytest.raises(errors.InvalidArgumentError, match="Invalid sandbox ID format"):
            sb.execute("true")
    with sandboxd.Sandbox.connect(**{**keys, "pod_ip": "169.254.169.254"}) as sb:
        with pytest.raises(errors.InvalidArgumentError, match="Invalid target IP address"):
            sb.execute("true")
    with sandboxd.Sandbox.connect(**{**keys, "grpc_port": 1}) as sb:
        with pytest.raises(errors.UnavailableError):
            sb.execute("true")
    with pytest.raises(TypeError, match="rest_url"):
        sandboxd.Sandbox.connect(**keys, rest_url="http://x")
    with pytest.raises(ValueError, match="go with router="):
        sandboxd.Sandbox.connect("127.0.0.1", name="sb")


def test_router_urls():
    assert parse_url("http://r:8080") == ("r:8080", "http://r:8080", False)
    assert parse_url("r:8080") == ("r:8080", "http://r:8080", False)
    assert parse_url("https://r") == ("r:443", "https://r:443", True)
    assert parse_url("http://[::1]:9") == ("[::1]:9", "http://[::1]:9", False)
    for bad in ("ftp://r", "http://r/path", "http://"):
        with pytest.raises(ValueError):
            parse_url(bad)


def test_two_sandboxes_over_one_connection(router, daemon_factory):
    a, b = daemon_factory(), daemon_factory()
    with Router(router.url, timeout=20) as r:
        sa = r.sandbox("a", pod_ip="127.0.0.1", grpc_port=a.grpc_port, rest_port=a.rest_port)
        sb = r.sandbox("b", pod_ip="127.0.0.1", grpc_port=b.grpc_port, rest_port=b.rest_port)
        for _ in range(3):
            assert root_of(sa) == a.root.resolve() and root_of(sb) == b.root.resolve()
        sa.close()  # a Router's sandbox leaves the connection to the Router
        assert root_of(sb) == b.root.resolve()
        with pytest.raises(errors.UnavailableError, match="closed"):
            sa.start("true")
        sb.close()
    assert h2_connections(router) == 1, "one client connection for both sandboxes"
    assert router.metric("sandbox_router_upstream_connections") == 2, "one per sandbox"


def test_connect_by_url_shares_the_router(router, daemon_factory):
    a, b = daemon_factory(), daemon_factory()
    sa = sandboxd.Sandbox.connect(**router.keys(a))
    sb = sandboxd.Sandbox.connect(**router.keys(b))
    assert sa._channel is sb._channel
    assert root_of(sa) == a.root.resolve() and root_of(sb) == b.root.resolve()
    sa.close()
    assert root_of(sb) == b.root.resolve(), "the other's close left the connection open"
    sb.close()
    assert sb._channel is not sandboxd.Sandbox.connect(**router.keys(a))._channel, \
        "the last close closed the shared one: a new connect opens another"
    assert h2_connections(router) >= 1


async def test_asyncio_through_the_router(router, daemon_factory):
    a, b = daemon_factory(), daemon_factory()
    async with AsyncSandbox.connect(**router.keys(a)) as sa, \
            AsyncSandbox.connect(**router.keys(b)) as sb:
        assert sa._channel is sb._channel
        for s, d in ((sa, a), (sb, b)):
            r = await s.run("pwd")
            assert Path(r.stdout_text.strip()).resolve() == d.root.resolve()
        async with await sa.start("while read l; do echo got-$l; done") as p:
            await p.write("x\n")
            await p.close_stdin()
            assert [ev.data async for ev in p] == [b"got-x\n"]
    assert h2_connections(router) == 1, "one connection for both AsyncSandboxes"
    async with AsyncRouter(router.url, timeout=20) as r:
        s = r.sandbox("a", pod_ip="127.0.0.1", grpc_port=a.grpc_port)
        assert (await s.execute("echo hi")).stdout == b"hi\n"
        await s.close()


def daemon_at_default_ports(daemon_factory, tmp_path, token):
    """sandboxd with a token at 9090 and 8080 (the ports a router reaches without
    X-Sandbox-Port) on a loopback address of its own: 127.0.0.0/8 is all loopback."""
    tf = tmp_path / "token"
    tf.write_text(token + "\n")
    for _ in range(5):
        host = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
        try:
            d = daemon_factory(["--listen-host", host, "--grpc-port", "9090", "--rest-port",
                                "8080", "--token-file", str(tf)])
            d.host = host
            return d
        except RuntimeError as e:
            last = e
    raise last


def test_token_goes_through(router, daemon_factory, tmp_path):
    # The router hands the client's Authorization on to sandboxd's own ports only (allow-all):
    # the keys name no port, as a client of a cluster's router sends them.
    d = daemon_at_default_ports(daemon_factory, tmp_path, "s3cret")
    keys = dict(router=router.url, name="sb", pod_ip=d.host, timeout=20.0)
    with sandboxd.Sandbox.connect(**keys, token="s3cret") as sb:
        assert sb.execute("echo ok").stdout == b"ok\n"
        sb.files.write_bytes("t.txt", b"token")
        assert sb.files.read_bytes("t.txt") == b"token"
    with sandboxd.Sandbox.connect(**keys, token="wrong") as sb:
        with pytest.raises(errors.UnauthenticatedError):
            sb.execute("true")
        with pytest.raises(errors.UnauthenticatedError):
            sb.files.stat("t.txt")


def test_files_through_the_router(router, daemon, area, tmp_path):
    if not proxies_http(router, daemon):
        pytest.skip("this sandboxd-router does not proxy HTTP/1.1 yet (501): files need it")
    n = int(os.environ.get("SANDBOXD_SDK_ROUTER_MIB", "64")) << 20
    src = tmp_path / "src.bin"
    with open(src, "wb") as f:
        f.write(os.urandom(1 << 20) * (n >> 20))
    want = hashlib.sha256(src.read_bytes()).hexdigest()
    with sandboxd.Sandbox.connect(**router.keys(daemon)) as sb:
        res = sb.files.upload(src, f"{area}/f.bin")
        assert (res.size, res.sha256) == (n, want)
        assert hashlib.sha256((daemon.root / area / "f.bin").read_bytes()).hexdigest() == want
        dst = tmp_path / "dst.bin"
        assert sb.files.download(f"{area}/f.bin", dst) == n
        assert hashlib.sha256(dst.read_bytes()).hexdigest() == want
        assert sb.files.stat(f"{area}/f.bin").size == n
        assert [e.name for e in sb.files.list(area)] == ["f.bin"]
        with pytest.raises(errors.NotFoundError):
            sb.files.stat(f"{area}/missing")
        assert sb.health().status == "ok"


def test_two_sandboxes_over_one_http_connection(router, daemon_factory):
    a, b = daemon_factory(), daemon_factory()
    if not proxies_http(router, a):
        pytest.skip("this sandboxd-router does not proxy HTTP/1.1 yet (501)")
    before = router.metric('sandbox_router_connections_total{protocol="http1"}')
    with Router(router.url, timeout=20) as r:
        sa = r.sandbox("a", pod_ip="127.0.0.1", grpc_port=a.grpc_port, rest_port=a.rest_port)
        sb = r.sandbox("b", pod_ip="127.0.0.1", grpc_port=b.grpc_port, rest_port=b.rest_port)
        for i in range(3):  # each request routed by its own headers on the one connection
            sa.files.write_bytes("who", b"a%d" % i)
            sb.files.write_bytes("who", b"b%d" % i)
            assert (sa.files.read_bytes("who"), sb.files.read_bytes("who")) == (b"a%d" % i,
                                                                                b"b%d" % i)
        assert (a.root / "who").read_bytes() == b"a2" and (b.root / "who").read_bytes() == b"b2"
    assert router.metric('sandbox_router_connections_total{protocol="http1"}') - before == 1, \
        "one keep-alive client connection for both sandboxes"


def test_terminal_through_the_router(router, daemon):
    if not proxies_http(router, daemon):
        pytest.skip("this sandboxd-router does not proxy HTTP/1.1 yet (501)")
    with sandboxd.Sandbox.connect(**router.keys(daemon)) as sb:
        with sb.terminal("read l; echo got-$l") as term:   # a WebSocket through the router
            term.write("typed\n")
            out = b""
            for chunk in term:
                out += chunk
        assert b"got-typed" in out and term.exit is not None and term.exit.exit_code == 0


def make_pki(d: Path) -> None:
    """ca.pem, and server.pem/.key for 127.0.0.1 signed by it (the openssl tool)."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=sdk-test-ca")
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "server.ext")


def test_https_router_with_a_private_ca(router_factory, daemon, tmp_path):
    make_pki(tmp_path)
    r = router_factory(["--https-bind-address", "127.0.0.1:0", "--tls-cert-file",
                        str(tmp_path / "server.pem"), "--tls-key-file", str(tmp_path / "server.key")])
    port = r.ports[1]
    if not proxies_http(r, daemon):
        pytest.skip("this sandboxd-router does not proxy HTTP/1.1 yet (501)")
    keys = {**r.keys(daemon), "router": f"https://127.0.0.1:{port}"}
    # HTTP/1.1 and WebSocket over TLS; gRPC over the TLS port is left out here: through this
    # router about one call in fifteen hangs there (grpcurl alike), which is the router's.
    with sandboxd.Sandbox.connect(**keys, ca_file=str(tmp_path / "ca.pem")) as sb:
        sb.files.write_bytes("tls.txt", b"sealed")
        assert sb.files.read_bytes("tls.txt") == b"sealed"
        with sb.terminal("echo wss") as term:                              # wss
            out = b""
            while term.exit is None:
                out += term.read(timeout=20)
        assert b"wss" in out
    with sandboxd.Sandbox.connect(**keys) as sb:  # the system's CAs do not know this one
        with pytest.raises(errors.UnavailableError):
            sb.files.stat("tls.txt")
