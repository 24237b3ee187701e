"""Fixtures of the Python SDK tests: a real sandboxd (SANDBOXD_BIN) on free loopback ports with a
temporary root dir, stopped with SIGTERM after the tests (it must exit 0)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

import sandboxd

START_TIMEOUT = 15.0


def _die_with_parent() -> None:
    """In the forked child: SIGKILL when the test process dies (a killed or crashed pytest
    leaves no daemon behind)."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Child:
    """A program of ours run for the tests: its output read into lines on a thread, waited
    for by pattern, stopped with SIGTERM (it must exit 0 with no crash signs)."""

    what = "child"

    def _spawn(self, argv: List[str], env: Optional[dict] = None) -> None:
        self.lines: List[str] = []
        self._cv = threading.Condition()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=_die_with_parent)
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with self._cv:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    def wait_line(self, pattern: str, timeout: float = START_TIMEOUT) -> "re.Match[str]":
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cv:
            while True:
                for ln in self.lines[seen:]:
                    m = rx.search(ln)
                    if m:
                        return m
                seen = len(self.lines)
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.what} exited (status {self.proc.returncode}): "
                                       f"{self.log()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"no line {pattern!r} within {timeout}s: {self.log()}")
                self._cv.wait(left)

    def log(self) -> str:
        return "\n".join(self.lines[-100:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.what} did not exit on SIGTERM:\n{self.log()}")
        self._t.join(timeout=5)
        assert rc == 0, f"{self.what} exited with {rc}:\n{self.log()}"
        bad = [ln for ln in self.lines if re.search(r"Sanitizer|runtime error:|Assertion", ln)]
        assert not bad, f"crash signs in the {self.what} log: " + " | ".join(bad[:5])


class Daemon(Child):
    what = "sandboxd"

    def __init__(self, binary: str, root: Path, extra: List[str] = (), socket: Optional[str] = None):
        self.root = root
        argv = [binary, "--listen-host", "127.0.0.1", "--grpc-port", "0", "--rest-port", "0",
                "--root-dir", str(root), "--shutdown-timeout", "5s", *extra]
        if socket:
            argv += ["--grpc-socket", socket]
        self.socket = socket
        # SANDBOXD_TOKEN configures the daemon too: only a test that means it passes it.
        env = {k: v for k, v in os.environ.items() if k != "SANDBOXD_TOKEN"}
        # A HOME of its own: the login shells of terminals read no dotfiles of this machine's.
        env["HOME"] = str(root.with_name(root.name + "-home"))
        os.makedirs(env["HOME"], exist_ok=True)
        self._spawn(argv, env)
        try:
            self.grpc_port = int(self.wait_line(r"grpc listening on \S+ port (\d+)").group(1))
            self.rest_port = int(self.wait_line(r"rest listening on \S+ port (\d+)").group(1))
            self.wait_line(r"\bready\b")
        except Exception:
            self.proc.kill()
            self.proc.wait()
            raise

    def sandbox(self, **kw) -> sandboxd.Sandbox:
        return sandboxd.Sandbox("127.0.0.1", grpc_port=self.grpc_port, rest_port=self.rest_port,
                                timeout=kw.pop("timeout", 20.0), **kw)


def _binary() -> str:
    b = os.environ.get("SANDBOXD_BIN")
    if not b or not os.access(b, os.X_OK):
        pytest.fail("set SANDBOXD_BIN to a built sandboxd (sdk/python/run-tests.sh does)")
    return b


@pytest.fixture(scope="session")
def daemon(tmp_path_factory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("root").resolve()
    sock = str(tmp_path_factory.mktemp("sock") / "grpc.sock")
    d = Daemon(_binary(), root, socket=sock)
    yield d
    d.stop()


@pytest.fixture
def daemon_factory(tmp_path_factory):
    started: List[Daemon] = []

    def start(extra: List[str] = ()) -> Daemon:
        d = Daemon(_binary(), tmp_path_factory.mktemp("root").resolve(), extra=list(extra))
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


class RouterProcess(Child):
    """sandboxd-router ($SANDBOXD_ROUTER_BIN) on a free loopback port, loopback pod IPs
    allowed (its sandboxes are the daemons of these tests, routed by X-Sandbox-Pod-IP)."""

    what = "sandboxd-router"

    def __init__(self, binary: str, extra: List[str] = ()) -> None:
        import socket as _socket

        ports = []
        for _ in range(2):
            with _socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                ports.append(s.getsockname()[1])
        self.probe_port, self.metrics_port = ports
        self._spawn([binary, "--http-bind-address", "127.0.0.1:0",
                     "--health-probe-bind-address", f"127.0.0.1:{self.probe_port}",
                     "--metrics-bind-address", f"127.0.0.1:{self.metrics_port}",
                     "--allow-loopback-pod-ip", "--shutdown-timeout", "5s", *extra])
        try:
            self.port = int(self.wait_line(r"router: listening on \S+ port (\d+)").group(1))
            self.wait_line(r"\bready\b")
        except Exception:
            self.proc.kill()
            self.proc.wait()
            raise
        # Every listener is bound before "ready", in order: the main port first, then the TLS
        # port when --https-bind-address asks for one (port 0: no free-port race).
        with self._cv:
            self.ports = [int(m.group(1)) for m in map(
                re.compile(r"router: listening on \S+ port (\d+)").search, self.lines) if m]
        self.url = f"http://127.0.0.1:{self.port}"

    def metric(self, name: str) -> float:
        """A metric of /metrics without labels (or the sum of its labelled series)."""
        import httpx

        body = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", trust_env=False).text
        vals = [float(ln.split()[-1]) for ln in body.splitlines()
                if ln.startswith(name + " ") or ln.startswith(name + "{")]
        if not vals:
            raise AssertionError(f"no metric {name} in:\n{body}")
        return sum(vals)

    def keys(self, d: Daemon) -> dict:
        """Sandbox.connect's arguments that reach daemon d through this router."""
        return dict(router=self.url, name="sb", pod_ip="127.0.0.1", grpc_port=d.grpc_port,
                    rest_port=d.rest_port, timeout=20.0)


@pytest.fixture
def router_bin() -> str:
    b = os.environ.get("SANDBOXD_ROUTER_BIN")
    if not b or not os.access(b, os.X_OK):
        pytest.fail("set SANDBOXD_ROUTER_BIN to a built sandboxd-router (run-tests.sh does)")
    return b


@pytest.fixture
def router(router_bin) -> Iterator[RouterProcess]:
    r = RouterProcess(router_bin)
    yield r
    r.stop()


@pytest.fixture
def router_factory(router_bin):
    started: List[RouterProcess] = []

    def start(extra: List[str] = ()) -> RouterProcess:
        r = RouterProcess(router_bin, list(extra))
        started.append(r)
        return r

    yield start
    for r in started:
        r.stop()


@pytest.fixture
def sb(daemon: Daemon) -> Iterator[sandboxd.Sandbox]:
    with daemon.sandbox() as s:
        yield s
    assert daemon.proc.poll() is None, f"sandboxd died:\n{daemon.log()}"


@pytest.fixture
def area(daemon: Daemon, request) -> str:
    """A fresh directory under the root for one test (its name), relative to the root."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)
    (daemon.root / name).mkdir()
    return name


def vm_hwm_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmHWM:"):
                return int(ln.split()[1])
    raise RuntimeError("no VmHWM")
