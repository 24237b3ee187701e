"""The REST port holds request heads to RFC 9112 and keeps its connections for clients that
use them: each malformed head below, sent as raw bytes, is answered with a JSON error and the
connection closed, and nothing is written; a head that does not come in time, too many
connections from one address and idle connections at the limit give way to new clients; both
IPv4 and IPv6 are served by default."""

import json
import re
import socket
import subprocess
import time

import pytest

from conftest import http_request, wait_until

RECV_WAIT = 3.0


def exchange(port, data, host="127.0.0.1", first=None):
    """Sends data on a new connection (after the request first, answered, when given) and
    returns (what the server answered to data, whether it then closed the connection)."""
    s = socket.create_connection((host, port), timeout=RECV_WAIT)
    try:
        if first:
            s.sendall(first)
            read_response(s)
        s.sendall(data)
        out, closed = b"", False
        while True:
            try:
                d = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                closed = True
                break
            if not d:
                closed = True
                break
            out += d
        return out, closed
    finally:
        s.close()


def read_response(s):
    """Reads one response with a Content-Length body from s; returns (head, body)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        assert d, f"connection closed mid-head: {buf!r}"
        buf += d
    head, _, body = buf.partition(b"\r\n\r\n")
    m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    n = int(m.group(1)) if m else 0
    while len(body) < n:
        d = s.recv(65536)
        assert d, "connection closed mid-body"
        body += d
    return head, body


def status_and_error(out):
    head, _, body = out.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, head, json.loads(body) if body.strip() else None


OK_HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"

# (id, raw request, status, words of the message); each was accepted or answered otherwise
# (a 404, a closed connection with no answer, HTML) before.
MALFORMED = [
    ("nul-in-value", b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400, "NUL"),
    ("no-host", b"GET /v1/health HTTP/1.1\r\n\r\n", 400, "without a Host"),
    ("two-hosts", b"GET /v1/health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400,
     "more than one Host"),
    ("garbage-line", b"GARBAGE\r\n\r\n", 400, "request line"),
    ("double-space", b"GET  /v1/health HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request line"),
    ("bare-lf", b"GET /v1/health HTTP/1.1\nHost: x\n\n", 400, "CRLF"),
    ("bare-cr", b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", 400, "CR"),
    ("space-before-colon", b"GET /v1/health HTTP/1.1\r\nHost : x\r\n\r\n", 400, "colon"),
    ("folded", b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", 400, "folding"),
    ("bad-escape", b"GET /v1/files/%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400, "percent-escape"),
    ("http-9", b"GET /v1/health HTTP/9.9\r\nHost: x\r\n\r\n", 505, "HTTP/1.1"),
    # h2c is the E2B port's alone: here its preface is one more version not served
    ("h2c-preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, "HTTP/1.1"),
    ("cl-and-te", b"PUT /v1/files/strict.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400, "Transfer-Encoding"),
    ("two-cl", b"PUT /v1/files/strict.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
     b"Content-Length: 4\r\n\r\nabcd", 400, "more than one Content-Length"),
    ("cl-not-number", b"PUT /v1/files/strict.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 3x\r\n"
     b"\r\nabc", 400, "decimal"),
    ("te-gzip", b"PUT /v1/files/strict.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n"
     b"\r\n", 501, "chunked"),
    ("te-in-1.0", b"PUT /v1/files/strict.txt HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"3\r\nabc\r\n0\r\n\r\n", 400, "HTTP/1.0"),
]


def assert_refused(out, closed, status, words):
    got, head, err = status_and_error(out)
    assert got == status, out
    assert err and err["code"] and words in err["message"], out
    assert re.search(rb"(?i)\r\ncontent-type: application/json", head), out
    assert re.search(rb"(?i)\r\nconnection: close", head), out
    assert closed, "the connection stayed open after a malformed head"


@pytest.mark.parametrize("raw,status,words", [m[1:] for m in MALFORMED],
                         ids=[m[0] for m in MALFORMED])
def test_malformed_first_head_is_refused(sandboxd, raw, status, words):
    out, closed = exchange(sandboxd.rest_port, raw)
    assert_refused(out, closed, status, words)
    assert not (sandboxd.root / "strict.txt").exists()
    assert http_request(sandboxd.rest_port, "GET", "/healthz").status == 200


# What a later head on a kept-alive connection is held to: the checks made on what
# libmicrohttpd parsed (its own refusals of a later head are its own, not JSON).
LATER = ["two-hosts", "bad-escape", "cl-and-te", "two-cl", "bare-cr", "te-gzip"]


@pytest.mark.parametrize("raw,status,words", [m[1:] for m in MALFORMED if m[0] in LATER],
                         ids=[m[0] for m in MALFORMED if m[0] in LATER])
def test_malformed_later_head_is_refused(sandboxd, raw, status, words):
    out, closed = exchange(sandboxd.rest_port, raw, first=OK_HEAD)
    assert_refused(out, closed, status, words)
    assert not (sandboxd.root / "strict.txt").exists()


def test_absolute_form_target(sandboxd):
    """RFC 9112 §3.2.2: a server accepts the absolute form; its path is the route."""
    out, _ = exchange(sandboxd.rest_port, b"GET http://sandbox.example/v1/health HTTP/1.1\r\n"
                      b"Host: other\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200 "), out
    out, _ = exchange(sandboxd.rest_port, b"PUT http://x:8080/v1/files/abs.txt HTTP/1.1\r\n"
                      b"Host: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc")
    assert out.startswith(b"HTTP/1.1 204 "), out
    assert (sandboxd.root / "abs.txt").read_bytes() == b"abc"


def test_http_1_0_is_answered_as_1_0_expects(sandboxd):
    (sandboxd.root / "ten.txt").write_bytes(b"0123456789" * 1000)
    out, closed = exchange(sandboxd.rest_port, b"GET /v1/files/ten.txt HTTP/1.0\r\n\r\n")
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head
    assert b"chunked" not in head.lower(), head
    assert body == b"0123456789" * 1000
    assert closed, "HTTP/1.0 without keep-alive: the server closes after the answer"


def test_head_too_large(sandboxd):
    raw = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n"
    out, closed = exchange(sandboxd.rest_port, raw)
    assert_refused(out, closed, 431, "16 KiB")


def test_head_deadline(sandboxd_factory):
    d = sandboxd_factory(["--http-head-timeout", "1s"])
    half = socket.create_connection(("127.0.0.1", d.rest_port))
    silent = socket.create_connection(("127.0.0.1", d.rest_port))
    half.sendall(b"GET /v1/health HTTP/1.1\r\nHo")
    t0 = time.monotonic()
    half.settimeout(10)
    out = b""
    while (chunk := half.recv(4096)):
        out += chunk
    assert_refused(out, True, 408, "in time")
    silent.settimeout(10)
    assert silent.recv(4096) == b"", "a connection that sent nothing is closed without answer"
    print(f"closed after {time.monotonic() - t0:.2f}s (--http-head-timeout 1s)")
    half.close()
    silent.close()


def open_idle(port, n, request=False):
    """n connections to port; with request, each has had one request answered and is idle."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=RECV_WAIT)
        if request:
            s.sendall(OK_HEAD)
            read_response(s)
        socks.append(s)
    return socks


def open_busy(port, n):
    """n connections each with an upload in progress (its body announced, not sent)."""
    busy = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=RECV_WAIT)
        s.sendall(b"PUT /v1/files/busy%d HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab" % i)
        busy.append(s)
    time.sleep(0.3)  # each taken by the server
    return busy


def closed_by_server(s):
    s.settimeout(RECV_WAIT)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, socket.timeout) as e:
        return isinstance(e, ConnectionResetError)


def test_per_peer_limit_closes_the_peers_oldest_half_open_connection(sandboxd_factory):
    d = sandboxd_factory(["--http-max-connections-per-peer", "4"])
    half = open_idle(d.rest_port, 4)
    for s in half:
        s.sendall(b"GET /v1/health HTTP/1.1\r\nHo")
    time.sleep(0.3)  # all four held by the gate before the fifth comes
    assert http_request(d.rest_port, "GET", "/v1/health").status == 200
    assert closed_by_server(half[0]), "the oldest half-open connection was kept"
    for s in half:
        s.close()


def test_silent_connections_take_nothing(sandboxd_factory):
    """The kernel holds a connection that has sent nothing (TCP_DEFER_ACCEPT) before the gate
    sees it: ten of them count for nothing against a limit of four."""
    d = sandboxd_factory(["--http-max-connections-per-peer", "4"])
    silent = open_idle(d.rest_port, 10)
    time.sleep(0.3)
    for _ in range(3):
        assert http_request(d.rest_port, "GET", "/v1/health").status == 200
    for s in silent:
        s.close()


def test_per_peer_limit_refuses_when_every_connection_is_busy(sandboxd_factory):
    d = sandboxd_factory(["--http-max-connections-per-peer", "2"])
    busy = open_busy(d.rest_port, 2)
    out, closed = exchange(d.rest_port, OK_HEAD)
    assert_refused(out, closed, 503, "too many connections from this address")
    for s in busy:
        s.close()


def test_idle_connections_give_way_at_the_connection_limit(sandboxd_factory):
    d = sandboxd_factory(["--http-max-connections", "4"])
    idle = open_idle(d.rest_port, 4, request=True)
    r = http_request(d.rest_port, "GET", "/v1/health")
    assert r.status == 200
    assert closed_by_server(idle[0]), "the connection idle longest was kept"
    for s in idle:
        s.close()


def test_probes_have_a_reserve_when_every_connection_is_busy(sandboxd_factory):
    d = sandboxd_factory(["--http-max-connections", "2", "--http-max-connections-per-peer", "100"])
    busy = open_busy(d.rest_port, 2)
    out, closed = exchange(d.rest_port, b"GET /v1/metadata HTTP/1.1\r\nHost: x\r\n\r\n")
    assert_refused(out, closed, 503, "connection limit")
    for path in ("/healthz", "/readyz", "/v1/health"):
        assert http_request(d.rest_port, "GET", path).status == 200, path
    for s in busy:
        s.close()


# --- both families ---

def can_connect(host, port):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def has_ipv6():
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.bind(("::1", 0))
        s.close()
        return True
    except OSError:
        return False


def free_wildcard_port():
    """A TCP port free on every address of both families now (free_port checks 127.0.0.1 only;
    a port some other address holds, say in TIME_WAIT, cannot be bound by a wildcard)."""
    fam = socket.AF_INET6 if has_ipv6() else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        if fam == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.bind(("::" if fam == socket.AF_INET6 else "0.0.0.0", 0))
        return s.getsockname()[1]


@pytest.fixture
def bare_daemon(sandboxd_bin, tmp_path):
    """Starts sandboxd with the given --listen-host (None: the default) on fixed free ports."""
    procs = []

    def start(host):
        # A port free on 127.0.0.1 may be taken on another address: try again with others.
        for _ in range(5):
            grpc_port, rest_port = free_wildcard_port(), free_wildcard_port()
            argv = [str(sandboxd_bin), "--grpc-port", str(grpc_port), "--rest-port",
                    str(rest_port), "--root-dir", str(tmp_path)]
            if host:
                argv += ["--listen-host", host]
            p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            procs.append(p)
            lines = []
            for line in p.stderr:
                lines.append(line.decode())
                if "ready" in lines[-1]:
                    return grpc_port, rest_port, "".join(lines)
            p.wait(timeout=20)
            if "in use" not in "".join(lines):
                break
        raise AssertionError("sandboxd did not start:\n" + "".join(lines))

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=20)


def test_default_listen_serves_both_families(bare_daemon):
    if not has_ipv6():
        pytest.skip("no IPv6 on this machine")
    grpc_port, rest_port, log = bare_daemon(None)
    assert "rest listening on every address" in log and "(IPv4 and IPv6)" in log, log
    for host in ("127.0.0.1", "::1"):
        assert can_connect(host, grpc_port), f"gRPC on {host}"
        out, _ = exchange(rest_port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                          b"Connection: close\r\n\r\n", host=host)
        assert out.startswith(b"HTTP/1.1 200 "), (host, out)


@pytest.mark.parametrize("given,other", [("127.0.0.1", "::1"), ("::1", "127.0.0.1")])
def test_explicit_address_binds_only_that_one(bare_daemon, given, other):
    if not has_ipv6():
        pytest.skip("no IPv6 on this machine")
    grpc_port, rest_port, log = bare_daemon(given)
    assert can_connect(given, grpc_port) and can_connect(given, rest_port), log
    assert not can_connect(other, grpc_port), f"gRPC answered on {other}"
    assert not can_connect(other, rest_port), f"REST answered on {other}"


def test_explicit_ipv4_wildcard_is_ipv4_only_on_rest(bare_daemon):
    if not has_ipv6():
        pytest.skip("no IPv6 on this machine")
    _, rest_port, log = bare_daemon("0.0.0.0")
    assert "(IPv4 only)" in log, log
    assert can_connect("127.0.0.1", rest_port)
    assert not can_connect("::1", rest_port)


def test_still_serving_after_all_of_it(sandboxd, client):
    wait_until(lambda: http_request(sandboxd.rest_port, "GET", "/v1/health").status == 200, 5,
               what="health")
    assert client.execute(["true"]).exit_code == 0
