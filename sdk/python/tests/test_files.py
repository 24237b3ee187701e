"""Files with the sync client against a real sandboxd."""

from __future__ import annotations

import hashlib
import io
import os
import stat

import pytest

from sandboxd import errors


def test_upload_download_bytes_path_and_fileobj(sb, daemon, area, tmp_path):
    data = os.urandom(3 * (1 << 20) + 17)
    r = sb.files.upload(data, f"{area}/a.bin", mode=0o640)
    assert r.size == len(data) and r.sha256 == hashlib.sha256(data).hexdigest()
    assert (daemon.root / area / "a.bin").read_bytes() == data
    assert stat.S_IMODE((daemon.root / area / "a.bin").stat().st_mode) == 0o640
    # from a path, to a path
    src = tmp_path / "src.bin"
    src.write_bytes(data[::-1])
    sb.files.upload(src, f"{area}/b.bin")
    dst = tmp_path / "out" / "b.bin"
    dst.parent.mkdir()
    assert sb.files.download(f"{area}/b.bin", dst) == len(data)
    assert dst.read_bytes() == data[::-1]
    assert [p.name for p in dst.parent.iterdir()] == ["b.bin"]  # no temp file left
    # from and to file objects (a pipe-like object without a size goes chunked)
    class NoSize(io.RawIOBase):
        def __init__(self, b):
            self.b = io.BytesIO(b)

        def readable(self):
            return True

        def read(self, n=-1):
            return self.b.read(n)

    r = sb.files.upload(NoSize(data[:100000]), f"{area}/c.bin")
    assert r.size == 100000
    out = io.BytesIO()
    sb.files.download(f"{area}/c.bin", out)
    assert out.getvalue() == data[:100000]


def test_progress_callback(sb, area):
    data = os.urandom(5 * (1 << 20) + 3)
    seen = []
    sb.files.upload(data, f"{area}/p.bin", progress=lambda d, t: seen.append((d, t)))
    assert seen[0] == (0, len(data)) and seen[-1] == (len(data), len(data))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and len(seen) >= 6
    seen.clear()
    sb.files.download(f"{area}/p.bin", io.BytesIO(), progress=lambda d, t: seen.append((d, t)))
    assert seen[0] == (0, len(data)) and seen[-1] == (len(data), len(data))


def test_range_download(sb, area):
    data = bytes(range(256)) * 100
    sb.files.write_bytes(f"{area}/r.bin", data)
    out = io.BytesIO()
    assert sb.files.download(f"{area}/r.bin", out, offset=1000, length=300) == 300
    assert out.getvalue() == data[1000:1300]
    out = io.BytesIO()
    sb.files.download(f"{area}/r.bin", out, offset=25000)
    assert out.getvalue() == data[25000:]
    with pytest.raises(errors.InvalidArgumentError) as ei:
        sb.files.download(f"{area}/r.bin", io.BytesIO(), offset=10 ** 6)
    assert ei.value.http_status == 416


def test_failed_download_to_path_leaves_nothing(sb, area, tmp_path):
    dst = tmp_path / "x.bin"
    dst.write_bytes(b"old")
    with pytest.raises(errors.NotFoundError):
        sb.files.download(f"{area}/missing", dst)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.bin"]
    assert dst.read_bytes() == b"old"


def test_stat_list_exists_mkdir_move_remove(sb, daemon, area):
    f = sb.files
    f.mkdir(f"{area}/d1")
    f.mkdir(f"{area}/d2/deep/er", parents=True, mode=0o700)
    with pytest.raises(errors.ConflictError):
        f.mkdir(f"{area}/d1")
    with pytest.raises(errors.NotFoundError):
        f.mkdir(f"{area}/nope/x")
    f.write_bytes(f"{area}/d1/a.txt", b"hello")
    os.symlink("a.txt", daemon.root / area / "d1" / "link")
    st = f.stat(f"{area}/d1/a.txt")
    assert (st.type, st.size, st.name, st.is_file) == ("file", 5, "a.txt", True)
    assert st.path == f"/{area}/d1/a.txt" and st.modified_at is not None
    ln = f.stat(f"{area}/d1/link")
    assert ln.type == "symlink" and ln.symlink_target == "a.txt"
    assert f.stat(f"{area}/d2/deep/er").mode & 0o777 == 0o700
    names = [(e.name, e.type) for e in f.list(area)]
    assert names == [("d1", "directory"), ("d2", "directory")]
    entries = {e.name: e for e in f.list(f"{area}/d1")}
    assert entries["a.txt"].size == 5 and not entries["a.txt"].is_dir
    assert f.exists(f"{area}/d1/a.txt") and not f.exists(f"{area}/d1/zzz")
    f.move(f"{area}/d1/a.txt", f"{area}/d2/b.txt")
    assert f.read_bytes(f"{area}/d2/b.txt") == b"hello"
    f.write_bytes(f"{area}/d1/c.txt", b"c")
    with pytest.raises(errors.ConflictError):
        f.move(f"{area}/d1/c.txt", f"{area}/d2/b.txt")
    f.move(f"{area}/d1/c.txt", f"{area}/d2/b.txt", overwrite=True)
    assert f.read_bytes(f"{area}/d2/b.txt") == b"c"
    with pytest.raises(errors.ConflictError):
        f.remove(f"{area}/d2")
    f.remove(f"{area}/d2", recursive=True)
    f.remove(f"{area}/d1/link")
    assert not f.exists(f"{area}/d2")
    with pytest.raises(errors.NotFoundError):
        f.remove(f"{area}/d2")


def test_file_errors_are_typed(sb, area):
    f = sb.files
    with pytest.raises(errors.PermissionDeniedError) as ei:
        f.write_bytes("../escape.txt", b"x")
    assert ei.value.http_status == 403 and ei.value.code == "PERMISSION_DENIED"
    with pytest.raises(errors.PermissionDeniedError):
        f.stat("a/../../..")
    f.mkdir(f"{area}/dir")
    with pytest.raises(errors.InvalidArgumentError):
        f.write_bytes(f"{area}/dir", b"x")  # a directory
    with pytest.raises(errors.InvalidArgumentError):
        f.download(f"{area}/dir", io.BytesIO())
    f.write_bytes(f"{area}/file", b"x")
    with pytest.raises(errors.InvalidArgumentError):
        f.list(f"{area}/file")
    f.write_bytes(f"{area}/big", b"y" * 1000)
    with pytest.raises(errors.InvalidArgumentError):
        f.read_bytes(f"{area}/big", max_bytes=999)
    with pytest.raises(ValueError):
        f.mkdir(f"{area}/m", mode=0o1777)


def test_payload_too_large(daemon_factory):
    d = daemon_factory(["--max-upload-bytes", "1000"])
    with d.sandbox() as s:
        with pytest.raises(errors.PayloadTooLargeError) as ei:
            s.files.write_bytes("x", b"z" * 1001)
        assert ei.value.http_status == 413
        assert not s.files.exists("x")


def _tree(root):
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", stat.S_IMODE(st.st_mode), int(st.st_mtime),
                                hashlib.sha256(f.read()).hexdigest())
    return out


def make_tree(base):
    (base / "a" / "b" / "c").mkdir(parents=True)
    (base / "empty").mkdir()
    (base / "top.txt").write_bytes(b"top")
    (base / "a" / "exec.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    os.chmod(base / "a" / "exec.sh", 0o755)
    (base / "a" / "b" / "c" / "big.bin").write_bytes(os.urandom(3 << 20))
    (base / "a" / "b" / "odd name ü.txt").write_bytes(b"unicode")
    os.symlink("../top.txt", base / "a" / "to-top")
    for i in range(50):
        (base / "a" / "b" / f"f{i:03}").write_bytes(os.urandom(i * 100))
    os.chmod(base / "empty", 0o700)


def test_directory_tar_up_and_down(sb, daemon, area, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    make_tree(src)
    seen = []
    n = sb.files.upload_dir(src, f"{area}/up", progress=lambda d, t: seen.append(d))
    assert n == len(_tree(src)) and seen and seen[-1] > 3 << 20
    assert _tree(daemon.root / area / "up") == _tree(src)
    dst = tmp_path / "down"
    assert sb.files.download_dir(f"{area}/up", dst) == n
    assert _tree(dst) == _tree(src)


def test_download_dir_refuses_links_out(sb, daemon, area, tmp_path):
    base = daemon.root / area
    (base / "ok.txt").write_bytes(b"ok")
    os.symlink("/etc", base / "zz-out")
    dst = tmp_path / "down"
    with pytest.raises(errors.PermissionDeniedError):
        sb.files.download_dir(area, dst)
    assert not (dst / "zz-out").exists() and not os.path.islink(dst / "zz-out")


def test_upload_dir_of_missing_dir(sb, tmp_path):
    with pytest.raises(NotADirectoryError):
        sb.files.upload_dir(tmp_path / "nope", "x")


def test_health_metadata(sb):
    h = sb.health()
    assert h.status == "ok" and h.uptime_seconds >= 0
    assert isinstance(sb.files.metadata(), dict)
    sb.wait_ready(10)
