"""sandboxd-install, the injector image's copy step, on its own: what it writes, and its errors."""

import os
import stat
import subprocess
from pathlib import Path

import pytest


@pytest.fixture
def install():
    p = os.environ.get("SANDBOXD_INSTALL_BIN")
    if not p:
        pytest.skip("SANDBOXD_INSTALL_BIN is not set (CTest sets it to sandboxd-install)")

    def run(*args):
        return subprocess.run([p, *map(str, args)], capture_output=True, text=True, timeout=30)

    return run


def test_copies_atomically_with_mode_0755(install, tmp_path):
    src = tmp_path / "src"
    src.write_bytes(os.urandom(300_000))
    os.chmod(src, 0o600)
    dest = tmp_path / "vol"
    dest.mkdir()
    (dest / "sandboxd").write_bytes(b"an older binary")
    out = install("--from", src, dest)
    assert out.returncode == 0, out.stderr
    assert f"installed '{dest}/sandboxd' (300000 bytes)" in out.stdout
    assert (dest / "sandboxd").read_bytes() == src.read_bytes()
    assert stat.S_IMODE((dest / "sandboxd").stat().st_mode) == 0o755
    assert sorted(os.listdir(dest)) == ["sandboxd"]  # no temporary file left


@pytest.mark.parametrize(
    "args, message",
    [
        (["--from", "/nonexistent/x", "{dir}"], "open '/nonexistent/x': No such file"),
        (["--from", "{dir}", "{dir}"], "is not a regular file"),
        (["--from", "{file}", "/nonexistent/dir"], "open directory '/nonexistent/dir'"),
        (["--from", "{file}", "{file}"], "Not a directory"),
    ],
)
def test_errors_are_clear_and_leave_nothing(install, tmp_path, args, message):
    d = tmp_path / "vol"
    d.mkdir()
    f = tmp_path / "file"
    f.write_bytes(b"x")
    out = install(*[a.format(dir=d, file=f) for a in args])
    assert out.returncode == 1
    assert out.stderr.startswith("sandboxd-install: ") and message in out.stderr, out.stderr
    assert os.listdir(d) == []


def test_usage(install):
    assert install().returncode == 2
    assert install("a", "b").returncode == 2
    out = install("--help")
    assert out.returncode == 0 and out.stdout.startswith("usage: sandboxd-install")


def test_default_source_is_the_images_sandboxd(install, tmp_path):
    if Path("/sandboxd").exists():
        pytest.skip("this machine has a /sandboxd")
    out = install(tmp_path)
    assert out.returncode == 1 and "open '/sandboxd'" in out.stderr
