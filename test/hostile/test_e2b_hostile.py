"""Hostile clients of the E2B port (--e2b-port: envd's Connect protocol over HTTP/1.1), on raw
sockets with small receive buffers that never read: a Start whose process floods stdout, a
Connect (reattach) to a flooding process, a WatchDir on a busy directory. The daemon stays up
and answers others (/health, other Starts, our gRPC and REST), its memory stays bounded by its
rings and queues (not by the output or the events), and a client's going lets go of what it
held.

A Start stream holds its process while its client does not read (sbx_job_spec.held: the process
waits as on a pipe, nothing is dropped), as under envd: by design, a never-reading Start client
blocks its own process and nothing else. A Connect stream holds nothing: its process runs on."""

import base64
import json
import os
import socket
import struct
import time
from pathlib import Path

import sbxtest
from sbx_integration_conftest import Prober, http_request, vm_rss_kib, wait_until

# Under ASan RSS says nothing (its allocator keeps what is freed): LeakSanitizer checks instead.
SANITIZED = os.environ.get("SANDBOXD_SANITIZED") == "ON"
E2B_LISTENING = r"e2b listening on 127\.0\.0\.1 port (\d+)"
MIB = 1 << 20
FLOOD = 300_000_000  # bytes a flood writes: far beyond any ring, queue or socket buffer
GROWTH_BOUND_KIB = 64 * 1024  # the daemon's RSS growth while abused (plain build only)


def e2b_daemon(factory):
    d = factory(["--e2b-port", str(sbxtest.free_port())])
    d.e2b_port = int(d.wait_line(E2B_LISTENING).group(1))
    return d


def envelope(msg):
    payload = json.dumps(msg).encode()
    return struct.pack(">BI", 0, len(payload)) + payload


def never_reading(d, path, msg, head=True):
    """A Connect server stream on a socket with a 4 KiB receive buffer: the request sent, the
    response head read (200), then nothing more is ever read."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(20)
    s.connect(("127.0.0.1", d.e2b_port))
    body = envelope(msg)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\n"
              f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    got = b""
    while head and b"\r\n\r\n" not in got:
        chunk = s.recv(1)  # byte by byte: nothing past the head is taken from the socket
        assert chunk, f"closed before the response head: {got!r}"
        got += chunk
    assert not head or got.startswith(b"HTTP/1.1 200"), got
    return s


def unary(d, method, msg):
    r = http_request(d.e2b_port, "POST", method, json.dumps(msg).encode(),
                     {"Content-Type": "application/json"}, timeout=20)
    assert r.status == 200, (method, r.status, r.body[:500])
    return json.loads(r.body)


def tagged(d):
    """{tag: pid} of the running processes, from process.Process/List."""
    ps = unary(d, "/process.Process/List", {}).get("processes", [])
    return {p["tag"]: p["pid"] for p in ps if p.get("tag")}


def start_to_end(d, cmd):
    """A whole Start stream read by a well-behaved client: (stdout, the end event)."""
    r = http_request(d.e2b_port, "POST", "/process.Process/Start",
                     envelope({"process": {"cmd": "/bin/sh", "args": ["-c", cmd]}}),
                     {"Content-Type": "application/connect+json"}, timeout=30)
    assert r.status == 200, r.status
    out, end, b = b"", None, r.body
    while b:
        flags, n = struct.unpack(">BI", b[:5])
        msg, b = json.loads(b[5:5 + n]), b[5 + n:]
        ev = msg.get("event", {})
        if "data" in ev:
            out += base64.b64decode(ev["data"].get("stdout", ""))
        end = ev.get("end", end)
    return out, end


def others_answer(d):
    """What any other client gets while the abuse goes on: envd's /health, a whole Start, a
    unary call; (our gRPC and REST: the Prober)."""
    assert http_request(d.e2b_port, "GET", "/health", timeout=20).status == 204
    out, end = start_to_end(d, "echo still here")
    assert out == b"still here\n" and end and end.get("exited"), (out, end)
    assert unary(d, "/filesystem.Filesystem/Stat", {"path": "/"})["entry"]["type"] == \
        "FILE_TYPE_DIRECTORY"


def finish(prober, what):
    """Stops the prober once it has probed a few times (however fast the abuse went by)."""
    n = len(prober.healthz)
    wait_until(lambda: len(prober.healthz) >= n + 3, 60, interval=0.05, what="three more probes")
    prober.finish(what)


def over(d, prober, what):
    """After the abuse: the flood has left List, and everyone is answered as before."""
    wait_until(lambda: "flood" not in tagged(d), 30, interval=0.1, what="the flood to leave List")
    others_answer(d)
    finish(prober, what)
    assert d.alive()


def written(pid):
    """Bytes a process has written (/proc/PID/io), None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except OSError:
        return None
    return 0


def stopped(pid):
    """True when the process wrote nothing over half a second."""
    a = written(pid)
    time.sleep(0.5)
    return a == written(pid)


def child_of(pid):
    kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(kids[0]) if kids else None


def settled(d, base_kib):
    grown = vm_rss_kib(d.proc.pid) - base_kib
    print(f"daemon RSS grew by {grown} KiB (bound {GROWTH_BOUND_KIB} KiB, plain build only)")
    if not SANITIZED:
        assert grown < GROWTH_BOUND_KIB, f"the daemon grew by {grown} KiB"


def warm(d):
    """One of each call first, so that what the daemon allocates once is not counted."""
    others_answer(d)
    time.sleep(0.2)
    return vm_rss_kib(d.proc.pid)


def flood_held(d, done):
    """The tagged "flood" process's shell, once its head is held: its writes stop at what the
    job's ring, the call's queue and the socket buffers take (not a timing: the count stops
    moving, and stays far below the flood)."""
    sh = wait_until(lambda: tagged(d).get("flood"), 20, what="the flood in List")
    head = wait_until(lambda: child_of(sh), 20, what="the flood's head")
    wait_until(lambda: stopped(head), 60, what="the flood to be held")
    w = written(head)
    assert w is not None and w < 64 * MIB and not done.exists(), \
        f"the flood was not held (it wrote {w} bytes; None: it is over)"
    return sh


def abused(factory):
    """A daemon with the E2B port, its RSS once warm, and a Prober of its gRPC and REST."""
    d = e2b_daemon(factory)
    base = warm(d)
    prober = Prober(d)
    prober.start()
    return d, base, prober


def test_start_whose_client_never_reads(sandboxd_factory, tmp_path):
    d, base, prober = abused(sandboxd_factory)
    done = tmp_path / "flood-done"
    s = never_reading(d, "/process.Process/Start", {
        "process": {"cmd": "/bin/sh", "args": ["-c", f"head -c {FLOOD} /dev/zero; : > {done}"]},
        "tag": "flood"})
    sh = flood_held(d, done)
    others_answer(d)
    assert tagged(d).get("flood") == sh
    settled(d, base)
    # The client goes: nothing holds the process any more, it runs to its end.
    s.close()
    wait_until(done.exists, 120, interval=0.1, what="the flood to run to its end")
    over(d, prober, "a Start client that never reads")


def test_connect_whose_client_never_reads(sandboxd_factory, tmp_path):
    d, base, prober = abused(sandboxd_factory)
    done = tmp_path / "flood-done"
    # The process waits for a line before it floods; its Start client leaves at once (the
    # process outlives its stream, unheld), a Connect client attaches and never reads.
    a = never_reading(d, "/process.Process/Start", {
        "process": {"cmd": "/bin/sh",
                    "args": ["-c", f"read go; head -c {FLOOD} /dev/zero; : > {done}"]},
        "tag": "flood"})
    wait_until(lambda: "flood" in tagged(d), 20, what="the flood in List")
    a.close()
    b = never_reading(d, "/process.Process/Connect", {"process": {"tag": "flood"}})
    unary(d, "/process.Process/SendInput",
          {"process": {"tag": "flood"}, "input": {"stdin": base64.b64encode(b"go\n").decode()}})
    # A Connect client holds nothing: the whole flood goes by it while it reads nothing.
    wait_until(done.exists, 120, interval=0.1, what="the flood to run to its end")
    others_answer(d)
    settled(d, base)
    b.close()
    over(d, prober, "a Connect client that never reads")


def test_watchdir_whose_client_never_reads(sandboxd_factory, tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    d, base, prober = abused(sandboxd_factory)
    s = never_reading(d, "/filesystem.Filesystem/WatchDir", {"path": str(busy)})
    names = [busy / f"f{i}" for i in range(16)]
    for i in range(20_000):  # 60,000 events: create, write, remove
        p = names[i % 16]
        p.write_bytes(b"x")
        p.unlink()
        if i % 5000 == 0:
            others_answer(d)
    others_answer(d)
    settled(d, base)
    s.close()
    # Still watching for a client that reads: a new WatchDir sees a new file.
    r = socket.create_connection(("127.0.0.1", d.e2b_port), timeout=20)
    body = envelope({"path": str(busy)})
    r.sendall(b"POST /filesystem.Filesystem/WatchDir HTTP/1.1\r\nHost: x\r\nContent-Type: "
              b"application/connect+json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    got = [b""]
    while b"\r\n\r\n" not in got[0]:
        got[0] += r.recv(4096)
    assert got[0].startswith(b"HTTP/1.1 200"), got[0]
    r.settimeout(0.2)

    def seen():
        (busy / "after").write_bytes(b"y")  # again and again: whenever the watch is armed
        try:
            got[0] += r.recv(65536)
        except socket.timeout:
            pass
        return b"after" in got[0]
    wait_until(seen, 30, what="an event for a reading client")
    r.close()
    finish(prober, "a WatchDir client that never reads")
    assert d.alive()
