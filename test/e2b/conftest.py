"""Fixtures of the E2B conformance tests: a real sandboxd with its E2B port on, driven by the
unmodified `e2b` Python SDK from PyPI and by raw HTTP for what the SDK never sends.

The SDK needs no control plane here: E2B_DEBUG=true makes Sandbox.create() skip the API and
E2B_SANDBOX_URL points every envd call at our port (the SDK 2.63 reads both; see README.md).

Environment:
  SANDBOXD_BIN        our daemon
  SANDBOXD_SANITIZED  ON under ASan (waits are longer)
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
    path = Path(os.environ.get("SANDBOXD_BIN", ""))
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"sandboxd binary not found at '{path}' (set SANDBOXD_BIN)")
    return path


@pytest.fixture(scope="module")
def daemon(sandboxd_bin, tmp_path_factory):
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


@pytest.fixture
def sandbox(daemon, monkeypatch):
    """The SDK's Sandbox, pointed at the daemon without a control plane."""
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setenv("E2B_SANDBOX_URL", daemon.url)
    from e2b import Sandbox
    return Sandbox.create()


def sdk_sandbox(d, monkeypatch, **kw):
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setenv("E2B_SANDBOX_URL", d.url)
    from e2b import Sandbox
    return Sandbox.create(**kw)
