"""HTTP/1.1 through sandboxd-router: real sandboxd daemons (routed by X-Sandbox-Pod-IP, the mode
that needs no cluster) and plain HTTP and WebSocket servers standing for apps in a sandbox,
reached with curl, http.client, raw sockets and the websockets library. Bodies streamed both ways
in flat memory, several sandboxes on one kept-alive connection, SSE as it comes, upgrades
tunnelled, the reference router's refusals and header rewriting."""

import asyncio
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import pytest
import websockets

from conftest import free_port, wait_until

T = 30.0


def keys(port, sid="sb", **extra):
    h = {"X-Sandbox-ID": sid, "X-Sandbox-Pod-IP": "127.0.0.1", "X-Sandbox-Port": str(port)}
    h.update(extra)
    return h


def metric(router, name, labels=""):
    c = http.client.HTTPConnection("127.0.0.1", router.metrics_port, timeout=T)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    m = re.search(rf"^{re.escape(name + labels)} (\d+)$", text, re.M)
    assert m, f"{name}{labels} not in\n{text}"
    return int(m.group(1))


def request(router, method, path, headers=None, body=None):
    c = http.client.HTTPConnection("127.0.0.1", router.port, timeout=T)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r, data


def raw(router, data, read_until_close=True):
    with socket.create_connection(("127.0.0.1", router.port), timeout=T) as s:
        s.sendall(data)
        out = b""
        while read_until_close:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        return out


class Echo(BaseHTTPRequestHandler):
    """An app in a sandbox: answers what it received as JSON; /chunked answers in chunks,
    /sleep?s=N answers after N seconds."""

    protocol_version = "HTTP/1.1"
    seen = []

    def log_message(self, *a):
        pass

    def _answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        rec = {"method": self.command, "path": self.path, "headers": dict(self.headers.items()),
               "body": body.decode("latin-1")}
        Echo.seen.append(rec)
        if self.path.startswith("/sleep"):
            time.sleep(float(self.path.split("=")[1]))
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"alpha ", b"beta ", b"gamma"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\nX-Trailer: yes\r\n\r\n")
            return
        out = json.dumps(rec).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = _answer


@pytest.fixture(scope="module")
def echo():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()


def test_healthz_on_the_main_port(router):
    r, body = request(router, "GET", "/healthz")
    assert r.status == 200 and json.loads(body) == {"status": "ok"}


@pytest.mark.parametrize("headers,detail", [
    ({}, "X-Sandbox-ID header is required."),
    ({"X-Sandbox-ID": "Bad_Name"}, "Invalid sandbox ID format."),
    ({"X-Sandbox-ID": "a" * 64}, "Invalid sandbox ID format."),
    ({"X-Sandbox-ID": "sb", "X-Sandbox-Namespace": "evil.com"}, "Invalid namespace format."),
    ({"X-Sandbox-ID": "sb", "X-Sandbox-Port": "0"}, "Invalid port format."),
    ({"X-Sandbox-ID": "sb", "X-Sandbox-Port": "65536"}, "Invalid port format."),
    ({"X-Sandbox-ID": "sb", "X-Sandbox-Port": "80a"}, "Invalid port format."),
    ({"X-Sandbox-ID": "sb", "X-Sandbox-Pod-IP": "169.254.169.254"}, "Invalid target IP address."),
    ({"X-Sandbox-ID": "sb", "X-Sandbox-Pod-IP": "0.0.0.0"}, "Invalid target IP address."),
    ({"X-Sandbox-ID": "sb", "X-Sandbox-Pod-IP": "224.0.0.1"}, "Invalid target IP address."),
    ({"X-Sandbox-ID": "sb", "X-Sandbox-Pod-IP": "fe80::1"}, "Invalid target IP address."),
    ({"X-Sandbox-ID": "sb", "X-Sandbox-Pod-IP": "::ffff:169.254.1.1"},
     "Invalid target IP address."),
    ({"X-Sandbox-ID": "sb", "X-Sandbox-Pod-IP": "10.0.0.1:80"}, "Invalid target IP address."),
])
def test_bad_routing_headers_get_the_references_refusals(router, headers, detail):
    r, body = request(router, "GET", "/anything", headers)
    assert r.status == 400 and json.loads(body) == {"detail": detail}, body


def test_oversized_and_malformed_heads_refused(router):
    big = b"GET / HTTP/1.1\r\nHost: x\r\nX-Sandbox-ID: sb\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n"
    out = raw(router, big)
    assert out.startswith(b"HTTP/1.1 431 "), out[:200]
    out = raw(router, b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400 "), out[:200]
    out = raw(router, b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400 "), out[:200]
    out = raw(router, b"GET / HTTP/2.0\r\nHost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 505 "), out[:200]


def test_reference_sdk_shaped_requests_reach_the_app_unchanged(router, echo):
    """Headers as the reference Python SDK's router mode sends them (connector.send_request):
    X-Sandbox-ID, -Namespace, -Port, -Timeout, -Pod-IP, on top of requests' own."""
    Echo.seen.clear()
    body = json.dumps({"command": "echo hi", "x": "é" * 10}).encode()
    h = {"X-Sandbox-ID": "sb", "X-Sandbox-Namespace": "default", "X-Sandbox-Port": str(echo),
         "X-Sandbox-Timeout": "60", "X-Sandbox-Pod-IP": "127.0.0.1",
         "User-Agent": "python-requests/2.31.0", "Accept-Encoding": "gzip, deflate",
         "Accept": "*/*", "Connection": "keep-alive", "Content-Type": "application/json",
         "Authorization": "Bearer client-secret", "X-Forwarded-For": "6.6.6.6",
         "Keep-Alive": "timeout=5", "X-App": "kept"}
    path = "/execute/a%20b/%2e%2e/c?q=1&r=%2F"
    r, data = request(router, "POST", path, h, body)
    assert r.status == 200, data
    got = json.loads(data)
    assert got["method"] == "POST" and got["path"] == path
    assert got["body"].encode("latin-1") == body
    hd = {k.lower(): v for k, v in got["headers"].items()}
    assert hd["host"] == f"127.0.0.1:{echo}"
    assert "authorization" not in hd and "keep-alive" not in hd
    assert hd["x-forwarded-for"] == "127.0.0.1"
    assert hd["x-forwarded-host"] == f"127.0.0.1:{router.port}"
    assert hd["x-forwarded-proto"] == "http"
    for k in ("x-sandbox-id", "x-sandbox-namespace", "x-sandbox-port", "x-sandbox-timeout",
              "x-app", "user-agent", "content-type", "accept"):
        assert k in hd, (k, hd)


def test_two_sandboxes_on_one_kept_alive_connection(router, sandboxd_factory):
    a, b = sandboxd_factory(), sandboxd_factory()
    before = metric(router, "sandbox_router_connections_total", '{protocol="http1"}')
    reused = metric(router, "sandbox_router_http_upstream_reused_total")
    c = http.client.HTTPConnection("127.0.0.1", router.port, timeout=T)
    for i in range(3):
        for d, name in ((a, "a"), (b, "b")):
            c.request("PUT", f"/v1/files/{name}-{i}.txt", body=f"{name}{i}".encode(),
                      headers=keys(d.rest_port))
            r = c.getresponse()
            assert r.status in (200, 201, 204), r.read()
            r.read()
            c.request("GET", f"/v1/files/{name}-{i}.txt", headers=keys(d.rest_port))
            r = c.getresponse()
            assert r.status == 200 and r.read() == f"{name}{i}".encode()
    c.close()
    assert sorted(p.name for p in a.root.iterdir()) == ["a-0.txt", "a-1.txt", "a-2.txt"]
    assert sorted(p.name for p in b.root.iterdir()) == ["b-0.txt", "b-1.txt", "b-2.txt"]
    assert metric(router, "sandbox_router_connections_total", '{protocol="http1"}') == before + 1
    # each PUT/GET pair to one sandbox shares an upstream connection
    assert metric(router, "sandbox_router_http_upstream_reused_total") >= reused + 6


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def test_one_gib_up_and_down_streamed_in_flat_memory(router, sandboxd, tmp_path):
    src = tmp_path / "big"
    h = hashlib.sha256()
    block = os.urandom(1 << 20)
    with open(src, "wb") as f:
        for i in range(1024):
            chunk = i.to_bytes(8, "little") + block[8:]
            h.update(chunk)
            f.write(chunk)
    want = h.hexdigest()
    hdr = [a for k, v in keys(sandboxd.rest_port).items() for a in ("-H", f"{k}: {v}")]
    base = f"http://127.0.0.1:{router.port}/v1/files/big"
    peak = [rss_kib(router.proc.pid)]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak.append(rss_kib(router.proc.pid))
            time.sleep(0.05)

    t = threading.Thread(target=sample)
    t.start()
    try:
        up = subprocess.run(["curl", "-sS", "-f", *hdr, "-T", str(src), base], capture_output=True,
                            timeout=600)
        assert up.returncode == 0, up.stderr
        down = subprocess.run(f"curl -sS -f {' '.join(repr(x) for x in hdr)} {base} | sha256sum",
                              shell=True, capture_output=True, text=True, timeout=600)
        assert down.returncode == 0, down.stderr
    finally:
        stop.set()
        t.join()
    assert down.stdout.split()[0] == want
    with open(sandboxd.root / "big", "rb") as f:
        assert hashlib.file_digest(f, "sha256").hexdigest() == want
    src.unlink()
    (sandboxd.root / "big").unlink()
    # 2 GiB went through: the router held no more than its buffers
    assert max(peak) - peak[0] < 32 * 1024, (peak[0], max(peak))


def test_sse_events_arrive_as_they_happen(router, sandboxd):
    c = http.client.HTTPConnection("127.0.0.1", router.port, timeout=T)
    c.request("GET", "/v1/watch/?recursive=true", headers=keys(sandboxd.rest_port))
    r = c.getresponse()
    assert r.status == 200 and r.getheader("Content-Type", "").startswith("text/event-stream")

    def until(pred):
        while True:
            line = r.readline()
            assert line, "stream ended"
            if pred(line):
                return line

    until(lambda ln: b"ready" in ln)
    (sandboxd.root / "sse-probe.txt").write_text("x")
    until(lambda ln: b"sse-probe.txt" in ln)
    c.close()
    (sandboxd.root / "sse-probe.txt").unlink()


def test_chunked_response_to_http10_and_http11_clients(router, echo):
    head = f"GET /chunked HTTP/1.1\r\nHost: r\r\nX-Sandbox-ID: sb\r\nX-Sandbox-Pod-IP: 127.0.0.1\r\n" \
           f"X-Sandbox-Port: {echo}\r\nConnection: close\r\n\r\n".encode()
    out = raw(router, head)
    assert b"Transfer-Encoding: chunked" in out and out.endswith(b"0\r\nX-Trailer: yes\r\n\r\n")
    out = raw(router, head.replace(b"HTTP/1.1", b"HTTP/1.0"))
    hd, _, body = out.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding" not in hd and b"Connection: close" in hd, hd
    assert body == b"alpha beta gamma"


def test_pipelined_requests_answered_in_order(router, echo):
    one = lambda n: (f"GET /p{n} HTTP/1.1\r\nHost: r\r\nX-Sandbox-ID: sb\r\n"  # noqa: E731
                     f"X-Sandbox-Pod-IP: 127.0.0.1\r\nX-Sandbox-Port: {echo}\r\n\r\n").encode()
    last = one(3).replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
    out = raw(router, one(1) + one(2) + last)
    paths = re.findall(rb'"path": "(/p\d)"', out)
    assert paths == [b"/p1", b"/p2", b"/p3"], out


def test_unreachable_sandbox_is_502_after_retries(router):
    port = free_port()
    retries = metric(router, "sandbox_router_upstream_retries_total")
    r, body = request(router, "GET", "/x", keys(port))
    assert r.status == 502
    assert json.loads(body) == {"detail": "Could not connect to the backend sandbox: sb"}
    assert metric(router, "sandbox_router_upstream_retries_total") == retries + 3


def test_x_sandbox_timeout_bounds_the_wait_for_the_response(router, echo):
    r, body = request(router, "GET", "/sleep?s=3", keys(echo, **{"X-Sandbox-Timeout": "0.3"}))
    assert r.status == 504, body
    r, body = request(router, "GET", "/sleep?s=0.1", keys(echo, **{"X-Sandbox-Timeout": "5"}))
    assert r.status == 200, body


def test_websocket_app_reached_through_the_router(router):
    seen = {}

    async def handler(ws, path=None):
        seen["origin"] = ws.request_headers.get("Origin")
        seen["host"] = ws.request_headers.get("Host")
        async for msg in ws:
            await ws.send(msg)

    async def main():
        async with websockets.serve(handler, "127.0.0.1", 0, max_size=None) as srv:
            port = srv.sockets[0].getsockname()[1]
            async with websockets.connect(f"ws://127.0.0.1:{router.port}/ws",
                                          extra_headers=keys(port), origin="http://evil.example",
                                          max_size=None) as ws:
                for msg in ("hello", "x" * 300000, b"\x00\x01" * 50000):
                    await ws.send(msg)
                    assert await asyncio.wait_for(ws.recv(), T) == msg

    asyncio.run(main())
    assert seen["origin"] is None  # dropped on upgrades, as the reference does
    assert metric(router, "sandbox_router_tunnels_open") == 0


def test_sandboxd_terminal_through_the_router(router, sandboxd):
    async def main():
        url = f"ws://127.0.0.1:{router.port}/v1/terminal?command=/bin/sh"
        async with websockets.connect(url, extra_headers=keys(sandboxd.rest_port)) as ws:
            await ws.send(b"echo through-$((6*7))\n")
            got = b""
            while b"through-42" not in got:
                m = await asyncio.wait_for(ws.recv(), T)
                got += m if isinstance(m, bytes) else b""
            await ws.send(b"exit\n")

    asyncio.run(main())


def test_client_gone_mid_stream_frees_the_connection(router, sandboxd):
    open_before = metric(router, "sandbox_router_http_connections_open")
    c = http.client.HTTPConnection("127.0.0.1", router.port, timeout=T)
    c.request("GET", "/v1/watch/", headers=keys(sandboxd.rest_port))
    r = c.getresponse()
    assert r.status == 200
    assert metric(router, "sandbox_router_http_connections_open") == open_before + 1
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    wait_until(lambda: metric(router, "sandbox_router_http_connections_open") == open_before, 10,
               what="the router to let the connection go")


def test_router_restarted_while_clients_retry(router_factory, sandboxd, protos):
    """The router keeps nothing a client needs: killed and started again on its port, clients
    that retry (an HTTP loop, a gRPC channel waiting for ready) carry on, and nothing is lost."""
    from test_grpc_relay import routed

    port = free_port()
    args = ["--http-bind-address", f"127.0.0.1:{port}"]
    r = router_factory(args)
    grpc_client = routed(r, sandboxd, protos)
    results, errors, stop = [], [], threading.Event()

    def http_loop():
        i = 0
        while not stop.is_set():
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("PUT", f"/v1/files/restart-{i}.txt", body=str(i).encode(),
                          headers=keys(sandboxd.rest_port))
                st = c.getresponse().status
                c.close()
                if st < 300:
                    results.append(i)
                    i += 1
                else:
                    errors.append(st)
            except OSError:
                time.sleep(0.05)  # the router is away: retry, as a client would

    t = threading.Thread(target=http_loop)
    t.start()
    try:
        wait_until(lambda: len(results) >= 5, T, what="requests through the first router")
        r.proc.kill()
        r.proc.wait()
        n = len(results)
        r2 = router_factory(args)
        assert r2.port == port
        wait_until(lambda: len(results) >= n + 5, T, what="requests through the second router")
        def grpc_ok():
            try:
                return grpc_client.execute(["echo", "after"]).exit_code == 0
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.UNAVAILABLE, e  # reconnecting: retry
                return False

        wait_until(grpc_ok, T, interval=0.2, what="the gRPC channel to reconnect")
    finally:
        stop.set()
        t.join()
        grpc_client.close()
    assert errors == []
    for i in results:  # every acknowledged write is in the sandbox
        assert (sandboxd.root / f"restart-{i}.txt").read_text() == str(i)
    r.stop_and_check = lambda: None  # killed on purpose


def test_sigterm_drains_requests_and_closes_idle_connections(router_factory, sandboxd):
    r = router_factory(["--shutdown-timeout", "60s"])
    data = os.urandom(1 << 20) * 24
    (sandboxd.root / "drain.bin").write_bytes(data)
    idle = http.client.HTTPConnection("127.0.0.1", r.port, timeout=T)
    idle.request("GET", "/v1/health", headers=keys(sandboxd.rest_port))
    assert idle.getresponse().read()
    busy = http.client.HTTPConnection("127.0.0.1", r.port, timeout=T)
    busy.request("GET", "/v1/files/drain.bin", headers=keys(sandboxd.rest_port))
    resp = busy.getresponse()
    got = [resp.read(1 << 20)]
    r.proc.send_signal(signal.SIGTERM)
    # the idle connection is closed at once; the download goes on to its end
    idle.sock.settimeout(T)
    assert idle.sock.recv(1) == b""
    while chunk := resp.read(1 << 20):
        got.append(chunk)
        time.sleep(0.02)
    assert hashlib.sha256(b"".join(got)).digest() == hashlib.sha256(data).digest()
    assert r.wait_exit(T) == 0
    (sandboxd.root / "drain.bin").unlink()


def test_a_stalled_download_is_cut_at_the_proxy_timeout(router_factory, sandboxd):
    """A client that stops reading mid-download: the body's splice waits for the client, not
    spinning on a readable sandbox, and the silence bound (--proxy-timeout) ends it."""
    (sandboxd.root / "stall.bin").write_bytes(b"\0" * (64 << 20))
    r = router_factory(["--proxy-timeout", "2s"])
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(T)
    s.connect(("127.0.0.1", r.port))
    head = "".join(f"{k}: {v}\r\n" for k, v in keys(sandboxd.rest_port).items())
    s.sendall(f"GET /v1/files/stall.bin HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode())
    assert s.recv(64).startswith(b"HTTP/1.1 200")
    with open(f"/proc/{r.proc.pid}/stat") as f:
        router_cpu0 = sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13])
    assert metric(r, "sandbox_router_http_connections_open") == 1
    wait_until(lambda: metric(r, "sandbox_router_http_connections_open") == 0, T, interval=0.2,
               what="the stalled download cut after 2 s of silence")
    with open(f"/proc/{r.proc.pid}/stat") as f:
        router_cpu = sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13]) - router_cpu0
    # waiting is not spinning: well under a second of CPU (in clock ticks) for 2 s of stall
    assert router_cpu < os.sysconf("SC_CLK_TCK"), router_cpu
    s.close()
    (sandboxd.root / "stall.bin").unlink()
