"""Terminals over WebSocket: GET /v1/terminal spawns a shell, GET /v1/processes/{id}/terminal
attaches to a pty process; replay from an offset, several clients, resize, input, the exit
detail, auth (header or ?token=), the handshake's refusals and the framing rules.

The main flows use the `websockets` library (Debian's python3-websockets), a client nobody here
wrote; the protocol violations need frames no library sends, so a small raw client sends them."""

import asyncio
import base64
import json
import os
import socket
import struct
import time

import pytest
import websockets

import sbxtest  # noqa: E402 - test/common, on the path by conftest
from conftest import own_home_env, RPC_TIMEOUT, Procs, http_request, wait_until

WAIT = 10.0


daemon_env = own_home_env  # login shells here must not read this machine's dotfiles


@pytest.fixture
def procs(sandboxd, protos):
    return Procs(sandboxd.client().channel, protos)


def url(d, path):
    return f"ws://127.0.0.1:{d.rest_port}{path}"


class Session:
    """What one WebSocket client saw: control messages and the bytes of binary frames."""

    def __init__(self, ws):
        self.ws = ws
        self.controls = []
        self.data = b""

    def control(self, type_):
        return [c for c in self.controls if c["type"] == type_]

    async def read_until(self, pred, timeout=WAIT):
        async def loop():
            while not pred(self):
                m = await self.ws.recv()
                if isinstance(m, str):
                    self.controls.append(json.loads(m))
                else:
                    self.data += m
        await asyncio.wait_for(loop(), timeout)

    async def read_to_close(self, timeout=WAIT):
        try:
            await self.read_until(lambda s: False, timeout)
        except websockets.ConnectionClosed:
            pass
        return self.ws.close_code, self.ws.close_reason


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def connect(d, path, **kw):
    return Session(await websockets.connect(url(d, path), max_size=None, **kw))


def test_new_terminal_runs_command_and_reports_exit(sandboxd):
    async def go():
        s = await connect(sandboxd, "/v1/terminal?command=echo%20hi%3B%20exit%203")
        code, reason = await s.read_to_close()
        return s, code, reason

    s, code, reason = run(go())
    attached = s.control("attached")[0]
    assert attached["offset"] == 0 and attached["id"] > 0
    assert s.data == b"hi\r\n"
    ex = s.control("exit")[0]
    assert ex["exit_code"] == 3 and ex["reason"] == "exited" and ex["offset"] == 4
    assert (code, reason) == (1000, "process exited: code 3")


def test_login_shell_in_root_dir_with_term_and_size(sandboxd):
    async def go():
        s = await connect(sandboxd, "/v1/terminal?cols=91&rows=31")
        await s.read_until(lambda s: s.control("attached"))
        await s.ws.send(b"echo T=$TERM; pwd; stty size; exit\n")
        await s.read_to_close()
        return s

    s = run(go())
    out = s.data.decode(errors="replace")
    assert "T=xterm-256color" in out
    assert str(sandboxd.root) in out
    assert "31 91" in out
    assert s.control("exit")[0]["exit_code"] == 0


def test_attach_two_clients_see_the_same_bytes_and_both_type(sandboxd, procs):
    info = procs.spawn(["sh"], pty=(24, 80), stdin=True)

    async def go():
        a = await connect(sandboxd, f"/v1/processes/{info.id}/terminal?offset=0")
        b = await connect(sandboxd, f"/v1/processes/{info.id}/terminal?offset=0")
        for s in (a, b):
            await s.read_until(lambda s: s.control("attached"))
        await a.ws.send(b"echo from-a-$((1+1))\n")
        for s in (a, b):
            await s.read_until(lambda s: b"from-a-2\r\n" in s.data)
        await b.ws.send(b"echo from-b-$((2+2))\n")
        for s in (a, b):
            await s.read_until(lambda s: b"from-b-4\r\n" in s.data)
        await a.ws.send(b"exit 7\n")
        for s in (a, b):
            await s.read_to_close()
        return a, b

    a, b = run(go())
    assert a.data == b.data
    assert a.control("exit")[0]["exit_code"] == 7 == b.control("exit")[0]["exit_code"]
    assert a.control("exit")[0]["offset"] == len(a.data)


def test_closing_the_socket_never_ends_the_process(sandboxd, procs):
    info = procs.spawn(["sh"], pty=(24, 80), stdin=True)

    async def go():
        s = await connect(sandboxd, f"/v1/processes/{info.id}/terminal")
        await s.read_until(lambda s: s.control("attached"))
        await s.ws.close()

    run(go())
    time.sleep(0.3)
    assert procs.get(info.id).state == procs.m.STATE_RUNNING
    procs.signal(info.id, 9)


def test_resume_from_offset_loses_and_doubles_nothing(sandboxd, procs):
    info = procs.spawn(["sh"], pty=(24, 80), stdin=True)

    async def first():
        s = await connect(sandboxd, f"/v1/processes/{info.id}/terminal?offset=0")
        await s.ws.send(b"echo one-$((3*3))\n")
        await s.read_until(lambda s: b"one-9\r\n" in s.data)
        offset = s.control("attached")[0]["offset"] + len(s.data)
        await s.ws.close()
        return offset, s.data

    offset, seen = run(first())
    # While nobody is attached, the process writes more.
    procs.write(info.id, b"echo two-$((4*4))\n")
    wait_until(lambda: procs.get(info.id).stdout.end > offset + 20, WAIT, what="more output")

    async def second():
        s = await connect(sandboxd, f"/v1/processes/{info.id}/terminal?offset={offset}")
        await s.read_until(lambda s: b"two-16\r\n" in s.data)
        await s.ws.send(b"exit\n")
        await s.read_to_close()
        return s

    s = run(second())
    assert s.control("attached")[0]["offset"] == offset
    # The two sessions together are exactly the process's output, read by gRPC from offset 0.
    out, _, truncs, _, _ = procs.attach(info.id)
    assert truncs == []
    assert seen + s.data == out


def test_default_replay_is_the_last_lines(sandboxd, procs):
    info = procs.spawn(["sh", "-c", "for i in $(seq 1 200); do echo line-$i; done; sleep 30"],
                       pty=(24, 80))
    wait_until(lambda: procs.get(info.id).stdout.end >= 200 * 8, WAIT, what="200 lines")

    async def go():
        s = await connect(sandboxd, f"/v1/processes/{info.id}/terminal")
        await s.read_until(lambda s: b"line-200\r\n" in s.data)
        await s.ws.close()
        return s

    s = run(go())
    lines = s.data.decode().split("\r\n")
    assert lines[0] == "line-151", lines[:3]
    assert s.control("attached")[0]["offset"] > 0
    procs.signal(info.id, 9)


def test_output_gone_from_the_ring_is_said(sandboxd_factory, protos):
    d = sandboxd_factory(["--output-ring-bytes", "4096"])
    p = Procs(d.client().channel, protos)
    info = p.spawn(["sh", "-c", "head -c 20000 /dev/zero | tr '\\0' x; echo; echo end"],
                   pty=(24, 80))
    p.wait(info.id)

    async def go():
        s = await connect(d, f"/v1/processes/{info.id}/terminal?offset=0")
        await s.read_to_close()
        return s

    s = run(go())
    t = s.control("truncated")
    assert len(t) == 1 and t[0]["from"] == 0 and t[0]["to"] > 15000
    assert s.data.endswith(b"end\r\n")
    assert t[0]["to"] + len(s.data) == s.control("exit")[0]["offset"]


def test_resize_control_and_bad_controls(sandboxd, procs):
    info = procs.spawn(["sh"], pty=(24, 80), stdin=True)

    async def go():
        s = await connect(sandboxd, f"/v1/processes/{info.id}/terminal?offset=0")
        await s.ws.send(json.dumps({"type": "resize", "cols": 123, "rows": 45}))
        await s.ws.send("not json")
        await s.ws.send(json.dumps({"type": "dance"}))
        await s.ws.send(json.dumps({"type": "resize", "cols": 0, "rows": 5}))
        await s.read_until(lambda s: len(s.control("error")) == 3)
        await s.ws.send(b"stty size; exit\n")
        await s.read_to_close()
        return s

    s = run(go())
    assert b"45 123" in s.data
    msgs = [e["message"] for e in s.control("error")]
    assert "type" in msgs[0] and "unknown" in msgs[1] and "cols and rows" in msgs[2]


def test_refusals_before_the_upgrade(sandboxd, procs):
    plain = procs.spawn(["sleep", "30"])
    pty = procs.spawn(["sleep", "30"], pty=(24, 80))
    key = base64.b64encode(os.urandom(16)).decode()
    ws_headers = {"Upgrade": "websocket", "Connection": "Upgrade",
                  "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": key}

    before = {p.id for p in procs.list() if p.tag == "terminal"}

    def status(path, **over):
        h = {**ws_headers, **over}
        h = {k: v for k, v in h.items() if v is not None}
        return http_request(sandboxd.rest_port, "GET", path, headers=h, timeout=5)

    r = http_request(sandboxd.rest_port, "GET", "/v1/terminal", timeout=5)
    assert r.status == 426 and r.header("Upgrade") == "websocket"
    r = status("/v1/terminal", **{"Sec-WebSocket-Version": "8"})
    assert r.status == 426 and r.header("Sec-WebSocket-Version") == "13"
    assert status("/v1/terminal", **{"Sec-WebSocket-Key": "short"}).status == 400
    assert status(f"/v1/processes/{plain.id}/terminal").status == 409
    assert status("/v1/processes/999999/terminal").status == 404
    assert status("/v1/processes/x/terminal").status == 404
    assert status(f"/v1/processes/{pty.id}/terminal?offset=-1").status == 400
    assert status("/v1/terminal?cols=0").status == 400
    # A page of another origin may not open a terminal; the same origin may.
    port = sandboxd.rest_port
    assert status("/v1/terminal", Origin="http://evil.example").status == 403
    r = status(f"/v1/processes/{pty.id}/terminal", Origin=f"http://127.0.0.1:{port}")
    assert r.status == 101
    # Every refusal above started nothing.
    assert {p.id for p in procs.list() if p.tag == "terminal"} == before
    for p in (plain, pty):
        procs.signal(p.id, 9)


def test_token_as_header_or_query_on_terminal_routes_only(sandboxd_factory, tmp_path):
    tok = tmp_path / "token"
    tok.write_text("s3cret\n")
    d = sandboxd_factory(["--token-file", str(tok)])

    async def attempt(path, headers=None):
        try:
            s = await connect(d, path, extra_headers=headers or {})
        except websockets.InvalidStatusCode as e:
            return e.status_code
        await s.read_until(lambda s: s.control("attached"))
        await s.ws.close()
        return 101

    assert run(attempt("/v1/terminal?command=true")) == 401
    assert run(attempt("/v1/terminal?command=true&token=wrong")) == 401
    assert run(attempt("/v1/terminal?command=true&token=s3cret")) == 101
    assert run(attempt("/v1/terminal?command=true",
                       {"Authorization": "Bearer s3cret"})) == 101
    # The query parameter is for WebSockets alone.
    assert http_request(d.rest_port, "GET", "/v1/files/?token=s3cret", timeout=5).status == 401
    # The page itself is open (it holds no secret; it takes the token from its fragment).
    assert http_request(d.rest_port, "GET", "/ui/", timeout=5).status == 200
    assert "s3cret" not in d.log()


def test_ws_limit_refused_before_upgrade(sandboxd_factory):
    d = sandboxd_factory(["--max-websockets", "2"])

    async def go():
        a = await connect(d, "/v1/terminal?command=sleep%2030")
        b = await connect(d, "/v1/terminal?command=sleep%2030")
        with pytest.raises(websockets.InvalidStatusCode) as e:
            await connect(d, "/v1/terminal?command=sleep%2030")
        await a.ws.close()
        # A slot is free again once a connection is gone.
        async def reconnect():
            while True:
                try:
                    return await connect(d, "/v1/terminal?command=true")
                except websockets.InvalidStatusCode:
                    await asyncio.sleep(0.05)
        c = await asyncio.wait_for(reconnect(), WAIT)
        await c.read_to_close()
        await b.ws.close()
        return e.value.status_code

    assert run(go()) == 503


# ---- framing rules, with frames no library would send ---------------------------------------


class Raw:
    """A minimal WebSocket client over a plain socket: handshake, masked frames, raw reads."""

    def __init__(self, port, path):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.s.recv(1)
        assert head.startswith(b"HTTP/1.1 101"), head
        self.buf = b""

    def send(self, b0, payload, mask=True, length=None):
        n = len(payload) if length is None else length
        h = bytes([b0])
        m = 0x80 if mask else 0
        if n < 126:
            h += bytes([m | n])
        elif n < 65536:
            h += bytes([m | 126]) + struct.pack(">H", n)
        else:
            h += bytes([m | 127]) + struct.pack(">Q", n)
        if mask:
            k = os.urandom(4)
            h += k
            payload = bytes(c ^ k[i % 4] for i, c in enumerate(payload))
        self.s.sendall(h + payload)

    def frame(self):
        """The next frame (op, payload); None at the end of the stream."""
        def need(n):
            while len(self.buf) < n:
                chunk = self.s.recv(65536)
                if not chunk:
                    return False
                self.buf += chunk
            return True
        if not need(2):
            return None
        n = self.buf[1] & 0x7F
        off = 2
        if n == 126:
            need(4)
            n, off = struct.unpack(">H", self.buf[2:4])[0], 4
        elif n == 127:
            need(10)
            n, off = struct.unpack(">Q", self.buf[2:10])[0], 10
        need(off + n)
        op, payload = self.buf[0] & 0x0F, self.buf[off:off + n]
        self.buf = self.buf[off + n:]
        return op, payload

    def close_code(self):
        """Reads to the server's close frame: its code and reason."""
        while True:
            f = self.frame()
            if f is None:
                return None
            if f[0] == 8:
                return struct.unpack(">H", f[1][:2])[0], f[1][2:].decode()


def test_upgraded_socket_sends_small_frames_at_once(sandboxd, procs):
    """An echo is a frame of a few bytes. With Nagle's algorithm on, one that follows a frame the
    client has not acknowledged yet waits for the client's delayed ACK, 40 ms: the last echoes of
    a pasted line did, in a quarter of bench/terminal.sh's bursts. libmicrohttpd turns
    TCP_NODELAY off on the connection before the upgrade; the upgraded socket turns it on."""
    info = procs.spawn(["sleep", "30"], pty=(24, 80))
    r = Raw(sandboxd.rest_port, f"/v1/processes/{info.id}/terminal?offset=0")
    op, payload = r.frame()
    assert op == 1 and json.loads(payload)["type"] == "attached"
    s = sbxtest.peer_socket(sandboxd.proc.pid, r.s.getsockname())
    assert s is not None, "the daemon's end of the connection not found"
    with s:
        assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    procs.signal(info.id, 9)


@pytest.mark.parametrize("case,code", [
    ("unmasked", 1002),
    ("reserved bit", 1002),
    ("unknown opcode", 1002),
    ("text not utf-8", 1007),
    ("too big", 1009),
    ("fragmented ping", 1002),
])
def test_framing_violations_close_with_their_code(sandboxd, procs, case, code):
    info = procs.spawn(["sleep", "30"], pty=(24, 80))
    r = Raw(sandboxd.rest_port, f"/v1/processes/{info.id}/terminal")
    if case == "unmasked":
        r.send(0x82, b"abc", mask=False)
    elif case == "reserved bit":
        r.send(0xC2, b"abc")
    elif case == "unknown opcode":
        r.send(0x83, b"abc")
    elif case == "text not utf-8":
        r.send(0x81, b"\xc3\x28")
    elif case == "too big":
        r.send(0x82, b"", length=1 << 20)  # refused at its header: no payload needed
    elif case == "fragmented ping":
        r.send(0x09, b"p")
    got = r.close_code()
    assert got and got[0] == code, got
    # The daemon stays up and the process runs on.
    assert procs.get(info.id).state == procs.m.STATE_RUNNING
    assert http_request(sandboxd.rest_port, "GET", "/healthz", timeout=5).status == 200
    procs.signal(info.id, 9)


def test_ping_pong_fragments_and_close_echo(sandboxd, procs):
    info = procs.spawn(["cat"], pty=(24, 80), stdin=True)
    r = Raw(sandboxd.rest_port, f"/v1/processes/{info.id}/terminal?offset=0")
    r.send(0x89, b"are you there")
    # Input in three fragments with a ping among them is one message.
    r.send(0x02, b"fr")
    r.send(0x89, b"2")
    r.send(0x00, b"ag")
    r.send(0x80, b"ment\n")
    pongs, data = [], b""
    while b"fragment\r\n" not in data or len(pongs) < 2:
        op, payload = r.frame()
        if op == 0xA:
            pongs.append(payload)
        elif op == 2:
            data += payload
    assert pongs == [b"are you there", b"2"]
    r.send(0x88, struct.pack(">H", 1000) + b"bye")
    assert r.close_code() == (1000, "")
    assert r.frame() is None  # and the server closes the TCP connection
    assert procs.get(info.id).state == procs.m.STATE_RUNNING
    procs.signal(info.id, 9)


def test_sigterm_with_a_terminal_attached_ends_cleanly(sandboxd_factory):
    d = sandboxd_factory()

    async def go():
        s = await connect(d, "/v1/terminal")
        await s.read_until(lambda s: s.control("attached"))
        d.sigterm()
        code, _ = await s.read_to_close(timeout=20)
        return s, code

    s, code = run(go())
    assert code == 1000 and s.control("exit")[0]["reason"] in ("shutdown", "killed")
    d.stop_and_check()


def test_output_flows_again_after_the_client_stopped_reading(sandboxd):
    """A client that stops reading a flooding terminal and then reads again gets the output
    flowing again, however full its queue became (it once stopped for good when the queue was
    nearly full: the terminal held back and was never told the queue had drained)."""
    r = Raw(sandboxd.rest_port, "/v1/terminal?command=exec%20yes%200123456789")
    r.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    time.sleep(1)  # not reading: the queue fills
    got, t0 = 0, time.monotonic()
    while got < 32 << 20:
        op, payload = r.frame()
        got += len(payload)
        assert time.monotonic() - t0 < 60, f"output stopped after {got} bytes"
    r.s.close()
