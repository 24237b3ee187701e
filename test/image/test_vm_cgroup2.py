"""sandboxd's cgroup v2 path on a real Linux kernel whose cgroups are v2 only: memory limits,
swap, OOM kills, pids limits and deadlines, where the machine's own hybrid kernel and gVisor
(which stores memory.max without enforcing it) cannot show them.

A virtual machine (QEMU with software emulation: KVM hangs on these VMs) boots Debian's kernel
(scripts/vm-tools.sh fetches it, with a static grpcurl) with an initramfs made here: busybox,
sandboxd-static and grpcurl. Its /init mounts cgroup2 at /sys/fs/cgroup, starts sandboxd as
root's child, drives sandboxd.v1.Processes with grpcurl over the unix socket and prints each
reply between markers on the serial console; the test reads them. The machine powers off at the
end; every wait inside is bounded, and so is the VM (VM_TIMEOUT).
"""

import base64
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import busybox_tree, need_root

VM_TIMEOUT = 600  # seconds: booting under emulation on two busy cores takes 20 s to minutes
APPLETS = ("dd", "grep", "head", "mount", "poweroff", "sed", "seq", "test", "wc", "mkdir")

# Each step prints "@@begin NAME", its output, "@@end NAME".
INIT = r"""#!/bin/sh
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp; mount -t cgroup2 none /sys/fs/cgroup
step() { echo "@@begin $1"; shift; "$@"; echo "@@end"; }
g() { grpcurl -plaintext -max-time 120 -d "$2" -unix /run/sbx.sock "$1"; }
run() { g sandboxd.v1.Processes/Run "{\"spec\":$1}"; }
sandboxd --listen-host 127.0.0.1 --grpc-port 0 --rest-port 0 --root-dir /workspace \
    --grpc-socket /run/sbx.sock > /tmp/log 2>&1 &
i=0; while [ ! -S /run/sbx.sock ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
step controllers cat /sys/fs/cgroup/cgroup.controllers
step limits run '{"command":["sh","-c","c=/sys/fs/cgroup$(sed s/0:://  /proc/self/cgroup); cat $c/memory.max $c/memory.swap.max"],"limits":{"memory_bytes":67108864}}'
step hog run '{"command":["dd","if=/dev/zero","of=/dev/null","bs=200M","count=1"],"limits":{"memory_bytes":67108864}}'
step hog-below-shell run '{"command":["sh","-c","dd if=/dev/zero of=/dev/null bs=200M count=1; exit $?"],"limits":{"memory_bytes":67108864}}'
step hog-unlimited run '{"command":["dd","if=/dev/zero","of=/dev/null","bs=200M","count=1"]}'
step bomb g sandboxd.v1.Processes/Spawn '{"spec":{"command":["sh","-c","cat /proc/self/cgroup; sleep 1000 & b() { b | b & }; b"],"limits":{"pids":32},"timeout_ms":2000,"grace_ms":300}}'
i=0; while ! grep -q "timeout of 2000 ms: SIGKILL" /tmp/log && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
sleep 1
c=$(ls -d /sys/fs/cgroup/sandboxd-*-5)
step bomb-after sh -c "wc -l < $c/cgroup.procs; cat $c/pids.peak; grep max $c/pids.events"
step bomb-wait g sandboxd.v1.Processes/Wait '{"id":5}'
g sandboxd.v1.Processes/Remove '{"id":5}' > /dev/null
step alive g process.v1.ProcessService/Execute '{"config":{"command":["echo","alive"]}}'
i=0; while [ "$(ls -d /sys/fs/cgroup/sandboxd* | wc -l)" != 1 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
step cgroups ls -d /sys/fs/cgroup/sandboxd*
step log cat /tmp/log
poweroff -f
"""


@pytest.fixture(scope="module")
def vm_tools():
    need_root()
    d = Path(os.environ.get("SANDBOXD_TOOLS", Path.home() / ".cache/sandboxd/bin")) / "vm"
    if not ((d / "vmlinuz").is_file() and os.access(d / "grpcurl", os.X_OK)):
        pytest.skip(f"no kernel and static grpcurl in {d}: scripts/vm-tools.sh fetches them")
    qemu = shutil.which("qemu-system-x86_64")
    if not qemu:
        pytest.skip("qemu-system-x86_64 is not installed (scripts/vm-tools.sh installs it)")
    for tool in ("cpio", "gzip"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed (scripts/vm-tools.sh installs cpio)")
    return d, qemu


def initramfs(tmp, static_bin, tools):
    root = busybox_tree(tmp / "root")
    for applet in APPLETS:
        os.symlink("busybox", root / "bin" / applet)
    for d in ("proc", "sys", "dev", "tmp", "run", "workspace"):
        (root / d).mkdir()
    shutil.copy2(static_bin, root / "bin/sandboxd")
    shutil.copy2(tools / "grpcurl", root / "bin/grpcurl")
    (root / "init").write_text(INIT)
    os.chmod(root / "init", 0o755)
    out = tmp / "initrd.gz"
    files = subprocess.run(["find", "."], cwd=root, capture_output=True, check=True).stdout
    cpio = subprocess.run(["cpio", "-o", "-H", "newc"], cwd=root, input=files,
                          capture_output=True, check=True, timeout=120).stdout
    out.write_bytes(subprocess.run(["gzip", "-1"], input=cpio, capture_output=True,
                                   check=True).stdout)
    return out


@pytest.fixture(scope="module")
def steps(vm_tools, static_bin, tmp_path_factory):
    """Boots the VM once; {step name: its output}, and the whole console."""
    tools, qemu = vm_tools
    tmp = tmp_path_factory.mktemp("vm")
    initrd = initramfs(tmp, static_bin, tools)
    argv = [qemu, "-accel", "tcg", "-cpu", "max", "-m", "768", "-smp", "1", "-nographic",
            "-no-reboot", "-kernel", str(tools / "vmlinuz"), "-initrd", str(initrd),
            "-append", "console=ttyS0 quiet loglevel=1 panic=-1"]
    try:
        out = subprocess.run(argv, capture_output=True, timeout=VM_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the VM did not power off within {VM_TIMEOUT}s:\n"
                    f"{(e.stdout or b'').decode(errors='replace')[-3000:]}")
    console = out.stdout.decode(errors="replace").replace("\r", "")
    found = dict(re.findall(r"@@begin (\S+)\n(.*?)@@end", console, re.S))
    if "log" not in found:
        pytest.fail("the VM's /init did not finish:\n" + console[-3000:])
    return found, console


def reply(steps, name):
    try:
        return json.loads(steps[0][name])
    except (KeyError, json.JSONDecodeError):
        pytest.fail(f"step {name}: no reply\n" + steps[1][-3000:])


def test_daemon_takes_the_v2_path_with_memory_and_pids(steps):
    assert {"memory", "pids"} <= set(steps[0]["controllers"].split())
    assert "cgroups v2 for spawned processes: memory pids\n" in steps[0]["log"], steps[0]["log"]


def test_memory_limit_and_no_swap_are_set(steps):
    r = reply(steps, "limits")
    assert base64.b64decode(r["stdout"]).decode().split() == [str(64 << 20), "0"], r


def test_hog_is_oom_killed_and_told_apart(steps):
    r = reply(steps, "hog")
    assert r["exit"]["reason"] == "EXIT_REASON_OOM_KILLED" and r["exit"]["signal"] == 9, r
    # Killed below a shell: the shell's 137 is told apart too.
    r = reply(steps, "hog-below-shell")
    assert r["exit"]["reason"] == "EXIT_REASON_OOM_KILLED" and r["exit"]["exitCode"] == 137, r
    # Without a limit the same program runs, and the daemon lives on.
    r = reply(steps, "hog-unlimited")
    assert r["exit"]["reason"] == "EXIT_REASON_EXITED" and "exitCode" not in r["exit"], r
    assert "YWxpdmUK" in steps[0]["alive"]  # base64 of "alive\n"


def test_fork_bomb_contained_and_ended_at_its_deadline(steps):
    members, peak, events = steps[0]["bomb-after"].split("\n")[:3]
    assert int(members) == 0, "the bomb outlived its deadline"
    assert int(peak) <= 32 and int(events.split()[1]) > 0, (peak, events)
    assert reply(steps, "bomb-wait")["exit"]["reason"] == "EXIT_REASON_EXITED"


def test_every_cgroup_removed(steps):
    assert steps[0]["cgroups"].split() == ["/sys/fs/cgroup/sandboxd"], steps[0]["cgroups"]
