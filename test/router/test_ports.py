"""The router's ports: one main port for every client (gRPC's HTTP/2 preface and HTTP/1.1 told
apart by the first bytes), the probe port (/healthz, /readyz that turns 503 on SIGTERM), the
metrics port; connections that say nothing are closed after the head timeout."""

import json
import signal
import socket
import threading
import time

import sbxtest
from conftest import http_request, wait_until
from test_grpc_relay import routed


def metric(r, name):
    text = http_request(r.metrics_port, "GET", "/metrics", timeout=5).body.decode()
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return line
    raise AssertionError(f"{name} not in /metrics:\n{text}")


def test_one_port_serves_http1_and_grpc(router, sandboxd, protos):
    r = http_request(router.port, "GET", "/healthz", timeout=5)
    assert r.status == 200 and json.loads(r.body) == {"status": "ok"}
    c = routed(router, sandboxd, protos)
    assert c.execute(["true"]).exit_code == 0
    c.close()
    # The same port proxies HTTP/1.1 to the same sandbox's REST port.
    r = http_request(router.port, "GET", "/v1/health", timeout=5,
                     headers={"X-Sandbox-ID": "sb", "X-Sandbox-Pod-IP": "127.0.0.1",
                              "X-Sandbox-Port": str(sandboxd.rest_port)})
    assert r.status == 200 and json.loads(r.body)["status"] == "ok"
    assert int(metric(router, 'sandbox_router_connections_total{protocol="h2"}').split()[-1]) >= 1
    assert int(metric(router, 'sandbox_router_connections_total{protocol="http1"}').split()[-1]) >= 2


def test_probes_and_drain(router_factory, sandboxd, protos):
    r = router_factory()
    assert http_request(r.probe_port, "GET", "/healthz", timeout=5).status == 200
    assert http_request(r.probe_port, "GET", "/readyz", timeout=5).status == 200
    c = routed(r, sandboxd, protos)
    done = []
    t = threading.Thread(target=lambda: done.append(
        c.execute(["sh", "-c", "sleep 1.5; echo late"], timeout=30)))
    t.start()
    time.sleep(0.3)
    r.signal(signal.SIGTERM)
    # Draining: not ready, still alive, the call in flight finishes.
    wait_until(lambda: http_request(r.probe_port, "GET", "/readyz", timeout=5).status == 503, 10,
               what="/readyz 503 while draining")
    t.join(30)
    assert done and done[0].stdout == b"late\n"
    assert r.wait_exit(30) == 0
    c.close()


def test_metrics_count_upstreams(router_factory, sandboxd_factory, protos):
    r = router_factory()
    a, b = sandboxd_factory(), sandboxd_factory()
    for d in (a, b, a, b):
        c = routed(r, d, protos)
        assert c.execute(["true"]).exit_code == 0
        c.close()
    assert metric(r, "sandbox_router_upstream_connections").split()[-1] == "2"
    assert metric(r, "sandbox_router_upstream_connections_created_total").split()[-1] == "2"
    assert int(metric(r, "sandbox_router_grpc_calls_total").split()[-1]) == 4


def closed_by_peer(s):
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True  # closed with our bytes unread: a reset


def test_silent_connections_are_closed(router_factory):
    r = router_factory(["--http-head-timeout", "1s"])
    s = socket.create_connection(("127.0.0.1", r.port), timeout=10)
    t0 = time.monotonic()
    assert closed_by_peer(s)  # by the router, not by our timeout
    assert time.monotonic() - t0 < 9
    s.close()
    # Half a preface is not a preface either.
    s = socket.create_connection(("127.0.0.1", r.port), timeout=10)
    s.sendall(b"PRI * HTTP/2.0\r\n")
    assert closed_by_peer(s)
    s.close()
    assert http_request(r.port, "GET", "/healthz", timeout=5).status == 200


def test_client_connections_send_small_frames_at_once(router, sandboxd, protos):
    """The router's end of a client's connection has Nagle's algorithm off, whichever server it
    was handed to: with it on, a unary answer waited for the client's delayed ACK (40 ms)."""
    import socket as so
    for proto in ("h2", "http1"):
        s = so.create_connection(("127.0.0.1", router.port), timeout=10)
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" if proto == "h2" else
                  b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        mine = wait_until(lambda: sbxtest.peer_socket(router.proc.pid, s.getsockname()), 10,
                          what=f"the router's end of the {proto} connection")
        assert mine.getsockopt(so.IPPROTO_TCP, so.TCP_NODELAY) != 0, proto
        mine.close()
        s.close()
