"""sandboxd's cgroup v2 path, end to end, under gVisor with a cgroup2 hierarchy of its own.

This machine's kernel is hybrid (memory and pids bound to v1 hierarchies), and a fresh v2
hierarchy with those controllers cannot be mounted beside them. gVisor implements cgroup v2 in
its own kernel (--in-sandbox-cgroup=v2): an OCI bundle with a cgroup mount at /sys/fs/cgroup and
a cgroup namespace, as containerd gives every Kubernetes pod, gets a cgroup2 hierarchy rooted at
the container's own cgroup with memory and pids offered. Debian's runsc (2022) has no such
thing; scripts/gvisor-tools.sh builds a recent one into ~/.cache/sandboxd/bin/gvisor/runsc.

sandboxd-static runs as the container's first process (`runsc run`, systrap platform, host
networking, gRPC on a unix socket the sandbox creates on the host). From outside, grpcurl drives
sandboxd.v1.Processes; what the cgroups hold is read from inside with process.v1 Execute (whose
processes get no cgroup of their own).

What gVisor does not do, from its source (pkg/sentry/fsimpl/cgroup2fs/memory.go): memory.max is
stored but never enforced, memory.events counts nothing (no oom_kill), and there is no
memory.swap.max. sandboxd therefore refuses memory limits under gVisor (FAILED_PRECONDITION);
a canary test here fails the day gVisor starts enforcing memory.max. pids.max is enforced on
v2; on gVisor's default v1 it is not held (pids limits refused there too, tested below).

One sandbox serves the module; the tests run in order and each removes what it spawned, so the
last one can check that no per-process cgroup is left.
"""

import base64
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import (
    STOP_TIMEOUT,
    Endpoints,
    busybox_tree,
    daemon_flags,
    kill_leftovers,
    need_root,
    wait_until,
)

CID = "sbx-cgv2"
# The busybox applets the scripts below use, beyond busybox_tree's.
APPLETS = ("dd", "grep", "head", "kill", "seq", "setsid", "test", "wc")
GRPC_TIMEOUT = 60  # seconds, one grpcurl call (a Wait outlasts a 3 s timeout plus its grace)

DAEMON = ["/sandboxd", *daemon_flags("/run/sbx.sock")]
# Trees that fork as fast as they can: one whose top stays (its timeout ends it, TIMED_OUT), the
# classic one whose top returns at once (EXITED; the timeout still ends what it left). A member
# that fails to fork exits, so a bomb held at its limit can die out on its own before the
# deadline: the sleep it leaves first is what certainly outlives it.
FORK_BOMBS = {
    "top-stays": ("cat /proc/self/cgroup; b() { b | b & }; b; exec sleep 1000",
                  "EXIT_REASON_TIMED_OUT"),
    "top-returns": ("cat /proc/self/cgroup; sleep 1000 & b() { b | b & }; b",
                    "EXIT_REASON_EXITED"),
}


def runsc_path():
    p = os.environ.get("SANDBOXD_RUNSC")
    if p:
        return Path(p)
    tools = Path(os.environ.get("SANDBOXD_TOOLS", Path.home() / ".cache/sandboxd/bin"))
    return tools / "gvisor/runsc"


def runsc_base(runsc, state):
    return [str(runsc), f"--root={state}", "--platform=systrap", "--ignore-cgroups"]


def unmount_null_netns(state):
    """runsc pins an empty network namespace at STATE/null-netns (a bind mount) for its gofers;
    `runsc do` removes it, `runsc run` leaves it to the caller."""
    libc = ctypes.CDLL(None, use_errno=True)
    path = str(state / "null-netns").encode()
    for _ in range(100):  # stacked mounts, one per gofer that raced to make it
        if libc.umount2(path, 2) != 0:  # MNT_DETACH
            break


@pytest.fixture(scope="module")
def runsc(tmp_path_factory):
    """The recent runsc, after a `runsc do` of one static program proved that it runs here
    (and knows --in-sandbox-cgroup)."""
    need_root()
    path = runsc_path()
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.skip(f"no recent runsc at {path}: scripts/gvisor-tools.sh builds it (about 4 "
                    "minutes once per machine; Debian's runsc has no cgroup v2 inside)")
    flags = subprocess.run([str(path), "flags"], capture_output=True, text=True, timeout=30)
    if "-in-sandbox-cgroup" not in flags.stdout + flags.stderr:
        pytest.skip(f"{path} has no --in-sandbox-cgroup (too old: no cgroup v2 inside); "
                    "scripts/gvisor-tools.sh builds a recent one")
    bb = shutil.which("busybox")
    if not bb:
        pytest.skip("busybox is not installed (scripts/setup.sh installs busybox-static)")
    d = tmp_path_factory.mktemp("runsc-probe")
    argv = runsc_base(path, d / "state") + [
        "--network=none", "--in-sandbox-cgroup=v2", "do", bb, "true"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, TMPDIR=str(d)))
    except subprocess.TimeoutExpired:
        out = None
    finally:
        kill_leftovers(str(d))
        unmount_null_netns(d / "state")
    if out is None or out.returncode != 0:
        why = "timed out" if out is None else f"exited {out.returncode}: {out.stderr[-500:]}"
        pytest.skip(f"{path} cannot run a sandbox on this machine ({why})")
    return path


def bundle(root, static_bin, args):
    """An OCI bundle: a busybox tree that runs args (sandboxd, as a rule), /sys/fs/cgroup mounted
    and a cgroup namespace of its own (what containerd asks for on a cgroup v2 node)."""
    tree = busybox_tree(root / "rootfs")
    for applet in APPLETS:
        os.symlink("busybox", tree / "bin" / applet)
    for d in ("run", "workspace", "tmp"):
        (tree / d).mkdir()
    shutil.copy2(static_bin, tree / "sandboxd")
    caps = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
            "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_SYS_CHROOT", "CAP_SYS_ADMIN",
            "CAP_SYS_RESOURCE"]
    spec = {
        "ociVersion": "1.0.2",
        "process": {
            "user": {"uid": 0, "gid": 0},
            "cwd": "/",
            "args": args,
            "env": ["PATH=/bin"],
            "capabilities": {k: caps for k in ("bounding", "effective", "permitted")},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 20000, "soft": 20000}],
        },
        "root": {"path": "rootfs", "readonly": False},
        "hostname": "sbx",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs"},
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},
        ],
        "linux": {"namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "cgroup")]},
    }
    (root / "config.json").write_text(json.dumps(spec, indent=1))
    return tree


class Sandbox:
    """sandboxd-static in a gVisor container (`runsc run`), reached from outside."""

    def __init__(self, runsc, tmp, static_bin, tools, args=DAEMON, cgroups="v2"):
        self.runsc, self.tools = runsc, tools
        self.state, self.tmp = tmp / "state", tmp / "tmp"
        self.state.mkdir()
        self.tmp.mkdir()
        self.tree = bundle(tmp / "bundle", static_bin, args)
        self.ep = Endpoints(tmp / "sandboxd.log", socket=str(self.tree / "run/sbx.sock"))
        # The gofer serves the tree itself (no overlay): the socket the sandbox makes in /run
        # is a socket on the host (--host-uds=create).
        argv = runsc_base(runsc, self.state) + [
            "--network=host", "--host-uds=create", "--overlay2=none",
            f"--in-sandbox-cgroup={cgroups}", "run", "--bundle", str(tmp / "bundle"), CID]
        with open(self.ep.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         env=dict(os.environ, TMPDIR=str(self.tmp)),
                                         start_new_session=True)
        self.ep.wait_ready(lambda: self.proc.poll() is None)

    def grpc(self, method, req, check=True):
        """One unary or server-streaming call with grpcurl; the JSON messages of the reply (a
        list for a stream), or (ok=False) grpcurl's error text."""
        argv = [self.tools["grpcurl"], "-plaintext", "-max-time", str(GRPC_TIMEOUT),
                "-d", json.dumps(req), "-unix", self.ep.socket, method]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=GRPC_TIMEOUT + 10)
        if not check:
            return out.returncode == 0, out.stdout + out.stderr
        assert out.returncode == 0, f"{method} {req}: {out.stderr}\n{self.ep.log()}"
        msgs, text, dec = [], out.stdout.strip(), json.JSONDecoder()
        while text:
            m, end = dec.raw_decode(text)
            msgs.append(m)
            text = text[end:].lstrip()
        return msgs if "Attach" in method else msgs[0]

    def sh(self, script):
        """process.v1 Execute of a shell script inside; (exit code, stdout, stderr)."""
        r = self.grpc("process.v1.ProcessService/Execute",
                      {"config": {"command": ["sh", "-c", script]}})
        dec = lambda k: base64.b64decode(r.get(k, "")).decode()  # noqa: E731
        return r.get("exitCode", 0), dec("stdout"), dec("stderr")

    def spawn(self, script, **spec):
        return self.grpc("sandboxd.v1.Processes/Spawn",
                         {"spec": {"command": ["sh", "-c", script], **spec}})

    def wait(self, pid_id):
        return self.grpc("sandboxd.v1.Processes/Wait", {"id": pid_id})

    def stdout(self, pid_id):
        events = self.grpc("sandboxd.v1.Processes/Attach", {"id": pid_id, "skip_stderr": True})
        return b"".join(base64.b64decode(e["output"]["data"]) for e in events
                        if "output" in e).decode()

    def remove(self, pid_id):
        self.grpc("sandboxd.v1.Processes/Remove", {"id": pid_id})

    def cgroup_of(self, pid_id):
        """The job's cgroup directory inside, from the first line its script prints."""
        first = wait_until(lambda: self.stdout(pid_id).split("\n", 1)[0], 20, "the cgroup line")
        assert first.startswith("0::/sandboxd-"), first
        return "/sys/fs/cgroup" + first[3:]

    def read(self, path):
        code, out, err = self.sh(f"cat {path}")
        assert code == 0, err
        return out

    def stop(self):
        """SIGTERM to sandboxd (`runsc run` passes no signal on: `runsc kill` sends it); runsc
        must exit with sandboxd's status, 0."""
        kill = runsc_base(self.runsc, self.state) + ["kill", CID, "TERM"]
        subprocess.run(kill, capture_output=True, timeout=30, check=True)
        try:
            rc = self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"sandboxd did not stop within {STOP_TIMEOUT}s:\n{self.ep.log()}")
        assert rc == 0, f"runsc exited {rc}:\n{self.ep.log()}"
        assert "sandboxd stopped" in self.ep.log()

    def cleanup(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        base = runsc_base(self.runsc, self.state)
        subprocess.run(base + ["delete", "--force", CID], capture_output=True, timeout=30)
        kill_leftovers(str(self.state))
        unmount_null_netns(self.state)


@pytest.fixture(scope="module")
def sbx(runsc, static_bin, tools, tmp_path_factory):
    s = Sandbox(runsc, tmp_path_factory.mktemp("gvisor-cgv2"), static_bin, tools)
    yield s
    s.cleanup()


def test_daemon_takes_the_v2_path(sbx):
    line = next(ln for ln in sbx.ep.log().splitlines() if "for spawned processes" in ln)
    assert "cgroups v2 for spawned processes: pids; no memory limits: gVisor" in line, line
    assert "pid 1)" in sbx.ep.log(), "sandboxd is not the container's first process"
    # It moved into a leaf of its own and enabled memory and pids for the cgroups beside it.
    assert sbx.read("/proc/1/cgroup") == "0::/sandboxd\n"
    assert set(sbx.read("/sys/fs/cgroup/cgroup.subtree_control").split()) >= {"memory", "pids"}
    assert sbx.read("/sys/fs/cgroup/cgroup.procs") == "", "processes left in the inner cgroup"


@pytest.mark.parametrize("bomb", FORK_BOMBS)
def test_fork_bomb_is_contained_and_dies_whole_on_timeout(sbx, bomb):
    script, reason = FORK_BOMBS[bomb]
    p = sbx.spawn(script, limits={"pids": 32}, timeout_ms=3000, grace_ms=500)
    cg = sbx.cgroup_of(p["id"])
    assert sbx.read(f"{cg}/pids.max") == "32\n"
    done = sbx.wait(p["id"])
    assert done["exit"]["reason"] == reason, done
    # The SIGKILL at the end of the grace reaches all that outlived the SIGTERM.
    kill = f"job {p['id']} (pid {p['pid']}): timeout of 3000 ms: SIGKILL to its tree"
    wait_until(lambda: kill in sbx.ep.log(), 20, "the SIGKILL at the end of the grace")
    wait_until(lambda: sbx.read(f"{cg}/cgroup.procs") == "", 20, "every member gone")
    events = dict(ln.split() for ln in sbx.read(f"{cg}/pids.events").splitlines())
    assert int(events["max"]) > 0, "the bomb never ran into its limit"
    assert int(sbx.read(f"{cg}/pids.peak")) <= 32
    sbx.remove(p["id"])
    wait_until(lambda: sbx.sh(f"test -e {cg}")[0] != 0, 40, "the bomb's cgroup removed")
    assert sbx.sh("echo alive")[1] == "alive\n"


def test_tree_signal_reaches_an_orphan_that_left_the_group(sbx):
    # The shell exits at once; its child, in a session of its own, is re-parented to sandboxd:
    # only the job's cgroup still ties it to the job.
    p = sbx.spawn("cat /proc/self/cgroup; setsid sleep 1000 & echo $!")
    assert sbx.wait(p["id"])["exit"]["reason"] == "EXIT_REASON_EXITED"
    cg = sbx.cgroup_of(p["id"])
    orphan = int(sbx.stdout(p["id"]).split()[1])
    stat = sbx.read(f"/proc/{orphan}/stat").split()
    assert stat[3] == "1" and stat[5] == str(orphan), f"not an orphan in a session: {stat}"
    assert sbx.read(f"{cg}/cgroup.procs").split() == [str(orphan)]
    r = sbx.grpc("sandboxd.v1.Processes/Signal",
                 {"id": p["id"], "signal": 9, "scope": "SIGNAL_SCOPE_TREE"})
    assert r.get("count", 0) >= 1, r
    wait_until(lambda: sbx.sh(f"test -e /proc/{orphan}")[0] != 0, 20, "the orphan gone")
    sbx.remove(p["id"])


def test_memory_limits_are_refused_not_ignored(sbx):
    ok, text = sbx.grpc("sandboxd.v1.Processes/Spawn",
                        {"spec": {"command": ["true"], "limits": {"memory_bytes": 64 << 20}}},
                        check=False)
    assert not ok and "FailedPrecondition" in text, text
    assert "gVisor does not enforce cgroup memory limits" in text, text
    assert sbx.sh("echo alive")[1] == "alive\n"


def test_canary_gvisor_still_ignores_memory_max(sbx):
    """Why the refusal above: a process sets memory.max of its own cgroup to 64 MiB and
    allocates 200 MiB, and lives; no OOM kill is counted. When this fails, gVisor enforces
    memory.max: let sandboxd offer memory limits there (cgroup.c, memory_limits_ignored)."""
    script = ("read l < /proc/self/cgroup; cg=/sys/fs/cgroup${l#0::}; "
              "echo 64M > $cg/memory.max; cat $cg/memory.max; "
              "dd if=/dev/zero of=/dev/null bs=200M count=1 2>/dev/null && echo survived; "
              "grep oom_kill $cg/memory.events")
    p = sbx.spawn(script, limits={"pids": 16})
    done = sbx.wait(p["id"])
    out = sbx.stdout(p["id"])
    assert out.split("\n")[0] == str(64 << 20), out
    assert done["exit"]["reason"] == "EXIT_REASON_EXITED" and "survived" in out, (done, out)
    assert "oom_kill 0" in out, out
    sbx.remove(p["id"])


def test_leftover_keeps_its_cgroup_until_it_ends_then_it_is_swept(sbx):
    # The run ends; its background child lives on in the cgroup (the graveyard keeps it, and
    # its limit); once it is gone, the daemon's sweep removes the cgroup.
    r = sbx.grpc("sandboxd.v1.Processes/Run", {"spec": {
        "command": ["sh", "-c", "cat /proc/self/cgroup; sleep 1000 >/dev/null 2>&1 & echo $!"],
        "limits": {"pids": 10}}})
    lines = base64.b64decode(r["stdout"]).decode().split()
    cg, leftover = "/sys/fs/cgroup" + lines[0][3:], int(lines[1])
    assert sbx.read(f"{cg}/pids.max") == "10\n"
    assert sbx.read(f"{cg}/cgroup.procs").split() == [str(leftover)]
    assert sbx.sh(f"kill -9 {leftover}")[0] == 0
    wait_until(lambda: sbx.sh(f"test -e {cg}")[0] != 0, 40, interval=0.5,
               what="the empty cgroup swept")


def test_not_the_first_process_no_cgroups_and_nothing_changed(runsc, static_bin, tools,
                                                               tmp_path):
    # A shell is the container's first process and stays in its cgroup: sandboxd may move into
    # a leaf, but not enable controllers where a process lives. It says why, refuses limits
    # with that reason, moves back and leaves nothing behind.
    shell = ["/bin/sh", "-c", " ".join(DAEMON) + " & wait"]
    s = Sandbox(runsc, tmp_path, static_bin, tools, args=shell)
    try:
        why = ("cannot enable pids below '/sys/fs/cgroup': Device or resource busy (other "
               "processes share our cgroup: sandboxd must be the first process of its container)")
        assert "no cgroups for spawned processes: " + why in s.ep.log(), s.ep.log()
        ok, text = s.grpc("sandboxd.v1.Processes/Spawn",
                          {"spec": {"command": ["true"], "limits": {"pids": 16}}}, check=False)
        assert not ok and "FailedPrecondition" in text and why in text, text
        p = s.spawn("cat /proc/self/cgroup")
        assert s.wait(p["id"])["exit"]["reason"] == "EXIT_REASON_EXITED"
        assert s.stdout(p["id"]) == "0::/\n"
        daemon = re.search(r"ready \(root /workspace, pid (\d+)\)", s.ep.log()).group(1)
        assert s.read(f"/proc/{daemon}/cgroup") == "0::/\n", "sandboxd did not move back"
        assert "sandboxd" not in s.sh("ls /sys/fs/cgroup")[1].split()
    finally:
        s.cleanup()


def test_gvisor_v1_limits_refused_tree_still_held(runsc, static_bin, tools, tmp_path):
    # gVisor's default, cgroup v1 inside: it lets a cgroup grow past pids.max (a fork bomb
    # under 16 reached thousands of processes and stalled the sandbox; 20 sleepers under 8 were
    # sometimes refused, sometimes all let in) and ignores memory limits, so both are refused;
    # the cgroups still tie each process's tree together.
    s = Sandbox(runsc, tmp_path, static_bin, tools, cgroups="v1")
    try:
        line = next(ln for ln in s.ep.log().splitlines() if "for spawned processes" in ln)
        assert "cgroups v1 for spawned processes:; no memory limits: gVisor" in line, line
        why = "gVisor's cgroup v1 does not hold pids.max (runsc --in-sandbox-cgroup=v2 does)"
        assert why in line, line
        ok, text = s.grpc("sandboxd.v1.Processes/Spawn",
                          {"spec": {"command": ["true"], "limits": {"pids": 16}}}, check=False)
        assert not ok and "FailedPrecondition" in text and why in text, text
        p = s.spawn("setsid sleep 1000 & echo $!")
        assert s.wait(p["id"])["exit"]["reason"] == "EXIT_REASON_EXITED"
        orphan = int(s.stdout(p["id"]))
        assert s.sh(f"test -e /proc/{orphan}")[0] == 0
        r = s.grpc("sandboxd.v1.Processes/Signal",
                   {"id": p["id"], "signal": 9, "scope": "SIGNAL_SCOPE_TREE"})
        assert r.get("count", 0) >= 1, r
        wait_until(lambda: s.sh(f"test -e /proc/{orphan}")[0] != 0, 20, "the orphan gone")
        s.remove(p["id"])
        wait_until(lambda: "sandboxd-" not in s.sh("ls /sys/fs/cgroup/pids")[1], 40,
                   "the cgroup removed")
    finally:
        s.cleanup()


def test_no_cgroup_is_left_and_the_daemon_stops(sbx):
    code, out, _ = sbx.sh("ls -d /sys/fs/cgroup/sandboxd*")
    assert out.split() == ["/sys/fs/cgroup/sandboxd"], out
    sbx.stop()
