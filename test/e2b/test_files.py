"""The E2B SDK's file calls against sandboxd's E2B port: files.write / read / list / exists /
get_info / remove / rename / make_dir / watch_dir (the synchronous SDK's polling watcher and the
asynchronous SDK's WatchDir stream), uploads of several files and of 100 MiB, the SDK's own
exceptions for what fails, another user's permissions; and GET/POST /files with bad input,
through curl. Paths are the sandbox's absolute ones (here, this machine's)."""

import asyncio
import hashlib
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from e2b import AsyncSandbox
from e2b.exceptions import (
    FileNotFoundException,
    InvalidArgumentException,
    SandboxException,
)

from conftest import ROUTED, async_sandbox

NOBODY = pwd.getpwnam("nobody")


@pytest.fixture
def tmp(request):
    """A directory of the test's own, readable by anyone (nobody's tests need that)."""
    daemon = None if ROUTED else request.getfixturevalue("daemon")
    d = Path(tempfile.mkdtemp(prefix="e2b-files-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)
    assert daemon is None or daemon.alive()


def test_write_read_exists_info(sandbox, tmp):
    p = str(tmp / "new" / "deeper" / "hello.txt")
    info = sandbox.files.write(p, "hello, world\n")
    assert info.path == p and info.name == "hello.txt"
    assert (tmp / "new" / "deeper" / "hello.txt").read_text() == "hello, world\n"
    assert sandbox.files.read(p) == "hello, world\n"
    assert bytes(sandbox.files.read(p, format="bytes")) == b"hello, world\n"
    assert sandbox.files.exists(p)
    assert not sandbox.files.exists(str(tmp / "nothing"))
    e = sandbox.files.get_info(p)
    assert e.type.value == "file" and e.size == 13 and e.permissions == "-rw-r--r--"
    assert e.owner == "root" and e.name == "hello.txt" and e.path == p
    os.symlink(p, tmp / "link")
    e = sandbox.files.get_info(str(tmp / "link"))
    assert e.symlink_target == p and e.permissions.startswith("L")


def test_gzip(sandbox, tmp):
    p = str(tmp / "z" / "gz.txt")
    text = "compressible " * 10000
    info = sandbox.files.write(p, text, gzip=True)
    assert info.path == p and (tmp / "z" / "gz.txt").read_text() == text
    assert sandbox.files.read(p, gzip=True) == text


def test_metadata(sandbox, tmp):
    p = str(tmp / "m")
    info = sandbox.files.write(p, "x", metadata={"Owner": "team-a", "stage": "raw data"})
    assert info.metadata == {"owner": "team-a", "stage": "raw data"}  # keys lowercased
    assert os.getxattr(p, "user.e2b.owner") == b"team-a"
    assert sandbox.files.get_info(p).metadata == {"owner": "team-a", "stage": "raw data"}
    assert [e.metadata for e in sandbox.files.list(str(tmp))] == [
        {"owner": "team-a", "stage": "raw data"}]
    sandbox.files.write(p, "y", metadata={"stage": "cooked"})  # replaces the whole map
    assert sandbox.files.get_info(p).metadata == {"stage": "cooked"}
    sandbox.files.write(p, "z")
    assert not sandbox.files.get_info(p).metadata


def test_write_files_several_at_once(sandbox, tmp):
    from e2b.sandbox.filesystem.filesystem import WriteEntry
    infos = sandbox.files.write_files([
        WriteEntry(path=str(tmp / "a.txt"), data="A"),
        WriteEntry(path=str(tmp / "sub" / "b.bin"), data=b"\x00\x01B"),
    ])
    assert sorted(i.path for i in infos) == [str(tmp / "a.txt"), str(tmp / "sub" / "b.bin")]
    assert (tmp / "a.txt").read_bytes() == b"A"
    assert (tmp / "sub" / "b.bin").read_bytes() == b"\x00\x01B"


def test_list_depth(sandbox, tmp):
    (tmp / "d" / "e").mkdir(parents=True)
    (tmp / "d" / "e" / "f").write_text("f")
    (tmp / "g").write_text("g")
    one = sandbox.files.list(str(tmp))
    assert [(e.name, e.type.value) for e in one] == [("d", "dir"), ("g", "file")]
    three = sandbox.files.list(str(tmp), depth=3)
    assert [e.path for e in three] == [str(tmp / "d"), str(tmp / "d" / "e"),
                                       str(tmp / "d" / "e" / "f"), str(tmp / "g")]


def test_make_dir_rename_remove(sandbox, tmp):
    d = str(tmp / "x" / "y")
    assert sandbox.files.make_dir(d) is True
    assert sandbox.files.make_dir(d) is False  # already exists
    assert (tmp / "x" / "y").is_dir()
    (tmp / "x" / "y" / "f").write_text("f")
    moved = sandbox.files.rename(str(tmp / "x"), str(tmp / "moved" / "here"))
    assert moved.path == str(tmp / "moved" / "here")
    assert (tmp / "moved" / "here" / "y" / "f").read_text() == "f"
    sandbox.files.remove(str(tmp / "moved"))
    assert not (tmp / "moved").exists()
    sandbox.files.remove(str(tmp / "moved"))  # nothing there: no error, as envd


def test_errors_raise_the_sdks_exceptions(sandbox, tmp):
    with pytest.raises(FileNotFoundException):
        sandbox.files.read(str(tmp / "missing"))
    with pytest.raises(FileNotFoundException):
        sandbox.files.get_info(str(tmp / "missing"))
    with pytest.raises(FileNotFoundException):
        sandbox.files.list(str(tmp / "missing"))
    with pytest.raises(FileNotFoundException):
        sandbox.files.rename(str(tmp / "missing"), str(tmp / "other"))
    (tmp / "file").write_text("x")
    with pytest.raises(InvalidArgumentException):
        sandbox.files.list(str(tmp / "file"))
    with pytest.raises(InvalidArgumentException):
        sandbox.files.read(str(tmp))  # a directory
    with pytest.raises(InvalidArgumentException):
        sandbox.files.make_dir(str(tmp / "file"))


def test_another_users_permissions(sandbox, tmp):
    private = tmp / "private"
    private.mkdir(mode=0o700)
    (private / "secret").write_text("s")
    with pytest.raises(SandboxException, match="(?i)denied"):
        sandbox.files.read(str(private / "secret"), user="nobody")
    with pytest.raises(SandboxException, match="(?i)denied"):
        sandbox.files.write(str(private / "new"), "x", user="nobody")
    with pytest.raises(SandboxException, match="(?i)denied"):
        sandbox.files.list(str(private), user="nobody")
    with pytest.raises(SandboxException, match="(?i)denied"):
        sandbox.files.remove(str(private / "secret"), user="nobody")
    assert (private / "secret").exists() and not (private / "new").exists()
    shared = tmp / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    info = sandbox.files.write(str(shared / "sub" / "mine"), "m", user="nobody")
    assert info.path == str(shared / "sub" / "mine")
    assert (shared / "sub" / "mine").stat().st_uid == NOBODY.pw_uid
    assert (shared / "sub").stat().st_uid == NOBODY.pw_uid
    assert sandbox.files.get_info(str(shared / "sub" / "mine"), user="nobody").owner == "nobody"
    assert sandbox.files.make_dir(str(shared / "d"), user="nobody")
    assert (shared / "d").stat().st_uid == NOBODY.pw_uid
    # A relative path is the user's home's, as envd resolves it: nobody's is /nonexistent.
    with pytest.raises(SandboxException):
        sandbox.files.write("rel.txt", "x", user="nobody")


def _wait_for(get, want, what, limit=20.0):
    """Polls get() (a list of events) until want(events) holds; bounded."""
    seen, deadline = [], time.monotonic() + limit
    while time.monotonic() < deadline:
        seen += get()
        if want(seen):
            return seen
        time.sleep(0.05)
    pytest.fail(f"{what}: saw only {[(e.name, e.type) for e in seen]}")


def test_watch_dir_polling(sandbox, tmp):
    from e2b.sandbox.filesystem.watch_handle import FilesystemEventType as T
    h = sandbox.files.watch_dir(str(tmp), recursive=True)
    try:
        (tmp / "a").write_text("1")
        (tmp / "a").rename(tmp / "b")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "c").write_text("2")
        (tmp / "b").unlink()
        got = _wait_for(h.get_new_events, lambda ev: (("sub/c", T.CREATE) in
                                                      [(e.name, e.type) for e in ev] and
                                                      ("b", T.REMOVE) in
                                                      [(e.name, e.type) for e in ev]),
                        "watch events")
        kinds = [(e.name, e.type) for e in got]
        for want in [("a", T.CREATE), ("a", T.RENAME), ("b", T.CREATE), ("sub", T.CREATE),
                     ("sub/c", T.CREATE), ("b", T.REMOVE)]:
            assert want in kinds, (want, kinds)
    finally:
        h.stop()
    with pytest.raises(SandboxException):
        h.get_new_events()  # removed


def test_watch_dir_hides_what_the_user_may_not_list(sandbox, tmp):
    from e2b.sandbox.filesystem.watch_handle import FilesystemEventType as T
    (tmp / "private").mkdir(mode=0o700)
    (tmp / "open").mkdir()
    h = sandbox.files.watch_dir(str(tmp), recursive=True, user="nobody")
    try:
        (tmp / "private" / "secret-name").write_text("s")
        (tmp / "open" / "visible").write_text("v")
        got = _wait_for(h.get_new_events,
                        lambda ev: ("open/visible", T.CREATE) in [(e.name, e.type) for e in ev],
                        "an event nobody may see")
        # the secret's events came first (inotify keeps the order): none of them was shown
        assert not [e for e in got if "secret" in e.name], [(e.name, e.type) for e in got]
    finally:
        h.stop()


def test_watch_dir_stream(sandbox, tmp):
    from e2b.sandbox.filesystem.watch_handle import FilesystemEventType as T

    async def run():
        sbx = await async_sandbox(sandbox)
        events = []
        h = await sbx.files.watch_dir(str(tmp), on_event=events.append, include_entry=True)
        try:
            (tmp / "streamed").write_text("x")
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not any(
                    e.name == "streamed" and e.type == T.WRITE for e in events):
                await asyncio.sleep(0.05)
        finally:
            await h.stop()
        return events

    events = asyncio.run(run())
    created = [e for e in events if e.name == "streamed" and e.type == T.CREATE]
    assert created and any(e.type == T.WRITE for e in events), events
    assert created[0].entry is not None and created[0].entry.path == str(tmp / "streamed")


def test_sigterm_with_watches_open(make_daemon, tmp, monkeypatch):
    """The daemon stops cleanly (exit 0, nothing leaked under ASan) with a WatchDir stream and a
    polling watcher open; the stream ends."""
    d = make_daemon()
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setenv("E2B_SANDBOX_URL", d.url)
    from e2b import Sandbox
    Sandbox.create().files.watch_dir(str(tmp))  # a polling watcher, never removed
    ended = []

    async def run():
        sbx = await AsyncSandbox.create()
        h = await sbx.files.watch_dir(str(tmp), on_event=lambda e: None,
                                      on_exit=lambda e: ended.append(e), timeout=0)
        (tmp / "x").write_text("x")
        await asyncio.sleep(0.2)
        await asyncio.get_running_loop().run_in_executor(None, d.stop)  # asserts exit 0
        deadline = time.monotonic() + 20
        while not ended and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await h.stop()

    asyncio.run(run())
    assert ended, "the stream did not end when the daemon stopped"


def test_watch_dir_errors(sandbox, tmp):
    with pytest.raises(FileNotFoundException):
        sandbox.files.watch_dir(str(tmp / "missing"))
    (tmp / "f").write_text("x")
    with pytest.raises(InvalidArgumentException):
        sandbox.files.watch_dir(str(tmp / "f"))


MIB = 1 << 20


class Pattern:
    """100 MiB of a known pattern, read in pieces (never whole in memory), hashed as it goes."""

    def __init__(self, size):
        self.left, self.h, self.i = size, hashlib.sha256(), 0

    def read(self, n=-1):
        n = self.left if n < 0 else min(n, self.left)
        n = min(n, MIB)
        block = bytes([(self.i + k) % 251 for k in range(256)]) * (n // 256 + 1)
        block = block[:n]
        self.i += 1
        self.left -= n
        self.h.update(block)
        return block


def test_upload_100_mib(sandbox, tmp):
    import io
    src = Pattern(100 * MIB)

    class Reader(io.RawIOBase):
        def readable(self):
            return True

        def readinto(self, b):
            data = src.read(len(b))
            b[:len(data)] = data
            return len(data)

    p = tmp / "big.bin"
    info = sandbox.files.write(str(p), io.BufferedReader(Reader(), 1 << 16))
    assert info.path == str(p)
    assert p.stat().st_size == 100 * MIB
    h = hashlib.sha256()
    with open(p, "rb") as f:
        while chunk := f.read(MIB):
            h.update(chunk)
    assert h.hexdigest() == src.h.hexdigest()
    # and back, streamed
    h2, n = hashlib.sha256(), 0
    for chunk in sandbox.files.read(str(p), format="stream"):
        h2.update(chunk)
        n += len(chunk)
    assert n == 100 * MIB and h2.hexdigest() == src.h.hexdigest()


def test_upload_100_mib_multipart(sandbox, tmp):
    data = os.urandom(100 * MIB)
    p = tmp / "big-multipart.bin"
    sandbox.files.write(str(p), data)
    with open(p, "rb") as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest()


def test_read_of_a_file_without_a_size(sandbox, daemon, tmp):
    """procfs says its files are empty and makes them as they are read: the download reads to
    the end (chunked) rather than trust st_size; a really empty file is still empty."""
    want = Path("/proc/version").read_bytes()
    assert want
    assert sandbox.files.read("/proc/version") == want.decode()
    status, headers, body = daemon.request("GET", "/files?path=/proc/version")
    assert (status, body) == (200, want)
    assert headers.get("transfer-encoding") == "chunked" and "content-length" not in headers
    assert headers["content-disposition"] == "inline; filename=version"
    (tmp / "empty").write_bytes(b"")
    assert sandbox.files.read(str(tmp / "empty")) == ""
    status, headers, body = daemon.request("GET", f"/files?path={tmp}/empty")
    assert (status, body, headers.get("content-length")) == (200, b"", "0")


def test_upload_cut_off_leaves_nothing(daemon, tmp):
    """A client that goes away mid-upload (raw and multipart) leaves no file and no temp file."""
    import socket
    bodies = [
        ("application/octet-stream", b"x" * MIB),
        ("multipart/form-data; boundary=zz",
         b'--zz\r\nContent-Disposition: form-data; name="file"; filename="' +
         str(tmp / "cut2").encode() + b'"\r\n\r\n' + b"y" * MIB),
    ]
    for ctype, part in bodies:
        s = socket.create_connection(("127.0.0.1", daemon.port), timeout=10)
        q = f"?path={tmp}/cut1" if ctype.startswith("application") else ""
        s.sendall(f"POST /files{q} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n"
                  f"Content-Length: {10 * MIB}\r\n\r\n".encode() + part)
        # the upload is under way: its temp file is there
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not list(tmp.glob(".sandboxd-tmp*")):
            time.sleep(0.01)
        assert list(tmp.glob(".sandboxd-tmp*")), ctype
        s.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and list(tmp.iterdir()):
            time.sleep(0.05)
        assert not list(tmp.iterdir()), ctype
    assert daemon.alive()


# ---------------------------------------------------------------------------------------------
# GET/POST /files with bad input, through curl: envd's JSON errors, and the daemon stays up.

def curl(daemon, *args):
    """(status, body) of curl against the daemon."""
    out = subprocess.run(["curl", "-s", "-m", "20", "-w", "\n%{http_code}", *args],
                         capture_output=True, check=True).stdout
    body, _, status = out.rpartition(b"\n")
    return int(status), body


def error_of(body):
    j = json.loads(body)
    assert set(j) == {"code", "message"}, j
    return j["code"], j["message"]


def test_curl_bad_input(daemon, tmp):
    u = daemon.url + "/files"
    (tmp / "f").write_text("x")
    cases = [
        # (curl arguments, status, words of the message)
        ([f"{u}?path={tmp}/missing"], 404, "does not exist"),
        ([f"{u}?path={tmp}"], 400, "is a directory"),
        ([f"{u}?path={tmp}/f&username=no-such-user"], 401, "error looking up user"),
        ([f"{u}?path=~other/x"], 400, "home dir"),
        (["-XPOST", "-H", "Content-Type: application/octet-stream", "--data-binary", "x", u],
         400, "path query parameter is required"),
        (["-XPOST", "-H", "Content-Type: text/plain", "--data-binary", "x",
          f"{u}?path={tmp}/t"], 400, "unsupported content type"),
        (["-XPOST", "-H", "Content-Type: multipart/form-data", "--data-binary", "x",
          f"{u}?path={tmp}/t"], 400, "unsupported content type"),
        (["-XPOST", "-H", "Content-Type: multipart/form-data; boundary=zz", "--data-binary",
          "--zz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"t\"\r\n\r\nabc",
          f"{u}?path={tmp}/t"], 400, "does not end with its boundary"),
        (["-XPOST", "-F", f"file=@{tmp}/f;filename={tmp}/dup", "-F",
          f"file=@{tmp}/f;filename={tmp}/dup", u], 400, "multiple files to the same path"),
        (["-XPOST", "-F", f"file=@{tmp}/f;filename=", u], 400, "no filename"),
        (["-XPOST", "-F", f"file=@{tmp}/f", f"{u}?path={tmp}"], 400, "is a directory"),
        (["-XPOST", "-F", f"file=@{tmp}/f", f"{u}?path=/root/x&username=nobody"], 403,
         "denied"),
        (["-XPOST", "-H", "Content-Type: application/octet-stream", "-H",
          "Content-Encoding: br", "--data-binary", "x", f"{u}?path={tmp}/t"], 400,
         "Content-Encoding"),
        (["-XPOST", "-H", "Content-Type: application/octet-stream", "-H",
          "X-Metadata-" + "k" * 250 + ": v", "--data-binary", "x", f"{u}?path={tmp}/t"], 400,
         "invalid metadata"),
        (["-XPOST", "-H", "Content-Type: application/octet-stream", "-H",
          "Content-Encoding: gzip", "--data-binary", "not gzip", f"{u}?path={tmp}/t"], 400,
         "error decompressing"),
        (["-XPOST", "-H", "Content-Type: application/octet-stream", "-H",
          "Content-Encoding: gzip", "--data-binary", "@" + str(tmp / "cut.gz"),
          f"{u}?path={tmp}/t"], 400, "unexpected end of gzip data"),
    ]
    import gzip
    (tmp / "cut.gz").write_bytes(gzip.compress(b"x" * 100000)[:-20])
    for args, status, words in cases:
        got, body = curl(daemon, *args)
        assert got == status, (args, got, body)
        code, msg = error_of(body)
        assert code == status and words in msg, (args, msg)
    # nothing of a refused upload is left, but the first file of a doubled path (envd's words:
    # "only the first specified file was uploaded")
    assert not (tmp / "t").exists() and (tmp / "dup").read_text() == "x"
    assert not [p for p in tmp.iterdir() if p.name.startswith(".sandboxd-tmp")]
    # what works, for contrast: the answer is envd's list of entries
    got, body = curl(daemon, "-XPOST", "-F", f"file=@{tmp}/f;filename={tmp}/one", "-F",
                     f"file=@{tmp}/f;filename={tmp}/two", u)
    assert got == 200 and json.loads(body) == [
        {"path": f"{tmp}/one", "name": "one", "type": "file"},
        {"path": f"{tmp}/two", "name": "two", "type": "file"}]
    got, body = curl(daemon, "-D", "-", f"{u}?path={tmp}/one")
    assert got == 200 and body.endswith(b"\r\n\r\nx")
    assert b"Content-Disposition: inline; filename=one" in body
    assert daemon.alive()
