"""Directory watches abused: many watches whose SSE clients never read, under a flood of events.
The daemon's memory stays bounded by the watches' queues (not by the events), it stays
responsive, and the watches go once their retention passes."""

import os
import socket
import time

from sbx_integration_conftest import Prober, http_request, raise_nofile, vm_rss_kib, wait_until

# Under ASan RSS says nothing (its allocator keeps what is freed): LeakSanitizer checks instead.
SANITIZED = os.environ.get("SANDBOXD_SANITIZED") == "ON"

STREAMS = 32
EVENTS = 200_000


def never_reading_sse(d, path):
    """An SSE watch whose client reads the head and the ready event, then nothing more, with a
    small receive buffer."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(10)
    s.connect(("127.0.0.1", d.rest_port))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    got = b""
    while b"event: ready" not in got:
        chunk = s.recv(4096)
        assert chunk, got
        got += chunk
    assert got.startswith(b"HTTP/1.1 200"), got
    return s


def watches_open(d):
    m = http_request(d.rest_port, "GET", "/metrics").body.decode()
    for ln in m.splitlines():
        if ln.startswith("sandboxd_watches "):
            return int(ln.split()[1])
    return None


def test_never_reading_watchers_under_a_flood(sandboxd_factory):
    raise_nofile(4096)
    d = sandboxd_factory(["--max-watches", "64", "--max-watches-per-client", "64",
                          "--watch-queue", "4096", "--watch-retention", "1s"])
    flood_dir = d.root / "flood"
    flood_dir.mkdir()
    names = [flood_dir / (c * 200) for c in "ab"]
    for p in names:
        p.touch()
    http_request(d.rest_port, "GET", "/healthz")
    time.sleep(0.3)
    base = vm_rss_kib(d.proc.pid)
    socks = [never_reading_sse(d, "/v1/watch/flood") for _ in range(STREAMS)]
    prober = Prober(d, 2.0, 3.0)
    prober.start()
    peak = 0
    for i in range(EVENTS):
        os.utime(names[i & 1], ns=(i, i))
        if i % 20_000 == 0:
            peak = max(peak, vm_rss_kib(d.proc.pid))
    (flood_dir / "done").touch()
    for _ in range(10):
        time.sleep(0.2)
        peak = max(peak, vm_rss_kib(d.proc.pid))
    wait_until(lambda: len(prober.execute) >= 3, 10, what="three probes")
    prober.finish(f"{STREAMS} never-reading SSE watches, {EVENTS} events")
    # Each watch holds at most its queue: 4096 events and 1 MiB of paths, whatever came.
    bound = base + STREAMS * 1536 + (32 << 10)
    print(f"daemon RSS: base {base} KiB, peak {peak} KiB, bound {bound} KiB "
          f"(unbounded it would hold ~{EVENTS * STREAMS * 250 >> 20} MiB of events)")
    assert SANITIZED or peak < bound, "the daemon's memory stays bounded by the watches' queues"
    for s in socks:
        s.close()
    # Closed clients are noticed at the next keepalive or write; their watches then expire.
    (flood_dir / "poke").touch()
    wait_until(lambda: watches_open(d) == 0, 40, what="every watch gone after its retention")
    assert d.alive()
