"""sandboxd-static in root filesystems that are not its own, as a container runtime would run it:
its own mount and PID namespaces (sandboxd is PID 1), /proc, /dev and /tmp mounted, chrooted
into the tree. The tree is an overlay: the lower layer is the image (nothing at all, busybox
only, or Debian), the upper one holds sandboxd and what the test writes.

Each time: exec calls over gRPC (grpcurl), an upload and download round trip over REST (curl),
the health probes, and a clean exit on SIGTERM.
"""

import hashlib
import os
import subprocess

import pytest
from conftest import (
    Clients,
    Endpoints,
    busybox_tree,
    child_pid,
    daemon_flags,
    need_root,
    need_tool,
    run,
    stop,
    wait_until,
)

# Runs on the host inside the new namespaces, before the chroot: the tree needs no shell.
LAUNCH = r"""
set -eu
mount --make-rprivate /
mount -t overlay overlay -o "lowerdir=$LOWER,upperdir=$UPPER,workdir=$WORK" "$MERGED"
mount -t proc proc "$MERGED/proc"
mount --rbind /dev "$MERGED/dev"
mount -t tmpfs -o size=64m tmpfs "$MERGED/tmp"
mount --bind "$RUN" "$MERGED/run"
exec chroot "$MERGED" /sandboxd "$@"
"""


class Tree:
    """A running sandboxd chrooted into lower (a tree) + an upper layer of its own."""

    def __init__(self, lower, tmp_path, static_bin):
        need_root()
        need_tool("unshare")
        self.tmp = tmp_path
        upper, work, self.merged = tmp_path / "upper", tmp_path / "work", tmp_path / "merged"
        run = tmp_path / "run"  # the unix socket's directory, shared with the host
        for d in (upper, work, self.merged, run):
            d.mkdir()
        # The upper layer: the binary and the mount points, nothing else.
        for d in ("proc", "dev", "tmp", "run", "workspace"):
            (upper / d).mkdir()
        (upper / "sandboxd").write_bytes(static_bin.read_bytes())
        os.chmod(upper / "sandboxd", 0o755)
        self.upper = upper
        env = dict(os.environ, LOWER=str(lower), UPPER=str(upper), WORK=str(work))
        env.update(MERGED=str(self.merged), RUN=str(run))
        self.ep = Endpoints(tmp_path / "sandboxd.log", socket=str(run / "sbx.sock"))
        argv = ["unshare", "--mount", "--pid", "--fork", "--kill-child", "sh", "-c", LAUNCH]
        argv += ["launch", *daemon_flags("/run/sbx.sock")]
        with open(self.ep.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.ep.wait_ready(lambda: self.proc.poll() is None)

    def stop(self):
        pid = wait_until(lambda: child_pid(self.proc.pid), 5, "the daemon's host pid")
        stop(self.proc, self.ep, signal_pid=pid)


@pytest.fixture
def tree_daemon(tmp_path, static_bin):
    started = []

    def start(lower):
        t = Tree(lower, tmp_path, static_bin)
        started.append(t)
        return t

    yield start
    for t in started:
        if t.proc.poll() is None:
            t.proc.kill()
            t.proc.wait(timeout=10)


def common_checks(t, tools, tmp_path):
    c = Clients(tools, t.ep)
    assert c.health() == "status: SERVING"
    assert c.health(via_socket=True) == "status: SERVING"
    c.probes()
    data = c.round_trip(tmp_path)
    # The upload landed in the tree's /workspace, on the upper layer.
    assert (t.upper / "workspace/up.bin").read_bytes() == data
    assert "pid 1)" in t.ep.log(), "sandboxd is not PID 1 of its namespace"
    return c


def test_empty_tree(tree_daemon, tools, tmp_path):
    """Nothing but sandboxd: no libc, no shell, no /etc."""
    lower = tmp_path / "empty"
    lower.mkdir()
    t = tree_daemon(lower)
    c = common_checks(t, tools, tmp_path)
    assert os.listdir(lower) == [] and sorted(os.listdir(t.upper)) == [
        "dev", "proc", "run", "sandboxd", "tmp", "workspace"
    ]
    # The only program there is sandboxd itself.
    code, out, _ = c.execute(["/sandboxd", "--version"])
    assert (code, out) == (0, "sandboxd 0.1.0\n")
    code, out, _ = c.execute(["/sandboxd", "--version"], via_socket=True)
    assert (code, out) == (0, "sandboxd 0.1.0\n")
    # No shell to fall back on: a missing program is NOT_FOUND, and the daemon stays up.
    req = '{"config":{"command":["/bin/sh","-c","true"]}}'
    argv = [tools["grpcurl"], "-plaintext", "-max-time", "20", "-d", req, *c.grpc_target(False)]
    bad = run([*argv, "process.v1.ProcessService/Execute"], text=True)
    assert bad.returncode != 0 and "NotFound" in bad.stderr, bad.stderr
    assert c.health() == "status: SERVING"
    t.stop()


def test_busybox_tree(tree_daemon, tools, tmp_path):
    """A static busybox and nothing else (no libc, no /etc)."""
    lower = busybox_tree(tmp_path / "busybox")
    t = tree_daemon(lower)
    c = common_checks(t, tools, tmp_path)
    code, out, _ = c.execute(["/bin/sh", "-c", "echo $((6 * 7)) $$; sha256sum up.bin"])
    assert code == 0
    answer, _, digest = out.partition("\n")
    assert answer.split()[0] == "42"
    want = hashlib.sha256((t.upper / "workspace/up.bin").read_bytes()).hexdigest()
    assert digest.split()[0] == want
    code, _, _ = c.execute(["/bin/sh", "-c", "exit 7"], via_socket=True)
    assert code == 7
    t.stop()


def test_debian_tree(tree_daemon, debian_tree, tools, tmp_path):
    """A minimal Debian made by debootstrap (cached once per machine)."""
    t = tree_daemon(debian_tree)
    c = common_checks(t, tools, tmp_path)
    code, out, _ = c.execute(["/bin/bash", "-c", "cat /etc/debian_version; sha256sum up.bin"])
    assert code == 0, out
    version, _, digest = out.partition("\n")
    want = (debian_tree / "etc/debian_version").read_text().strip()
    assert version == want
    want = hashlib.sha256((t.upper / "workspace/up.bin").read_bytes()).hexdigest()
    assert digest.split()[0] == want
    # Plain programs of the image, found through PATH as a user would call them.
    code, out, _ = c.execute(["id", "-u"])
    assert (code, out) == (0, "0\n")
    t.stop()
