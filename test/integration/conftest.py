"""Fixtures of the sandboxd integration tests.

The tests start the real daemon (ours, and the reference Go daemon for the differential tests) and
drive it from outside with real clients: Python grpcio, grpcurl and grpc-health-probe.

Everything is bounded: every RPC carries a deadline, every wait has a timeout, every daemon is
stopped with SIGTERM and must exit 0 on its own within its shutdown timeout.

Environment:
  SANDBOXD_BIN    our daemon (default /tmp/itest-build/sandboxd/sandboxd)
  SANDBOXD_TOOLS  directory of grpcurl, grpc-health-probe, reference-sandboxd
                  (default ~/.cache/sandboxd/bin)
"""

import hashlib
import importlib.util
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
import sbxtest  # noqa: E402

REPO = sbxtest.REPO
PROTO_DIR = REPO / "proto"

RPC_TIMEOUT = 10.0  # default deadline of a unary call
STREAM_TIMEOUT = 30.0  # default deadline of a streaming call
START_TIMEOUT = 10.0  # a daemon must be ready within this


# ---------------------------------------------------------------------------------------------
# Small helpers


def wait_until(pred, timeout, interval=0.01, what="condition"):
    """Polls pred until it returns a truthy value; fails the test after timeout seconds."""
    return sbxtest.wait_until(pred, timeout, interval=interval, what=what)


free_port = sbxtest.free_port


def pid_state(pid):
    """The state letter of a process in /proc (R, S, Z, ...), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return data[data.rindex(")") + 2]


def pid_gone(pid):
    """True once the process no longer exists (reaped). A zombie still counts as present."""
    return pid_state(pid) is None


def pid_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return None


def sha256(data):
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------
# Binaries and generated message classes


@pytest.fixture(scope="session")
def sandboxd_bin():
    path = Path(os.environ.get("SANDBOXD_BIN", "/tmp/itest-build/sandboxd/sandboxd"))
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"sandboxd binary not found at {path} (build it, or set SANDBOXD_BIN)")
    return path


@pytest.fixture(scope="session")
def tools():
    return sbxtest.find_tools(("grpcurl", "grpc-health-probe", "reference-sandboxd"))


def _load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


class Protos:
    """The generated message modules: pb (process.v1), sbx (sandboxd.v1), health, refl_v1,
    refl_v1alpha."""


@pytest.fixture(scope="session")
def protos(tmp_path_factory):
    out = tmp_path_factory.mktemp("pb")
    files = [
        "process/v1/process.proto",
        "sandboxd/v1/processes.proto",
        "grpc/health/v1/health.proto",
        "grpc/reflection/v1/reflection.proto",
        "grpc/reflection/v1alpha/reflection.proto",
    ]
    protoc = shutil.which("protoc") or "/usr/bin/protoc"
    subprocess.run(
        [protoc, f"-I{PROTO_DIR}", "-I/usr/include", f"--python_out={out}", *files],
        check=True,
        timeout=60,
    )
    p = Protos()
    # Loaded by path under private names: "grpc" would collide with the grpcio package.
    p.pb = _load_module("sbx_itest_process_pb2", out / "process/v1/process_pb2.py")
    p.sbx = _load_module("sbx_itest_processes_pb2", out / "sandboxd/v1/processes_pb2.py")
    p.health = _load_module("sbx_itest_health_pb2", out / "grpc/health/v1/health_pb2.py")
    p.refl_v1 = _load_module("sbx_itest_refl_v1_pb2", out / "grpc/reflection/v1/reflection_pb2.py")
    p.refl_v1alpha = _load_module(
        "sbx_itest_refl_v1alpha_pb2", out / "grpc/reflection/v1alpha/reflection_pb2.py"
    )
    return p


# ---------------------------------------------------------------------------------------------
# A client of process.v1.ProcessService and grpc.health.v1.Health


class StartStream:
    """A Start call whose events a background thread collects, so a test can wait for
    conditions (with timeouts) while it sends WriteStdin/SendSignal/ResizeTTY calls."""

    def __init__(self, call):
        self.call = call
        self.events = []  # (kind, value): ("init", id), ("stdout", b), ("stderr", b), ("exit", code)
        self.error = None  # grpc.RpcError when the call ended with a non-OK status
        self.done = False
        self._cv = threading.Condition()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        try:
            for m in self.call:
                kind = m.WhichOneof("event")
                if kind == "init":
                    ev = ("init", m.init.process_id)
                elif kind == "exit":
                    ev = ("exit", m.exit.exit_code)
                elif kind in ("stdout", "stderr"):
                    ev = (kind, getattr(m, kind))
                else:
                    ev = ("empty", None)
                with self._cv:
                    self.events.append(ev)
                    self._cv.notify_all()
        except grpc.RpcError as e:
            with self._cv:
                self.error = e
        finally:
            with self._cv:
                self.done = True
                self._cv.notify_all()

    def wait(self, pred, timeout=10.0, what="stream condition"):
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                v = pred(self)
                if v:
                    return v
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(
                        f"timed out after {timeout}s waiting for {what}; events so far: "
                        f"{self.summary()}, error: {self.error!r}"
                    )
                self._cv.wait(left)

    def wait_init(self, timeout=10.0):
        def got(s):
            if s.events:
                return s.events[0]
            if s.done:
                pytest.fail(f"stream ended before the init event: {s.error!r}")
            return None

        ev = self.wait(got, timeout, "the init event")
        assert ev[0] == "init", f"first event is {ev!r}, not init"
        return ev[1]

    def wait_stdout(self, pred, timeout=10.0, what="stdout"):
        return self.wait(lambda s: pred(s.stdout()) or (s.done and pytest.fail(
            f"stream ended while waiting for {what}; stdout={s.stdout()!r} error={s.error!r}")),
            timeout, what)

    def wait_done(self, timeout=20.0):
        self.wait(lambda s: s.done, timeout, "the end of the stream")
        self._t.join(timeout=5)
        return self

    def stdout(self):
        return b"".join(v for k, v in self.events if k == "stdout")

    def stderr(self):
        return b"".join(v for k, v in self.events if k == "stderr")

    def kinds(self):
        return [k for k, _ in self.events]

    def exit_code(self):
        """The exit code of the last event, which must be the only exit event."""
        exits = [v for k, v in self.events if k == "exit"]
        assert self.error is None, f"stream failed: {self.error!r}"
        assert len(exits) == 1, f"expected exactly one exit event, got {self.summary()}"
        assert self.events[-1][0] == "exit", f"exit is not the last event: {self.summary()}"
        return exits[0]

    def summary(self):
        out = []
        for k, v in self.events:
            if k in ("stdout", "stderr"):
                out.append(f"{k}[{len(v)}]")
            else:
                out.append(f"{k}={v}")
        if len(out) > 40:
            out = out[:20] + ["..."] + out[-20:]
        return ", ".join(out)

    def cancel(self):
        self.call.cancel()


def status_of(fn):
    """Runs an RPC; returns (code, details, response-or-None)."""
    try:
        r = fn()
        return grpc.StatusCode.OK, "", r
    except grpc.RpcError as e:
        return e.code(), e.details(), None


class Client:
    SVC = "/process.v1.ProcessService/"

    def __init__(self, target, protos):
        self.target = target
        self.p = protos
        self.pb = protos.pb
        self.channel = grpc.insecure_channel(
            target,
            options=[
                ("grpc.max_receive_message_length", 64 << 20),
                ("grpc.max_send_message_length", 64 << 20),
                ("grpc.enable_http_proxy", 0),
                ("grpc.enable_retries", 0),
            ],
        )
        pb = self.pb

        def uu(name, req, resp):
            return self.channel.unary_unary(
                self.SVC + name,
                request_serializer=req.SerializeToString,
                response_deserializer=resp.FromString,
            )

        self._execute = uu("Execute", pb.ExecuteRequest, pb.ExecuteResponse)
        self._write = uu("WriteStdin", pb.WriteStdinRequest, pb.WriteStdinResponse)
        self._signal = uu("SendSignal", pb.SendSignalRequest, pb.SendSignalResponse)
        self._resize = uu("ResizeTTY", pb.ResizeTTYRequest, pb.ResizeTTYResponse)
        self._start = self.channel.unary_stream(
            self.SVC + "Start",
            request_serializer=pb.StartRequest.SerializeToString,
            response_deserializer=pb.StartResponse.FromString,
        )
        h = protos.health
        self._check = self.channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=h.HealthCheckRequest.SerializeToString,
            response_deserializer=h.HealthCheckResponse.FromString,
        )
        self._watch = self.channel.unary_stream(
            "/grpc.health.v1.Health/Watch",
            request_serializer=h.HealthCheckRequest.SerializeToString,
            response_deserializer=h.HealthCheckResponse.FromString,
        )

    def close(self):
        self.channel.close()

    def config(self, command, env=None, cwd=None):
        c = self.pb.ProcessConfig(command=list(command))
        if env:
            c.env_vars.update(env)
        if cwd is not None:
            c.cwd = cwd
        return c

    # ProcessService

    def execute(self, command, env=None, cwd=None, timeout=RPC_TIMEOUT):
        req = self.pb.ExecuteRequest(config=self.config(command, env, cwd))
        return self._execute(req, timeout=timeout)

    def execute_req(self, req, timeout=RPC_TIMEOUT):
        return self._execute(req, timeout=timeout)

    def start_call(self, command, env=None, cwd=None, pty=None, timeout=STREAM_TIMEOUT):
        """The raw grpcio iterator of a Start call."""
        req = self.pb.StartRequest(config=self.config(command, env, cwd))
        if pty is not None:
            req.pty.rows, req.pty.cols = pty
        return self._start(req, timeout=timeout)

    def start(self, command, env=None, cwd=None, pty=None, timeout=STREAM_TIMEOUT):
        """A Start call read by a background thread. pty is (rows, cols) or None."""
        return StartStream(self.start_call(command, env, cwd, pty, timeout))

    def start_req(self, req, timeout=STREAM_TIMEOUT):
        return StartStream(self._start(req, timeout=timeout))

    def write_stdin(self, pid, data=None, eof=False, timeout=RPC_TIMEOUT):
        req = self.pb.WriteStdinRequest(process_id=pid)
        if eof:
            req.eof.SetInParent()
        else:
            req.input = data
        return self._write(req, timeout=timeout)

    def send_signal(self, pid, sig, timeout=RPC_TIMEOUT):
        return self._signal(self.pb.SendSignalRequest(process_id=pid, signal=sig), timeout=timeout)

    def resize(self, pid, rows, cols, timeout=RPC_TIMEOUT):
        req = self.pb.ResizeTTYRequest(process_id=pid, rows=rows, cols=cols)
        return self._resize(req, timeout=timeout)

    # Health

    def health(self, service="", timeout=RPC_TIMEOUT):
        return self._check(self.p.health.HealthCheckRequest(service=service), timeout=timeout)

    def watch(self, service="", timeout=STREAM_TIMEOUT):
        return self._watch(self.p.health.HealthCheckRequest(service=service), timeout=timeout)

    # Raw bytes, for malformed input

    def raw_unary(self, method, payload, timeout=5.0):
        f = self.channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        return f(payload, timeout=timeout)

    def raw_stream_unary(self, method, payloads, timeout=5.0):
        f = self.channel.stream_unary(method, request_serializer=None, response_deserializer=None)
        return f(iter(payloads), timeout=timeout)


# ---------------------------------------------------------------------------------------------
# Daemons


class DaemonProcess:
    """A daemon process whose stderr a thread collects."""

    ready_pattern = None
    name = "daemon"

    def __init__(self, argv, env=None, cwd=None):
        self.argv = [str(a) for a in argv]
        self.lines = []
        self._cv = threading.Condition()
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,  # a ^C of pytest must not reach it directly
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.exited_early = None  # set when it was found dead before we stopped it
        self.stop_elapsed = None

    def _read(self):
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            with self._cv:
                self.lines.append(line)
                self._cv.notify_all()
        with self._cv:
            self.lines.append("<eof>")
            self._cv.notify_all()

    def log(self):
        return "\n".join(self.lines)

    def wait_line(self, regex, timeout=START_TIMEOUT):
        rx = re.compile(regex)
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for line in self.lines:
                    m = rx.search(line)
                    if m:
                        return m
                if self.proc.poll() is not None and self.lines and self.lines[-1] == "<eof>":
                    raise RuntimeError(
                        f"{self.name} exited with {self.proc.returncode} before /{regex}/:\n"
                        + self.log()
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"{self.name} did not log /{regex}/ in {timeout}s:\n" + self.log())
                self._cv.wait(min(left, 0.2))

    def alive(self):
        return self.proc.poll() is None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout):
        """Waits for the exit; returns the status, or None on timeout."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self, timeout):
        """SIGTERM, wait up to timeout; returns the exit status (SIGKILLs and fails on timeout)."""
        if self.proc.poll() is not None:
            if self.exited_early is None:
                self.exited_early = self.proc.returncode
            return self.proc.returncode
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        rc = self.wait_exit(timeout)
        self.stop_elapsed = time.monotonic() - t0
        if rc is None:
            self.kill()
            raise AssertionError(
                f"{self.name} did not exit within {timeout}s of SIGTERM:\n" + self.log()
            )
        self._reader.join(timeout=5)
        return rc


class Sandboxd(DaemonProcess):
    """Our daemon on a free loopback port with a temporary root dir."""

    name = "sandboxd"

    def __init__(self, binary, root, protos, extra_args=(), env=None, socket_path=None,
                 shutdown_timeout=10.0):
        self.root = Path(root)
        self.protos = protos
        self.shutdown_timeout = shutdown_timeout
        argv = [
            binary,
            *sbxtest.LOOPBACK_FLAGS,
            "--root-dir", self.root,
            "--shutdown-timeout", f"{int(shutdown_timeout * 1000)}ms",
            "--log-level", "debug",
        ]
        if socket_path:
            argv += ["--grpc-socket", socket_path]
        argv += list(extra_args)
        super().__init__(argv, env=env)
        try:
            m = self.wait_line(sbxtest.GRPC_LISTENING)
            self.port = int(m.group(1))
            m = self.wait_line(sbxtest.REST_LISTENING)
            self.rest_port = int(m.group(1))
            self.rest_url = f"http://127.0.0.1:{self.rest_port}"
            self.wait_line(r"\bready\b")
        except Exception:
            self.kill()
            raise
        self.target = f"127.0.0.1:{self.port}"
        self._clients = []
        self.term_sent = None
        self.checked = False

    def client(self, target=None):
        c = Client(target or self.target, self.protos)
        self._clients.append(c)
        return c

    def close_clients(self):
        for c in self._clients:
            c.close()
        self._clients = []

    def crash_report(self):
        """Signs of a crash in the log: sanitizer reports, aborts, assertion failures."""
        bad = re.compile(r"AddressSanitizer|UndefinedBehaviorSanitizer|runtime error:|"
                         r"LeakSanitizer|Assertion .* failed|\bSIGSEGV\b|core dumped|"
                         r"\bFATAL\b|\bpanic\b", re.I)
        return [ln for ln in self.lines if bad.search(ln)]

    def sigterm(self):
        """Sends SIGTERM (once) and remembers when, for stop_and_check."""
        if self.term_sent is None and self.proc.poll() is None:
            self.term_sent = time.monotonic()
            self.proc.send_signal(signal.SIGTERM)

    def stop_and_check(self):
        """SIGTERM (unless the test sent it); it must exit 0 within its shutdown timeout (plus
        slack) and never crash."""
        problems = []
        self.checked = True
        self.close_clients()
        if self.proc.poll() is not None and self.term_sent is None:
            problems.append(f"sandboxd died before it was stopped (status {self.proc.returncode})")
        self.sigterm()
        left = self.term_sent + self.shutdown_timeout + 5 - time.monotonic() if self.term_sent else 0
        rc = self.wait_exit(max(left, 0.1))
        if rc is None:
            self.kill()
            problems.append(f"sandboxd did not exit within {self.shutdown_timeout + 5}s of SIGTERM")
        else:
            self._reader.join(timeout=5)
            if rc != 0:
                problems.append(f"sandboxd exited with status {rc}")
        crash = self.crash_report()
        if crash:
            problems.append("crash signs in its log: " + " | ".join(crash[:5]))
        if problems:
            raise AssertionError("; ".join(problems) + "\n--- sandboxd log ---\n" + self.log())
        return rc


class Reference(DaemonProcess):
    """The reference Go daemon on free loopback ports."""

    name = "reference-sandboxd"

    def __init__(self, binary, root, protos, env=None):
        self.root = Path(root)
        self.protos = protos
        last = None
        for _ in range(5):  # a port picked free may be taken by the time it binds: retry
            self.grpc_port, self.rest_port = free_port(), free_port()
            if self.grpc_port == self.rest_port:
                continue
            super().__init__([binary, "-grpc-port", self.grpc_port, "-rest-port", self.rest_port,
                              "-root-dir", self.root, "-shutdown-timeout", "5s"], env=env)
            try:
                self.wait_line(r"sandboxd listening")
                break
            except RuntimeError as e:
                last = e
                self.kill()
        else:
            raise last
        self.target = f"127.0.0.1:{self.grpc_port}"
        self._clients = []

    def client(self):
        c = Client(self.target, self.protos)
        self._clients.append(c)
        return c

    def stop_and_check(self):
        for c in self._clients:
            c.close()
        rc = self.stop(15)
        assert rc == 0, f"reference exited with {rc}:\n{self.log()}"


def pid_starttime(pid):
    """The start time of a process (field 22 of /proc/pid/stat): with the pid, its identity."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(data[data.rindex(")") + 2:].split()[19])


class Leftovers:
    """OS pids a test saw; the ones still alive at teardown (same pid, same start time) are
    SIGKILLed, so that a failing test (or a daemon bug) leaks no sleepers."""

    def __init__(self):
        self.pids = []

    def add(self, *pids):
        for p in pids:
            st = pid_starttime(p)
            if st is not None:
                self.pids.append((p, st))

    def kill(self):
        for p, st in self.pids:
            if pid_starttime(p) == st and pid_state(p) != "Z":
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture
def leftovers():
    lo = Leftovers()
    yield lo
    lo.kill()


# Daemons currently running, so that a failing test shows their logs.
_RUNNING = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and _RUNNING:
        for d in list(_RUNNING):
            tail = d.lines[-200:]
            rep.sections.append((f"{d.name} log (pid {d.proc.pid}, last {len(tail)} lines)",
                                 "\n".join(tail)))


def _make_root(tmp_path_factory, name):
    root = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=tmp_path_factory.getbasetemp()))
    return root.resolve()


@pytest.fixture(scope="session")
def daemon_env():
    """The environment our daemons run with: two marker variables the env tests look for."""
    env = dict(os.environ)
    env["SBX_ITEST_DAEMON_VAR"] = "from-daemon"
    env["SBX_ITEST_OVERRIDE"] = "daemon-value"
    return env


@pytest.fixture(scope="module")
def own_home_env(tmp_path_factory):
    """daemon_env with a HOME of its own, for a module whose daemons run login shells: they read
    the user's dotfiles, and what this machine's user runs at login (a version manager's rehash,
    which waits on a lock a killed shell can leave behind) must be no part of a test. A module
    takes it with `daemon_env = own_home_env`."""
    env = dict(os.environ)
    env["SBX_ITEST_DAEMON_VAR"] = "from-daemon"
    env["SBX_ITEST_OVERRIDE"] = "daemon-value"
    env["HOME"] = str(tmp_path_factory.mktemp("home"))
    return env


def _merged_env(base, overrides):
    """base with overrides merged over it; an override of None removes that variable."""
    e = dict(base)
    for k, v in (overrides or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return e


def _stop_all(started):
    """Stops and checks every daemon a factory started; fails the test if one misbehaved."""
    errors = []
    for d in started:
        try:
            if not d.checked:
                d.stop_and_check()
        except AssertionError as e:
            errors.append(str(e))
        finally:
            _RUNNING.remove(d)
    if errors:
        pytest.fail("\n\n".join(errors))


@pytest.fixture
def sandboxd_factory(sandboxd_bin, protos, tmp_path_factory, daemon_env):
    """Starts daemons with extra flags; stops and checks each at the end of the test. env is
    merged over the usual daemon environment; a value of None removes that variable."""
    started = []

    def start(extra_args=(), socket_path=None, shutdown_timeout=10.0, root=None, env=None):
        r = root or _make_root(tmp_path_factory, "root")
        e = _merged_env(daemon_env, env)
        d = Sandboxd(sandboxd_bin, r, protos, extra_args=extra_args, env=e,
                     socket_path=socket_path, shutdown_timeout=shutdown_timeout)
        started.append(d)
        _RUNNING.append(d)
        return d

    yield start
    _stop_all(started)


@pytest.fixture(scope="module")
def sandboxd(sandboxd_bin, protos, tmp_path_factory, daemon_env):
    """One daemon shared by the tests of a module."""
    d = Sandboxd(sandboxd_bin, _make_root(tmp_path_factory, "root"), protos, env=daemon_env)
    _RUNNING.append(d)
    try:
        yield d
    finally:
        _RUNNING.remove(d)
        d.stop_and_check()


@pytest.fixture
def client(sandboxd):
    """A fresh channel to the module's daemon; the test fails if the daemon died during it."""
    c = Client(sandboxd.target, sandboxd.protos)
    yield c
    c.close()
    assert sandboxd.alive(), f"sandboxd died during the test:\n{sandboxd.log()}"


@pytest.fixture(scope="module")
def reference(tools, protos, tmp_path_factory):
    d = Reference(tools["reference-sandboxd"], _make_root(tmp_path_factory, "refroot"), protos)
    _RUNNING.append(d)
    try:
        yield d
    finally:
        _RUNNING.remove(d)
        d.stop_and_check()


# ---------------------------------------------------------------------------------------------
# REST helpers and fixtures (test_rest*.py, test_openapi.py)

import http.client  # noqa: E402
import json  # noqa: E402

HTTP_TIMEOUT = 10.0  # default bound of one small HTTP request


class HttpResponse:
    """A complete HTTP response: status, reason, headers (list of pairs), body bytes."""

    def __init__(self, status, reason, headers, body):
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body

    def header(self, name, default=None):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return default

    def header_all(self, name):
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        body = self.body if len(self.body) <= 300 else self.body[:300] + b"..."
        return f"<HTTP {self.status} {self.reason} {self.headers} {body!r}>"


def http_request(port, method, path, body=None, headers=None, timeout=HTTP_TIMEOUT,
                 host="127.0.0.1"):
    """One request on a fresh connection with http.client; the path is sent as given (no
    normalisation, no quoting). Returns an HttpResponse."""
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        return HttpResponse(r.status, r.reason, r.getheaders(), data)
    finally:
        c.close()


def run_curl(args, timeout=HTTP_TIMEOUT + 5, check=False, input=None):
    """Runs the curl binary (never a proxy, always bounded) and returns the CompletedProcess."""
    curl = shutil.which("curl") or "/usr/bin/curl"
    argv = [curl, "--noproxy", "*", "-sS", "--max-time", str(timeout), *map(str, args)]
    return subprocess.run(argv, capture_output=True, timeout=timeout + 10, check=check,
                          input=input)


def byteranges(r):
    """The parts of a multipart/byteranges body: [(Content-Range, bytes)]."""
    m = re.fullmatch(r"multipart/byteranges; boundary=(\S+)", r.header("Content-Type") or "")
    assert m, r
    delim = b"--" + m.group(1).encode()
    body = r.body
    assert body.startswith(delim + b"\r\n") and body.endswith(b"\r\n" + delim + b"--\r\n"), body
    parts = []
    for chunk in body[len(delim) + 2:-(len(delim) + 6)].split(b"\r\n" + delim + b"\r\n"):
        head, _, data = chunk.partition(b"\r\n\r\n")
        h = dict(line.split(": ", 1) for line in head.decode().split("\r\n"))
        assert h["Content-Type"] == "application/octet-stream", h
        parts.append((h["Content-Range"], data))
    return parts


def vm_rss_kib(pid):
    """The resident set size of a process in KiB, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def temp_files(root):
    """The .sandboxd-tmp-* files anywhere beneath root."""
    return sorted(str(p) for p in Path(root).rglob(".sandboxd-tmp-*"))


@pytest.fixture
def sandboxd_env_factory(sandboxd_factory):
    """sandboxd_factory, called as (extra_args, env=...)."""
    return sandboxd_factory


@pytest.fixture
def reference_env_factory(tools, protos, tmp_path_factory):
    """Starts reference daemons with env merged over the test process's environment (a value of
    None removes that variable)."""
    started = []

    def start(env=None):
        e = _merged_env(os.environ, env)
        d = Reference(tools["reference-sandboxd"], _make_root(tmp_path_factory, "refroot"),
                         protos, e)
        started.append(d)
        _RUNNING.append(d)
        return d

    yield start
    for d in started:
        try:
            d.stop_and_check()
        finally:
            _RUNNING.remove(d)


# ---------------------------------------------------------------------------------------------
# Abuse: shared by the REST abuse tests and the hostile suite (test/hostile)


def raise_nofile(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        want = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        soft = want
    if soft < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below the {need} sockets needed")


class Prober(threading.Thread):
    """Times /healthz (a new connection each) and gRPC Execute ["true"] in a loop, while a test
    abuses the daemon; finish() prints the slowest of each and fails past the bounds."""

    def __init__(self, d, healthz_bound=1.0, execute_bound=2.0, client=None):
        super().__init__(daemon=True)
        self.d = d
        self.healthz_bound, self.execute_bound = healthz_bound, execute_bound
        self.client = client or d.client()
        self.healthz, self.execute, self.errors = [], [], []
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            t0 = time.monotonic()
            try:
                r = http_request(self.d.rest_port, "GET", "/healthz", timeout=5)
                if r.status != 200:
                    self.errors.append(f"/healthz answered {r.status}")
            except OSError as e:
                self.errors.append(f"/healthz: {e!r}")
            self.healthz.append(time.monotonic() - t0)
            t0 = time.monotonic()
            try:
                resp = self.client.execute(["true"], timeout=5)
                if resp.exit_code != 0:
                    self.errors.append(f"Execute exit code {resp.exit_code}")
            except Exception as e:  # grpc.RpcError
                self.errors.append(f"Execute: {e!r}")
            self.execute.append(time.monotonic() - t0)
            self.halt.wait(0.05)

    def finish(self, what):
        self.halt.set()
        self.join(15)
        h = max(self.healthz, default=None)
        e = max(self.execute, default=None)
        print(f"\n{what}: {len(self.healthz)} /healthz, slowest {h:.3f}s (bound {self.healthz_bound}s); "
              f"{len(self.execute)} Execute, slowest {e:.3f}s (bound {self.execute_bound}s)")
        assert not self.errors, f"{what}: failures while abused: {self.errors[:5]}"
        assert len(self.healthz) >= 3 and len(self.execute) >= 3, "too few probes"
        assert h < self.healthz_bound, f"{what}: /healthz took {h:.3f}s"
        assert e < self.execute_bound, f"{what}: Execute took {e:.3f}s"


def connect_many(port, n):
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            socks.append(s)
    except OSError:
        for s in socks:
            s.close()
        raise
    return socks


# ---------------------------------------------------------------------------------------------
# A client of sandboxd.v1.Processes


PROCS_SVC = "/sandboxd.v1.Processes/"


class Procs:
    """A client of sandboxd.v1.Processes."""

    def __init__(self, channel, protos):
        self.m = protos.sbx
        m = self.m

        def uu(name, req, resp):
            return channel.unary_unary(PROCS_SVC + name, request_serializer=req.SerializeToString,
                                       response_deserializer=resp.FromString)

        self._spawn = uu("Spawn", m.SpawnRequest, m.ProcessInfo)
        self._run = uu("Run", m.RunRequest, m.RunResponse)
        self._list = uu("List", m.ListRequest, m.ListResponse)
        self._get = uu("Get", m.GetRequest, m.ProcessInfo)
        self._wait = uu("Wait", m.WaitRequest, m.ProcessInfo)
        self._signal = uu("Signal", m.SignalRequest, m.SignalResponse)
        self._write = uu("WriteStdin", m.WriteStdinRequest, m.WriteStdinResponse)
        self._resize = uu("Resize", m.ResizeRequest, m.ResizeResponse)
        self._remove = uu("Remove", m.RemoveRequest, m.RemoveResponse)
        self._attach = channel.unary_stream(PROCS_SVC + "Attach",
                                            request_serializer=m.AttachRequest.SerializeToString,
                                            response_deserializer=m.AttachEvent.FromString)

    def spec(self, command, **kw):
        pty = kw.pop("pty", None)
        s = self.m.ProcessSpec(command=list(command), **kw)
        if pty:
            s.pty.rows, s.pty.cols = pty
        return s

    def spawn(self, command, **kw):
        return self._spawn(self.m.SpawnRequest(spec=self.spec(command, **kw)), timeout=RPC_TIMEOUT)

    def run(self, command, stdin=b"", limit=0, timeout=RPC_TIMEOUT, **kw):
        req = self.m.RunRequest(spec=self.spec(command, **kw), stdin=stdin,
                                output_limit_bytes=limit)
        return self._run(req, timeout=timeout)

    def list(self, tag=""):
        return list(self._list(self.m.ListRequest(tag=tag), timeout=RPC_TIMEOUT).processes)

    def get(self, pid):
        return self._get(self.m.GetRequest(id=pid), timeout=RPC_TIMEOUT)

    def wait(self, pid, timeout=STREAM_TIMEOUT):
        return self._wait(self.m.WaitRequest(id=pid), timeout=timeout)

    def signal(self, pid, sig, scope=0):
        return self._signal(self.m.SignalRequest(id=pid, signal=int(sig), scope=scope),
                            timeout=RPC_TIMEOUT).count

    def write(self, pid, data=b"", eof=False):
        return self._write(self.m.WriteStdinRequest(id=pid, data=data, eof=eof), timeout=RPC_TIMEOUT)

    def remove(self, pid):
        return self._remove(self.m.RemoveRequest(id=pid), timeout=RPC_TIMEOUT)

    def attach_call(self, pid, out=0, err=0, follow=True, timeout=STREAM_TIMEOUT, **kw):
        req = self.m.AttachRequest(id=pid, stdout_offset=out, stderr_offset=err, follow=follow,
                                   **kw)
        return self._attach(req, timeout=timeout)

    def attach(self, pid, **kw):
        """Reads a whole Attach call: (stdout bytes, stderr bytes, truncations, exit, events)."""
        data = {1: bytearray(), 2: bytearray()}
        truncs, ex, events = [], None, []
        for ev in self.attach_call(pid, **kw):
            kind = ev.WhichOneof("event")
            events.append(kind)
            if kind == "output":
                d = data[ev.output.stream]
                assert ev.output.offset == _kw_offset(kw, ev.output.stream) + len(d) + _skipped(
                    truncs, ev.output.stream), "offsets are contiguous"
                d += ev.output.data
            elif kind == "truncated":
                truncs.append((ev.truncated.stream, ev.truncated.__getattribute__("from"),
                               ev.truncated.to))
            elif kind == "exit":
                ex = ev.exit
        return bytes(data[1]), bytes(data[2]), truncs, ex, events


def _kw_offset(kw, stream):
    return kw.get("out", 0) if stream == 1 else kw.get("err", 0)


def _skipped(truncs, stream):
    return sum(t - f for s, f, t in truncs if s == stream)
