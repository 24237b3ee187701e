"""The router's suite: real sandboxd daemons behind a real sandboxd-router, driven by real
clients (grpcurl, grpcio). It shares the integration tests' fixtures and helpers
(test/integration/conftest.py), loaded here under a name of its own and re-exported, and adds the
router.

Environment: SANDBOXD_ROUTER_BIN (the router; set by CTest), SANDBOXD_BIN (the daemon)."""

import importlib.util
import sys
from pathlib import Path

_path = Path(__file__).resolve().parents[1] / "integration" / "conftest.py"
_spec = importlib.util.spec_from_file_location("sbx_integration_conftest", _path)
_mod = importlib.util.module_from_spec(_spec)
sys.modules["sbx_integration_conftest"] = _mod
_spec.loader.exec_module(_mod)

globals().update({k: v for k, v in vars(_mod).items() if not k.startswith("__")})


import os as _os  # noqa: E402
from pathlib import Path  # noqa: E402
import re as _re  # noqa: E402

import grpc as _grpc  # noqa: E402
import pytest as _pytest  # noqa: E402


class Meta(_grpc.UnaryUnaryClientInterceptor, _grpc.UnaryStreamClientInterceptor,
           _grpc.StreamUnaryClientInterceptor, _grpc.StreamStreamClientInterceptor):
    """Adds metadata (the routing keys, a credential) to every call of a channel."""

    def __init__(self, md):
        self.md = list(md)

    def _d(self, d):
        return d._replace(metadata=list(d.metadata or []) + self.md)

    def intercept_unary_unary(self, cont, d, req):
        return cont(self._d(d), req)

    def intercept_unary_stream(self, cont, d, req):
        return cont(self._d(d), req)

    def intercept_stream_unary(self, cont, d, it):
        return cont(self._d(d), it)

    def intercept_stream_stream(self, cont, d, it):
        return cont(self._d(d), it)


def routed_client(target, protos, md):
    """A Client of process.v1 at target (a router) whose every call carries md."""
    orig = _grpc.insecure_channel
    _grpc.insecure_channel = lambda t, options=None: _grpc.intercept_channel(
        orig(t, options=options), Meta(md))
    try:
        return Client(target, protos)  # noqa: F405 - from the integration conftest
    finally:
        _grpc.insecure_channel = orig


class Router(DaemonProcess):  # noqa: F405 - from the integration conftest
    """sandboxd-router on a free loopback port, loopback pod IPs allowed."""

    def __init__(self, binary, extra_args=(), wrap=()):
        self.probe_port, self.metrics_port = free_port(), free_port()  # noqa: F405
        super().__init__([*wrap, binary, "--http-bind-address", "127.0.0.1:0",
                          "--health-probe-bind-address", f"127.0.0.1:{self.probe_port}",
                          "--metrics-bind-address", f"127.0.0.1:{self.metrics_port}",
                          "--allow-loopback-pod-ip", "--log-level", "debug", *extra_args])
        m = self.wait_line(r"router: listening on \S+ port (\d+)")
        self.port = int(m.group(1))
        self.wait_line(r"\bready\b")
        self.target = f"127.0.0.1:{self.port}"

    def stop_and_check(self):
        rc = self.stop(35)
        assert rc == 0, f"router exited with {rc}:\n{self.log()}"
        assert "runtime error" not in self.log() and "ERROR: " not in self.log(), self.log()


@_pytest.fixture(scope="session")
def router_bin():
    p = _os.environ.get("SANDBOXD_ROUTER_BIN", "/tmp/itest-build/router/sandboxd-router")
    if not _os.access(p, _os.X_OK):
        _pytest.fail(f"no router at {p} (set SANDBOXD_ROUTER_BIN)")
    return p


@_pytest.fixture
def router_factory(router_bin):
    started = []

    def start(extra_args=(), wrap=()):
        r = Router(router_bin, extra_args, wrap)
        started.append(r)
        return r

    yield start
    for r in started:
        r.stop_and_check()


@_pytest.fixture(scope="module")
def router(router_bin):
    r = Router(router_bin)
    yield r
    r.stop_and_check()


def with_hosts(path, names):
    """A prefix for a command that runs it in a mount namespace of its own where /etc/hosts maps
    each name to its address: the DNS form <id>.<ns>.svc.<domain> resolves here as in a
    cluster, and nothing outside the namespace changes. Needs root."""
    Path(path).write_text("".join(f"{ip} {name}\n" for name, ip in names.items()))
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" /etc/hosts && exec "$@"', str(path)]
