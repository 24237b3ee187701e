"""The REST files API of sandboxd (issue 3), driven from outside with the real curl binary and
Python's http.client: every route and status code, keep-alive, 1 GiB both ways with bounded
memory, Range, cut-off uploads, ENOSPC, traversal and symlink races, tar both ways, metadata,
metrics and health while draining.

Every request carries a timeout: a daemon that never answers fails the test, it does not hang it.
"""

import base64
import hashlib
import http.client
import io
import json
import os
import re
import socket
import stat
import struct
import subprocess
import tarfile
import threading
import time
import uuid
from email.utils import parsedate_to_datetime
from pathlib import Path

import pytest

from conftest import (HttpResponse, http_request, run_curl, temp_files, vm_rss_kib,
                      wait_until)

SMALL = 5.0  # seconds: bound of a small request on loopback
EARLY = 2.0  # seconds: bound of a request refused before its body is read (an instant answer)
NOT_FOUND = "path does not exist within the sandbox"
TRAVERSAL = "path traversal outside sandbox root is forbidden"
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


# ---------------------------------------------------------------------------------------------
# Helpers


def rq(d, method, path, body=None, headers=None, timeout=SMALL):
    """A request with http.client; fails the test when no complete response comes in time."""
    try:
        return http_request(d.rest_port, method, path, body, headers, timeout)
    except (OSError, http.client.HTTPException) as e:
        pytest.fail(f"{method} {path}: no complete response within {timeout}s: {e!r}")


def try_rq(d, method, path, body=None, headers=None, timeout=SMALL):
    """Like rq, but returns the exception instead of failing (to check side effects first)."""
    try:
        return http_request(d.rest_port, method, path, body, headers, timeout)
    except (OSError, http.client.HTTPException) as e:
        return e


def answered(r, what):
    if not isinstance(r, HttpResponse):
        pytest.fail(f"{what}: no complete response: {r!r}")
    return r


def assert_error(r, status, code, message=None):
    """A JSON error: {code, message} + newline, Content-Type application/json."""
    info = f"\n  got: {r!r}"
    assert r.status == status, f"status {r.status}, expected {status}" + info
    assert r.header("Content-Type") == "application/json", info
    assert r.body.endswith(b"\n"), "JSON body without the trailing newline" + info
    j = r.json()
    assert set(j) == {"code", "message"}, info
    assert j["code"] == code, info
    if message is not None:
        if isinstance(message, re.Pattern):
            assert message.search(j["message"]), info
        else:
            assert j["message"] == message, info
    return j


def curl_req(d, args, timeout=SMALL):
    """curl with headers in the output: returns (status, headers dict lower-case, body)."""
    r = run_curl(["-D", "-", "-o", "-", *args], timeout=timeout)
    assert r.returncode == 0, f"curl {args}: rc={r.returncode} {r.stderr.decode(errors='replace')}"
    raw = r.stdout
    # Skip interim 1xx responses (100 Continue).
    while True:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        if 100 <= status < 200:
            raw = rest
            continue
        break
    hdrs = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return status, hdrs, rest


def no_temp_left(p, timeout=2.0):
    """No .sandboxd-tmp-* beneath p (after a refused upload the daemon may remove its temp file
    just after answering: allowed a short while)."""
    wait_until(lambda: not temp_files(p), timeout, 0.01, f"no temp file left in {p}: {temp_files(p)}")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)


def make_file(path, size, seed=1):
    """Writes size deterministic bytes (distinct 1 MiB blocks) to path; returns their sha256."""
    import random

    base = random.Random(seed).randbytes(1 << 20)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        i = 0
        left = size
        while left:
            block = (struct.pack("<Q", i) + base[8:])[:left]
            f.write(block)
            h.update(block)
            left -= len(block)
            i += 1
    return h.hexdigest()


def digest_headers_ok(r_headers, data_sha_hex, size):
    """The three headers of a successful upload."""
    get = (lambda k: r_headers.header(k)) if isinstance(r_headers, HttpResponse) else \
        (lambda k: r_headers.get(k.lower()))
    assert get("X-Sandboxd-Size") == str(size), r_headers
    assert get("X-Sandboxd-Sha256") == data_sha_hex, r_headers
    b64 = base64.b64encode(bytes.fromhex(data_sha_hex)).decode()
    assert get("Repr-Digest") == f"sha-256=:{b64}:", r_headers


def metric(text, name, labels=None):
    """The value of one sample of a Prometheus text exposition (0 when absent)."""
    lab = "" if not labels else "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    for line in text.splitlines():
        if line.startswith(name + lab + " "):
            return float(line.split()[-1])
    return 0.0


class RssSampler(threading.Thread):
    """Samples a process's VmRSS every 20 ms until stopped."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.base = vm_rss_kib(pid)
        self.peak = self.base
        self._halt = threading.Event()

    def run(self):
        while not self._halt.wait(0.02):
            v = vm_rss_kib(self.pid)
            if v is not None and v > self.peak:
                self.peak = v

    def stop(self):
        self._halt.set()
        self.join(5)
        return self.peak - self.base


@pytest.fixture(scope="module")
def d(sandboxd):
    return sandboxd


@pytest.fixture
def area(d):
    """A fresh directory beneath the module daemon's root; (its path, its name in URLs)."""
    name = "t-" + uuid.uuid4().hex[:10]
    p = d.root / name
    p.mkdir()
    return p, name


# ---------------------------------------------------------------------------------------------
# PUT and GET of files


def test_put_raw_then_get_with_curl(d, area):
    p, n = area
    data = b"hello world\n" * 100
    # curl reads the body from a file: --data-binary @file sends it byte for byte.
    src = p.parent / (n + ".src")
    src.write_bytes(data)
    try:
        status, h, body = curl_req(d, ["-X", "PUT", "--data-binary", f"@{src}",
                                       f"{d.rest_url}/v1/files/{n}/a/b/c.txt"])
    finally:
        src.unlink()
    assert status == 204, (status, h, body)
    assert body == b""
    digest_headers_ok(h, hashlib.sha256(data).hexdigest(), len(data))
    f = p / "a/b/c.txt"
    assert f.read_bytes() == data
    assert stat.S_IMODE(f.stat().st_mode) == 0o644, "default mode is 0644"
    assert stat.S_IMODE((p / "a").stat().st_mode) == 0o755, "parents are created 0755"
    assert not temp_files(p)

    status, h, body = curl_req(d, [f"{d.rest_url}/v1/files/{n}/a/b/c.txt"])
    assert status == 200
    assert body == data
    assert h["content-type"] == "application/octet-stream"
    assert h["accept-ranges"] == "bytes"
    assert h["content-length"] == str(len(data))
    lm = parsedate_to_datetime(h["last-modified"])
    assert int(lm.timestamp()) == int(f.stat().st_mtime), (h["last-modified"], f.stat().st_mtime)


def test_put_empty_body_and_chunked(d, area):
    p, n = area
    r = rq(d, "PUT", f"/v1/files/{n}/empty", body=b"", headers={"Content-Length": "0"})
    assert r.status == 204, r
    digest_headers_ok(r, hashlib.sha256(b"").hexdigest(), 0)
    assert (p / "empty").read_bytes() == b""
    # Chunked transfer encoding (curl -T - reads stdin and sends it chunked).
    data = os.urandom(300_000)
    cp = run_curl(["-T", "-", "-o", "/dev/null", "-w", "%{http_code}",
                   f"{d.rest_url}/v1/files/{n}/chunked"], input=data)
    assert cp.returncode == 0 and cp.stdout == b"204", cp
    assert (p / "chunked").read_bytes() == data


def test_put_mode(d, area):
    p, n = area
    for mode in ("0755", "0600", "0666", "0400"):
        r = rq(d, "PUT", f"/v1/files/{n}/m{mode}?mode={mode}", body=b"x")
        assert r.status == 204, r
        got = stat.S_IMODE((p / f"m{mode}").stat().st_mode)
        assert got == int(mode, 8), f"mode={mode} gave {oct(got)} (umask must not apply)"


@pytest.mark.parametrize("mode", ["755", "0855", "abc", "07555", "0x1ff", "-1"])
def test_put_bad_mode_empty_body(d, area, mode):
    p, n = area
    r = rq(d, "PUT", f"/v1/files/{n}/f?mode={mode}", body=b"", headers={"Content-Length": "0"})
    assert_error(r, 400, "INVALID_ARGUMENT", f'mode "{mode}" must match ^0[0-7]{{3}}$')
    assert not (p / "f").exists()


@pytest.mark.parametrize("case", ["bad-mode", "directory-target", "escaping-link",
                                  "multipart-without-boundary"])
def test_put_early_error_with_a_body_is_answered(d, area, tmp_path, case):
    """A PUT refused before its body is read must still be answered (and keep the connection
    usable), whatever the body: clients always send one."""
    p, n = area
    (p / "dir").mkdir()
    (p / "dir" / "x").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (p / "out").symlink_to(outside)
    path, headers, want = {
        "bad-mode": (f"{n}/f?mode=9", {}, (400, "INVALID_ARGUMENT", 'mode "9" must match ^0[0-7]{3}$')),
        "directory-target": (f"{n}/dir", {}, (400, "INVALID_ARGUMENT", "target path is a directory")),
        "escaping-link": (f"{n}/out/f", {}, (403, "PERMISSION_DENIED", TRAVERSAL)),
        "multipart-without-boundary": (
            f"{n}/f", {"Content-Type": "multipart/form-data"},
            (400, "INVALID_ARGUMENT",
             "invalid multipart body: no multipart boundary param in Content-Type")),
    }[case]
    r = try_rq(d, "PUT", f"/v1/files/{path}", body=b"some body bytes", headers=headers,
               timeout=EARLY)
    assert not list(outside.iterdir()), "something was written outside the root"
    assert not (p / "f").exists()
    answered(r, f"PUT /v1/files/{path} with a 15-byte body")
    assert_error(r, *want)
    no_temp_left(p)


@pytest.mark.parametrize("method,path,status", [
    ("GET", "/v1/health", 200),
    ("GET", "/v1/files/{n}/f", 200),
    ("DELETE", "/v1/files/{n}/f", 204),
    ("POST", "/v1/health", 405),
    ("POST", "/v1/nosuchroute", 404),
    ("PUT", "/v1/dirs/{n}/newdir", 400),
])
def test_request_with_unexpected_body_is_answered(d, area, method, path, status):
    """A body on a request that takes none (or one answered before its body is read) must not
    cost the answer."""
    p, n = area
    (p / "f").write_text("x")
    r = try_rq(d, method, path.format(n=n), body=b'{"some": "json body"}',
               headers={"Content-Type": "application/json"}, timeout=EARLY)
    r = answered(r, f"{method} {path} with a 21-byte body")
    assert r.status == status, r


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
def test_nul_in_path_is_refused(d, area, method):
    """A NUL byte (%00) cannot be in a file name: the path must be refused, not cut at the NUL
    (DELETE /v1/files/important%00.bak must not remove "important")."""
    p, n = area
    (p / "important").write_text("keep me")
    r = rq(d, method, f"/v1/files/{n}/important%00.bak", body=b"" if method == "PUT" else None)
    assert (p / "important").read_text() == "keep me", f"{method} acted on the truncated path"
    assert_error(r, 400, "INVALID_ARGUMENT")
    r = rq(d, "GET", "/v1/files/%00")
    assert_error(r, 400, "INVALID_ARGUMENT")


def test_put_directory_target_empty_body(d, area):
    p, n = area
    (p / "dir").mkdir()
    r = rq(d, "PUT", f"/v1/files/{n}/dir", body=b"", headers={"Content-Length": "0"})
    assert_error(r, 400, "INVALID_ARGUMENT", "target path is a directory")
    r = rq(d, "PUT", "/v1/files/", body=b"", headers={"Content-Length": "0"})
    assert_error(r, 400, "INVALID_ARGUMENT", "target path is a directory")


def test_put_replaces_existing_file_atomically(d, area):
    p, n = area
    f = p / "f"
    f.write_bytes(b"old")
    ino = f.stat().st_ino
    r = rq(d, "PUT", f"/v1/files/{n}/f", body=b"new content")
    assert r.status == 204, r
    assert f.read_bytes() == b"new content"
    assert f.stat().st_ino != ino, "replaced in place instead of renamed over"
    assert not temp_files(p)


def test_put_through_inside_symlink_writes_target(d, area):
    p, n = area
    (p / "real").mkdir()
    (p / "real" / "t").write_text("old")
    (p / "lnk").symlink_to("real/t")
    r = rq(d, "PUT", f"/v1/files/{n}/lnk", body=b"via link")
    assert r.status == 204, r
    assert (p / "lnk").is_symlink(), "the link was replaced by a file"
    assert (p / "real" / "t").read_bytes() == b"via link"


def test_put_parent_is_a_file(d, area):
    p, n = area
    (p / "afile").write_text("x")
    r = rq(d, "PUT", f"/v1/files/{n}/afile/child", body=b"", headers={"Content-Length": "0"})
    assert 400 <= r.status < 600 and r.status != 404, r
    assert r.header("Content-Type") == "application/json"
    assert (p / "afile").read_text() == "x"


def test_put_multipart_with_curl(d, area, tmp_path):
    p, n = area
    data = os.urandom(3 << 20) + b"\r\n--not-a-boundary\r\n"
    src = tmp_path / "part.bin"
    src.write_bytes(data)
    status, h, body = curl_req(d, ["-X", "PUT", "-F", "before=ignored", "-F", f"file=@{src}",
                                   "-F", "after=ignored too",
                                   f"{d.rest_url}/v1/files/{n}/mp.bin?mode=0640"], timeout=30)
    assert status == 204, (status, h, body)
    digest_headers_ok(h, hashlib.sha256(data).hexdigest(), len(data))
    assert (p / "mp.bin").read_bytes() == data
    assert stat.S_IMODE((p / "mp.bin").stat().st_mode) == 0o640


def test_put_multipart_missing_file_part(d, area):
    p, n = area
    status, h, body = curl_req(d, ["-X", "PUT", "-F", "other=1", f"{d.rest_url}/v1/files/{n}/nofile"])
    r = HttpResponse(status, "", list(h.items()), body)
    assert_error(r, 400, "INVALID_ARGUMENT", 'multipart body is missing the required "file" part')
    assert not (p / "nofile").exists()
    no_temp_left(p)


def test_put_too_large(sandboxd_factory):
    d = sandboxd_factory(["--max-upload-bytes", "1024"])
    ok = rq(d, "PUT", "/v1/files/ok", body=b"x" * 1024)
    assert ok.status == 204, ok
    # Declared too large: refused from Content-Length.
    r = try_rq(d, "PUT", "/v1/files/big1", body=b"y" * 4096, timeout=EARLY)
    assert not (d.root / "big1").exists()
    no_temp_left(d.root)
    assert_error(answered(r, "PUT of 4096 bytes with Content-Length"), 413, "PAYLOAD_TOO_LARGE")
    # Undeclared (chunked): refused when the count goes over.
    cp = run_curl(["-T", "-", "-D", "-", "-o", "-", f"{d.rest_url}/v1/files/big2"], input=b"z" * 8192)
    assert not (d.root / "big2").exists()
    no_temp_left(d.root)
    assert re.search(rb"HTTP/1.1 413", cp.stdout), (cp.returncode, cp.stdout, cp.stderr)


# ---------------------------------------------------------------------------------------------
# HEAD, GET of directories and errors


def test_head(d, area):
    p, n = area
    (p / "f").write_bytes(b"12345")
    r = rq(d, "HEAD", f"/v1/files/{n}/f")
    assert r.status == 200 and r.body == b"", r
    assert r.header("Content-Length") == "5"
    assert r.header("Content-Type") == "application/octet-stream"
    assert r.header("Accept-Ranges") == "bytes"
    assert r.header("Last-Modified")
    r = rq(d, "HEAD", f"/v1/files/{n}/missing")
    assert r.status == 404 and r.body == b"", r
    assert r.header("Content-Type") == "application/json"
    r = rq(d, "HEAD", f"/v1/files/{n}")
    assert r.status == 200 and r.body == b"" and r.header("Content-Type") == "application/json", r
    cp = run_curl(["-I", f"{d.rest_url}/v1/files/{n}/f"])
    assert cp.returncode == 0 and b" 200" in cp.stdout.split(b"\r\n")[0], cp


def test_get_directory_listing(d, area, tmp_path):
    p, n = area
    (p / "b.txt").write_bytes(b"abc")
    os.chmod(p / "b.txt", 0o600)
    (p / ".hidden").write_text("h")
    (p / "sub").mkdir(mode=0o750)
    os.chmod(p / "sub", 0o750)
    (p / "sub" / "x").write_text("x")
    (p / "empty").mkdir()
    (p / "in_file").symlink_to("b.txt")
    (p / "in_dir").symlink_to("sub")
    (p / "out").symlink_to("/etc")
    (p / "dangling").symlink_to("nowhere")
    os.utime(p / "b.txt", (1_600_000_000, 1_600_000_000))
    r = rq(d, "GET", f"/v1/files/{n}")
    assert r.status == 200, r
    assert r.header("Content-Type") == "application/json"
    assert r.body.endswith(b"}\n")
    j = r.json()
    assert j["path"] == f"/{n}"
    names = [e["name"] for e in j["entries"]]
    assert names == sorted(names), "entries are sorted by name"
    assert names == [".hidden", "b.txt", "empty", "in_dir", "in_file", "sub"], \
        "hidden files listed; escaping and dangling links omitted"
    by = {e["name"]: e for e in j["entries"]}
    for e in j["entries"]:
        assert set(e) == {"name", "size", "type", "modified_at", "mode"}, e
        assert RFC3339.match(e["modified_at"]), e
        assert re.match(r"^0[0-7]{3}$", e["mode"]), e
    assert by["b.txt"] == {"name": "b.txt", "size": 3, "type": "file",
                           "modified_at": "2020-09-13T12:26:40Z", "mode": "0600"}
    assert by["sub"]["type"] == "directory" and by["sub"]["mode"] == "0750"
    # In-root links: listed under their own name with their target's stat.
    assert by["in_file"]["type"] == "file" and by["in_file"]["size"] == 3
    assert by["in_file"]["mode"] == "0600"
    assert by["in_dir"]["type"] == "directory" and by["in_dir"]["mode"] == "0750"
    # Empty directory: [] not null; trailing slash kept in "path".
    r = rq(d, "GET", f"/v1/files/{n}/empty/")
    assert r.status == 200 and r.json() == {"path": f"/{n}/empty/", "entries": []}, r
    r = rq(d, "GET", "/v1/files/")
    assert r.status == 200 and r.json()["path"] == "/", r
    assert n in [e["name"] for e in r.json()["entries"]]


def test_get_errors(d, area):
    p, n = area
    assert_error(rq(d, "GET", f"/v1/files/{n}/missing"), 404, "NOT_FOUND", NOT_FOUND)
    assert_error(rq(d, "GET", f"/v1/files/{n}/missing/deeper"), 404, "NOT_FOUND", NOT_FOUND)
    r = rq(d, "GET", "/v1/nosuchroute")
    assert r.status == 404, r
    r = rq(d, "GET", "/nothing")
    assert r.status == 404, r


ROUTES = [
    # path, allowed methods
    ("/v1/files/x", {"GET", "HEAD", "PUT", "DELETE"}),
    ("/v1/stat/x", {"GET", "HEAD"}),
    ("/v1/dirs/x", {"PUT"}),
    ("/v1/move", {"POST"}),
    ("/v1/health", {"GET", "HEAD"}),
    ("/v1/metadata", {"GET", "HEAD"}),
    ("/healthz", {"GET", "HEAD"}),
    ("/readyz", {"GET", "HEAD"}),
    ("/metrics", {"GET", "HEAD"}),
]


@pytest.mark.parametrize("path,allowed", ROUTES, ids=[r[0] for r in ROUTES])
def test_method_not_allowed(d, path, allowed):
    for method in ("GET", "HEAD", "PUT", "POST", "DELETE", "PATCH", "OPTIONS"):
        if method in allowed:
            continue
        r = rq(d, method, path, body=b"" if method in ("PUT", "POST", "PATCH") else None)
        assert r.status == 405, (method, r)
        allow = {m.strip() for m in (r.header("Allow") or "").split(",")}
        assert allow == allowed, (method, r.header("Allow"))
        if method != "HEAD":
            assert_error(r, 405, "METHOD_NOT_ALLOWED")


# ---------------------------------------------------------------------------------------------
# DELETE


def test_delete(d, area):
    p, n = area
    (p / "f").write_text("x")
    (p / "full" / "deep").mkdir(parents=True)
    (p / "full" / "deep" / "f").write_text("x")
    (p / "emptydir").mkdir()
    r = rq(d, "DELETE", f"/v1/files/{n}/f")
    assert r.status == 204 and r.body == b"", r
    assert not (p / "f").exists()
    assert_error(rq(d, "DELETE", f"/v1/files/{n}/f"), 404, "NOT_FOUND", NOT_FOUND)
    assert_error(rq(d, "DELETE", f"/v1/files/{n}/full"), 409, "CONFLICT",
                 "directory is not empty; pass recursive=true to remove it")
    assert_error(rq(d, "DELETE", f"/v1/files/{n}/full?recursive=false"), 409, "CONFLICT")
    assert_error(rq(d, "DELETE", f"/v1/files/{n}/full?recursive=yes"), 400, "INVALID_ARGUMENT",
                 'recursive "yes" must be a boolean')
    assert (p / "full" / "deep" / "f").exists()
    r = rq(d, "DELETE", f"/v1/files/{n}/emptydir")
    assert r.status == 204, r
    for v in ("true", "1", "T", "TRUE", "True", "t"):
        (p / "full2" / "a").mkdir(parents=True)
        r = rq(d, "DELETE", f"/v1/files/{n}/full2?recursive={v}")
        assert r.status == 204, (v, r)
        assert not (p / "full2").exists()
    r = rq(d, "DELETE", f"/v1/files/{n}/full?recursive=true")
    assert r.status == 204, r
    assert not (p / "full").exists()


def test_delete_symlink_removes_the_link_itself(d, area, tmp_path):
    """Deliberately unlike the reference (which acts on the target)."""
    p, n = area
    (p / "sub").mkdir()
    (p / "sub" / "f").write_text("keep")
    (p / "ldir").symlink_to("sub")
    (p / "lfile").symlink_to("sub/f")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("outside")
    (p / "lout").symlink_to(outside)
    for name in ("ldir", "lfile", "lout"):
        r = rq(d, "DELETE", f"/v1/files/{n}/{name}")
        assert r.status == 204, (name, r)
        assert not os.path.lexists(p / name), name
    assert (p / "sub" / "f").read_text() == "keep"
    assert (outside / "victim").read_text() == "outside"
    # Through an escaping link: refused, nothing removed outside.
    (p / "lout2").symlink_to(outside)
    assert_error(rq(d, "DELETE", f"/v1/files/{n}/lout2/victim"), 403, "PERMISSION_DENIED", TRAVERSAL)
    assert_error(rq(d, "DELETE", f"/v1/files/{n}/lout2/victim?recursive=true"), 403,
                 "PERMISSION_DENIED")
    assert (outside / "victim").read_text() == "outside"


def test_delete_root(sandboxd_factory):
    d = sandboxd_factory()
    (d.root / "a" / "b").mkdir(parents=True)
    (d.root / "f").write_text("x")
    (d.root / ".hidden").write_text("x")
    for path in ("/v1/files/", "/v1/files", "/v1/files/.", "/v1/files/a/.."):
        assert_error(rq(d, "DELETE", path), 409, "CONFLICT",
                     "cannot delete the sandbox root; pass recursive=true to clear its contents")
    assert_error(rq(d, "DELETE", "/v1/files/?recursive=maybe"), 400, "INVALID_ARGUMENT")
    r = rq(d, "DELETE", "/v1/files/?recursive=true")
    assert r.status == 204, r
    assert d.root.is_dir(), "the root itself must stay"
    assert list(d.root.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# stat, mkdir, move


def test_stat(d, area):
    p, n = area
    (p / "f").write_bytes(b"1234567")
    os.chmod(p / "f", 0o640)
    os.utime(p / "f", (1_700_000_000, 1_700_000_000))
    (p / "dir").mkdir()
    (p / "l").symlink_to("f")
    (p / "lout").symlink_to("/etc/passwd")
    os.mkfifo(p / "fifo")
    st = (p / "f").stat()
    r = rq(d, "GET", f"/v1/stat/{n}/f")
    assert r.status == 200 and r.header("Content-Type") == "application/json", r
    assert r.json() == {"path": f"/{n}/f", "name": "f", "type": "file", "size": 7, "mode": "0640",
                        "uid": st.st_uid, "gid": st.st_gid, "modified_at": "2023-11-14T22:13:20Z"}
    j = rq(d, "GET", f"/v1/stat/{n}/dir").json()
    assert j["type"] == "directory" and j["name"] == "dir" and "symlink_target" not in j
    j = rq(d, "GET", f"/v1/stat/{n}/l").json()
    assert j["type"] == "symlink" and j["symlink_target"] == "f", j
    # lstat: a link pointing outside is described, not followed.
    j = rq(d, "GET", f"/v1/stat/{n}/lout").json()
    assert j["type"] == "symlink" and j["symlink_target"] == "/etc/passwd", j
    assert j["size"] == len("/etc/passwd")
    j = rq(d, "GET", f"/v1/stat/{n}/fifo").json()
    assert j["type"] == "other", j
    r = rq(d, "GET", "/v1/stat/")
    assert r.status == 200 and r.json()["type"] == "directory" and r.json()["path"] == "/", r
    assert_error(rq(d, "GET", f"/v1/stat/{n}/missing"), 404, "NOT_FOUND", NOT_FOUND)
    assert_error(rq(d, "GET", "/v1/stat/../etc/passwd"), 403, "PERMISSION_DENIED", TRAVERSAL)
    r = rq(d, "HEAD", f"/v1/stat/{n}/f")
    assert r.status == 200 and r.body == b"", r


def test_mkdir(d, area):
    p, n = area
    r = rq(d, "PUT", f"/v1/dirs/{n}/a/b/c?parents=true&mode=0700")
    assert r.status == 201, r
    assert (p / "a/b/c").is_dir()
    assert stat.S_IMODE((p / "a/b/c").stat().st_mode) == 0o700
    r = rq(d, "PUT", f"/v1/dirs/{n}/single")
    assert r.status == 201, r
    assert stat.S_IMODE((p / "single").stat().st_mode) == 0o755, "default mode 0755"
    assert_error(rq(d, "PUT", f"/v1/dirs/{n}/single"), 409, "CONFLICT")
    r = rq(d, "PUT", f"/v1/dirs/{n}/single?parents=true")
    assert r.status in (201, 409), r  # mkdir -p of an existing dir: either is defensible
    assert_error(rq(d, "PUT", f"/v1/dirs/{n}/x/y/z"), 404, "NOT_FOUND")
    assert not (p / "x").exists()
    assert_error(rq(d, "PUT", f"/v1/dirs/{n}/m?mode=755"), 400, "INVALID_ARGUMENT")
    assert_error(rq(d, "PUT", f"/v1/dirs/{n}/m?parents=perhaps"), 400, "INVALID_ARGUMENT")
    assert_error(rq(d, "PUT", "/v1/dirs/../escaped"), 403, "PERMISSION_DENIED", TRAVERSAL)
    (p / "f").write_text("x")
    assert_error(rq(d, "PUT", f"/v1/dirs/{n}/f"), 409, "CONFLICT")


def test_move(d, area, tmp_path):
    p, n = area
    (p / "a").write_text("A")
    (p / "b").write_text("B")

    def mv(body):
        return rq(d, "POST", "/v1/move", body=json.dumps(body).encode(),
                  headers={"Content-Type": "application/json"})

    r = mv({"from": f"{n}/a", "to": f"{n}/new/dir/a2"})
    assert r.status == 204 and r.body == b"", r
    assert (p / "new/dir/a2").read_text() == "A" and not (p / "a").exists()
    assert_error(mv({"from": f"{n}/new/dir/a2", "to": f"{n}/b"}), 409, "CONFLICT")
    assert (p / "b").read_text() == "B"
    assert_error(mv({"from": f"{n}/new/dir/a2", "to": f"{n}/b", "overwrite": False}), 409, "CONFLICT")
    r = mv({"from": f"{n}/new/dir/a2", "to": f"{n}/b", "overwrite": True})
    assert r.status == 204, r
    assert (p / "b").read_text() == "A"
    assert_error(mv({"from": f"{n}/missing", "to": f"{n}/c"}), 404, "NOT_FOUND")
    outside = tmp_path / "outside"
    outside.mkdir()
    (p / "lout").symlink_to(outside)
    assert_error(mv({"from": f"{n}/b", "to": f"{n}/lout/stolen"}), 403, "PERMISSION_DENIED")
    assert_error(mv({"from": f"{n}/b", "to": "../../stolen"}), 403, "PERMISSION_DENIED")
    assert_error(mv({"from": "/etc/passwd", "to": f"{n}/passwd"}), 404, "NOT_FOUND")
    assert not list(outside.iterdir()) and (p / "b").exists()
    for bad in (b"", b"not json", b'{"from": "x"}', b'{"from": 1, "to": "y"}', b"[]",
                b'{"from": "a", "to": "b", "overwrite": "yes"}'):
        assert_error(rq(d, "POST", "/v1/move", body=bad), 400, "INVALID_ARGUMENT")


# ---------------------------------------------------------------------------------------------
# Health, metadata, probes, metrics


def test_health_and_probes(d):
    r = rq(d, "GET", "/v1/health")
    assert r.status == 200 and r.header("Content-Type") == "application/json", r
    j = r.json()
    assert set(j) == {"status", "uptime_seconds"} and j["status"] == "ok", j
    assert isinstance(j["uptime_seconds"], int) and j["uptime_seconds"] >= 0
    assert r.body.endswith(b"\n")
    for path in ("/healthz", "/readyz"):
        r = rq(d, "GET", path)
        assert r.status == 200 and r.body.strip() == b"ok", (path, r)
        assert r.header("Content-Type", "").startswith("text/plain"), r
        r = rq(d, "HEAD", path)
        assert r.status == 200 and r.body == b"", r
    cp = run_curl(["-f", f"{d.rest_url}/healthz"])
    assert cp.returncode == 0 and cp.stdout.strip() == b"ok", cp


def test_metadata_filters_secrets(sandboxd_env_factory):
    clear = {k: None for k in os.environ if k.startswith("SANDBOX_") or k.startswith("MYAPP_")}
    env = {**clear, "SANDBOX_ID": "sbx-123", "SANDBOX_API_TOKEN": "t0k3n",
           "SANDBOX_DB_PASSWORD": "hunter2", "OTHER": "other", "SANDBOX_keyname": "k",
           "SANDBOX_private_thing": "p", "SANDBOX_CREDENTIALS": "c", "SANDBOX_AUTH_HEADER": "a",
           "SANDBOX_TLS_CERT": "c", "SANDBOX_SECRET_X": "s", "SANDBOX_PASSWD": "p",
           "SANDBOX_BEARER": "b", "SANDBOX_REGION": "eu-west", "SANDBOX_EMPTY": "",
           "MYAPP_ZONE": "z1", "MYAPP_SECRET": "no"}
    d = sandboxd_env_factory(env=env)
    r = rq(d, "GET", "/v1/metadata")
    assert r.status == 200 and r.header("Content-Type") == "application/json", r
    assert r.json() == {"env": {"SANDBOX_ID": "sbx-123", "SANDBOX_REGION": "eu-west",
                                "SANDBOX_EMPTY": ""}}, r
    for secret in (b"t0k3n", b"hunter2"):
        assert secret not in r.body
    r = rq(d, "HEAD", "/v1/metadata")
    assert r.status == 200 and r.body == b""
    d2 = sandboxd_env_factory(["--metadata-env-prefix", "MYAPP_"], env=env)
    assert rq(d2, "GET", "/v1/metadata").json() == {"env": {"MYAPP_ZONE": "z1"}}
    d3 = sandboxd_env_factory(["--metadata-env-prefix", "NOPE_NONE_"], env=env)
    assert rq(d3, "GET", "/v1/metadata").json() == {"env": {}}


def test_metrics_count_requests(d, area):
    p, n = area

    def scrape():
        r = rq(d, "GET", "/metrics")
        assert r.status == 200, r
        assert r.header("Content-Type", "").startswith("text/plain"), r
        return r.body.decode()

    before = scrape()
    for line in before.splitlines():
        if line and not line.startswith("#"):
            assert re.match(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? [-+0-9.eEInfa]+$', line), line
    for _ in range(3):
        assert rq(d, "GET", "/healthz").status == 200
    assert rq(d, "GET", f"/v1/files/{n}/missing").status == 404
    data = os.urandom(10_000)
    assert rq(d, "PUT", f"/v1/files/{n}/m", body=data).status == 204
    assert rq(d, "GET", f"/v1/files/{n}/m").body == data
    after = scrape()
    ok = ("sandboxd_http_requests_total", {"code": "200"})
    assert metric(after, *ok) >= metric(before, *ok) + 4, "200s not counted"
    nf = ("sandboxd_http_requests_total", {"code": "404"})
    assert metric(after, *nf) >= metric(before, *nf) + 1, "404 not counted"
    nc = ("sandboxd_http_requests_total", {"code": "204"})
    assert metric(after, *nc) >= metric(before, *nc) + 1, "204 not counted"
    assert metric(after, "sandboxd_bytes_received_total") >= \
        metric(before, "sandboxd_bytes_received_total") + len(data)
    assert metric(after, "sandboxd_bytes_sent_total") >= \
        metric(before, "sandboxd_bytes_sent_total") + len(data)
    for name in ("sandboxd_processes_started_total", "sandboxd_processes_running",
                 "sandboxd_spawn_duration_seconds_count"):
        assert re.search(rf"^{name} ", after, re.M), f"{name} missing"


def test_health_503_while_draining(sandboxd_factory, leftovers):
    d = sandboxd_factory(["--termination-grace", "2s"], shutdown_timeout=5.0)
    c = d.client()
    s = c.start(["sh", "-c", "trap '' TERM; sleep 1000 & echo $$ $!; wait"], timeout=30)
    s.wait_init()
    out = s.wait_stdout(lambda o: b"\n" in o and o, what="the pids")
    leftovers.add(*[int(x) for x in out.split(b"\n")[0].split()])
    assert rq(d, "GET", "/v1/health").status == 200
    d.sigterm()
    r = wait_until(lambda: (lambda r: r if r.status == 503 else None)(rq(d, "GET", "/v1/health")),
                   2.0, 0.02, "/v1/health to answer 503")
    assert_error(r, 503, "UNAVAILABLE", "sandboxd is shutting down")
    r = rq(d, "GET", "/readyz")
    assert r.status == 503, r
    r = rq(d, "GET", "/healthz")
    assert r.status == 200, ("liveness holds while draining", r)
    assert rq(d, "GET", "/v1/health").status == 503
    assert d.wait_exit(10) == 0


# ---------------------------------------------------------------------------------------------
# Keep-alive


def test_keep_alive_http_client(d, area):
    p, n = area
    (p / "f").write_bytes(b"abc")
    c = http.client.HTTPConnection("127.0.0.1", d.rest_port, timeout=SMALL)
    sock = None
    try:
        for method, path, body, want in [
            ("GET", "/v1/health", None, 200),
            ("GET", f"/v1/files/{n}/f", None, 200),
            ("PUT", f"/v1/files/{n}/g", b"x" * 5000, 204),
            ("GET", f"/v1/files/{n}/missing", None, 404),
            ("HEAD", f"/v1/files/{n}/f", None, 200),
            ("GET", f"/v1/files/{n}", None, 200),
            ("DELETE", f"/v1/files/{n}/g", None, 204),
            ("GET", "/metrics", None, 200),
        ]:
            c.request(method, path, body=body)
            if sock is None:
                sock = c.sock
                local = sock.getsockname()
            assert c.sock is sock, f"{method} {path}: the connection was reopened"
            r = c.getresponse()
            r.read()
            assert r.status == want, (method, path, r.status)
            assert (r.getheader("Connection") or "").lower() != "close", \
                f"{method} {path} answered Connection: close"
            assert not r.will_close, f"{method} {path}: the response ends the connection"
            assert c.sock is sock and sock.getsockname() == local
    finally:
        c.close()


def test_keep_alive_curl(d, area):
    p, n = area
    (p / "f").write_bytes(b"abc")
    url = f"{d.rest_url}/v1/files/{n}/f"
    cp = run_curl(["-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null",
                   "-w", "%{http_code} %{num_connects}\n", url, f"{d.rest_url}/v1/health", url])
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.decode().split()
    assert lines == ["200", "1", "200", "0", "200", "0"], f"(code, new connections) per request: {lines}"


def test_keep_alive_after_error_with_body(d, area):
    """An upload refused early (bad mode) leaves the connection usable."""
    p, n = area
    c = http.client.HTTPConnection("127.0.0.1", d.rest_port, timeout=EARLY)
    try:
        c.request("PUT", f"/v1/files/{n}/f?mode=bad", body=b"0123456789")
        r = c.getresponse()
        r.read()
        assert r.status == 400
        c.request("GET", "/v1/health")
        r = c.getresponse()
        assert r.status == 200 and r.read()
    except (OSError, http.client.HTTPException) as e:
        pytest.fail(f"no answer to an upload refused early: {e!r}")
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------
# Range


def test_range(d, area):
    p, n = area
    data = bytes(range(256)) * 4  # 1024 bytes
    (p / "r").write_bytes(data)
    url = f"/v1/files/{n}/r"
    size = len(data)
    cases = [
        ("bytes=0-9", 0, 9),
        ("bytes=10-19", 10, 19),
        ("bytes=1000-", 1000, size - 1),
        ("bytes=-24", size - 24, size - 1),
        ("bytes=-5000", 0, size - 1),
        ("bytes=1020-5000", 1020, size - 1),
        ("bytes=0-0", 0, 0),
        ("bytes=1023-1023", 1023, 1023),
    ]
    for rng, a, b in cases:
        r = rq(d, "GET", url, headers={"Range": rng})
        assert r.status == 206, (rng, r)
        assert r.body == data[a:b + 1], rng
        assert r.header("Content-Range") == f"bytes {a}-{b}/{size}", (rng, r)
        assert r.header("Content-Length") == str(b - a + 1)
        assert r.header("Content-Type") == "application/octet-stream"
    for rng in ("bytes=1024-", "bytes=5000-6000", "bytes=-0"):
        r = rq(d, "GET", url, headers={"Range": rng})
        assert r.status == 416, (rng, r)
        assert r.header("Content-Range") == f"bytes */{size}", (rng, r)
    # Several ranges: multipart/byteranges (test_rest_whole.py checks the parts); overlapping
    # ones that ask for more than the file: the whole file, 200.
    r = rq(d, "GET", url, headers={"Range": "bytes=0-1,5-6"})
    assert r.status == 206 and r.header("Content-Type").startswith("multipart/byteranges"), r
    r = rq(d, "GET", url, headers={"Range": "bytes=0-,0-"})
    assert r.status == 200 and r.body == data, r
    # A malformed header is ignored.
    r = rq(d, "GET", url, headers={"Range": "pages=1-2"})
    assert r.status == 200 and r.body == data, r
    # With curl -r.
    status, h, body = curl_req(d, ["-r", "100-199", f"{d.rest_url}{url}"])
    assert status == 206 and body == data[100:200] and h["content-range"] == f"bytes 100-199/{size}"
    status, h, body = curl_req(d, ["-r", "-10", f"{d.rest_url}{url}"])
    assert status == 206 and body == data[-10:]


# ---------------------------------------------------------------------------------------------
# 1 GiB both ways with bounded memory


def test_1gib_upload_and_download(sandboxd_factory, tmp_path):
    d = sandboxd_factory()
    size = 1 << 30
    # The source in RAM when /dev/shm has room (less disk traffic), else in tmp.
    shm = Path("/dev/shm")
    try:
        st = os.statvfs(shm)
        roomy = st.f_bavail * st.f_frsize > 3 * size
    except OSError:
        roomy = False
    src = (shm / f"sandboxd-itest-{uuid.uuid4().hex[:8]}.bin") if roomy else tmp_path / "gib.bin"
    dst = d.root / "big" / "gib.bin"
    try:
        t0 = time.monotonic()
        want = make_file(src, size)
        t_gen = time.monotonic() - t0
        rss = RssSampler(d.proc.pid)
        rss.start()
        # Upload with curl -T (PUT), streamed from the file.
        t0 = time.monotonic()
        hdr = tmp_path / "hdr"
        cp = run_curl(["-T", src, "-D", hdr, "-o", "/dev/null", "-w", "%{http_code}",
                       f"{d.rest_url}/v1/files/big/gib.bin"], timeout=120)
        t_up = time.monotonic() - t0
        assert cp.returncode == 0 and cp.stdout == b"204", cp
        h = {}
        for ln in hdr.read_bytes().decode("latin-1").split("\r\n"):
            k, _, v = ln.partition(":")
            h[k.strip().lower()] = v.strip()  # (the last response's headers win)
        digest_headers_ok(h, want, size)
        assert dst.stat().st_size == size
        assert not temp_files(d.root)
        # Download with curl, hashed as it streams.
        t0 = time.monotonic()
        curl = subprocess.Popen(["curl", "--noproxy", "*", "-sS", "--max-time", "120",
                                 f"{d.rest_url}/v1/files/big/gib.bin"], stdout=subprocess.PIPE)
        hsh, n = hashlib.sha256(), 0
        while True:
            b = curl.stdout.read(1 << 20)
            if not b:
                break
            hsh.update(b)
            n += len(b)
        assert curl.wait(timeout=30) == 0
        t_down = time.monotonic() - t0
        assert n == size and hsh.hexdigest() == want, "curl download differs"
        # Download with http.client, streamed.
        t0 = time.monotonic()
        c = http.client.HTTPConnection("127.0.0.1", d.rest_port, timeout=60)
        c.request("GET", "/v1/files/big/gib.bin")
        r = c.getresponse()
        assert r.status == 200 and r.getheader("Content-Length") == str(size)
        hsh, n = hashlib.sha256(), 0
        while True:
            b = r.read(1 << 20)
            if not b:
                break
            hsh.update(b)
            n += len(b)
        c.close()
        t_down2 = time.monotonic() - t0
        growth = rss.stop()
        assert n == size and hsh.hexdigest() == want, "http.client download differs"
        assert sha256_file(dst) == want, "the file on disk differs"
        print(f"\n1 GiB: generate {t_gen:.1f}s, upload {t_up:.1f}s ({size / t_up / 2**20:.0f} MiB/s),"
              f" curl download {t_down:.1f}s, http.client download {t_down2:.1f}s;"
              f" daemon RSS {rss.base} KiB -> peak {rss.peak} KiB (+{growth // 1024} MiB)")
        assert growth < 64 * 1024, f"daemon RSS grew by {growth} KiB during 1 GiB transfers"
    finally:
        for f in (src, dst):
            try:
                f.unlink()
            except FileNotFoundError:
                pass


# ---------------------------------------------------------------------------------------------
# Uploads cut off by the client


def _wait_temp(p, min_size=1, timeout=5.0):
    def grown():
        for t in temp_files(p):
            try:
                if os.path.getsize(t) >= min_size:
                    return t
            except FileNotFoundError:
                pass
        return None
    return wait_until(grown, timeout, 0.01, f"a temp file of >= {min_size} bytes in {p}")


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
def test_curl_killed_mid_upload(d, area, tmp_path, existing):
    p, n = area
    src = tmp_path / "src.bin"
    make_file(src, 32 << 20, seed=7)
    if existing:
        (p / "target").write_bytes(b"old content")
    proc = subprocess.Popen(["curl", "--noproxy", "*", "-sS", "--max-time", "60", "--limit-rate",
                             "4M", "-T", str(src), f"{d.rest_url}/v1/files/{n}/target"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_temp(p, 256 * 1024)
        assert proc.poll() is None, "curl ended before it was killed"
    finally:
        proc.kill()
        proc.wait(10)
    wait_until(lambda: not temp_files(p), 5.0, 0.02, "the temp file to be removed")
    if existing:
        assert (p / "target").read_bytes() == b"old content"
    else:
        assert not os.path.lexists(p / "target")
    assert rq(d, "GET", "/healthz").status == 200


@pytest.mark.parametrize("how", ["content-length", "chunked"])
@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
def test_socket_closed_mid_upload(d, area, how, existing):
    p, n = area
    if existing:
        (p / "target").write_bytes(b"old content")
    s = socket.create_connection(("127.0.0.1", d.rest_port), timeout=SMALL)
    try:
        part = os.urandom(200_000)
        if how == "content-length":
            s.sendall(f"PUT /v1/files/{n}/target HTTP/1.1\r\nHost: x\r\n"
                      f"Content-Length: {1 << 20}\r\n\r\n".encode() + part)
        else:
            s.sendall(f"PUT /v1/files/{n}/target HTTP/1.1\r\nHost: x\r\n"
                      f"Transfer-Encoding: chunked\r\n\r\n{len(part):x}\r\n".encode() + part +
                      b"\r\n")
        _wait_temp(p, 100_000)
    finally:
        s.close()
    wait_until(lambda: not temp_files(p), 5.0, 0.02, "the temp file to be removed")
    if existing:
        assert (p / "target").read_bytes() == b"old content"
    else:
        assert not os.path.lexists(p / "target")


def test_uploads_cut_off_right_after_sending_leave_nothing(d, area):
    """Twenty clients each send the headers and 1 MiB of a 4 MiB body and close at once (the
    data still in flight): every upload is abandoned promptly, not at the idle timeout."""
    p, n = area
    part = os.urandom(1 << 20)
    for i in range(20):
        s = socket.create_connection(("127.0.0.1", d.rest_port), timeout=SMALL)
        try:
            s.sendall(f"PUT /v1/files/{n}/t{i} HTTP/1.1\r\nHost: x\r\n"
                      f"Content-Length: {4 << 20}\r\n\r\n".encode() + part)
        finally:
            s.close()
    deadline = time.monotonic() + 3.0
    while temp_files(p) and time.monotonic() < deadline:
        time.sleep(0.02)
    left = temp_files(p)
    assert not left, (f"{len(left)} of 20 cut-off uploads still hold their temp file 3 s after "
                      f"the client closed: {[(os.path.basename(t), os.path.getsize(t)) for t in left]}")
    assert not any(os.path.lexists(p / f"t{i}") for i in range(20))


# ---------------------------------------------------------------------------------------------
# ENOSPC


@pytest.fixture
def small_tmpfs(tmp_path):
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(mnt)],
                       capture_output=True, timeout=10)
    if r.returncode != 0:
        pytest.skip("cannot mount a 1 MiB tmpfs (needs root with CAP_SYS_ADMIN): "
                    + r.stderr.decode(errors="replace").strip())
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=10)


def test_enospc_gives_507_and_leaves_nothing(small_tmpfs, sandboxd_factory, tmp_path):
    d = sandboxd_factory(root=small_tmpfs)
    keep = os.urandom(100_000)
    r = rq(d, "PUT", "/v1/files/keep", body=keep)
    assert r.status == 204, r
    big = tmp_path / "2mib"
    make_file(big, 2 << 20, seed=3)
    # http.client, Content-Length, a new file.
    r = try_rq(d, "PUT", "/v1/files/big", body=big.read_bytes(), timeout=SMALL)
    assert not os.path.lexists(small_tmpfs / "big"), "a half-written file was left"
    no_temp_left(small_tmpfs)
    assert_error(answered(r, "PUT of 2 MiB on a 1 MiB tmpfs"), 507, "INSUFFICIENT_STORAGE")
    # curl, replacing an existing file.
    cp = run_curl(["-T", big, "-D", "-", "-o", "-", f"{d.rest_url}/v1/files/keep"])
    no_temp_left(small_tmpfs)
    assert (small_tmpfs / "keep").read_bytes() == keep, "the old file was damaged"
    assert re.search(rb"HTTP/1.1 507", cp.stdout), (cp.returncode, cp.stdout, cp.stderr)
    # Multipart.
    cp = run_curl(["-X", "PUT", "-F", f"file=@{big}", "-D", "-", "-o", "-",
                   f"{d.rest_url}/v1/files/mp"])
    assert not os.path.lexists(small_tmpfs / "mp")
    no_temp_left(small_tmpfs)
    assert re.search(rb"HTTP/1.1 507", cp.stdout), (cp.returncode, cp.stdout, cp.stderr)
    # The space is back: a small upload still works.
    r = rq(d, "PUT", "/v1/files/small", body=b"fits")
    assert r.status == 204, r


# ---------------------------------------------------------------------------------------------
# Traversal


@pytest.fixture
def outside(tmp_path):
    o = tmp_path / "outside"
    o.mkdir()
    (o / "victim").write_text("outside original")
    return o


def _outside_untouched(o):
    assert sorted(x.name for x in o.iterdir()) == ["victim"], list(o.iterdir())
    assert (o / "victim").read_text() == "outside original"


HOST_PASSWD = Path("/etc/passwd").read_bytes()


@pytest.mark.parametrize("path", [
    "/v1/files/../../etc/passwd",
    "/v1/files/../../../../../../etc/passwd",
    "/v1/files/a/../../../etc/passwd",
    "/v1/files/%2e%2e/%2e%2e/etc/passwd",
    "/v1/files/%2E%2E/%2E%2E/%2E%2E/etc/passwd",
    "/v1/files/..%2F..%2F..%2Fetc%2Fpasswd",
    "/v1/files/..%2f..%2f..%2f..%2fetc/passwd",
    "/v1/files/..",
    "/v1/files/%2e%2e",
])
def test_traversal_dotdot_refused(d, path):
    for method in ("GET", "HEAD"):
        r = rq(d, method, path)
        assert r.status == 403, (method, path, r)
        assert HOST_PASSWD not in r.body
        if method == "GET":
            assert_error(r, 403, "PERMISSION_DENIED", TRAVERSAL)
    assert_error(rq(d, "GET", path.replace("/v1/files/", "/v1/stat/")), 403, "PERMISSION_DENIED")


@pytest.mark.parametrize("path", ["/v1/files//etc/passwd", "/v1/files/%2Fetc%2Fpasswd",
                                  "/v1/files///etc/passwd"])
def test_absolute_path_is_joined_under_root(d, path):
    r = rq(d, "GET", path)
    assert HOST_PASSWD not in r.body
    assert_error(r, 404, "NOT_FOUND", NOT_FOUND)


def test_absolute_path_reads_inside_root(d, area):
    p, n = area
    (p / "f").write_text("inside")
    r = rq(d, "GET", f"/v1/files//{n}/f")
    assert r.status == 200 and r.body == b"inside", r
    # The root's own absolute path is accepted too (like the reference).
    r = rq(d, "GET", f"/v1/files/{d.root}/{n}/f")
    assert r.status == 200 and r.body == b"inside", r


def test_symlinks_out_of_root_refused(d, area, outside):
    p, n = area
    (p / "etc").symlink_to("/etc")  # in the middle
    (p / "pw").symlink_to("/etc/passwd")  # at the end
    (p / "up").symlink_to("../../../../../../../..")  # relative, escaping
    (p / "out").symlink_to(outside)
    (p / "vic").symlink_to(outside / "victim")
    (p / "chain1").symlink_to("chain2")
    (p / "chain2").symlink_to("/etc")
    reads = [f"{n}/etc/passwd", f"{n}/etc", f"{n}/pw", f"{n}/up/etc/passwd", f"{n}/up",
             f"{n}/chain1/passwd", f"{n}/etc?archive=tar", f"{n}/out/victim", f"{n}/vic"]
    for path in reads:
        for method in ("GET", "HEAD"):
            r = rq(d, method, f"/v1/files/{path}")
            assert HOST_PASSWD not in r.body and b"outside original" not in r.body, path
            assert r.status == 403, (method, path, r)
        assert_error(rq(d, "GET", f"/v1/files/{path}"), 403, "PERMISSION_DENIED", TRAVERSAL)
    for path in (f"{n}/etc/passwd", f"{n}/up/etc", f"{n}/out/victim"):
        assert_error(rq(d, "GET", f"/v1/stat/{path}"), 403, "PERMISSION_DENIED")
    # Writes and deletes through them: refused, nothing changes outside.
    for path in (f"{n}/out/new", f"{n}/out/victim", f"{n}/vic", f"{n}/out/sub/new"):
        r = try_rq(d, "PUT", f"/v1/files/{path}", body=b"", headers={"Content-Length": "0"})
        _outside_untouched(outside)
        assert_error(answered(r, f"PUT {path}"), 403, "PERMISSION_DENIED", TRAVERSAL)
    for path in (f"{n}/out/victim", f"{n}/out/victim?recursive=true"):
        assert_error(rq(d, "DELETE", f"/v1/files/{path}"), 403, "PERMISSION_DENIED")
    assert_error(rq(d, "PUT", f"/v1/dirs/{n}/out/newdir"), 403, "PERMISSION_DENIED")
    assert_error(rq(d, "PUT", f"/v1/dirs/{n}/out/a/b?parents=true"), 403, "PERMISSION_DENIED")
    _outside_untouched(outside)


def test_escaping_link_is_no_oracle_of_host_paths(d, area, tmp_path):
    """Through a link that leaves the root, every path is refused alike: whether the host path
    exists, is a file or a directory must not show in the answer."""
    p, n = area
    host = tmp_path / "host"
    (host / "adir").mkdir(parents=True)
    (host / "afile").write_text("host file")
    (p / "hl").symlink_to(host)  # absolute, outside
    (p / "hf").symlink_to(host / "afile")
    (p / "hn").symlink_to(tmp_path / "no-such-thing")
    answers = {}
    for path in ("hl/adir", "hl/afile", "hl/missing", "hl/adir/missing", "hl/afile/x",
                 "hf", "hf/x", "hn", "hn/x"):
        for method, prefix in (("GET", "/v1/files/"), ("GET", "/v1/stat/"), ("DELETE", "/v1/files/")):
            if method == "DELETE" and path in ("hf", "hn"):
                continue  # would remove the link itself (it is inside), and the paths below it
            r = rq(d, method, f"{prefix}{n}/{path}")
            code = r.json().get("code") if r.header("Content-Type") == "application/json" else None
            answers[f"{method} {prefix}{path}"] = (r.status, code)
    odd = {k: v for k, v in answers.items() if v != (403, "PERMISSION_DENIED")}
    # A link itself is inside the root: stat and delete of the bare link are fine.
    for k in ("GET /v1/stat/hf", "GET /v1/stat/hn", "DELETE /v1/files/hf", "DELETE /v1/files/hn"):
        odd.pop(k, None)
    assert not odd, f"answers that tell about host paths (expected 403 everywhere): {odd}"
    assert (host / "afile").read_text() == "host file" and (host / "adir").is_dir()


def test_symlink_swapped_during_requests(d, area, outside):
    """A thread swaps a link between a directory inside and /etc (and one between inside and an
    outside directory) while requests run: no answer may ever carry host content, nothing may
    be written outside."""
    p, n = area
    inside = p / "inside"
    inside.mkdir()
    (inside / "passwd").write_bytes(b"inside passwd\n")
    (inside / "victim").write_bytes(b"inside victim\n")
    sw, sw2 = p / "sw", p / "sw2"
    sw.symlink_to("inside")
    sw2.symlink_to("inside")
    stop = threading.Event()
    swaps = [0]

    def swapper():
        i = 0
        while not stop.is_set():
            for link, target in ((sw, "/etc"), (sw2, str(outside)), (sw, "inside"), (sw2, "inside")):
                tmp = p / f".swap{i}"
                i += 1
                os.symlink(target, tmp)
                os.replace(tmp, link)
            swaps[0] += 1

    seen = {"200": 0, "204": 0, "403": 0, "other": [], "noanswer": 0}
    bad = []

    def reader(kind):
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            if kind == "file":
                r = try_rq(d, "GET", f"/v1/files/{n}/sw/passwd", timeout=2)
            elif kind == "list":
                r = try_rq(d, "GET", f"/v1/files/{n}/sw", timeout=2)
            elif kind == "tar":
                r = try_rq(d, "GET", f"/v1/files/{n}/sw?archive=tar", timeout=2)
            elif kind == "stat":
                r = try_rq(d, "GET", f"/v1/stat/{n}/sw/passwd", timeout=2)
            else:
                r = try_rq(d, "PUT", f"/v1/files/{n}/sw2/victim", body=b"pwned!\n", timeout=1)
            if not isinstance(r, HttpResponse):
                seen["noanswer"] += 1
                continue
            key = str(r.status) if r.status in (200, 204, 403) else "other"
            if key == "other":
                seen["other"].append((kind, r.status, r.body[:100]))
            else:
                seen[key] += 1
            if HOST_PASSWD in r.body or b"root:x:0:0" in r.body:
                bad.append((kind, r))
            if kind == "list" and r.status == 200:
                # (.sandboxd-tmp-* are the concurrent uploads through sw2 into "inside")
                names = {e["name"] for e in r.json()["entries"]
                         if not e["name"].startswith(".sandboxd-tmp-")}
                if not names <= {"passwd", "victim"}:
                    bad.append((kind, sorted(names)[:10]))
            if kind == "tar" and r.status == 200:
                with tarfile.open(fileobj=io.BytesIO(r.body)) as t:
                    names = {m.name[2:] if m.name.startswith("./") else m.name
                             for m in t.getmembers()} - {"", "."}
                names = {x for x in names if not x.startswith(".sandboxd-tmp-")}
                if not names <= {"passwd", "victim"}:
                    bad.append((kind, sorted(names)[:10]))
            if kind == "stat" and r.status == 200 and r.json()["size"] != len(b"inside passwd\n"):
                bad.append((kind, r))

    t = threading.Thread(target=swapper, daemon=True)
    t.start()
    workers = [threading.Thread(target=reader, args=(k,), daemon=True)
               for k in ("file", "list", "tar", "stat", "put", "put")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(10)
    stop.set()
    t.join(5)
    print(f"\nswap race: {swaps[0]} swap rounds, answers {seen}")
    assert not bad, f"host content leaked through a swapped link: {bad[:3]}"
    _outside_untouched(outside)
    assert seen["200"] > 0 and seen["403"] > 0, f"the race was not exercised: {seen}"
    assert not seen["other"], f"unexpected statuses: {seen['other'][:5]}"
    assert seen["noanswer"] == 0, (f"{seen['noanswer']} requests got no answer (refused PUTs with a body; "
                                    "see test_put_early_error_with_a_body_is_answered)")


# ---------------------------------------------------------------------------------------------
# Tar both ways


def _build_tree(base):
    """A tree with modes, symlinks, empty dirs, odd names and fixed mtimes."""
    (base / "d1" / "d2").mkdir(parents=True)
    (base / "empty_dir").mkdir()
    (base / "d1" / "f1.txt").write_bytes(b"first file\n")
    (base / "d1" / "run.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    (base / "d1" / "d2" / "big.bin").write_bytes(os.urandom(3 << 20))
    (base / "empty_file").write_bytes(b"")
    (base / "sp ace ü.txt").write_bytes(b"unicode\n")
    long_dir = base / ("L" * 60) / ("M" * 60)
    long_dir.mkdir(parents=True)
    (long_dir / ("N" * 90 + ".txt")).write_bytes(b"long name\n")
    (base / "link_rel").symlink_to("d1/f1.txt")
    (base / "link_dir").symlink_to("d1/d2")
    (base / "link_dangling").symlink_to("no/such/thing")
    os.chmod(base / "d1" / "run.sh", 0o755)
    os.chmod(base / "d1" / "f1.txt", 0o640)
    os.chmod(base / "empty_file", 0o600)
    os.chmod(base / "empty_dir", 0o700)
    os.chmod(base / "d1" / "d2", 0o750)
    t = 1_500_000_000
    for i, q in enumerate(sorted(base.rglob("*"), key=lambda x: -len(x.parts))):
        os.utime(q, (t + i * 61, t + i * 61), follow_symlinks=False)


def _describe(base):
    """{relative path: (type, mode, mtime, content-or-target)} of a tree on disk."""
    out = {}
    for q in sorted(base.rglob("*")):
        rel = str(q.relative_to(base))
        st = q.lstat()
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", None, int(st.st_mtime), os.readlink(q))
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ("dir", stat.S_IMODE(st.st_mode), int(st.st_mtime), None)
        else:
            out[rel] = ("file", stat.S_IMODE(st.st_mode), int(st.st_mtime),
                        hashlib.sha256(q.read_bytes()).hexdigest())
    return out


def _describe_tar(data):
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as t:
        for m in t.getmembers():
            name = m.name[2:] if m.name.startswith("./") else m.name
            name = name.rstrip("/")
            if name in ("", "."):
                continue
            if m.issym():
                out[name] = ("link", None, None, m.linkname)
            elif m.isdir():
                out[name] = ("dir", m.mode & 0o7777, m.mtime, None)
            elif m.isfile():
                out[name] = ("file", m.mode & 0o7777, m.mtime,
                             hashlib.sha256(t.extractfile(m).read()).hexdigest())
            else:
                out[name] = ("other", m.type, None, None)
    return out


def _no_link_mtime(desc):
    return {k: (v if v[0] != "link" else (v[0], None, None, v[3])) for k, v in desc.items()}


def test_tar_round_trip(d, area, tmp_path):
    p, n = area
    src = p / "src"
    src.mkdir()
    _build_tree(src)
    want = _describe(src)
    # GET as tar: application/x-tar, every entry with its mode, mtime, target, content.
    r = rq(d, "GET", f"/v1/files/{n}/src?archive=tar", timeout=30)
    assert r.status == 200, r
    assert r.header("Content-Type") == "application/x-tar"
    got = _describe_tar(r.body)
    assert _no_link_mtime(got) == _no_link_mtime(want)
    # GNU tar reads it too.
    ext = tmp_path / "gnu-extract"
    ext.mkdir()
    cp = subprocess.run(["tar", "-xpf", "-", "-C", str(ext)], input=r.body, capture_output=True,
                        timeout=30)
    assert cp.returncode == 0, cp.stderr
    assert _no_link_mtime(_describe(ext)) == _no_link_mtime(want)
    # PUT it back elsewhere: the same tree, modes and mtimes (dirs included) restored.
    r2 = rq(d, "PUT", f"/v1/files/{n}/dst/deeper?archive=tar", body=r.body,
            headers={"Content-Type": "application/x-tar"}, timeout=30)
    assert r2.status == 200 and r2.header("Content-Type") == "application/json", r2
    assert r2.json() == {"entries": len([m for m in got])}, (r2.json(), len(got))
    assert _no_link_mtime(_describe(p / "dst" / "deeper")) == _no_link_mtime(want)
    # A tar made by GNU tar (with ./ prefixes and a root entry), uploaded with curl.
    gnu = tmp_path / "gnu.tar"
    subprocess.run(["tar", "-C", str(src), "-cf", str(gnu), "."], check=True, timeout=30)
    status, h, body = curl_req(d, ["-X", "PUT", "--data-binary", f"@{gnu}",
                                   f"{d.rest_url}/v1/files/{n}/dst2?archive=tar"], timeout=30)
    assert status == 200, (status, body)
    assert _no_link_mtime(_describe(p / "dst2")) == _no_link_mtime(want)
    # A tar made by Python's tarfile in pax format.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        t.add(str(src), arcname=".")
    r3 = rq(d, "PUT", f"/v1/files/{n}/dst3?archive=tar", body=buf.getvalue(), timeout=30)
    assert r3.status == 200, r3
    assert _no_link_mtime(_describe(p / "dst3")) == _no_link_mtime(want)
    assert not temp_files(p)
    # An empty directory as tar, and tar of a missing dir.
    (p / "nothing").mkdir()
    r = rq(d, "GET", f"/v1/files/{n}/nothing?archive=tar")
    assert r.status == 200 and _describe_tar(r.body) == {}, r
    assert_error(rq(d, "GET", f"/v1/files/{n}/missing?archive=tar"), 404, "NOT_FOUND")


def _tar(*members):
    """A tar of (name, kind, extra) members: kind file (extra = bytes), dir, sym/hard (extra =
    target)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, kind, extra in members:
            ti = tarfile.TarInfo(name)
            ti.mtime = 1_600_000_000
            if kind == "file":
                ti.size = len(extra)
                t.addfile(ti, io.BytesIO(extra))
                continue
            if kind == "dir":
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            elif kind == "sym":
                ti.type, ti.linkname = tarfile.SYMTYPE, extra
            elif kind == "hard":
                ti.type, ti.linkname = tarfile.LNKTYPE, extra
            t.addfile(ti)
    return buf.getvalue()


EVIL_TARS = {
    "dotdot": lambda o, m: _tar(("ok.txt", "file", b"ok"), (f"../../{m}", "file", b"evil")),
    "dotdot-inside-target": lambda o, m: _tar((f"../{m}", "file", b"evil")),
    "dotdot-middle": lambda o, m: _tar((f"a/b/../../../../{m}", "file", b"evil")),
    "dotdot-dir": lambda o, m: _tar((f"../../{m}/", "dir", None)),
    "symlink-then-write": lambda o, m: _tar(("lnk", "sym", str(o)), (f"lnk/{m}", "file", b"evil")),
    "relative-symlink-then-write": lambda o, m: _tar(
        ("lnk", "sym", "../../../../../../../../../../.." + str(o)), (f"lnk/{m}", "file", b"evil")),
    "hardlink-outside": lambda o, m: _tar((m, "hard", str(o / "victim"))),
    "hardlink-dotdot": lambda o, m: _tar((m, "hard", "../../../../../../../../../.." + str(o / "victim"))),
}


@pytest.mark.parametrize("case", list(EVIL_TARS))
def test_tar_escaping_entries_refused(d, area, outside, case):
    p, n = area
    marker = "evil-" + uuid.uuid4().hex[:8]
    data = EVIL_TARS[case](outside, marker)
    r = try_rq(d, "PUT", f"/v1/files/{n}/target?archive=tar", body=data,
               headers={"Content-Type": "application/x-tar"})
    # Nothing outside the target: not in the area, not at the root, not outside the root.
    _outside_untouched(outside)
    assert (outside / "victim").stat().st_nlink == 1, "a hard link to an outside file was made"
    for base in (d.root, d.root.parent):
        found = [str(x) for x in base.rglob(marker + "*")] if base == d.root else \
            [str(x) for x in base.glob(marker + "*")]
        found = [f for f in found if not f.startswith(str(p / "target") + "/")]
        assert not found, f"{case}: created outside the target: {found}"
    assert_error(answered(r, f"PUT of an escaping tar ({case})"), 403, "PERMISSION_DENIED")


def test_tar_garbage_refused(d, area):
    p, n = area
    r = try_rq(d, "PUT", f"/v1/files/{n}/g?archive=tar", body=b"this is not a tar" * 100)
    r = answered(r, "PUT of a non-tar body with archive=tar")
    assert r.status == 400, r
    assert_error(r, 400, "INVALID_ARGUMENT")


def test_tar_head_keeps_the_connection_usable(d, area):
    """HEAD of a directory as tar: headers only, and nothing else before the next answer on the
    connection (libmicrohttpd 0.9.75 sometimes sent a chunked body's last chunk after a HEAD
    answer, about every other time here: 20 rounds)."""
    import socket
    p, n = area
    (p / "th").mkdir()
    (p / "th" / "f").write_bytes(b"x" * 10)
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", d.rest_port), timeout=10) as s:
            s.sendall(f"HEAD /v1/files/{n}/th?archive=tar HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(65536)
                assert chunk, data
                data += chunk
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            while chunk:
                chunk = s.recv(65536)
                data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ") and b"application/x-tar" in head, head
        assert rest.startswith(b"HTTP/1.1 200 ") and rest.endswith(b"ok\n"), rest[:200]
