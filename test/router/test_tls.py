"""The router's TLS port: certificates made here with the openssl tool (a CA, a server certificate
for localhost and 127.0.0.1, a client certificate), and clients nobody here wrote — curl,
grpcurl, grpcio with SSL credentials, the websockets library over wss — reaching real sandboxd
daemons and an app through --https-bind-address. ALPN sends gRPC to the relay and the rest to
the proxy; a renewed certificate is served without a restart; client certificates are asked
for or required; what is not TLS is refused and the router stays up."""

import asyncio
import http.client
import json
import re
import socket
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import pytest
import websockets

from conftest import Meta, free_port, wait_until

T = 30.0


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(d, cn="localhost"):
    """ca.pem, server.pem/.key (CN and SANs localhost, 127.0.0.1), client.pem/.key."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=test-ca", cwd=d)
    for name, ext in (("server", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
                      ("client", "extendedKeyUsage=clientAuth")):
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={cn if name == 'server' else 'a-client'}", cwd=d)
        (d / f"{name}.ext").write_text(ext + "\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext",
                cwd=d)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    make_pki(d)
    return d


def tls_args(pki, port, *extra):
    return ["--https-bind-address", f"127.0.0.1:{port}", "--tls-cert-file", str(pki / "server.pem"),
            "--tls-key-file", str(pki / "server.key"), *extra]


@pytest.fixture
def trouter(router_factory, pki):
    port = free_port()
    r = router_factory(tls_args(pki, port))
    r.tls_port = port
    return r


def keys(port):
    return {"X-Sandbox-ID": "sb", "X-Sandbox-Pod-IP": "127.0.0.1", "X-Sandbox-Port": str(port)}


def ctx(pki, client=False):
    c = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if client:
        c.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    return c


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        out = json.dumps(dict(self.headers.items())).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture(scope="module")
def echo():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()


def test_curl_upload_and_download_over_tls(trouter, sandboxd, pki, tmp_path):
    data = tmp_path / "blob"
    data.write_bytes(bytes(range(256)) * 40000)
    hdr = [a for k, v in keys(sandboxd.rest_port).items() for a in ("-H", f"{k}: {v}")]
    url = f"https://localhost:{trouter.tls_port}/v1/files/blob"
    up = subprocess.run(["curl", "-sS", "-f", "--cacert", str(pki / "ca.pem"), *hdr, "-T",
                         str(data), url], capture_output=True, timeout=120)
    assert up.returncode == 0, up.stderr
    down = subprocess.run(["curl", "-sS", "-f", "--cacert", str(pki / "ca.pem"), *hdr, url],
                          capture_output=True, timeout=120)
    assert down.returncode == 0 and down.stdout == data.read_bytes(), down.stderr
    assert (sandboxd.root / "blob").read_bytes() == data.read_bytes()


def test_forwarded_proto_is_https(trouter, echo, pki):
    c = http.client.HTTPSConnection("localhost", trouter.tls_port, timeout=T, context=ctx(pki))
    c.request("GET", "/", headers=keys(echo))
    got = json.loads(c.getresponse().read())
    c.close()
    assert got["X-Forwarded-Proto"] == "https" and got["X-Forwarded-For"] == "127.0.0.1"


def test_grpc_over_tls_through_alpn(trouter, sandboxd, pki, tools):
    creds = grpc.ssl_channel_credentials(root_certificates=(pki / "ca.pem").read_bytes())
    # Each on a connection of its own: the relay once missed a TLS client's first frames when
    # they came after the hand-over (a blocking plaintext fd held a gRPC poller), 1 call in 10.
    for _ in range(30):
        ch = grpc.intercept_channel(
            grpc.secure_channel(f"localhost:{trouter.tls_port}", creds),
            Meta((("x-sandbox-id", "sb"), ("x-sandbox-pod-ip", "127.0.0.1"),
                  ("x-sandbox-port", str(sandboxd.port)))))
        check = ch.unary_unary("/grpc.health.v1.Health/Check")
        assert check(b"", timeout=T) == b"\x08\x01"  # SERVING
        ch.close()
    out = subprocess.run([tools["grpcurl"], "-cacert", str(pki / "ca.pem"),
                          "-H", "x-sandbox-id: sb", "-H", "x-sandbox-pod-ip: 127.0.0.1",
                          "-H", f"x-sandbox-port: {sandboxd.port}",
                          f"localhost:{trouter.tls_port}", "list"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "process.v1.ProcessService" in out.stdout, out.stderr


def test_wss_reaches_a_websocket_app(trouter, pki):
    async def handler(ws, path=None):
        async for m in ws:
            await ws.send(m)

    async def main():
        async with websockets.serve(handler, "127.0.0.1", 0) as srv:
            port = srv.sockets[0].getsockname()[1]
            async with websockets.connect(f"wss://localhost:{trouter.tls_port}/",
                                          ssl=ctx(pki), extra_headers=keys(port)) as ws:
                for m in ("over tls", "x" * 100000):
                    await ws.send(m)
                    assert await asyncio.wait_for(ws.recv(), T) == m

    asyncio.run(main())


def served_cn(port, pki):
    with socket.create_connection(("127.0.0.1", port), timeout=T) as s:
        c = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        c.check_hostname = False
        with c.wrap_socket(s, server_hostname="localhost") as t:
            return dict(x[0] for x in t.getpeercert()["subject"])["commonName"]


def test_renewed_certificate_served_without_restart(router_factory, pki, tmp_path):
    d = tmp_path / "live"
    d.mkdir()
    for f in ("server.pem", "server.key"):
        (d / f).write_bytes((pki / f).read_bytes())
    port = free_port()
    r = router_factory(["--https-bind-address", f"127.0.0.1:{port}",
                        "--tls-cert-file", str(d / "server.pem"),
                        "--tls-key-file", str(d / "server.key")])
    assert served_cn(port, pki) == "localhost"
    # a renewed pair, signed by the same CA, under another name
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    for f in ("ca.pem", "ca.key"):
        (fresh / f).write_bytes((pki / f).read_bytes())
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=renewed", cwd=fresh)
    (fresh / "ext").write_text("subjectAltName=DNS:localhost\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext", cwd=fresh)
    (d / "server.key").write_bytes((fresh / "server.key").read_bytes())
    (d / "server.pem").write_bytes((fresh / "server.pem").read_bytes())
    wait_until(lambda: served_cn(port, pki) == "renewed", T, interval=0.3,
               what="the renewed certificate to be served")
    # a broken file keeps the last good certificate
    (d / "server.pem").write_text("not a certificate\n")
    time.sleep(1.2)
    assert served_cn(port, pki) == "renewed"
    text = http.client.HTTPConnection("127.0.0.1", r.metrics_port, timeout=T)
    text.request("GET", "/metrics")
    m = text.getresponse().read().decode()
    assert 'sandbox_router_cert_reloads_total{outcome="success"} 1' in m, m
    assert 'sandbox_router_cert_reloads_total{outcome="failure"} 1' in m, m


def test_client_certificates_required_and_optional(router_factory, pki, echo):
    port = free_port()
    router_factory(tls_args(pki, port, "--tls-client-ca-file", str(pki / "ca.pem"),
                            "--mtls-mode", "required"))

    def get(client):
        c = http.client.HTTPSConnection("localhost", port, timeout=T, context=ctx(pki, client))
        c.request("GET", "/", headers=keys(echo))
        st = c.getresponse().status
        c.close()
        return st

    assert get(True) == 200
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        get(False)
    port2 = free_port()
    router_factory(tls_args(pki, port2, "--tls-client-ca-file", str(pki / "ca.pem"),
                            "--mtls-mode", "optional"))
    port = port2
    assert get(False) == 200 and get(True) == 200


def test_what_is_not_tls_is_refused_and_the_router_stays_up(router_factory, pki, echo):
    port = free_port()
    r = router_factory(tls_args(pki, port, "--http-head-timeout", "1s"))
    def refused(data):
        with socket.create_connection(("127.0.0.1", port), timeout=T) as s:
            s.sendall(data)
            try:
                return s.recv(4096)[:1] in (b"", b"\x15")  # closed, or a TLS alert
            except ConnectionResetError:
                return True

    assert refused(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert refused(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    silent = socket.create_connection(("127.0.0.1", port), timeout=T)
    silent.settimeout(T)
    assert silent.recv(1) == b""  # closed after the head timeout
    silent.close()
    c = http.client.HTTPSConnection("localhost", port, timeout=T, context=ctx(pki))
    c.request("GET", "/", headers=keys(echo))
    assert c.getresponse().status == 200
    c.close()
    del r


def test_a_stalled_tls_download_is_cut_at_the_proxy_timeout(router_factory, pki, sandboxd):
    """A client over TLS that stops reading mid-download: the proxy's silence bound still holds
    (its plaintext end is non-blocking, so the body's splice waits in poll, under the bound)."""
    (sandboxd.root / "stall.bin").write_bytes(b"\0" * (64 << 20))
    port = free_port()
    r = router_factory(tls_args(pki, port, "--proxy-timeout", "2s"))
    raw = socket.create_connection(("127.0.0.1", port), timeout=T)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s = ctx(pki).wrap_socket(raw, server_hostname="localhost")
    head = "".join(f"{k}: {v}\r\n" for k, v in keys(sandboxd.rest_port).items())
    s.sendall(f"GET /v1/files/stall.bin HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode())
    assert s.recv(64).startswith(b"HTTP/1.1 200")

    def open_conns():
        c = http.client.HTTPConnection("127.0.0.1", r.metrics_port, timeout=T)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
        return int(re.search(r"^sandbox_router_http_connections_open (\d+)$", text, re.M)[1])

    assert open_conns() == 1
    wait_until(lambda: open_conns() == 0, T, interval=0.2,
               what="the stalled download cut after 2 s of silence")
    s.close()
    (sandboxd.root / "stall.bin").unlink()
