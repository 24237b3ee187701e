"""Slow and bad HTTP clients: slowloris headers, stalled uploads, 1000 idle connections. While
they hold the daemon, /healthz and a gRPC Execute must keep answering within a bound (printed);
the daemon survives; the idle timeout (--http-idle-timeout 2s), or the head timeout for one
that never sends, closes every such connection and a stalled upload leaves no temp file
behind."""

import selectors
import socket
import time

import pytest

from conftest import Prober, connect_many, http_request, raise_nofile, temp_files, wait_until

IDLE = 2.0  # --http-idle-timeout of these daemons
CLOSE_SLACK = 4.0  # the server must close an idle connection within IDLE + this
HEALTHZ_BOUND = 1.0  # seconds: the slowest /healthz allowed while abused
EXECUTE_BOUND = 2.0  # seconds: the slowest Execute allowed while abused


@pytest.fixture
def abused(sandboxd_factory):
    raise_nofile(4096)  # before the daemon starts: it inherits the limit
    return sandboxd_factory(["--http-idle-timeout", f"{int(IDLE)}s"])


def _wait_closed_by_server(socks, timeout):
    """Waits until the server has closed every socket (EOF or reset); returns the seconds each
    took, and the sockets still open at the timeout."""
    sel = selectors.DefaultSelector()
    t0 = time.monotonic()
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    open_ = set(socks)
    took = []
    deadline = t0 + timeout
    while open_ and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=max(0.0, deadline - time.monotonic())):
            s = key.fileobj
            try:
                data = s.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data == b"":
                sel.unregister(s)
                open_.discard(s)
                took.append(time.monotonic() - t0)
            # (data: an error response before the close; keep reading)
    sel.close()
    return took, open_


def test_slowloris(abused):
    d = abused
    n = 200
    socks = connect_many(d.rest_port, n)
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
    probe = Prober(d, HEALTHZ_BOUND, EXECUTE_BOUND)
    try:
        probe.start()
        # 3 s of headers a byte at a time on every connection, every 0.25 s (< the idle timeout).
        sent = 0
        t_end = time.monotonic() + 3.0
        while time.monotonic() < t_end:
            for s in socks:
                s.sendall(request[sent:sent + 1])
            sent += 1
            time.sleep(0.25)
        probe.finish(f"{n} slowloris connections")
        assert d.alive()
        # They stop sending: the idle timeout closes every one.
        took, still = _wait_closed_by_server(socks, IDLE + CLOSE_SLACK)
        print(f"slowloris: {len(took)} closed by the server, last after {max(took, default=0):.2f}s")
        assert not still, f"{len(still)} of {n} stalled connections still open after " \
                          f"{IDLE + CLOSE_SLACK}s"
        assert min(took) >= IDLE * 0.5, f"closed after {min(took):.2f}s, before the idle timeout"
    finally:
        for s in socks:
            s.close()
    assert http_request(d.rest_port, "GET", "/healthz", timeout=5).status == 200


def test_stalled_uploads(abused):
    d = abused
    n = 20
    socks = connect_many(d.rest_port, n)
    probe = Prober(d, HEALTHZ_BOUND, EXECUTE_BOUND)
    try:
        for i, s in enumerate(socks):
            s.sendall(f"PUT /v1/files/stalled/f{i} HTTP/1.1\r\nHost: x\r\n"
                      f"Content-Length: {1 << 20}\r\n\r\n".encode() + b"0123456789")
        probe.start()
        time.sleep(1.0)  # deliberate: the uploads stay stalled while we probe
        probe.finish(f"{n} stalled uploads")
        took, still = _wait_closed_by_server(socks, IDLE + CLOSE_SLACK)
        print(f"stalled uploads: closed after {min(took, default=0):.2f}..{max(took, default=0):.2f}s")
        assert not still, f"{len(still)} of {n} stalled uploads still open"
    finally:
        for s in socks:
            s.close()
    wait_until(lambda: not temp_files(d.root), 3.0, 0.05, "the stalled uploads' temp files to go")
    assert not any((d.root / "stalled" / f"f{i}").exists() for i in range(n)), \
        "a stalled upload left its target"
    assert d.alive()


def test_1000_idle_connections(sandboxd_factory):
    # A connection that never sends is closed after the head timeout (the kernel holds it that
    # long before the gate sees it, then the gate as long again): here 1 s, for a bound near the
    # idle timeout of the keep-alive ones.
    raise_nofile(4096)
    d = sandboxd_factory(["--http-idle-timeout", f"{int(IDLE)}s", "--http-head-timeout", "1s"])
    n = 1000
    socks = connect_many(d.rest_port, n)
    keep = []
    probe = Prober(d, HEALTHZ_BOUND, EXECUTE_BOUND)
    try:
        # And 50 keep-alive connections idle after one complete request.
        for _ in range(50):
            s = socket.create_connection(("127.0.0.1", d.rest_port), timeout=5)
            keep.append(s)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while b"\r\n\r\nok\n" not in data:
                chunk = s.recv(4096)
                assert chunk, "closed before answering"
                data += chunk
            assert data.startswith(b"HTTP/1.1 200"), data
        probe.start()
        time.sleep(1.0)  # deliberate: the connections stay idle while we probe
        probe.finish(f"{n} idle connections")
        took, still = _wait_closed_by_server(socks + keep, IDLE + CLOSE_SLACK)
        print(f"idle: {len(took)} closed by the server after {min(took, default=0):.2f}.."
              f"{max(took, default=0):.2f}s")
        assert not still, f"{len(still)} of {n + len(keep)} idle connections still open after " \
                          f"{IDLE + CLOSE_SLACK}s"
    finally:
        for s in socks + keep:
            s.close()
    assert d.alive()
    assert http_request(d.rest_port, "GET", "/healthz", timeout=5).status == 200
