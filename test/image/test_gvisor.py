"""sandboxd-static as PID 1 of a gVisor sandbox (runsc, ptrace platform: kvm hangs on these VMs),
in a tree that holds nothing else, and in a busybox-only tree.

runsc's own network stack is not reachable from the host, so the daemon is reached over a unix
socket on the host filesystem (--host-uds=create lets the sandbox create it in a directory
shared without overlay) for gRPC, and over host networking (--network=host) for REST. Exec
(grpcurl), upload/download (curl) and the health probes are called from outside.

runsc runs with --ignore-cgroups (no cgroup is made, none can be left behind), its state and
temporary files under the test's own directory; a run that has to be killed is cleaned up by
killing the processes that name that directory, then removing it.
"""

import hashlib
import os
import signal
import subprocess

import pytest
from conftest import (
    STOP_TIMEOUT,
    Clients,
    ContainerLog,
    Endpoints,
    Podman,
    busybox_tree,
    daemon_flags,
    kill_leftovers,
    need_root,
    need_tool,
    wait_until,
)


def runsc_argv(state, tree, flags):
    return [
        "runsc",
        f"--root={state}",
        "--rootless",
        "--network=host",
        "--platform=ptrace",
        "--host-uds=create",
        "--ignore-cgroups",
        "do",
        "-root",
        str(tree),
        "-force-overlay=false",
        "-cwd",
        "/",
        "/sandboxd",
        *flags,
    ]


class Gvisor:
    def __init__(self, tree, tmp_path, static_bin, main=()):
        need_root()
        need_tool("runsc")
        for d in ("run", "workspace"):
            (tree / d).mkdir(exist_ok=True)
        (tree / "sandboxd").write_bytes(static_bin.read_bytes())
        os.chmod(tree / "sandboxd", 0o755)
        self.tree = tree
        self.state = tmp_path / "runsc-state"
        tmpdir = tmp_path / "runsc-tmp"
        self.state.mkdir()
        tmpdir.mkdir()
        self.ep = Endpoints(tmp_path / "sandboxd.log", socket=str(tree / "run/sbx.sock"))
        flags = daemon_flags("/run/sbx.sock")
        if main:
            flags += ["--", *main]
        argv = runsc_argv(self.state, tree, flags)
        env = dict(os.environ, TMPDIR=str(tmpdir))
        with open(self.ep.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.ep.wait_ready(lambda: self.proc.poll() is None)

    def stop(self, status=0):
        """SIGTERM to runsc, which passes it on to sandboxd; all must exit with status."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"runsc/sandboxd did not exit within {STOP_TIMEOUT}s:\n{self.ep.log()}")
        assert rc == status, f"runsc exited {rc}:\n{self.ep.log()}"
        assert "sandboxd stopped" in self.ep.log()

    def cleanup(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        kill_leftovers(str(self.state))


@pytest.fixture
def gvisor(tmp_path, static_bin):
    started = []

    def start(tree, main=()):
        g = Gvisor(tree, tmp_path, static_bin, main)
        started.append(g)
        return g

    yield start
    for g in started:
        g.cleanup()


def check_from_outside(g, tools, tmp_path):
    c = Clients(tools, g.ep)
    assert "pid 1)" in g.ep.log(), "sandboxd is not PID 1 of the sandbox"
    assert c.health(via_socket=True) == "status: SERVING"
    assert c.health() == "status: SERVING"
    c.probes()
    data = c.round_trip(tmp_path)
    # Written through gVisor's gofer into the tree on the host.
    assert (g.tree / "workspace/up.bin").read_bytes() == data
    return c


def test_empty_tree_under_gvisor(gvisor, tools, tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    g = gvisor(tree)
    c = check_from_outside(g, tools, tmp_path)
    code, out, _ = c.execute(["/sandboxd", "--version"], via_socket=True)
    assert (code, out) == (0, "sandboxd 0.1.0\n")
    g.stop()


def test_busybox_tree_under_gvisor(gvisor, tools, tmp_path):
    """As injected: sandboxd -- <original command>, the command sandboxd's main process."""
    g = gvisor(busybox_tree(tmp_path / "tree"), ["/bin/sh", "-c", "echo started; exec sleep 600"])
    c = check_from_outside(g, tools, tmp_path)
    wait_until(lambda: "started\n" in g.ep.log(), 10, "the main process's output")
    # The file uploaded from outside is read inside; the shell is a child of PID 1.
    code, out, _ = c.execute(["/bin/sh", "-c", "sha256sum up.bin; echo $PPID"], via_socket=True)
    assert code == 0, out
    digest, ppid = out.split("\n")[0].split()[0], out.split("\n")[1]
    assert digest == hashlib.sha256((g.tree / "workspace/up.bin").read_bytes()).hexdigest()
    assert ppid == "1", "the shell's parent is sandboxd, PID 1"
    # SIGTERM reaches the main process (sleep), and sandboxd exits with its status, 143, which
    # `runsc do` reports as a plain failure, 1 (test_pod.py sees the 143 through podman).
    g.stop(status=1)


def test_injector_image_under_podman_runsc(podman, injector_image, tools, tmp_path):
    """The injector image itself under gVisor, run by podman with runsc: its /sandboxd as PID 1
    and as the image's user (65532), the unix socket and /workspace on host directories."""
    need_tool("runsc")
    run_dir, ws = tmp_path / "run", tmp_path / "ws"
    for d in (run_dir, ws):
        d.mkdir()
        os.chmod(d, 0o777)  # the image's user writes there
    name = f"sbx-gvisor-{os.getpid()}"
    rt = Podman.RUNSC
    argv = ["run", "-d", "--name", name, "--network=host", "--ulimit", "nofile=20000:20000"]
    argv += ["-v", f"{run_dir}:/run/sbx", "-v", f"{ws}:/workspace", "--entrypoint", "/sandboxd"]
    argv += [injector_image, *daemon_flags("/run/sbx/sbx.sock")]
    podman(*argv, runtime=rt)
    try:
        ep = ContainerLog(podman, name, tmp_path / "log", str(run_dir / "sbx.sock"), runtime=rt)
        ep.wait_ready(ep.running)
        c = Clients(tools, ep)
        assert "pid 1)" in ep.log()
        assert c.health(via_socket=True) == "status: SERVING"
        c.probes()
        code, out, _ = c.execute(["/sandboxd", "--version"], via_socket=True)
        assert (code, out) == (0, "sandboxd 0.1.0\n")
        data = c.round_trip(tmp_path)
        assert (ws / "up.bin").read_bytes() == data
        assert (ws / "up.bin").stat().st_uid == 65532
        podman("stop", "--time", "20", name, runtime=rt)
        code = podman("inspect", "--format", "{{.State.ExitCode}}", name, runtime=rt).stdout
        assert code.strip() == "0", ep.log()
        assert "sandboxd stopped" in ep.log()
    finally:
        podman("rm", "--force", name, check=False, runtime=rt)


class SSE:
    """A directory watch over Server-Sent Events, read by a thread: the events as dicts."""

    def __init__(self, port, query):
        import http.client
        import json
        import threading

        self.events, self._json = [], json
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.conn.request("GET", f"/v1/watch/?{query}")
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200, self.resp.read()
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        try:
            for raw in self.resp:
                line = raw.decode().rstrip("\n")
                if line.startswith("data: "):
                    self.events.append(self._json.loads(line[6:]))
        except (OSError, ValueError, AttributeError):
            pass  # closed under the reader (http.client drops its file object)

    def paths(self, kind):
        return {e.get("path") for e in self.events if e["kind"] == kind}

    def close(self):
        self.conn.close()


def test_directory_watch_under_gvisor(gvisor, tools, tmp_path):
    """What a watch sees inside gVisor: changes made in the sandbox come from inotify as on a
    kernel; a file put into the tree from the host (as a volume changed from outside would be)
    is seen by a watch with a periodic rescan, which inotify inside gVisor may not report."""
    g = gvisor(busybox_tree(tmp_path / "tree"), ["/bin/sh", "-c", "exec sleep 600"])
    c = Clients(tools, g.ep)
    plain = SSE(g.ep.rest_port, "recursive=true")
    rescan = SSE(g.ep.rest_port, "recursive=true&rescan_interval=1s")
    for w in (plain, rescan):
        wait_until(lambda w=w: any(e["kind"] == "ready" for e in w.events), 20, "the watch ready")
    code, out, _ = c.execute(["/bin/sh", "-c", "mkdir -p a/b && echo x > a/b/f && mv a/b/f a/g"],
                             via_socket=True)
    assert code == 0, out
    for w in (plain, rescan):
        wait_until(lambda w=w: "a/g" in w.paths("rename") or "a/g" in w.paths("create"), 20,
                   "the change made inside seen")
        assert {"a", "a/b"} <= w.paths("create"), w.events
    # From the host, behind gVisor's back.
    (g.tree / "workspace/from-host.txt").write_text("outside\n")
    wait_until(lambda: "from-host.txt" in rescan.paths("create"), 20,
               "the host's file found by the rescan")
    print(f"\nunder gVisor, a file made from the host: plain inotify watch "
          f"{'saw' if 'from-host.txt' in plain.paths('create') else 'did not see'} it; the "
          f"rescanning watch saw it")
    plain.close()
    rescan.close()
    g.stop(status=1)
