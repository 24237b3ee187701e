"""Helpers the suites under test/ share (their conftests import this module: each puts this
directory on sys.path first). Only what more than one suite uses the same way is here; a suite's
own fixtures stay in its conftest."""

import ctypes
import os
import socket
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def wait_until(pred, timeout, *, interval, what, retry=()):
    """Polls pred until it returns a truthy value, and returns it; fails the test after timeout
    seconds. An exception of a type in retry counts as "not yet" (the last one is named in the
    failure)."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except retry as e:
            last_exc = e
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}"
                        + (f" (last error: {last_exc})" if last_exc else ""))
        time.sleep(interval)


def free_port():
    """A TCP port free on 127.0.0.1 now (another process may take it before it is used)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tools_dir():
    """Where scripts/setup.sh and scripts/k8s-tools.sh put the tools the suites run: $SANDBOXD_TOOLS,
    else ~/.cache/sandboxd/bin."""
    return Path(os.environ.get("SANDBOXD_TOOLS", Path.home() / ".cache" / "sandboxd" / "bin"))


def find_tools(names):
    """{name: path} of the named executables in tools_dir(); fails the test when one is missing."""
    d = tools_dir()
    found = {}
    for name in names:
        p = d / name
        if not (p.is_file() and os.access(p, os.X_OK)):
            pytest.fail(f"{name} not found in {d} (run scripts/setup.sh, or set SANDBOXD_TOOLS)")
        found[name] = p
    return found


# A sandboxd on ephemeral loopback ports says where it listens in its log, one line per API.
LOOPBACK_FLAGS = ["--listen-host", "127.0.0.1", "--grpc-port", "0", "--rest-port", "0"]
GRPC_LISTENING = r"grpc listening on 127\.0\.0\.1 port (\d+)"
REST_LISTENING = r"rest listening on 127\.0\.0\.1 port (\d+)"


def peer_socket(pid, peer):
    """A process's end of the TCP connection whose other end is at `peer`, duplicated into this
    process with pidfd_getfd(2) (root may take another process's descriptors); None if none."""
    syscall = ctypes.CDLL(None, use_errno=True).syscall
    pidfd = os.pidfd_open(pid)
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                    continue
            except FileNotFoundError:
                continue
            fd = syscall(438, pidfd, int(name), 0)  # SYS_pidfd_getfd
            if fd < 0:
                continue
            s = socket.socket(fileno=fd)
            try:
                if s.type == socket.SOCK_STREAM and s.getpeername() == peer:
                    return s
            except OSError:
                pass
            s.close()
    finally:
        os.close(pidfd)
    return None
