"""h2c on the E2B port (HTTP/2 with prior knowledge over cleartext TCP, as envd serves it beside
HTTP/1.1), by real HTTP/2 clients: curl --http2-prior-knowledge and httpx on the h2 library.
Every route goes through the same implementation as over HTTP/1.1; these tests check that the
bridge carries it whole: plain routes, uploads and downloads of a few MiB, Connect unary and
server-streaming calls, concurrent streams on one connection, a reset stream and a closed
connection."""

import asyncio
import hashlib
import json
import os
import socket
import struct
import subprocess
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import httpx

from conftest import envelope


def curl(*args, data=None):
    """(HTTP version, status, body) of one curl call over h2c."""
    out = subprocess.run(
        ["curl", "-sS", "--http2-prior-knowledge", "-o", "-", "-w",
         "\n%{http_version} %{http_code}", "--max-time", "60", *args],
        input=data, capture_output=True, check=True)
    body, _, tail = out.stdout.rpartition(b"\n")
    version, status = tail.decode().split()
    return version, int(status), body


def h2_client(**kw):
    return httpx.Client(http1=False, http2=True, timeout=60, **kw)


def start_msg(*argv, tag=None):
    msg = {"process": {"cmd": argv[0], "args": list(argv[1:])}}
    if tag:
        msg["tag"] = tag
    return envelope(json.dumps(msg).encode())


CONNECT_JSON = {"Content-Type": "application/connect+json"}


class Envelopes:
    """Connect envelopes read from a stream of byte chunks as they come."""

    def __init__(self, chunks):
        self.chunks = chunks
        self.buf = b""

    def next(self):
        while True:
            if len(self.buf) >= 5:
                flags, n = struct.unpack(">BI", self.buf[:5])
                if len(self.buf) >= 5 + n:
                    payload, self.buf = self.buf[5:5 + n], self.buf[5 + n:]
                    return flags, json.loads(payload)
            self.buf += next(self.chunks)


def test_health_over_h2c(daemon):
    version, status, body = curl(f"{daemon.url}/health")
    assert (version, status, body) == ("2", 204, b"")


def test_upload_and_download_over_h2c(daemon, tmp_path):
    data = os.urandom(5 * 1024 * 1024 + 123)
    src = tmp_path / "up.bin"
    src.write_bytes(data)
    up, raw = tmp_path / "up-dest.bin", tmp_path / "raw-dest.bin"  # the sandbox's paths are ours
    version, status, body = curl("-F", f"file=@{src}", f"{daemon.url}/files?path={up}")
    assert (version, status) == ("2", 200), body
    assert json.loads(body)[0]["path"] == str(up)
    version, status, body = curl(f"{daemon.url}/files?path={up}")
    assert (version, status) == ("2", 200)
    assert hashlib.sha256(body).digest() == hashlib.sha256(data).digest()
    # A raw body of its own length (Content-Length relayed, not chunked).
    version, status, body = curl("-H", "Content-Type: application/octet-stream", "--data-binary",
                                 "@-", f"{daemon.url}/files?path={raw}", data=data[:99999])
    assert (version, status) == ("2", 200), body
    assert raw.read_bytes() == data[:99999]
    assert curl(f"{daemon.url}/files?path={raw}")[2] == data[:99999]


def test_connect_unary_over_h2c(daemon):
    version, status, body = curl("-H", "Content-Type: application/json", "-d", '{"path": "/tmp"}',
                                 f"{daemon.url}/filesystem.Filesystem/Stat")
    assert (version, status) == ("2", 200)
    assert json.loads(body)["entry"]["type"] == "FILE_TYPE_DIRECTORY"
    # A Connect error keeps its status and JSON.
    version, status, body = curl("-H", "Content-Type: application/json", "-d", '{"path": "/nope"}',
                                 f"{daemon.url}/filesystem.Filesystem/Stat")
    assert (version, status, json.loads(body)["code"]) == ("2", 404, "not_found")


def test_start_stream_over_h2c(daemon):
    with h2_client() as c:
        r = c.post(f"{daemon.url}/process.Process/Start", headers=CONNECT_JSON,
                   content=start_msg("/bin/sh", "-c", "echo hi; echo oops >&2; exit 3"))
        assert r.http_version == "HTTP/2" and r.status_code == 200
        assert r.headers["content-type"] == "application/connect+json"
        assert "transfer-encoding" not in r.headers and "connection" not in r.headers
        body, msgs = r.content, []
        while body:
            flags, n = struct.unpack(">BI", body[:5])
            msgs.append((flags, json.loads(body[5:5 + n])))
            body = body[5 + n:]
    ev = [m["event"] for f, m in msgs[:-1]]
    assert "pid" in ev[0]["start"]
    assert {"data": {"stdout": "aGkK"}} in ev and {"data": {"stderr": "b29wcwo="}} in ev
    assert ev[-1]["end"]["exitCode"] == 3
    assert msgs[-1] == (2, {})


def test_concurrent_streams_on_one_connection(daemon, tmp_path):
    """N Start calls on one connection whose processes wait for each other: they end only if
    every stream runs at once."""
    n, barrier = 8, tmp_path / "barrier"
    script = (f"mkdir -p {barrier}; touch {barrier}/$$; i=0; "
              f"while [ $(ls {barrier} | wc -l) -lt {n} ] && [ $i -lt 600 ]; "
              f"do sleep 0.05; i=$((i+1)); done; ls {barrier} | wc -l")

    async def run():
        limits = httpx.Limits(max_connections=1)
        async with httpx.AsyncClient(http1=False, http2=True, timeout=60, limits=limits) as c:
            rs = await asyncio.gather(*[
                c.post(f"{daemon.url}/process.Process/Start", headers=CONNECT_JSON,
                       content=start_msg("/bin/sh", "-c", script)) for _ in range(n)])
            return rs

    rs = asyncio.run(run())
    for r in rs:
        assert r.http_version == "HTTP/2" and r.status_code == 200
        # base64 of "8\n": every process saw all the others
        assert b'"stdout":"OAo="' in r.content, r.content


def flood_ends(d, tag):
    """Waits for a held flood to leave List once its client is gone. The daemon's idle timeout
    (300 s here) would end it too: the wait is far shorter."""
    deadline = time.monotonic() + 120
    while True:
        status, body = d.unary("List", {})
        if tag not in [p.get("tag") for p in body.get("processes", [])]:
            return
        assert time.monotonic() < deadline, "the process did not end after its client left"
        time.sleep(0.1)


def flood(tag):
    return start_msg("/bin/sh", "-c", "head -c 300000000 /dev/zero", tag=tag)


def test_reset_stream_is_a_client_gone(make_daemon):
    """A Start stream reset (RST_STREAM) mid-output on a connection that stays: the daemon sees
    its client gone and lets the held process go (its 300 MB then end at once), as when an
    HTTP/1.1 client closes. By the h2 library itself: httpx closing a response mid-stream sends
    no RST_STREAM (httpcore leaves the stream be)."""
    d = make_daemon(extra=["--http-idle-timeout", "300s"])
    s = socket.create_connection(("127.0.0.1", d.port), timeout=30)
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, [(":method", "POST"), (":path", "/process.Process/Start"),
                         (":scheme", "http"), (":authority", "127.0.0.1"),
                         ("content-type", "application/connect+json")])
    c.send_data(sid, flood("h2c-reset"), end_stream=True)
    s.sendall(c.data_to_send())
    got = b""
    while b'"data"' not in got:  # the start event, then output
        for e in c.receive_data(s.recv(65536)):
            if isinstance(e, h2.events.DataReceived):
                got += e.data  # never acknowledged: the window shuts, the flood is held
        s.sendall(c.data_to_send())
    status, body = d.unary("List", {})
    assert "h2c-reset" in [p.get("tag") for p in body.get("processes", [])]
    c.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
    health = c.get_next_available_stream_id()
    c.send_headers(health, [(":method", "GET"), (":path", "/health"), (":scheme", "http"),
                            (":authority", "127.0.0.1")], end_stream=True)
    s.sendall(c.data_to_send())
    answered = None
    while answered is None:
        for e in c.receive_data(s.recv(65536)):
            if isinstance(e, h2.events.ResponseReceived) and e.stream_id == health:
                answered = dict(e.headers)[b":status"]
        s.sendall(c.data_to_send())
    assert answered == b"204", "the connection did not go on after the reset"
    flood_ends(d, "h2c-reset")
    s.close()


def test_closed_connection_is_a_client_gone(make_daemon):
    """httpx's HTTP/2 connection closed mid-Start: the stream's client is gone too."""
    d = make_daemon(extra=["--http-idle-timeout", "300s"])
    c = h2_client()
    with c.stream("POST", f"{d.url}/process.Process/Start", headers=CONNECT_JSON,
                  content=flood("h2c-close")) as r:
        assert r.http_version == "HTTP/2"
        env = Envelopes(r.iter_raw())
        assert "start" in env.next()[1]["event"]
        assert "data" in env.next()[1]["event"]
        status, body = d.unary("List", {})
        assert "h2c-close" in [p.get("tag") for p in body.get("processes", [])]
        c.close()
    flood_ends(d, "h2c-close")


def test_http1_still_served(daemon):
    """The same port, HTTP/1.1: the gate hands h2c aside, nothing else."""
    assert daemon.request("GET", "/health")[0] == 204
    status, body = daemon.unary("List", {})
    assert status == 200
