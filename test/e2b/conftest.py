"""Fixtures of the E2B conformance tests: a real sandboxd with its E2B port on, driven by the
unmodified `e2b` Python SDK from PyPI and by raw HTTP for what the SDK never sends.

The SDK needs no control plane here: E2B_DEBUG=true makes Sandbox.create() skip the API and
E2B_SANDBOX_URL points every envd call at our port (the SDK 2.63 reads both; see README.md).

The same tests run through the router and E2B's control plane when SANDBOXD_E2B_TEMPLATE is
set (test/controller/test_e2b_sdk.py does that): one sandbox of that template is created with
E2B_API_URL / E2B_API_KEY for the whole session, its envd traffic goes where E2B_SANDBOX_URL (the
router's shared host) or E2B_DOMAIN (<port>-<id>.<domain>) says, and the tests that talk to a
sandboxd of their own (raw HTTP, curl, a token, SIGTERM) are skipped there.

Environment:
  SANDBOXD_BIN            our daemon (not through the router)
  SANDBOXD_SANITIZED      ON under ASan (waits are longer)
  SANDBOXD_E2B_TEMPLATE   through the router: the template to create the session's sandbox of
  SANDBOXD_E2B_ENVD_PORT  through the router: envd's port in the sandbox (the SDK's 49983)
  SANDBOXD_E2B_SANDBOX_ID through the router: connect to this sandbox rather than create one
"""

import http.client
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
import sbxtest  # noqa: E402

ROUTED = os.environ.get("SANDBOXD_E2B_TEMPLATE")
SANITIZED = os.environ.get("SANDBOXD_SANITIZED", "OFF").upper() in ("ON", "1", "TRUE")
START_TIMEOUT = 30.0 if SANITIZED else 10.0
E2B_LISTENING = r"e2b listening on 127\.0\.0\.1 port (\d+)"


class Daemon:
    """A sandboxd with --e2b-port, its log in a file; stopped with SIGTERM, which it must obey."""

    def __init__(self, binary, tmp, token=None, extra=()):
        self.root = Path(tmp) / "root"
        self.root.mkdir()
        self.log_path = Path(tmp) / "sandboxd.log"
        env = dict(os.environ)
        env.pop("SANDBOXD_TOKEN", None)
        if token:
            env["SANDBOXD_TOKEN"] = token
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            # --e2b-port 0 is "off": a port free now (another process may take it first).
            [str(binary), *sbxtest.LOOPBACK_FLAGS, "--e2b-port", str(sbxtest.free_port()),
             "--root-dir",
             str(self.root), "--shutdown-timeout", "5s", *extra],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        m = sbxtest.wait_until(lambda: re.search(E2B_LISTENING, self.log_text()),
                               START_TIMEOUT, interval=0.02, what="the e2b port")
        self.port = int(m.group(1))
        self.url = f"http://127.0.0.1:{self.port}"

    def log_text(self):
        return self.log_path.read_text(errors="replace")

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=START_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                pytest.fail("sandboxd did not stop on SIGTERM")
        self.log.close()
        assert self.proc.returncode == 0, self.log_text()[-4000:]

    # raw HTTP --------------------------------------------------------------------------------

    def request(self, method, path, body=b"", headers=None, timeout=10):
        """(status, headers, body) of one request on a fresh connection."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def unary(self, method, msg, headers=None):
        """A Connect unary JSON call: (status, decoded JSON body)."""
        h = {"Content-Type": "application/json", **(headers or {})}
        status, _, body = self.request("POST", f"/process.Process/{method}",
                                       json.dumps(msg).encode(), h)
        return status, json.loads(body) if body else None


def envelope(payload, flags=0):
    return struct.pack(">BI", flags, len(payload)) + payload


def read_envelopes(data):
    """[(flags, payload)] of a Connect stream's body."""
    out, i = [], 0
    while i < len(data):
        flags, n = struct.unpack(">BI", data[i:i + 5])
        out.append((flags, data[i + 5:i + 5 + n]))
        i += 5 + n
    assert i == len(data), "a partial envelope at the end of the stream"
    return out


@pytest.fixture(scope="session")
def sandboxd_bin():
    if ROUTED:
        pytest.skip("starts a sandboxd of its own, not through the router")
    path = Path(os.environ.get("SANDBOXD_BIN", ""))
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"sandboxd binary not found at '{path}' (set SANDBOXD_BIN)")
    return path


@pytest.fixture(scope="module")
def daemon(sandboxd_bin, tmp_path_factory):
    if ROUTED:
        pytest.skip("talks to a sandboxd of its own, not through the router")
    d = Daemon(sandboxd_bin, tmp_path_factory.mktemp("e2b"))
    yield d
    d.stop()


@pytest.fixture
def make_daemon(sandboxd_bin, tmp_path_factory):
    """Starts daemons of a test's own (a token, other flags); all are stopped after it."""
    started = []

    def make(**kw):
        d = Daemon(sandboxd_bin, tmp_path_factory.mktemp("e2b"), **kw)
        started.append(d)
        return d

    yield make
    for d in started:
        d.stop()


@pytest.fixture(scope="session")
def routed_sandbox():
    """Through the router: the session's one sandbox, created from SANDBOXD_E2B_TEMPLATE by the
    control plane and killed at the end (kill answering True is checked)."""
    from e2b import Sandbox
    from e2b.connection_config import ConnectionConfig
    if os.environ.get("SANDBOXD_E2B_ENVD_PORT"):
        # the SDK names envd's port in E2b-Sandbox-Port or the host; the test's sandboxd has
        # a free port of its own rather than 49983
        ConnectionConfig.envd_port = int(os.environ["SANDBOXD_E2B_ENVD_PORT"])
    sid = os.environ.get("SANDBOXD_E2B_SANDBOX_ID")
    # One made before (the per-host form: the test maps its host name first), else a new one.
    sb = Sandbox.connect(sid) if sid else Sandbox.create(template=ROUTED, timeout=600)
    yield sb
    assert sb.kill() is True


@pytest.fixture
def sandbox(request, monkeypatch):
    """The SDK's Sandbox: pointed at the daemon without a control plane, or (SANDBOXD_E2B_TEMPLATE)
    the session's sandbox through the router."""
    if ROUTED:
        sb = request.getfixturevalue("routed_sandbox")
        yield sb
        assert sb.is_running(), "the sandbox stopped answering through the router"
        return
    daemon = request.getfixturevalue("daemon")
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setenv("E2B_SANDBOX_URL", daemon.url)
    from e2b import Sandbox
    yield Sandbox.create()


async def async_sandbox(sandbox):
    """The asynchronous SDK's handle on the same sandbox (the `sandbox` fixture's environment)."""
    from e2b import AsyncSandbox
    return await AsyncSandbox.connect(sandbox.sandbox_id)


def sdk_sandbox(d, monkeypatch, **kw):
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setenv("E2B_SANDBOX_URL", d.url)
    from e2b import Sandbox
    return Sandbox.create(**kw)
