"""Differential tests of the REST API: the same HTTP request to the reference Go daemon and to
ours, status codes, headers that matter and JSON bodies compared (messages too, where ours are
meant to match word for word).

Deliberate differences, not compared here (test_rest.py checks our side):
- DELETE of a symlink removes the link itself; the reference acts on the link's target.
- Our 204 to a PUT carries X-Sandboxd-Size, X-Sandboxd-Sha256 and Repr-Digest.
- Several ranges: both send multipart/byteranges, each with a boundary of its own (compared by
  their parts in test_multiple_ranges).
- A raw `..` or `//` path: the reference's mux answers 307 to a cleaned path; we answer 403
  (`..`) or join the path under the root (`//`).
- A malformed Range header (`bytes=x-y`): we ignore it (200, as RFC 9110 allows); the reference
  answers 416.
- Unknown routes and 405: the reference answers text/plain, we answer JSON errors (the Allow
  header is compared).
"""

import json
import os
import uuid

import pytest

from conftest import HttpResponse, byteranges, http_request, run_curl

T = 5.0  # seconds: bound of each request
MTIME = 1_650_000_000


def _prepare(root):
    (root / "dir1" / "sub").mkdir(parents=True, exist_ok=True)
    (root / "emptydir").mkdir(exist_ok=True)
    (root / "dir1" / "a.txt").write_bytes(b"hello world")
    (root / "dir1" / "b.bin").write_bytes(bytes(range(256)) * 8)
    (root / "dir1" / ".hidden").write_bytes(b"h")
    (root / "afile").write_bytes(b"plain file\n")
    (root / "noexec").write_bytes(b"#!/bin/sh\n")
    os.chmod(root / "noexec", 0o600)
    os.chmod(root / "dir1" / "sub", 0o750)
    for name, target in (("link_in", "dir1"), ("link_out", "/etc"), ("link_file", "afile"),
                         ("dangling", "nowhere"), ("link_pw", "/etc/passwd")):
        if not os.path.lexists(root / name):
            (root / name).symlink_to(target)
    for q in ("dir1/a.txt", "dir1/b.bin", "dir1/.hidden", "afile", "noexec", "dir1/sub",
              "emptydir"):
        os.utime(root / q, (MTIME, MTIME))


@pytest.fixture(scope="module")
def pair(sandboxd, reference):
    _prepare(sandboxd.root)
    _prepare(reference.root)
    yield reference, sandboxd
    assert sandboxd.alive(), "sandboxd died"
    assert reference.alive(), "the reference died"


def _req(daemon, method, path, body=None, headers=None):
    try:
        return http_request(daemon.rest_port, method, path, body, headers,
                            2.0 if body else T)
    except OSError as e:
        return e


def both(pair, method, path, body=None, headers=None):
    ref, ours = pair
    a = _req(ref, method, path, body, headers)
    b = _req(ours, method, path, body, headers)
    assert isinstance(a, HttpResponse), f"the reference did not answer {method} {path}: {a!r}"
    assert isinstance(b, HttpResponse), f"sandboxd did not answer {method} {path}: {b!r}"
    return a, b


def _strip_times(j):
    if isinstance(j, dict):
        return {k: _strip_times(v) for k, v in j.items() if k != "modified_at"}
    if isinstance(j, list):
        return [_strip_times(x) for x in j]
    return j


def same(pair, method, path, body=None, headers=None, message=True, hdrs=("Content-Type",),
         body_equal=None):
    """Sends the request to both; compares status, the named headers and the body: JSON
    (modulo modified_at; error messages only when message is true) or raw bytes."""
    a, b = both(pair, method, path, body, headers)
    info = f"\n  reference: {a!r}\n  ours:      {b!r}"
    assert a.status == b.status, f"{method} {path}: status differs" + info
    for h in hdrs:
        assert a.header(h) == b.header(h), f"{method} {path}: header {h} differs" + info
    ct = a.header("Content-Type") or ""
    if ct.startswith("application/json") and a.body:
        ja, jb = json.loads(a.body), json.loads(b.body)
        if not message and "message" in ja:
            ja, jb = dict(ja, message=None), dict(jb, message=None)
        assert _strip_times(ja) == _strip_times(jb), f"{method} {path}: JSON differs" + info
        assert b.body.endswith(b"\n")
    elif body_equal is not False:
        assert a.body == b.body, f"{method} {path}: body differs" + info
    return a, b


# ---------------------------------------------------------------------------------------------
# GET and HEAD


@pytest.mark.parametrize("path", ["dir1/a.txt", "dir1/b.bin", "afile", "link_file",
                                  "link_in/a.txt", "dir1/.hidden"])
def test_get_file(pair, path):
    same(pair, "GET", f"/v1/files/{path}",
         hdrs=("Content-Type", "Content-Length", "Accept-Ranges", "Last-Modified"))


@pytest.mark.parametrize("path", ["dir1", "dir1/", "emptydir", "link_in", "dir1/sub", ""])
def test_get_directory_listing(pair, path):
    a, b = same(pair, "GET", f"/v1/files/{path}", hdrs=("Content-Type",))
    assert a.status == 200
    if path != "":  # (the root's own entries' times depend on what ran before)
        ta = [(e["name"], e["modified_at"]) for e in a.json()["entries"]]
        tb = [(e["name"], e["modified_at"]) for e in b.json()["entries"]]
        assert ta == tb, f"modified_at differs: {ta} {tb}"


def test_listing_mode_of_special_bits(pair):
    """`mode` is the permission bits only (Go's Mode().Perm()): setuid, setgid and sticky bits
    are not shown."""
    for d in pair:
        sp = d.root / "special"
        sp.mkdir(exist_ok=True)
        for name, mode in (("suid", 0o4755), ("sgid", 0o2750), ("sticky", 0o1777)):
            f = sp / name
            if name == "sticky":
                f.mkdir(exist_ok=True)
            else:
                f.write_text("x")
            os.chmod(f, mode)
    a, b = same(pair, "GET", "/v1/files/special")
    assert a.status == 200


@pytest.mark.parametrize("path", ["dir1/a.txt", "missing", "dir1", "link_out/passwd"])
def test_head(pair, path):
    a, b = same(pair, "HEAD", f"/v1/files/{path}", hdrs=("Content-Type",))
    assert a.body == b.body == b""
    if a.status == 200 and path != "dir1":
        assert a.header("Content-Length") == b.header("Content-Length")


@pytest.mark.parametrize("rng", ["bytes=0-4", "bytes=6-", "bytes=-3", "bytes=2-2",
                                 "bytes=0-100000", "bytes=-100000", "bytes=11-", "bytes=500-600"])
def test_range(pair, rng):
    a, b = same(pair, "GET", "/v1/files/dir1/a.txt", headers={"Range": rng},
                hdrs=("Content-Range",), body_equal=False)
    if a.status in (200, 206):
        assert a.body == b.body
        assert a.header("Content-Type") == b.header("Content-Type")


@pytest.mark.parametrize("rng", ["bytes=0-1,5-6", "bytes=8-,0-0", "bytes=0-1,-3",
                                 "bytes=0-1,500-600", "bytes=500-,600-", "bytes=0-,0-"])
def test_multiple_ranges(pair, rng):
    a, b = both(pair, "GET", "/v1/files/dir1/a.txt", headers={"Range": rng})
    info = f"\n  reference: {a!r}\n  ours:      {b!r}"
    assert a.status == b.status, info
    if (a.header("Content-Type") or "").startswith("multipart/byteranges"):
        assert byteranges(a) == byteranges(b), info
    elif a.status in (200, 206):
        assert a.body == b.body and a.header("Content-Range") == b.header("Content-Range"), info
    else:
        assert a.header("Content-Range") == b.header("Content-Range"), info


@pytest.mark.parametrize("hdr", ["If-Modified-Since", "If-Range"])
def test_conditional_on_the_date(pair, hdr):
    for d in pair:
        os.utime(d.root / "dir1" / "a.txt", (MTIME, MTIME))
    lm = both(pair, "GET", "/v1/files/dir1/a.txt")[0].header("Last-Modified")
    headers = {hdr: lm, "Range": "bytes=0-1"} if hdr == "If-Range" else {hdr: lm}
    a, b = same(pair, "GET", "/v1/files/dir1/a.txt", headers=headers, hdrs=("Content-Range",))
    assert a.status == (206 if hdr == "If-Range" else 304)


@pytest.mark.parametrize("path", ["missing", "missing/deeper", "dir1/missing.txt", "dangling"])
def test_not_found(pair, path):
    a, b = same(pair, "GET", f"/v1/files/{path}")
    assert a.status == 404


@pytest.mark.parametrize("path", ["%2e%2e/%2e%2e/etc/passwd", "..%2F..%2Fetc%2Fpasswd",
                                  "dir1/%2e%2e/%2e%2e/%2e%2e/etc/passwd", "link_out/passwd",
                                  "link_out", "link_pw", "link_in/%2e%2e/%2e%2e/etc"])
def test_traversal_refused(pair, path):
    a, b = same(pair, "GET", f"/v1/files/{path}")
    assert a.status == 403


@pytest.mark.parametrize("path", ["%2e%2e/%2e%2e/tmp/x", "..%2F..%2Fetc%2Fpasswd", "link_out/x",
                                  "link_out/passwd", "link_in/%2e%2e/%2e%2e/etc/x"])
def test_traversal_refused_delete_and_put(pair, path):
    a, b = same(pair, "DELETE", f"/v1/files/{path}")
    assert a.status == 403
    a, b = same(pair, "PUT", f"/v1/files/{path}", body=b"", headers={"Content-Length": "0"})
    assert a.status == 403


# ---------------------------------------------------------------------------------------------
# PUT


def _uniq():
    return "p-" + uuid.uuid4().hex[:8]


def test_put_raw(pair):
    name = _uniq()
    data = os.urandom(100_000)
    a, b = same(pair, "PUT", f"/v1/files/{name}/deep/f.bin", body=data)
    assert a.status == 204 and a.body == b.body == b""
    for d in pair:
        assert (d.root / name / "deep" / "f.bin").read_bytes() == data
        assert oct((d.root / name / "deep" / "f.bin").stat().st_mode & 0o7777) == "0o644"
        assert oct((d.root / name / "deep").stat().st_mode & 0o7777) == "0o755"


@pytest.mark.parametrize("mode", ["0755", "0600", "0000", "0777"])
def test_put_mode(pair, mode):
    name = _uniq()
    a, b = same(pair, "PUT", f"/v1/files/{name}?mode={mode}", body=b"x")
    assert a.status == 204
    modes = {d.name: (d.root / name).stat().st_mode & 0o7777 for d in pair}
    assert len(set(modes.values())) == 1, modes


@pytest.mark.parametrize("mode", ["755", "0855", "rwx", "07777", ""])
def test_put_bad_mode(pair, mode):
    name = _uniq()
    same(pair, "PUT", f"/v1/files/{name}?mode={mode}", body=b"",
         headers={"Content-Length": "0"})
    for d in pair:
        assert (d.root / name).exists() == (mode == "")


@pytest.mark.parametrize("case", ["bad-mode", "directory-target", "escaping-link"])
def test_put_refused_with_a_body(pair, case):
    """What clients really send: a refused PUT still carries its body (curl --data-binary)."""
    path = {"bad-mode": f"{_uniq()}?mode=755", "directory-target": "dir1/sub",
            "escaping-link": "link_out/x"}[case]
    a, b = same(pair, "PUT", f"/v1/files/{path}", body=b"0123456789")
    assert a.status in (400, 403)


def test_put_directory_target(pair):
    a, b = same(pair, "PUT", "/v1/files/dir1/sub", body=b"", headers={"Content-Length": "0"})
    assert a.status == 400


def test_put_trailing_slash_writes_a_file(pair):
    name = _uniq()
    a, b = same(pair, "PUT", f"/v1/files/{name}/", body=b"slash")
    for d in pair:
        assert (d.root / name).read_bytes() == b"slash"


def test_put_through_inside_link(pair):
    name = _uniq()
    a, b = same(pair, "PUT", f"/v1/files/link_in/{name}", body=b"via link")
    for d in pair:
        assert (d.root / "dir1" / name).read_bytes() == b"via link"


def _curl_put(d, args, path):
    cp = run_curl(["-X", "PUT", "-o", "-", "-w", "\n%{http_code} %{content_type}", *args,
                   f"http://127.0.0.1:{d.rest_port}/v1/files/{path}"])
    assert cp.returncode == 0, cp.stderr
    body, _, tail = cp.stdout.rpartition(b"\n")
    code, _, ctype = tail.decode().partition(" ")
    return int(code), ctype, body


@pytest.mark.parametrize("case", ["file-part", "file-part-among-others", "missing-file-part",
                                  "file-part-mode"])
def test_put_multipart(pair, tmp_path, case):
    name = _uniq()
    src = tmp_path / "part.bin"
    src.write_bytes(os.urandom(70_000))
    args, query = {
        "file-part": (["-F", f"file=@{src}"], ""),
        "file-part-among-others": (["-F", "a=1", "-F", f"file=@{src}", "-F", "b=2"], ""),
        "missing-file-part": (["-F", "other=@" + str(src)], ""),
        "file-part-mode": (["-F", f"file=@{src}"], "?mode=0700"),
    }[case]
    answers = [_curl_put(d, args, name + query) for d in pair]
    assert answers[0][0] == answers[1][0], answers
    assert answers[0][1] == answers[1][1], answers
    if answers[0][0] != 204:
        assert json.loads(answers[0][2]) == json.loads(answers[1][2]), answers
    for d in pair:
        f = d.root / name
        assert (f.read_bytes() == src.read_bytes()) if answers[0][0] == 204 else not f.exists()


def test_put_multipart_without_boundary(pair):
    same(pair, "PUT", f"/v1/files/{_uniq()}", body=b"",
         headers={"Content-Type": "multipart/form-data", "Content-Length": "0"})


# ---------------------------------------------------------------------------------------------
# DELETE


@pytest.fixture
def tree(pair):
    """A fresh identical tree in both roots: a/b/f, file, empty/."""
    name = _uniq()
    for d in pair:
        (d.root / name / "a" / "b").mkdir(parents=True)
        (d.root / name / "a" / "b" / "f").write_text("x")
        (d.root / name / "file").write_text("x")
        (d.root / name / "empty").mkdir()
    return name


def test_delete_file(pair, tree):
    a, b = same(pair, "DELETE", f"/v1/files/{tree}/file")
    assert a.status == 204
    a, b = same(pair, "DELETE", f"/v1/files/{tree}/file")
    assert a.status == 404


def test_delete_empty_dir(pair, tree):
    a, b = same(pair, "DELETE", f"/v1/files/{tree}/empty")
    assert a.status == 204


@pytest.mark.parametrize("query", ["", "?recursive=false", "?recursive=0", "?recursive=F"])
def test_delete_non_empty(pair, tree, query):
    a, b = same(pair, "DELETE", f"/v1/files/{tree}/a{query}")
    assert a.status == 409


@pytest.mark.parametrize("query", ["?recursive=true", "?recursive=1", "?recursive=TRUE"])
def test_delete_recursive(pair, tree, query):
    a, b = same(pair, "DELETE", f"/v1/files/{tree}/a{query}")
    assert a.status == 204
    for d in pair:
        assert not (d.root / tree / "a").exists()


@pytest.mark.parametrize("value", ["yes", "2", "tRuE", "on"])
def test_delete_bad_recursive(pair, tree, value):
    a, b = same(pair, "DELETE", f"/v1/files/{tree}/a?recursive={value}")
    assert a.status == 400


def test_delete_missing_with_bad_recursive(pair):
    # Order of checks: lstat before the recursive parameter.
    same(pair, "DELETE", "/v1/files/missing?recursive=yes")


@pytest.mark.parametrize("path", ["", "%2e", "dir1/%2e%2e"])
def test_delete_root_without_recursive(pair, path):
    a, b = same(pair, "DELETE", f"/v1/files/{path}")
    assert a.status == 409


# ---------------------------------------------------------------------------------------------
# Health, metadata, methods


def test_health_shape(pair):
    a, b = both(pair, "GET", "/v1/health")
    assert a.status == b.status == 200
    assert a.header("Content-Type") == b.header("Content-Type")
    ja, jb = a.json(), b.json()
    assert set(ja) == set(jb) and ja["status"] == jb["status"] == "ok"
    assert type(ja["uptime_seconds"]) is type(jb["uptime_seconds"]) is int
    a, b = both(pair, "HEAD", "/v1/health")
    assert a.status == b.status == 200 and a.body == b.body == b""


def test_metadata(sandboxd_env_factory, reference_env_factory):
    env = {"SANDBOX_ID": "abc", "SANDBOX_API_TOKEN": "x", "SANDBOX_DB_PASSWORD": "pw",
           "SANDBOX_keyname": "y", "SANDBOX_REGION": "eu", "SANDBOX_AUTHOR": "a",
           "SANDBOX_CERTIFIED": "c", "OTHER": "z"}
    clear = {k: None for k in os.environ if k.startswith("SANDBOX_")}
    ours = sandboxd_env_factory(env={**clear, **env})
    ref = reference_env_factory(env={**clear, **env})
    a, b = both((ref, ours), "GET", "/v1/metadata")
    assert a.status == b.status == 200
    assert a.json() == b.json() == {"env": {"SANDBOX_ID": "abc", "SANDBOX_REGION": "eu"}}, (a, b)
    assert a.header("Content-Type") == b.header("Content-Type")


@pytest.mark.parametrize("path,methods", [("/v1/files/afile", ["POST", "PATCH"]),
                                          ("/v1/health", ["POST", "PUT", "DELETE"]),
                                          ("/v1/metadata", ["POST", "DELETE"])])
def test_method_not_allowed(pair, path, methods):
    for m in methods:
        a, b = both(pair, m, path, body=b"" if m in ("POST", "PUT", "PATCH") else None)
        assert a.status == b.status == 405, (m, a, b)
        allow = [{x.strip() for x in (r.header("Allow") or "").split(",")} for r in (a, b)]
        assert allow[0] == allow[1], (m, path, a.header("Allow"), b.header("Allow"))


# ---------------------------------------------------------------------------------------------
# Last: clearing the root


def test_delete_root_recursive(pair):
    a, b = same(pair, "DELETE", "/v1/files/?recursive=true")
    assert a.status == 204
    for d in pair:
        assert d.root.is_dir() and not list(d.root.iterdir())
    a, b = same(pair, "GET", "/v1/files/")
    assert a.json() == {"path": "/", "entries": []}
