"""Directory watches: sandboxd.v1.Files/Watch (grpcio) and GET /v1/watch/{path} (Server-Sent
Events over http.client and curl) against the real daemon and the real kernel.

Every wait is bounded; no assertion is on a duration. Each event is normalised to a dict:
seq, kind, path, dir, from/to (rename), lost (overflow: (from, to)), watch and resumed (ready).
"""

import http.client
import json
import os
import queue
import shutil
import socket
import subprocess
import threading

import grpc
import pytest

from conftest import PROTO_DIR, _load_module, http_request, run_curl

SC = grpc.StatusCode
T = 30.0  # bound of one wait for an event


@pytest.fixture(scope="module")
def fpb(tmp_path_factory):
    out = tmp_path_factory.mktemp("files_pb")
    protoc = shutil.which("protoc") or "/usr/bin/protoc"
    subprocess.run([protoc, f"-I{PROTO_DIR}", "-I/usr/include", f"--python_out={out}",
                    "sandboxd/v1/files.proto"], check=True, timeout=60)
    return _load_module("sbx_itest_files_pb2", out / "sandboxd/v1/files_pb2.py")


# ---------------------------------------------------------------------------------------------
# Clients


def grpc_event(fpb, m):
    kind = fpb.WatchEventKind.Name(m.kind).removeprefix("WATCH_EVENT_KIND_").lower()
    ev = {"seq": m.seq, "kind": kind, "path": m.path, "dir": m.dir}
    if kind == "rename":
        ev["from"], ev["to"] = getattr(m, "from"), m.to
    if kind == "overflow":
        ev["lost"] = (getattr(m.overflow, "from"), m.overflow.to)
        ev["rescan"] = m.overflow.rescan
    if kind == "ready":
        ev["watch"], ev["resumed"] = m.ready.watch_id, m.ready.resumed
        ev["directories"] = m.ready.directories
    return ev


class GrpcWatch:
    """A Watch call read by a thread into a queue (or left unread until read() is called)."""

    def __init__(self, d, fpb, background=True, timeout=120, **req):
        self.fpb = fpb
        self.channel = grpc.insecure_channel(d.target, options=[("grpc.enable_http_proxy", 0)])
        watch = self.channel.unary_stream("/sandboxd.v1.Files/Watch",
                                          request_serializer=fpb.WatchRequest.SerializeToString,
                                          response_deserializer=fpb.WatchEvent.FromString)
        self.call = watch(fpb.WatchRequest(**req), timeout=timeout)
        self.q = queue.Queue()
        self.error = None
        if background:
            threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        try:
            for m in self.call:
                self.q.put(grpc_event(self.fpb, m))
        except grpc.RpcError as e:
            self.error = e
        self.q.put(None)

    def read(self):
        """The next event, read directly (without the background thread)."""
        return grpc_event(self.fpb, next(self.call))

    def next(self, timeout=T):
        return self.q.get(timeout=timeout)

    def until(self, pred, timeout=T):
        """Events up to and including the first for which pred holds."""
        got = []
        while True:
            ev = self.next(timeout)
            assert ev is not None, f"stream ended ({self.error}) before the event; got {got}"
            got.append(ev)
            if pred(ev):
                return got

    def close(self):
        self.call.cancel()
        self.channel.close()


def sse_events(lines):
    """Parses SSE lines (bytes without newline) into (id, event, data) tuples."""
    ev = {}
    for line in lines:
        if line == b"":
            if ev:
                yield ev.get("id"), ev.get("event"), ev.get("data")
            ev = {}
        elif line.startswith(b":"):
            continue
        else:
            k, _, v = line.decode().partition(":")
            ev[k] = v.removeprefix(" ")


class Sse:
    """GET /v1/watch/... read with http.client; rcvbuf makes a small receive buffer (a reader
    that stops reading is then felt by the server at once)."""

    def __init__(self, d, query, headers=None, rcvbuf=None):
        self.conn = http.client.HTTPConnection("127.0.0.1", d.rest_port, timeout=T)
        if rcvbuf:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            s.settimeout(T)
            s.connect(("127.0.0.1", d.rest_port))
            self.conn.sock = s
        self.conn.request("GET", query, headers=headers or {})
        self.resp = self.conn.getresponse()
        self.comments = 0

    def _lines(self):
        while True:
            line = self.resp.readline()
            if not line:
                return
            line = line.rstrip(b"\n")
            if line.startswith(b":"):
                self.comments += 1
            yield line

    def events(self):
        for id_, kind, data in sse_events(self._lines()):
            ev = json.loads(data)
            if kind != "error":
                assert id_ == str(ev["seq"]) and kind == ev["kind"], (id_, kind, ev)
                if kind == "overflow":
                    ev["lost"] = (ev["from"], ev["to"])
            else:
                ev["kind"] = "error"
            yield ev

    def until(self, pred):
        got = []
        for ev in self.events():
            got.append(ev)
            if pred(ev):
                return got
        raise AssertionError(f"stream ended before the event; got {got}")

    def close(self):
        self.conn.close()


def is_(kind, path):
    return lambda ev: ev["kind"] == kind and ev.get("path") == path


def kinds_of(events, path):
    return [ev["kind"] for ev in events if ev.get("path") == path or ev.get("from") == path]


@pytest.fixture
def watchd(sandboxd_factory):
    return sandboxd_factory(["--watch-retention", "60s"])


# ---------------------------------------------------------------------------------------------
# Events of each kind


def check_kinds(root, open_watch):
    (root / "d").mkdir()
    (root / "e").mkdir()
    w = open_watch()
    ready = w.first
    assert ready["kind"] == "ready" and ready["seq"] == 0 and ready["directories"] == 3, ready
    f = root / "d" / "f"
    f.write_bytes(b"one")
    with open(f, "ab") as fh:
        fh.write(b"two")
    os.chmod(f, 0o600)
    f.rename(root / "d" / "g")
    (root / "d" / "g").rename(root / "e" / "h")
    (root / "e" / "h").unlink()
    (root / "e").rmdir()
    (root / "end").touch()
    evs = w.until(is_("create", "end"))
    seqs = [ev["seq"] for ev in evs]
    assert seqs == list(range(1, len(evs) + 1)), seqs
    assert kinds_of(evs, "d/f")[:2] == ["create", "write"], evs
    assert "chmod" in kinds_of(evs, "d/f"), evs
    ren = [ev for ev in evs if ev["kind"] == "rename"]
    assert [(r["from"], r["to"], r["path"]) for r in ren] == [("d/f", "d/g", "d/g"),
                                                               ("d/g", "e/h", "e/h")], evs
    assert [ev["kind"] for ev in evs if ev.get("path") == "e/h"][-1] == "remove", evs
    assert {"kind": "remove", "path": "e", "dir": True} in [
        {k: ev[k] for k in ("kind", "path", "dir")} for ev in evs], evs
    return w


def test_kinds_grpc(watchd, fpb):
    def open_watch():
        w = GrpcWatch(watchd, fpb, path="/", recursive=True)
        w.first = w.next()
        return w
    check_kinds(watchd.root, open_watch).close()


def test_kinds_sse(watchd):
    def open_watch():
        w = Sse(watchd, "/v1/watch/?recursive=true")
        assert w.resp.status == 200
        assert w.resp.getheader("Content-Type") == "text/event-stream"
        assert w.resp.getheader("Cache-Control") == "no-cache"
        w.it = w.events()
        w.first = next(w.it)
        w.until = lambda pred: _until(w.it, pred)
        return w
    check_kinds(watchd.root, open_watch).close()


def _until(it, pred):
    got = []
    for ev in it:
        got.append(ev)
        if pred(ev):
            return got
    raise AssertionError(f"stream ended; got {got}")


def test_mkdir_p_tree_seen_whole(watchd, fpb):
    """`mkdir -p a/b/c && touch a/b/c/f` at once: each directory is watched as it comes and
    scanned, so the file made before its directory's watch was added is seen, once."""
    w = GrpcWatch(watchd, fpb, path=".", recursive=True)
    assert w.next()["kind"] == "ready"
    subprocess.run(["sh", "-c", "mkdir -p a/b/c && touch a/b/c/f && touch end"],
                   cwd=watchd.root, check=True, timeout=10)
    evs = w.until(is_("create", "end"))
    creates = [(ev["path"], ev["dir"]) for ev in evs if ev["kind"] == "create"]
    for want in [("a", True), ("a/b", True), ("a/b/c", True), ("a/b/c/f", False)]:
        assert creates.count(want) == 1, (want, evs)
    # The new directories are watched: a change deep inside is seen.
    (watchd.root / "a/b/c/g").touch()
    w.until(is_("create", "a/b/c/g"))
    w.close()


def test_ready_only_after_every_watch_is_added(watchd, fpb):
    """A tree of 200 directories: a file made in the deepest right after ready is seen (its
    watch was there when ready came)."""
    deep = watchd.root
    for i in range(200):
        deep = deep / f"d{i}"
    deep.mkdir(parents=True)
    w = GrpcWatch(watchd, fpb, path="", recursive=True)
    ready = w.next()
    assert ready["kind"] == "ready" and ready["directories"] == 201, ready
    (deep / "x").touch()
    rel = str((deep / "x").relative_to(watchd.root))
    w.until(is_("create", rel))
    w.close()


def test_globs_and_non_recursive(watchd):
    (watchd.root / "sub").mkdir()
    (watchd.root / "node_modules").mkdir()
    w = Sse(watchd, "/v1/watch?recursive=true&include=*.py&include=end&exclude=node_modules")
    it = w.events()
    assert next(it)["directories"] == 2
    for p in ("a.txt", "b.py", "sub/c.py", "node_modules/d.py", "end"):
        (watchd.root / p).touch()
    evs = _until(it, is_("create", "end"))
    paths = {ev["path"] for ev in evs}
    assert paths == {"b.py", "sub/c.py", "end"}, evs
    w.close()
    w = Sse(watchd, "/v1/watch/sub")
    it = w.events()
    next(it)
    (watchd.root / "sub" / "inner").mkdir()
    (watchd.root / "sub" / "inner" / "deep").touch()
    (watchd.root / "sub" / "end").touch()
    evs = _until(it, is_("create", "end"))
    assert [ev["path"] for ev in evs if ev["kind"] == "create"] == ["inner", "end"], evs
    w.close()


# ---------------------------------------------------------------------------------------------
# A slow reader: 100,000 events, an overflow with the exact numbers lost


def flood(root, n):
    """n attribute changes, alternating between two files with long names (the kernel merges a
    change identical to the one before it)."""
    names = [root / "flood" / (c * 200) for c in "ab"]
    for p in names:
        p.touch()
    for i in range(n):
        os.utime(names[i & 1], ns=(i, i))


def check_accounting(events, first):
    """Every sequence number from first on is delivered once or counted in an overflow."""
    expect, lost, delivered = first, 0, 0
    for ev in events:
        if ev["kind"] == "overflow":
            lo, hi = ev["lost"]
            assert lo == expect and hi >= lo and ev["seq"] == hi and ev["rescan"], (ev, expect)
            lost += hi - lo + 1
            expect = hi + 1
        else:
            assert ev["seq"] == expect, (ev, expect)
            expect += 1
            delivered += 1
    return lost, delivered, expect


@pytest.mark.parametrize("client", ["sse", "grpc"])
def test_slow_reader_gets_exact_overflow(sandboxd_factory, fpb, client):
    d = sandboxd_factory(["--watch-queue", "1024"])
    (d.root / "flood").mkdir()
    if client == "sse":
        w = Sse(d, "/v1/watch/flood", rcvbuf=4096)
        it = w.events()
        nxt = lambda: next(it)  # noqa: E731
    else:
        w = GrpcWatch(d, fpb, background=False, path="flood")
        nxt = w.read
    assert nxt()["kind"] == "ready"
    flood(d.root, 100_000)
    (d.root / "flood" / "done").touch()
    events = []
    while True:
        ev = nxt()
        events.append(ev)
        if ev["kind"] == "create" and ev["path"] == "done":
            break
    lost, delivered, expect = check_accounting(events, 1)
    print(f"\n{client}: {delivered} events read, {lost} lost in "
          f"{sum(ev['kind'] == 'overflow' for ev in events)} overflow(s)")
    assert lost > 0 and delivered < 100_000
    # What follows is still right: numbered on, nothing missing.
    (d.root / "flood" / "after").touch()
    while True:
        ev = nxt()
        assert ev["kind"] != "overflow" and ev["seq"] == expect, (ev, expect)
        expect += 1
        if ev["path"] == "after" and ev["kind"] == "create":
            break
    m = http_request(d.rest_port, "GET", "/metrics").body.decode()
    assert 'sandboxd_watch_overflows_total{reason="queue"}' in m
    w.close()


# ---------------------------------------------------------------------------------------------
# Resume


def test_resume_grpc(watchd, fpb):
    w = GrpcWatch(watchd, fpb, path=".", recursive=True)
    wid = w.next()["watch"]
    (watchd.root / "one").touch()
    got = w.until(is_("create", "one"))
    since = got[-1]["seq"]
    w.close()
    (watchd.root / "two").touch()  # while no one reads: kept
    w = GrpcWatch(watchd, fpb, watch_id=wid, since=since)
    ready = w.next()
    assert ready["kind"] == "ready" and ready["resumed"] and ready["seq"] == since, ready
    evs = w.until(is_("create", "two"))
    assert evs[0]["seq"] == since + 1 and "one" not in [ev["path"] for ev in evs
                                                        if ev["kind"] == "create"], evs
    # A second client resuming it takes it over; the first is told.
    w2 = GrpcWatch(watchd, fpb, watch_id=wid, since=evs[-1]["seq"])
    assert w2.next()["resumed"]
    while w.next() is not None:  # what it had read before
        pass
    assert w.error.code() == SC.ABORTED and "resumed by another client" in w.error.details()
    w2.close()
    bad = GrpcWatch(watchd, fpb, watch_id="0000000000000000")
    assert bad.next() is None and bad.error.code() == SC.NOT_FOUND, bad.error
    bad = GrpcWatch(watchd, fpb, path=".", since=3)
    assert bad.next() is None and bad.error.code() == SC.INVALID_ARGUMENT, bad.error


def test_resume_sse_last_event_id(watchd):
    w = Sse(watchd, "/v1/watch/")
    it = w.events()
    wid = next(it)["watch"]
    (watchd.root / "one").touch()
    last = _until(it, is_("create", "one"))[-1]["seq"]
    w.close()
    (watchd.root / "two").touch()
    w = Sse(watchd, f"/v1/watch/?watch={wid}", headers={"Last-Event-ID": str(last)})
    it = w.events()
    ready = next(it)
    assert ready["resumed"] and ready["seq"] == last, ready
    evs = _until(it, is_("create", "two"))
    assert evs[0]["seq"] == last + 1, evs
    w.close()
    r = http_request(watchd.rest_port, "GET", "/v1/watch/?watch=ffffffffffffffff&since=1")
    assert r.status == 404 and r.json()["code"] == "NOT_FOUND", r
    r = http_request(watchd.rest_port, "GET", "/v1/watch/?since=1")
    assert r.status == 400 and r.json()["code"] == "INVALID_ARGUMENT", r


# ---------------------------------------------------------------------------------------------
# Confinement and limits


def test_symlink_escapes_refused(watchd, fpb, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (watchd.root / "out").symlink_to(outside)
    (watchd.root / "in").mkdir()
    (watchd.root / "in" / "link").symlink_to(outside)
    for path in ("out", "in/link", "../" + outside.name, str(outside)):
        w = GrpcWatch(watchd, fpb, path=path)
        ev = w.next()
        assert ev is None and w.error.code() in (SC.PERMISSION_DENIED, SC.NOT_FOUND), (path, ev)
    r = http_request(watchd.rest_port, "GET", "/v1/watch/out")
    assert r.status == 403 and r.json()["code"] == "PERMISSION_DENIED", r
    r = http_request(watchd.rest_port, "GET", "/v1/watch/%2e%2e/x")
    assert r.status == 403, r
    (watchd.root / "file").touch()
    r = http_request(watchd.rest_port, "GET", "/v1/watch/file")
    assert r.status == 400 and "not a directory" in r.json()["message"], r
    # A symlink in the tree pointing out is not followed.
    w = GrpcWatch(watchd, fpb, path="", recursive=True)
    assert w.next()["directories"] == 2
    (outside / "secret").touch()
    (watchd.root / "in" / "end").touch()
    evs = w.until(is_("create", "in/end"))
    assert not [ev for ev in evs if "secret" in ev.get("path", "")], evs
    w.close()


def test_limits_refused(sandboxd_factory, fpb):
    d = sandboxd_factory(["--max-watches", "3", "--max-watches-per-client", "2",
                          "--max-watch-dirs", "4"])
    (d.root / "a" / "b" / "c").mkdir(parents=True)
    ws = [GrpcWatch(d, fpb, path="") for _ in range(2)]
    assert [w.next()["kind"] for w in ws] == ["ready", "ready"]
    third = GrpcWatch(d, fpb, path="")
    assert third.next() is None and third.error.code() == SC.RESOURCE_EXHAUSTED
    assert "--max-watches-per-client" in third.error.details()
    # The same address over REST: still over its limit, 429 with the JSON error body.
    r = http_request(d.rest_port, "GET", "/v1/watch/?recursive=true")
    assert r.status == 429 and r.json()["code"] == "RESOURCE_EXHAUSTED", r
    cp = run_curl(["-o", "/dev/null", "-w", "%{http_code}", f"{d.rest_url}/v1/watch/"])
    assert cp.stdout == b"429", cp
    for w in ws:
        w.close()
    # A watch whose client went is kept and still counts; a fresh daemon shows the directory
    # budget: the root and a, a/b, a/b/c are 4, a fifth is refused.
    d2 = sandboxd_factory(["--max-watch-dirs", "4"])
    (d2.root / "a" / "b" / "c" / "d").mkdir(parents=True)
    r = http_request(d2.rest_port, "GET", "/v1/watch/?recursive=true")
    assert r.status == 429 and "--max-watch-dirs" in r.json()["message"], r
    ok = GrpcWatch(d2, fpb, path="a", recursive=True)
    assert ok.next()["directories"] == 4
    (d2.root / "a" / "new").mkdir()
    evs = []
    while (ev := ok.next()) is not None:
        evs.append(ev)
    assert ok.error.code() == SC.RESOURCE_EXHAUSTED and "--max-watch-dirs" in ok.error.details(), \
        (evs, ok.error)


def test_shutdown_ends_streams(sandboxd_factory, fpb):
    d = sandboxd_factory()
    g = GrpcWatch(d, fpb, path="")
    s = Sse(d, "/v1/watch/")
    it = s.events()
    assert g.next()["kind"] == "ready" and next(it)["kind"] == "ready"
    d.sigterm()
    assert g.next() is None and g.error.code() == SC.UNAVAILABLE, g.error
    last = list(it)
    assert last and last[-1]["kind"] == "error" and last[-1]["code"] == "UNAVAILABLE", last
    d.stop_and_check()


def test_rescan_catches_what_inotify_misses(watchd, fpb):
    """A write through mmap raises no inotify event (the file stays open: no close_write
    either); a watch with rescan_interval tells it from its snapshot, one without does not."""
    import mmap
    f = watchd.root / "mapped"
    f.write_bytes(b"x" * 4096)
    plain = GrpcWatch(watchd, fpb, path="")
    rescanned = GrpcWatch(watchd, fpb, path="", rescan_interval_ms=200)
    assert plain.next()["kind"] == "ready" and rescanned.next()["kind"] == "ready"
    with open(f, "r+b") as fh, mmap.mmap(fh.fileno(), 4096) as m:
        m[0:5] = b"hello"
        m.flush()
        rescanned.until(is_("write", "mapped"))
        (watchd.root / "end").touch()
        evs = plain.until(is_("create", "end"))
        assert not [ev for ev in evs if ev["path"] == "mapped"], evs
    plain.close()
    rescanned.close()
    bad = GrpcWatch(watchd, fpb, path="", rescan_interval_ms=5)
    assert bad.next() is None and bad.error.code() == SC.INVALID_ARGUMENT
