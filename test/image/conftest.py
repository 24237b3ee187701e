"""Fixtures of the image tests: sandboxd-static in foreign root filesystems, under gVisor, and
injected into a pod by podman.

Each test runs the real static binary where an image would hold it: a tree with nothing else in
it, a busybox-only tree, a Debian tree, gVisor's sandbox; and drives it from outside with real
clients (grpcurl, grpc-health-probe, curl). Everything is bounded: every client call has a
timeout, every daemon is stopped with SIGTERM and must exit 0 on its own.

They need root (mount namespaces, chroot, runsc, podman) and the tools scripts/setup.sh
installs; without them a test is skipped and says why.

Environment:
  SANDBOXD_STATIC_BIN  the static daemon (CTest sets it)
  SANDBOXD_TOOLS       directory of grpcurl and grpc-health-probe (default ~/.cache/sandboxd/bin)
"""

import base64
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
import sbxtest  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = sbxtest.REPO
START_TIMEOUT = 30.0  # a daemon must be ready within this (gVisor starts in a few seconds)
CALL_TIMEOUT = 30  # seconds, any one client call
STOP_TIMEOUT = 20.0  # exit after SIGTERM: the daemon's drain (10 s) and some


def wait_until(pred, timeout, what, interval=0.05):
    return sbxtest.wait_until(pred, timeout, interval=interval, what=what)


def need_root():
    if os.geteuid() != 0:
        pytest.skip("needs root (mount namespaces, chroot, container runtimes)")


def need_tool(name):
    path = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if not path:
        pytest.skip(f"{name} is not installed (scripts/setup.sh installs it)")
    return path


@pytest.fixture(scope="session", autouse=True)
def _root():
    need_root()


@pytest.fixture(scope="session")
def static_bin():
    p = os.environ.get("SANDBOXD_STATIC_BIN")
    if not p:
        why = os.environ.get("SANDBOXD_STATIC_MISSING", "SANDBOXD_STATIC_BIN is not set")
        pytest.skip(why + " (CTest sets SANDBOXD_STATIC_BIN to sandboxd-static)")
    path = Path(p)
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"SANDBOXD_STATIC_BIN={p} is not an executable file")
    return path


@pytest.fixture(scope="session")
def tools():
    return {k: str(p) for k, p in sbxtest.find_tools(("grpcurl", "grpc-health-probe")).items()}


def run(argv, **kw):
    kw.setdefault("timeout", CALL_TIMEOUT)
    return subprocess.run(argv, capture_output=True, **kw)


# ---------------------------------------------------------------------------------------------
# Root filesystem trees


def busybox_tree(root):
    """A tree with a static busybox (Debian's busybox-static) and applet links, nothing else."""
    bb = need_tool("busybox")
    (root / "bin").mkdir(parents=True)
    shutil.copy2(bb, root / "bin/busybox")
    for applet in ("sh", "cat", "echo", "ls", "sha256sum", "sleep", "tr", "touch", "id"):
        os.symlink("busybox", root / "bin" / applet)
    return root


@pytest.fixture(scope="session")
def debian_tree():
    """The cached Debian tree (built once per machine by debian-rootfs.sh)."""
    need_root()
    need_tool("debootstrap")
    out = subprocess.run(
        [str(HERE / "debian-rootfs.sh")], capture_output=True, text=True, timeout=1200
    )
    if out.returncode != 0:
        pytest.skip(f"no Debian tree: debian-rootfs.sh failed (no mirror?):\n{out.stderr}")
    return Path(out.stdout.strip())


# ---------------------------------------------------------------------------------------------
# A daemon reached from outside


class Endpoints:
    """Where a running sandboxd answers: TCP ports on the host's loopback, and a unix socket."""

    def __init__(self, log_path, socket=None):
        self.log_path = Path(log_path)
        self.socket = socket
        self.grpc_port = None
        self.rest_port = None

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_ready(self, alive):
        def ready():
            if not alive():
                pytest.fail("sandboxd exited before it was ready:\n" + self.log())
            text = self.log()
            if "ready" not in text:
                return False
            g = re.search(sbxtest.GRPC_LISTENING, text)
            r = re.search(sbxtest.REST_LISTENING, text)
            self.grpc_port, self.rest_port = int(g.group(1)), int(r.group(1))
            return True

        wait_until(ready, START_TIMEOUT, "sandboxd to be ready")
        if self.socket:
            wait_until(lambda: Path(self.socket).is_socket(), 5, "the gRPC unix socket")

    @property
    def rest(self):
        return f"http://127.0.0.1:{self.rest_port}"


def daemon_flags(socket_inside=None):
    flags = list(sbxtest.LOOPBACK_FLAGS)
    flags += ["--root-dir", "/workspace", "--shutdown-timeout", "5s"]
    if socket_inside:
        flags += ["--grpc-socket", socket_inside]
    return flags


class Clients:
    """The real clients, aimed at one daemon."""

    def __init__(self, tools, ep):
        self.tools, self.ep = tools, ep

    def grpc_target(self, via_socket):
        if via_socket:
            return ["-unix", self.ep.socket]
        return [f"127.0.0.1:{self.ep.grpc_port}"]

    def execute(self, command, via_socket=False):
        """process.v1.ProcessService/Execute with grpcurl; returns (exit_code, stdout, stderr)."""
        req = json.dumps({"config": {"command": command}})
        target = self.grpc_target(via_socket)
        argv = [self.tools["grpcurl"], "-plaintext", "-max-time", "20", "-d", req]
        out = run([*argv, *target, "process.v1.ProcessService/Execute"], text=True)
        assert out.returncode == 0, f"grpcurl Execute {command}: {out.stderr}\n{self.ep.log()}"
        resp = json.loads(out.stdout)
        dec = base64.b64decode
        return (
            resp.get("exitCode", 0),
            dec(resp.get("stdout", "")).decode(),
            dec(resp.get("stderr", "")).decode(),
        )

    def health(self, via_socket=False):
        addr = f"unix://{self.ep.socket}" if via_socket else f"127.0.0.1:{self.ep.grpc_port}"
        out = run([self.tools["grpc-health-probe"], "-addr", addr, "-connect-timeout", "10s"])
        assert out.returncode == 0, f"health probe of {addr}: {out.stdout} {out.stderr}"
        return (out.stdout + out.stderr).decode().strip()

    def curl(self, *args):
        argv = ["curl", "-sS", "--max-time", "20", "-w", "\n%{http_code}", *args]
        out = run(argv)
        assert out.returncode == 0, f"curl {args}: {out.stderr}"
        body, _, code = out.stdout.rpartition(b"\n")
        return int(code), body

    def round_trip(self, tmp_path, name="up.bin", size=1 << 20):
        """Uploads random bytes with curl, downloads them again; returns the data."""
        data = os.urandom(size)
        src = tmp_path / "upload.bin"
        src.write_bytes(data)
        url = f"{self.ep.rest}/v1/files/{name}"
        code, _ = self.curl("-X", "PUT", "--data-binary", f"@{src}", url)
        assert code == 204, f"upload: HTTP {code}\n{self.ep.log()}"
        code, body = self.curl(url)
        assert code == 200, f"download: HTTP {code}"
        assert hashlib.sha256(body).hexdigest() == hashlib.sha256(data).hexdigest()
        return data

    def probes(self):
        for path in ("/healthz", "/readyz", "/v1/health"):
            code, body = self.curl(self.ep.rest + path)
            assert code == 200, f"{path}: HTTP {code} {body!r}"


def child_pid(pid):
    """The first child of pid (the daemon under unshare --fork), or None."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = f.read().split()
    except FileNotFoundError:
        return None
    return int(kids[0]) if kids else None


def stop(proc, ep, signal_pid=None):
    """SIGTERM to the daemon (signal_pid, or proc itself); it must exit 0 within STOP_TIMEOUT."""
    if proc.poll() is None:
        os.kill(signal_pid or proc.pid, signal.SIGTERM)
    try:
        rc = proc.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        pytest.fail(f"sandboxd did not exit within {STOP_TIMEOUT}s of SIGTERM:\n{ep.log()}")
    assert rc == 0, f"sandboxd exited {rc}:\n{ep.log()}"


def kill_leftovers(marker):
    """SIGKILLs the processes this run started (sentry, gofer) that name marker."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    os.kill(int(pid), signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass


# ---------------------------------------------------------------------------------------------
# Containers: podman and buildah, as DESIGN §7 found they work here

CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=20000:20000"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


class Podman:
    def __init__(self, tmp_path):
        need_tool("podman")
        need_tool("buildah")
        need_tool("runc")
        need_tool("catatonit")  # podman builds its pod's pause image from it
        conf = tmp_path / "containers.conf"
        conf.write_text(CONTAINERS_CONF)
        self.env = dict(os.environ, CONTAINERS_CONF=str(conf), TMPDIR=str(tmp_path))

    # gVisor for single containers (a pod does not start under runsc here): its own flags through
    # podman, host networking (runsc's own stack is not reachable from the host), unix sockets
    # that the sandbox may create on the host, no cgroups.
    RUNSC = ["--runtime", "/usr/bin/runsc", "--runtime-flag=network=host"]
    RUNSC += ["--runtime-flag=platform=ptrace", "--runtime-flag=host-uds=create"]
    RUNSC += ["--runtime-flag=ignore-cgroups"]

    RUNC = ("--runtime", "runc")

    def __call__(self, *args, timeout=120, check=True, tool="podman", runtime=RUNC):
        argv = [tool, *args] if tool != "podman" else ["podman", *runtime, *args]
        out = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and out.returncode != 0:
            pytest.fail(f"{' '.join(argv)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
        return out


class ContainerLog(Endpoints):
    """The endpoints of a sandboxd in a container, found in its log (podman logs)."""

    def __init__(self, podman, name, path, socket=None, runtime=Podman.RUNC):
        super().__init__(path, socket)
        self.podman, self.name, self.runtime = podman, name, runtime

    def running(self):
        fmt = "{{.State.Status}}"
        out = self.podman("inspect", "--format", fmt, self.name, check=False, runtime=self.runtime)
        return out.stdout.strip() in ("created", "configured", "initialized", "running")

    def log(self):
        out = self.podman("logs", self.name, check=False, runtime=self.runtime)
        text = out.stdout + out.stderr
        self.log_path.write_text(text)
        return text


@pytest.fixture
def podman(tmp_path):
    return Podman(tmp_path)


@pytest.fixture(scope="session")
def oci_layout(tmp_path_factory):
    """The OCI image layout the injector image is also pushed to."""
    return tmp_path_factory.mktemp("oci")


def build_images(static_bin, tag, *more):
    """images/build.sh from the binaries under test, tagged tag; more: its further options."""
    need_tool("buildah")
    install_bin = os.environ.get("SANDBOXD_INSTALL_BIN")
    if not install_bin:
        pytest.skip("SANDBOXD_INSTALL_BIN is not set (CTest sets it to sandboxd-install)")
    argv = [REPO / "images/build.sh", "--bins", static_bin, install_bin, "--tag", tag, *more]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="session")
def injector_image(static_bin, oci_layout):
    """localhost/sandboxd:test-PID, built by images/build.sh from the binaries under test, in
    the container storage and in oci_layout (as sandboxd-test-PID)."""
    tag = f"test-{os.getpid()}"
    build_images(static_bin, tag, "--oci", oci_layout)
    ref = f"localhost/sandboxd:{tag}"
    yield ref
    subprocess.run(["buildah", "rmi", ref], capture_output=True, timeout=60)
