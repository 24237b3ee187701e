"""Issue 16: nothing accepted that is not whole, and conditional and partial downloads.

Uploads: each malformed or cut-off body goes to the daemon as raw bytes over a socket; the
answer (status, JSON), the connection's state (kept when the HTTP framing was whole, closed when
it was not) and the root afterwards (the target absent, or an existing file unchanged, no temp
file) are checked.

Downloads: ETag (strong, new after every write), If-None-Match and If-Modified-Since (304, the
former taking precedence), If-Range, several ranges (multipart/byteranges), unsatisfiable ranges
(416 with bytes */size), through raw HTTP, http.client and curl.
"""

import io
import json
import os
import re
import socket
import tarfile
import uuid
from email.utils import formatdate

import pytest

from conftest import byteranges, http_request, run_curl, temp_files, wait_until

T = 5.0  # seconds: bound of every exchange on loopback
OLD = b"the existing content, which must survive\n"


# ---------------------------------------------------------------------------------------------
# Raw HTTP


class Raw:
    """One client connection that writes bytes as given and reads responses framed by their
    Content-Length."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=T)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def shut(self):
        self.s.shutdown(socket.SHUT_WR)

    def _fill(self):
        d = self.s.recv(65536)
        self.buf += d
        return bool(d)

    def response(self, head_only=False):
        """(status, {lower-case header: value}, body), or None when the server closed first."""
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                assert self.buf == b"", f"closed inside a response head: {self.buf!r}"
                return None
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = 0 if head_only or status in (204, 304) else int(headers.get("content-length", 0))
        while len(self.buf) < n:
            assert self._fill(), "closed inside a response body"
        body, self.buf = self.buf[:n], self.buf[n:]
        return status, headers, body

    def closed_by_server(self):
        """True when the server closes the connection (EOF or reset) with nothing more sent."""
        try:
            while self._fill():
                pass
        except ConnectionResetError:
            pass
        return self.buf == b""

    def close(self):
        self.s.close()


def put_head(path, headers):
    h = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"PUT /v1/files/{path} HTTP/1.1\r\nHost: x\r\n{h}\r\n".encode()


def still_serves(conn):
    """The same connection answers a next request: its framing was kept."""
    conn.send(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
    r = conn.response()
    assert r is not None and r[0] == 200, f"the connection did not serve on: {r!r}"


@pytest.fixture
def target(sandboxd, request):
    """A path in the root: absent, or (param "existing") a file holding OLD."""
    name = "w-" + uuid.uuid4().hex[:8]
    p = sandboxd.root / name
    if getattr(request, "param", None) == "existing":
        p.write_bytes(OLD)
    return name, p


def untouched(root, p, existed):
    if existed:
        assert p.read_bytes() == OLD, "the existing file was changed"
    else:
        assert not os.path.lexists(p), f"{p.name} was written: {p.read_bytes()[:100]!r}"
    assert not temp_files(root), f"temp files left: {temp_files(root)}"


# ---------------------------------------------------------------------------------------------
# Multipart bodies that are not whole: refused, nothing written, the connection kept

FILEPART = b'--XX\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n\r\n'
CONTENT = b"0123456789abcdefghijklmnopqr"  # 28 bytes, as in the issue
NOT_WHOLE = {
    # The body: the part never ends (was 204 and the content minus its last 4 bytes).
    "no-closing-boundary": (FILEPART + CONTENT, "a part does not end with its boundary"),
    "cut-inside-the-delimiter": (FILEPART + CONTENT + b"\r\n--X",
                                 "a part does not end with its boundary"),
    "ends-after-a-delimiter": (FILEPART + CONTENT + b"\r\n--XX\r\n",
                               "the body ends before the closing boundary"),
    "closing-boundary-cut": (FILEPART + CONTENT + b"\r\n--XX-",
                             "the body ends before the closing boundary"),
    "second-file-part": (FILEPART + CONTENT + b"\r\n" + FILEPART + b"more\r\n--XX--\r\n",
                         'a second "file" part'),
    "part-without-name": (b"--XX\r\nContent-Type: text/plain\r\n\r\nx\r\n" + FILEPART +
                          CONTENT + b"\r\n--XX--\r\n", "a part has no name"),
    "boundary-then-junk": (FILEPART + CONTENT + b"\r\n--XXjunk\r\n--XX--\r\n",
                           'a boundary is followed by neither "--" nor a line end'),
}


@pytest.mark.parametrize("target", ["absent", "existing"], indirect=True)
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
@pytest.mark.parametrize("case", sorted(NOT_WHOLE))
def test_multipart_not_whole_is_refused(sandboxd, target, case, framing):
    name, p = target
    existed = p.exists()
    body, reason = NOT_WHOLE[case]
    headers = {"Content-Type": "multipart/form-data; boundary=XX"}
    if framing == "chunked":
        headers["Transfer-Encoding"] = "chunked"
        # In two chunks, cut inside the body: the parser sees it across reads.
        half = len(body) // 2
        wire = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (body[:half], body[half:]))
        wire += b"0\r\n\r\n"
    else:
        headers["Content-Length"] = str(len(body))
        wire = body
    c = Raw(sandboxd.rest_port)
    try:
        c.send(put_head(name, headers) + wire)
        r = c.response()
        assert r is not None, "closed without an answer"
        status, h, b = r
        assert status == 400, r
        assert h["content-type"] == "application/json"
        assert json.loads(b) == {"code": "INVALID_ARGUMENT",
                                 "message": f"invalid multipart body: {reason}"}, b
        untouched(sandboxd.root, p, existed)
        still_serves(c)  # the body was whole as HTTP: the connection goes on
    finally:
        c.close()


def test_multipart_not_whole_existing_file_kept(sandboxd):
    # The exact request over an existing file: it keeps its content.
    name = "w-" + uuid.uuid4().hex[:8]
    p = sandboxd.root / name
    p.write_bytes(OLD)
    c = Raw(sandboxd.rest_port)
    try:
        c.send(put_head(name, {"Content-Type": "multipart/form-data; boundary=XX",
                               "Content-Length": str(len(FILEPART + CONTENT))})
               + FILEPART + CONTENT)
        status, _, b = c.response()
        assert status == 400, b
    finally:
        c.close()
    untouched(sandboxd.root, p, True)


def test_multipart_whole_still_accepted(sandboxd):
    # The same bodies made whole are written (with curl too): the refusals are not blanket.
    name = "w-" + uuid.uuid4().hex[:8]
    body = (b"preamble\r\n--XX\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n"
            + FILEPART + CONTENT + b"\r\n--X\r\n\r\n--XX--\r\nepilogue")
    r = http_request(sandboxd.rest_port, "PUT", f"/v1/files/{name}", body=body,
                     headers={"Content-Type": "multipart/form-data; boundary=XX"}, timeout=T)
    assert r.status == 204, r
    assert (sandboxd.root / name).read_bytes() == CONTENT + b"\r\n--X\r\n"
    cp = run_curl(["-X", "PUT", "-F", "a=1", "-F", "file=@-;filename=f", "-o", "/dev/null",
                   "-w", "%{http_code}", f"http://127.0.0.1:{sandboxd.rest_port}/v1/files/{name}"],
                  input=CONTENT)
    assert cp.stdout == b"204", cp
    assert (sandboxd.root / name).read_bytes() == CONTENT


# ---------------------------------------------------------------------------------------------
# Bodies cut off by the client: no answer, the connection closed, nothing written

def _mp(length):
    return {"Content-Type": "multipart/form-data; boundary=XX", "Content-Length": str(length)}


CUT = {
    "content-length-short": ({"Content-Length": "100"}, b"0123456789"),
    "chunked-without-last-chunk": ({"Transfer-Encoding": "chunked"}, b"5\r\nhello\r\n"),
    "chunked-cut-inside-a-chunk": ({"Transfer-Encoding": "chunked"}, b"a\r\nhello"),
    "multipart-content-length-short": (_mp(500), FILEPART + CONTENT + b"\r\n--XX--\r\n"),
}


@pytest.mark.parametrize("target", ["absent", "existing"], indirect=True)
@pytest.mark.parametrize("case", sorted(CUT))
def test_cut_off_body_writes_nothing(sandboxd, target, case):
    name, p = target
    existed = p.exists()
    headers, body = CUT[case]
    c = Raw(sandboxd.rest_port)
    try:
        c.send(put_head(name, headers) + body)
        c.shut()  # the client goes away before its body is whole
        assert c.closed_by_server(), f"answered a cut-off body: {c.buf[:300]!r}"
    finally:
        c.close()
    wait_until(lambda: not temp_files(sandboxd.root), T, 0.01, "the temp file to go")
    untouched(sandboxd.root, p, existed)


def _tar(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for n, data in entries:
            ti = tarfile.TarInfo(n)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def test_tar_cut_inside_an_entry_leaves_no_part_of_it(sandboxd):
    # A tar body whose archive ends inside an entry: 400, that entry not written, no temp file.
    # (Entries before it were unpacked already: tar uploads are not one transaction.)
    d = "t-" + uuid.uuid4().hex[:8]
    data = _tar([("a.txt", b"a" * 700), ("b.txt", b"b" * 3000)])
    cut = data[:512 * 4 + 600]  # a.txt's header and content, b.txt's header, into its content
    c = Raw(sandboxd.rest_port)
    try:
        c.send(put_head(f"{d}?archive=tar", {"Content-Length": str(len(cut))}) + cut)
        status, h, b = c.response()
        assert status == 400 and json.loads(b)["code"] == "INVALID_ARGUMENT", b
        assert "truncated" in json.loads(b)["message"], b
        still_serves(c)
    finally:
        c.close()
    assert not (sandboxd.root / d / "b.txt").exists()
    assert not temp_files(sandboxd.root)


# ---------------------------------------------------------------------------------------------
# Conditional and partial downloads

DATA = bytes(range(256)) * 4  # 1024 bytes


@pytest.fixture
def dl(sandboxd):
    """A 1024-byte file with an mtime well in the past (a strong validator); its URL path."""
    name = "d-" + uuid.uuid4().hex[:8]
    p = sandboxd.root / name
    p.write_bytes(DATA)
    os.utime(p, (1_700_000_000, 1_700_000_000))
    return f"/v1/files/{name}", p


def get(sandboxd, path, headers=None, method="GET"):
    return http_request(sandboxd.rest_port, method, path, headers=headers, timeout=T)


def test_etag_strong_and_new_after_every_write(sandboxd, dl):
    url, p = dl
    a = get(sandboxd, url)
    tag = a.header("ETag")
    assert a.status == 200 and tag and re.fullmatch(r'"[0-9a-f.-]+"', tag), a
    assert get(sandboxd, url, method="HEAD").header("ETag") == tag
    assert get(sandboxd, url).header("ETag") == tag, "the tag of an unchanged file changed"
    assert a.header("Last-Modified") == "Tue, 14 Nov 2023 22:13:20 GMT"
    # The same bytes written again through the API: a new tag.
    r = http_request(sandboxd.rest_port, "PUT", url, body=DATA, timeout=T)
    assert r.status == 204
    b = get(sandboxd, url)
    assert b.header("ETag") not in (None, tag), (tag, b)
    # And once more, within the same second.
    r = http_request(sandboxd.rest_port, "PUT", url, body=DATA, timeout=T)
    assert get(sandboxd, url).header("ETag") not in (tag, b.header("ETag"))


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_if_none_match(sandboxd, dl, method):
    url, _ = dl
    tag = get(sandboxd, url).header("ETag")
    for inm in (tag, "W/" + tag, f'"nope", {tag}', f' W/"x" ,,{tag} ', "*"):
        r = get(sandboxd, url, {"If-None-Match": inm}, method)
        assert r.status == 304, (inm, r)
        assert r.body == b"" and r.header("ETag") == tag, r
        assert r.header("Content-Length") in (None, str(len(DATA))), r
    for inm in ('"nope"', "W/\"nope\", \"other\"", tag[1:-1]):
        r = get(sandboxd, url, {"If-None-Match": inm}, method)
        assert r.status == 200 and r.header("ETag") == tag, (inm, r)
        assert method == "HEAD" or r.body == DATA


def test_if_modified_since_and_precedence(sandboxd, dl):
    url, _ = dl
    lm = get(sandboxd, url).header("Last-Modified")
    assert get(sandboxd, url, {"If-Modified-Since": lm}).status == 304
    later = formatdate(1_800_000_000, usegmt=True)
    assert get(sandboxd, url, {"If-Modified-Since": later}).status == 304
    earlier = formatdate(1_600_000_000, usegmt=True)
    r = get(sandboxd, url, {"If-Modified-Since": earlier})
    assert r.status == 200 and r.body == DATA
    assert get(sandboxd, url, {"If-Modified-Since": "Sunday, 06-Nov-94 08:49:37 GMT"}).status == 200
    assert get(sandboxd, url, {"If-Modified-Since": "not a date"}).status == 200
    # If-None-Match takes precedence (RFC 9110 §13.2.2): a tag that does not match means 200
    # even with a date that alone would give 304.
    r = get(sandboxd, url, {"If-None-Match": '"nope"', "If-Modified-Since": later})
    assert r.status == 200 and r.body == DATA, r
    # With curl -z (If-Modified-Since).
    cp = run_curl(["-z", lm, "-o", "/dev/null", "-w", "%{http_code}",
                   f"http://127.0.0.1:{sandboxd.rest_port}{url}"])
    assert cp.stdout == b"304", cp


def test_if_range(sandboxd, dl):
    url, _ = dl
    r0 = get(sandboxd, url)
    tag, lm = r0.header("ETag"), r0.header("Last-Modified")
    rng = {"Range": "bytes=10-19"}
    r = get(sandboxd, url, {**rng, "If-Range": tag})
    assert r.status == 206 and r.body == DATA[10:20], r
    r = get(sandboxd, url, {**rng, "If-Range": lm})
    assert r.status == 206 and r.body == DATA[10:20], r
    for stale in ('"other"', "W/" + tag, formatdate(1_600_000_000, usegmt=True), "junk"):
        r = get(sandboxd, url, {**rng, "If-Range": stale})
        assert r.status == 200 and r.body == DATA, (stale, r)


def test_several_ranges(sandboxd, dl):
    url, _ = dl
    r = get(sandboxd, url, {"Range": "bytes=0-1, 10-19,-5"})
    assert r.status == 206 and r.header("Content-Length") == str(len(r.body)), r
    assert byteranges(r) == [("bytes 0-1/1024", DATA[0:2]), ("bytes 10-19/1024", DATA[10:20]),
                             ("bytes 1019-1023/1024", DATA[1019:])]
    h = get(sandboxd, url, {"Range": "bytes=0-1, 10-19,-5"}, "HEAD")
    assert h.status == 206 and h.header("Content-Length") == str(len(r.body)) and h.body == b""
    # Unsatisfiable ranges among them are left out; one left: a plain 206.
    r = get(sandboxd, url, {"Range": "bytes=5000-,3-4"})
    assert r.status == 206 and r.header("Content-Range") == "bytes 3-4/1024" and r.body == DATA[3:5]
    # Overlapping ranges asking for more than the file: the whole file.
    r = get(sandboxd, url, {"Range": "bytes=0-999,1-1000"})
    assert r.status == 200 and r.body == DATA
    # With curl.
    cp = run_curl(["-r", "0-1,5-6", "-D", "-", f"http://127.0.0.1:{sandboxd.rest_port}{url}"])
    assert cp.stdout.startswith(b"HTTP/1.1 206"), cp.stdout[:200]
    assert b"Content-Range: bytes 5-6/1024\r\n\r\n\x05\x06\r\n" in cp.stdout


@pytest.mark.parametrize("rng", ["bytes=1024-", "bytes=5000-6000", "bytes=-0",
                                 "bytes=1024-,2000-3000", "bytes=-0,1030-"])
def test_unsatisfiable_ranges(sandboxd, dl, rng):
    url, _ = dl
    r = get(sandboxd, url, {"Range": rng})
    assert r.status == 416 and r.header("Content-Range") == "bytes */1024", (rng, r)
    cp = run_curl(["-r", rng[6:], "-o", "/dev/null", "-w", "%{http_code}",
                   f"http://127.0.0.1:{sandboxd.rest_port}{url}"])
    assert cp.stdout == b"416", cp
