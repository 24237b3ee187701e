"""Hostile h2c clients of the E2B port (HTTP/2 with prior knowledge, bridged stream by stream to
the HTTP/1.1 server): garbage after the preface, a header block past the limit or never ended,
more streams than allowed on one connection and over all of them, more connections than an
address or the port may have, and a Start stream whose client never reads (nor opens its
window). Each gets a clear error (GOAWAY, RST_STREAM, an HTTP error) or is held to its bounds;
the daemon stays up, its memory bounded, and answers the next client.

The client is the h2 library (Debian's python3-h2), driven by hand on a raw socket so that it can
do what no well-behaved client does."""

import socket
import struct

import h2.config
import h2.errors
import h2.connection
import h2.events
import h2.settings
import hpack

import sbxtest
from sbx_integration_conftest import vm_rss_kib, wait_until
from test_e2b_hostile import (E2B_LISTENING, FLOOD, abused, e2b_daemon, envelope, flood_held,
                              others_answer, over, settled)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class H2:
    """One h2c connection: a socket and the h2 library's client state machine."""

    def __init__(self, port, rcvbuf=None):
        self.s = socket.socket()
        if rcvbuf:
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.s.settimeout(20)
        self.s.connect(("127.0.0.1", port))
        self.c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.c.initiate_connection()
        self.closed = False
        self.seen = []

    def flush(self):
        data = self.c.data_to_send()
        if data:
            self.s.sendall(data)

    def events(self):
        """The events of what the server sent next; [] once it closed (or reset)."""
        try:
            data = self.s.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return []
        evs = self.c.receive_data(data)
        self.seen += evs
        try:
            self.flush()  # acknowledgements, to a server that may have closed already
        except (BrokenPipeError, ConnectionResetError):
            pass
        return evs

    def until(self, pred, what):
        """Reads events until pred(event) holds for one; returns it (None: the server closed)."""
        while True:
            evs = self.events()
            if self.closed:
                return None
            for e in evs:
                if pred(e):
                    return e

    def request(self, method, path, body=None, headers=(), end=True):
        sid = self.c.get_next_available_stream_id()
        hs = [(":method", method), (":path", path), (":scheme", "http"),
              (":authority", "127.0.0.1"), *headers]
        self.c.send_headers(sid, hs, end_stream=end and body is None)
        if body is not None:
            self.c.send_data(sid, body, end_stream=end)
        self.flush()
        return sid

    def settle(self):
        """Returns once the server has answered every frame sent so far: it answers PINGs in
        order, but sends their ACKs first of what a read made, hence two."""
        for i in range(2):
            self.c.ping(b"settle-%d" % i)
            self.flush()
            self.until(lambda e: isinstance(e, h2.events.PingAckReceived), "PING's ACK")

    def close(self):
        self.s.close()


def goaway_or_close(h):
    """The GOAWAY a misbehaving connection gets (None if it was closed without one), then its
    end."""
    e = h.until(lambda e: isinstance(e, h2.events.ConnectionTerminated), "GOAWAY")
    while not h.closed:
        h.events()
    return e


def h2_health(port):
    """A well-behaved h2c client's GET /health: its status, or None when the connection was
    refused (GOAWAY or closed)."""
    h = H2(port)
    h.flush()
    sid = h.request("GET", "/health")
    e = h.until(lambda e: isinstance(e, (h2.events.ResponseReceived,
                                         h2.events.ConnectionTerminated)) and
                (not isinstance(e, h2.events.ResponseReceived) or e.stream_id == sid),
                "the response")
    h.close()
    return int(dict(e.headers)[b":status"]) if isinstance(e, h2.events.ResponseReceived) else None


def test_garbage_after_the_preface(sandboxd_factory):
    d = e2b_daemon(sandboxd_factory)
    for garbage in [b"GARBAGE!" * 64, b"\x00\x00\x04\x08\x00\x00\x00\x00\x00\x00\x00\xff\xff"]:
        s = socket.create_connection(("127.0.0.1", d.e2b_port), timeout=20)
        s.sendall(PREFACE + garbage)
        h = H2.__new__(H2)
        h.s, h.closed, h.seen = s, False, []
        h.c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        h.c.initiate_connection()
        h.c.data_to_send()  # the client's own preface went raw, above
        e = goaway_or_close(h)
        assert e is not None, "closed without GOAWAY"
        assert e.error_code != 0, "GOAWAY without an error for garbage"
        s.close()
    assert h2_health(d.e2b_port) == 204
    others_answer(d)
    assert d.alive()


def test_header_block_past_the_limit(sandboxd_factory):
    d = e2b_daemon(sandboxd_factory)
    h = H2(d.e2b_port)
    h.flush()
    # 20 KiB of fields: past the 16 KiB the server announced, within what HPACK allows.
    sid = h.request("GET", "/health", headers=[(f"x-big-{i}", "v" * 1000) for i in range(20)])
    e = h.until(lambda e: isinstance(e, (h2.events.ResponseReceived, h2.events.StreamReset,
                                         h2.events.ConnectionTerminated)), "an answer")
    assert isinstance(e, h2.events.ResponseReceived) and e.stream_id == sid, e
    assert dict(e.headers)[b":status"] == b"431"
    # The connection goes on: a normal request on it is answered.
    sid = h.request("GET", "/health")
    e = h.until(lambda e: isinstance(e, h2.events.ResponseReceived) and e.stream_id == sid, "")
    assert dict(e.headers)[b":status"] == b"204"
    # One field of 80 kB, over CONTINUATION frames (the h2 library's HPACK is slow past that):
    # beyond what nghttp2's decoder takes of one field, the connection ends with GOAWAY.
    h.request("GET", "/health", headers=[("x-huge", "v" * 80_000)])
    e = goaway_or_close(h)
    assert e is not None and e.error_code == h2.errors.ErrorCodes.COMPRESSION_ERROR
    h.close()
    assert h2_health(d.e2b_port) == 204
    others_answer(d)


def open_waiting_streams(h, n):
    """n unary calls whose bodies never come: each holds a stream (and a server connection)."""
    sids = []
    for _ in range(n):
        sids.append(h.request("POST", "/process.Process/List",
                              headers=[("content-type", "application/json")], end=False))
    return sids


def test_too_many_streams(sandboxd_factory):
    d = e2b_daemon(sandboxd_factory)
    # One connection past its SETTINGS_MAX_CONCURRENT_STREAMS (100): the h2 library keeps to
    # the server's settings, so it is told there is no limit.
    h = H2(d.e2b_port)
    h.flush()
    h.until(lambda e: isinstance(e, h2.events.RemoteSettingsChanged), "the server's SETTINGS")
    assert h.c.remote_settings.max_concurrent_streams == 100
    h.c.remote_settings = h2.settings.Settings(client=False, initial_values={
        h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1000})
    open_waiting_streams(h, 101)
    e = h.until(lambda e: isinstance(e, (h2.events.StreamReset, h2.events.ConnectionTerminated)),
                "the 101st stream refused")
    assert e is not None, "closed without a word"
    h.close()
    # Over all connections: 6 of 90 streams each, past the 512 the server serves at once. The
    # last are refused (REFUSED_STREAM) while the first wait. On a daemon of its own: the first
    # connection's streams go when the front has read its end, which nothing here waits for.
    assert h2_health(d.e2b_port) == 204
    d = e2b_daemon(sandboxd_factory)
    conns = [H2(d.e2b_port) for _ in range(6)]
    for c in conns:
        c.flush()
        open_waiting_streams(c, 90)
    for c in conns:
        c.settle()
    resets = [e for c in conns for e in c.seen if isinstance(e, h2.events.StreamReset)]
    assert len(resets) == 6 * 90 - 512, f"{len(resets)} streams refused"
    assert all(e.error_code == h2.errors.ErrorCodes.REFUSED_STREAM for e in resets)
    for c in conns:
        c.close()
    # Their streams' server connections go with them.
    assert h2_health(d.e2b_port) == 204
    others_answer(d)
    assert d.alive()


def test_start_whose_h2_client_never_reads(sandboxd_factory, tmp_path):
    """A Start of 300 MB on an h2c stream whose client reads nothing and never opens its window:
    the bridge holds at most its buffers, the daemon's own flow control holds the process, and
    the stream's reset lets it go."""
    d, base, prober = abused(sandboxd_factory)
    done = tmp_path / "flood-done"
    h = H2(d.e2b_port, rcvbuf=4096)
    h.flush()
    msg = {"process": {"cmd": "/bin/sh", "args": ["-c", f"head -c {FLOOD} /dev/zero; : > {done}"]},
           "tag": "flood"}
    sid = h.request("POST", "/process.Process/Start", body=envelope(msg),
                    headers=[("content-type", "application/connect+json")])
    e = h.until(lambda e: isinstance(e, h2.events.ResponseReceived), "the response head")
    assert dict(e.headers)[b":status"] == b"200"
    # From here on nothing is read from the socket.
    flood_held(d, done)
    # Another h2c client and the HTTP/1.1 ones are answered meanwhile.
    assert h2_health(d.e2b_port) == 204
    others_answer(d)
    settled(d, base)
    # The stream is reset (the connection's socket unread: RST_STREAM may wait behind it, so the
    # connection goes too): the process is let go and runs to its end.
    h.c.reset_stream(sid)
    try:
        h.s.setblocking(False)
        h.flush()
    except OSError:
        pass
    h.close()
    wait_until(done.exists, 120, interval=0.1, what="the flood to run to its end")
    over(d, prober, "an h2c Start client that never reads")
    assert vm_rss_kib(d.proc.pid) is not None


def test_connection_limits(sandboxd_factory):
    """Per address and in all, as the gate holds HTTP/1.1 connections: an address past its share
    gets GOAWAY; at the total, the connection idle longest is closed for a newcomer, and with
    none idle the newcomer gets GOAWAY."""
    d = sandboxd_factory(["--e2b-port", str(sbxtest.free_port()), "--http-max-connections", "4",
                          "--http-max-connections-per-peer", "3"])
    d.e2b_port = int(d.wait_line(E2B_LISTENING).group(1))

    def served(h):
        sid = h.request("GET", "/health")
        e = h.until(lambda e: isinstance(e, (h2.events.ResponseReceived,
                                             h2.events.ConnectionTerminated)), "an answer")
        return isinstance(e, h2.events.ResponseReceived) and e.stream_id == sid

    # 127.0.0.1 has three; a fourth from it is refused, and the three still serve.
    mine = [H2(d.e2b_port) for _ in range(3)]
    for h in mine:
        h.flush()
        assert served(h)
    extra = H2(d.e2b_port)
    extra.flush()
    e = goaway_or_close(extra)
    assert e is not None and e.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    assert all(served(h) for h in mine)
    # From another address (127.0.0.2) the total is reached with one more: then the one idle
    # longest (mine[0], answered first) makes room for the next, and then, every connection
    # with a stream open, the next is refused.
    def other():
        h = H2.__new__(H2)
        h.s = socket.socket()
        h.s.settimeout(20)
        h.s.bind(("127.0.0.2", 0))
        h.s.connect(("127.0.0.1", d.e2b_port))
        h.c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        h.c.initiate_connection()
        h.closed, h.seen = False, []
        h.flush()
        return h

    a = other()
    assert served(a)
    b = other()
    assert served(b)
    e = goaway_or_close(mine[0])
    assert e is not None and e.error_code == h2.errors.ErrorCodes.NO_ERROR
    for h in [mine[1], mine[2], a, b]:
        open_waiting_streams(h, 1)
        h.settle()
    c = other()
    e = goaway_or_close(c)
    assert e is not None and e.error_code == h2.errors.ErrorCodes.REFUSED_STREAM
    for h in [mine[1], mine[2], a, b]:
        h.close()
    # The front sees those closes on its own thread: until it has, the port is still full.
    wait_until(lambda: h2_health(d.e2b_port) == 204, 20, what="room again once they closed")
    others_answer(d)


def test_headers_never_finished(sandboxd_factory):
    """A stream whose header block never ends (HEADERS without END_HEADERS, then nothing) holds
    its connection and stream slot no longer than an idle connection: GOAWAY at the idle
    timeout (2 s here), as a connection without streams gets."""
    d = sandboxd_factory(["--e2b-port", str(sbxtest.free_port()), "--http-idle-timeout", "2s"])
    d.e2b_port = int(d.wait_line(E2B_LISTENING).group(1))
    h = H2(d.e2b_port)
    h.flush()
    h.until(lambda e: isinstance(e, h2.events.RemoteSettingsChanged), "SETTINGS")
    block = hpack.Encoder().encode([(":method", "GET"), (":path", "/health"),
                                    (":scheme", "http"), (":authority", "x")])
    # type 1 (HEADERS), flags 0: a CONTINUATION must follow, and never does
    h.s.sendall(struct.pack(">I", len(block))[1:] + b"\x01\x00" + struct.pack(">I", 1) + block)
    e = goaway_or_close(h)
    assert e is not None and e.error_code == h2.errors.ErrorCodes.NO_ERROR
    h.close()
    assert h2_health(d.e2b_port) == 204
