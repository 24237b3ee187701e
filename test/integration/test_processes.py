"""sandboxd.v1.Processes: processes that outlive their calls, output rings read from any offset,
wait, tree kill, exit detail, timeouts and captured runs with an output cap."""

import os
import signal
import threading
import time
from pathlib import Path

import grpc
import pytest

from conftest import RPC_TIMEOUT, Procs, pid_gone, wait_until

@pytest.fixture
def procs(sandboxd, protos):
    c = sandboxd.client()
    return Procs(c.channel, protos)


def code(fn):
    try:
        fn()
    except grpc.RpcError as e:
        return e.code()
    return grpc.StatusCode.OK


def test_spawn_list_get_wait(procs, sandboxd):
    before = time.time()
    info = procs.spawn(["sh", "-c", "echo out; echo err >&2; sleep 0.2; exit 4"], tag="build")
    assert info.id > 0 and info.pid > 0 and info.tag == "build"
    assert info.state == procs.m.STATE_RUNNING
    assert info.started_at.seconds >= int(before) - 1
    assert list(info.command) == ["sh", "-c", "echo out; echo err >&2; sleep 0.2; exit 4"]
    listed = [p for p in procs.list() if p.id == info.id]
    assert len(listed) == 1 and listed[0].pid == info.pid
    assert [p.id for p in procs.list(tag="build")] == [info.id]
    assert procs.list(tag="no-such-tag") == []
    done = procs.wait(info.id)
    assert done.state == procs.m.STATE_EXITED
    assert done.exit.exit_code == 4 and done.exit.reason == procs.m.EXIT_REASON_EXITED
    assert done.stdout.end == 4 and done.stderr.end == 4
    assert done.exited_at.seconds >= done.started_at.seconds
    g = procs.get(info.id)
    assert g.exit.exit_code == 4 and not g.stdin
    out, err, truncs, ex, _ = procs.attach(info.id)
    assert (out, err, truncs) == (b"out\n", b"err\n", [])
    assert ex.exit_code == 4


def test_errors(procs):
    m = procs.m
    assert code(lambda: procs.get(999999)) == grpc.StatusCode.NOT_FOUND
    assert code(lambda: procs.wait(999999)) == grpc.StatusCode.NOT_FOUND
    assert code(lambda: procs.signal(999999, 15)) == grpc.StatusCode.NOT_FOUND
    assert code(lambda: list(procs.attach_call(999999))) == grpc.StatusCode.NOT_FOUND
    assert code(lambda: procs.spawn([])) == grpc.StatusCode.INVALID_ARGUMENT
    assert code(lambda: procs._spawn(m.SpawnRequest(), timeout=5)) == grpc.StatusCode.INVALID_ARGUMENT
    assert code(lambda: procs.spawn(["surely-not-a-command"])) == grpc.StatusCode.NOT_FOUND
    assert code(lambda: procs.spawn(["true"], cwd="../..")) == grpc.StatusCode.PERMISSION_DENIED
    p = procs.spawn(["sleep", "30"])
    try:
        assert code(lambda: procs.signal(p.id, 0)) == grpc.StatusCode.INVALID_ARGUMENT
        assert code(lambda: procs.signal(p.id, 65)) == grpc.StatusCode.INVALID_ARGUMENT
        assert code(lambda: procs.signal(p.id, 15, scope=7)) == grpc.StatusCode.INVALID_ARGUMENT
        assert code(lambda: procs.remove(p.id)) == grpc.StatusCode.FAILED_PRECONDITION
        # Spawned without stdin: nothing to write to.
        assert code(lambda: procs.write(p.id, b"x")) == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        procs.signal(p.id, signal.SIGKILL)
    procs.wait(p.id)
    procs.remove(p.id)
    assert code(lambda: procs.get(p.id)) == grpc.StatusCode.NOT_FOUND


def test_stdin_and_shared_ids(procs, sandboxd):
    p = procs.spawn(["cat"], stdin=True)
    assert procs.get(p.id).stdin
    procs.write(p.id, b"one ")
    # process.v1 reaches the same process by the same id while it runs.
    sandboxd.client().write_stdin(p.id, b"two ")
    procs.write(p.id, b"three", eof=True)
    done = procs.wait(p.id)
    assert done.exit.exit_code == 0
    out, _, _, _, _ = procs.attach(p.id)
    assert out == b"one two three"
    assert code(lambda: procs.write(p.id, b"late")) == grpc.StatusCode.FAILED_PRECONDITION


def test_pty(procs):
    p = procs.spawn(["sh", "-c", "stty size; tty >/dev/null && echo tty; read x; stty size; "
                                 "echo got $x"], pty=(12, 70))
    wait_until(lambda: b"tty" in procs.attach(p.id, follow=False)[0], 10, what="the first size")
    procs._resize(procs.m.ResizeRequest(id=p.id, size=procs.m.TerminalSize(rows=30, cols=100)),
                  timeout=RPC_TIMEOUT)
    procs.write(p.id, b"hello\n")
    done = procs.wait(p.id)
    assert done.pty and done.exit.exit_code == 0
    out, _, _, _, _ = procs.attach(p.id)
    assert out.index(b"12 70") < out.index(b"tty") < out.index(b"30 100") < out.index(b"got hello")


def test_reattach_mid_stream_and_from_zero(procs):
    gate_script = "for i in $(seq 1 40); do echo line-$i; sleep 0.01; done; read x; echo last"
    p = procs.spawn(["sh", "-c", gate_script], stdin=True)
    first = []
    call = procs.attach_call(p.id)

    def read_first():
        for ev in call:
            if ev.WhichOneof("event") == "output":
                first.append(ev.output.data)

    t = threading.Thread(target=read_first, daemon=True)
    t.start()
    wait_until(lambda: b"".join(first).count(b"\n") >= 40, 20, what="the first reader's 40 lines")
    # A second client, from offset 0 and from the middle, while the process still runs.
    info = procs.get(p.id)
    mid = info.stdout.end // 2
    late = procs.attach_call(p.id, out=mid)
    from_zero = procs.attach_call(p.id, out=0)
    procs.write(p.id, b"go\n", eof=True)
    z = b"".join(ev.output.data for ev in from_zero if ev.WhichOneof("event") == "output")
    m = b"".join(ev.output.data for ev in late if ev.WhichOneof("event") == "output")
    t.join(20)
    whole = b"".join(f"line-{i}\n".encode() for i in range(1, 41)) + b"last\n"
    assert z == whole
    assert m == whole[mid:]
    assert b"".join(first) == whole


def test_ring_overflow_is_reported_as_truncation(sandboxd_factory, protos):
    d = sandboxd_factory(["--output-ring-bytes", "4096"])
    procs = Procs(d.client().channel, protos)
    p = procs.spawn(["sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a; echo -n END"])
    done = procs.wait(p.id)
    assert done.stdout.end == 100003 and done.stdout.start == 100003 - 4096
    out, _, truncs, ex, events = procs.attach(p.id)
    assert truncs == [(1, 0, 100003 - 4096)]
    assert events[0] == "truncated" and events[-1] == "exit"
    assert len(out) == 4096 and out.endswith(b"aEND")
    # From an offset still held: no truncation.
    out2, _, truncs2, _, _ = procs.attach(p.id, out=100000)
    assert (out2, truncs2) == (b"END", [])
    # Past the end: nothing but the exit.
    out3, _, truncs3, ex3, _ = procs.attach(p.id, out=200000)
    assert (out3, truncs3, ex3.exit_code) == (b"", [], 0)


def test_output_read_ahead_reaches_the_ring_while_the_process_waits(sandboxd_factory, protos):
    # Output is read from the pipe a block at a time and handed on a chunk at a time, a batch of
    # chunks per turn of the loop. With 100-byte chunks one read takes the whole burst and a
    # batch does not hand it all on: the rest must follow with the pipe empty and the process
    # silent, not wait for its next write or its exit.
    d = sandboxd_factory(["--stream-chunk-size", "100"])
    procs = Procs(d.client().channel, protos)
    p = procs.spawn(["sh", "-c", "head -c 20000 /dev/zero | tr '\\0' a; read x"], stdin=True)
    wait_until(lambda: procs.get(p.id).stdout.end == 20000, 20, what="all 20000 bytes in the ring")
    assert not procs.get(p.id).HasField("exit"), "the output came before the exit, not with it"
    procs.write(p.id, b"\n", eof=True)
    done = procs.wait(p.id)
    assert done.exit.exit_code == 0 and done.stdout.end == 20000
    out, _, _, _, _ = procs.attach(p.id)
    assert out == b"a" * 20000


def test_stalled_reader_blocks_nobody(sandboxd_factory, protos):
    d = sandboxd_factory(["--output-ring-bytes", "65536"])
    procs = Procs(d.client().channel, protos)
    p = procs.spawn(["sh", "-c", "sleep 0.2; head -c 20000000 /dev/zero; echo done >&2"])
    # A reader that never reads: its call is open, its window fills.
    stalled = procs.attach_call(p.id)
    done = procs.wait(p.id, timeout=60)
    assert done.exit.exit_code == 0 and done.stdout.end == 20000000
    # A second reader is served at once, with the drop reported.
    out, err, truncs, ex, _ = procs.attach(p.id, skip_stdout=False)
    assert err == b"done\n" and ex.exit_code == 0
    assert truncs and truncs[0][0] == 1 and truncs[0][1] == 0
    assert len(out) == 65536
    stalled.cancel()


def test_cancelled_call_leaves_the_process(procs):
    p = procs.spawn(["sh", "-c", "echo started; sleep 0.5; echo finished"])
    call = procs.attach_call(p.id)
    first = next(iter(call))
    assert first.output.data == b"started\n"
    call.cancel()
    done = procs.wait(p.id)
    assert done.exit.exit_code == 0
    out, _, _, _, _ = procs.attach(p.id)
    assert out == b"started\nfinished\n"


def test_wait_cancelled_by_deadline(procs):
    p = procs.spawn(["sleep", "30"])
    assert code(lambda: procs.wait(p.id, timeout=0.3)) == grpc.StatusCode.DEADLINE_EXCEEDED
    procs.signal(p.id, signal.SIGKILL)
    assert procs.wait(p.id).exit.reason == procs.m.EXIT_REASON_KILLED


def read_pids(procs, pid, n):
    def got():
        out = procs.attach(pid, follow=False)[0]
        pids = [int(x) for x in out.split()]
        return pids if len(pids) >= n else None

    return wait_until(got, 10, what=f"{n} pids")


@pytest.mark.parametrize("cgroups", ["auto", "off"])
def test_tree_kill_reaches_new_sessions(sandboxd_factory, protos, leftovers, cgroups):
    # With cgroups the job's cgroup is its tree; without, a walk of /proc that stops each member.
    d = sandboxd_factory(["--cgroups", cgroups])
    procs = Procs(d.client().channel, protos)
    # Grandchildren in sessions of their own: out of the group's reach, not of the tree's.
    script = ("for i in 1 2 3; do setsid sh -c 'echo $$; exec sleep 1000' & done; "
              "sh -c 'echo $$; exec sleep 1000' & wait")
    p = procs.spawn(["sh", "-c", script])
    pids = read_pids(procs, p.id, 4)
    leftovers.add(*pids)
    # A group signal spares the ones in new sessions.
    procs.signal(p.id, signal.SIGKILL, scope=procs.m.SIGNAL_SCOPE_GROUP)
    assert procs.wait(p.id).exit.signal == signal.SIGKILL
    alive = [x for x in pids if not pid_gone(x)]
    assert len(alive) >= 3, "setsid grandchildren survive a group kill"
    # They are orphans now (re-parented to sandboxd): a tree kill of a fresh parent is the case
    # the tree scope is for, tested below; clean these up.
    for x in alive:
        os.kill(x, signal.SIGKILL)

    p = procs.spawn(["sh", "-c", script])
    pids = read_pids(procs, p.id, 4)
    leftovers.add(*pids)
    n = procs.signal(p.id, signal.SIGKILL, scope=procs.m.SIGNAL_SCOPE_TREE)
    assert n >= 5  # sh, 3 setsid sleepers (after exec), 1 sleeper in the group
    assert procs.wait(p.id).exit.reason == procs.m.EXIT_REASON_KILLED
    wait_until(lambda: all(pid_gone(x) for x in pids), 10, what="every tree member gone")


def test_signal_scopes(procs):
    # The shell traps TERM; its child does not. PROCESS reaches the shell alone.
    p = procs.spawn(["sh", "-c", "trap 'echo trapped' TERM; sleep 1000 & echo $!; wait; wait"])
    child = read_pids(procs, p.id, 1)[0]
    assert procs.signal(p.id, signal.SIGTERM, scope=procs.m.SIGNAL_SCOPE_PROCESS) == 1
    wait_until(lambda: b"trapped" in procs.attach(p.id, follow=False)[0], 10, what="the trap")
    assert not pid_gone(child)
    procs.signal(p.id, signal.SIGKILL)  # the group
    assert procs.wait(p.id).exit.signal == signal.SIGKILL
    wait_until(lambda: pid_gone(child), 10, what="the child gone with the group")


def test_timeout_then_grace(procs):
    t0 = time.monotonic()
    r = procs.run(["sleep", "30"], timeout_ms=200)
    assert r.exit.reason == procs.m.EXIT_REASON_TIMED_OUT and r.exit.signal == signal.SIGTERM
    r = procs.run(["sh", "-c", "trap '' TERM; echo ignoring; while :; do sleep 0.05; done"],
                  timeout_ms=200, grace_ms=200)
    assert r.exit.reason == procs.m.EXIT_REASON_TIMED_OUT and r.exit.signal == signal.SIGKILL
    assert r.stdout == b"ignoring\n"
    assert time.monotonic() - t0 < 25
    # A process that finishes in time is not timed out.
    r = procs.run(["true"], timeout_ms=10000)
    assert r.exit.reason == procs.m.EXIT_REASON_EXITED
    # Spawned processes carry their timeout too.
    p = procs.spawn(["sleep", "30"], timeout_ms=200)
    assert procs.wait(p.id).exit.reason == procs.m.EXIT_REASON_TIMED_OUT


def test_run_output_cap(procs):
    r = procs.run(["sh", "-c", "head -c 50000 /dev/zero | tr '\\0' x; cat; echo e >&2"],
                  stdin=b"tail-of-it", limit=16)
    assert r.stdout == b"xxxxxxtail-of-it" and r.stdout_truncated and r.stdout_total == 50010
    assert r.stderr == b"e\n" and not r.stderr_truncated and r.stderr_total == 2
    r = procs.run(["echo", "small"])
    assert r.stdout == b"small\n" and not r.stdout_truncated and r.pid > 0
    # A run is forgotten once answered.
    assert all(p.pid != r.pid for p in procs.list())


def test_run_reports_every_exit_code_and_signal(procs):
    wrong = []
    for c in range(256):
        r = procs.run(["sh", "-c", f"exit {c}"])
        if (r.exit.exit_code, r.exit.signal, r.exit.reason) != (c, 0, procs.m.EXIT_REASON_EXITED):
            wrong.append((c, r.exit))
    assert not wrong, wrong[:3]
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGKILL, signal.SIGSEGV, signal.SIGTERM,
                signal.SIGUSR1, signal.SIGPIPE, signal.SIGALRM, signal.SIGSYS):
        r = procs.run(["sh", "-c", f"kill -{int(sig)} $$"])
        assert (r.exit.exit_code, r.exit.signal, r.exit.reason) == (
            -1, int(sig), procs.m.EXIT_REASON_SIGNALED), (sig, r.exit)
    r = procs.run(["sh", "-c", "ulimit -c unlimited; kill -QUIT $$"])
    assert r.exit.signal == signal.SIGQUIT


def test_run_cancelled_kills_the_tree(procs, leftovers):
    call = procs._run.future(procs.m.RunRequest(spec=procs.spec(
        ["sh", "-c", "setsid sleep 1000 & echo $! > pid; wait"])), timeout=RPC_TIMEOUT)
    found = wait_until(lambda: [p for p in procs.list() if p.command[0] == "sh"
                                and "setsid" in p.command[2]], 10, what="the run listed")
    p = found[0]
    grandchild = wait_until(lambda: procs.attach(p.id, follow=False) is not None and
                            _read_pid_file(procs), 10, what="the grandchild's pid")
    leftovers.add(grandchild)
    call.cancel()
    wait_until(lambda: pid_gone(grandchild), 10, what="the run's tree gone with its call")


def _read_pid_file(procs):
    r = procs.run(["cat", "pid"])
    try:
        return int(r.stdout)
    except ValueError:
        return None


def test_retention(sandboxd_factory, protos):
    d = sandboxd_factory(["--exit-retention", "300ms", "--max-exited", "2"])
    procs = Procs(d.client().channel, protos)
    ids = [procs.spawn(["true"]).id for _ in range(4)]
    for i in ids:
        try:
            procs.wait(i)
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND  # trimmed already
    kept = [p.id for p in procs.list()]
    assert len(kept) <= 2
    wait_until(lambda: procs.list() == [], 10, what="exited processes forgotten after retention")


def test_shutdown_reason(sandboxd_factory, protos):
    d = sandboxd_factory(["--termination-grace", "200ms"])
    procs = Procs(d.client().channel, protos)
    p = procs.spawn(["sh", "-c", "trap '' TERM; echo up; while :; do sleep 0.05; done"])
    events = []
    call = procs.attach_call(p.id)

    def read():
        for ev in call:
            events.append(ev)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    wait_until(lambda: events, 10, what="the first output")
    d.sigterm()
    t.join(20)
    assert events[-1].WhichOneof("event") == "exit"
    assert events[-1].exit.reason == procs.m.EXIT_REASON_SHUTDOWN
    assert events[-1].exit.signal == signal.SIGKILL


def test_grpcurl_discovers_the_service(sandboxd, tools):
    import subprocess
    out = subprocess.run([str(tools["grpcurl"]), "-plaintext", sandboxd.target, "describe",
                          "sandboxd.v1.Processes"], capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr
    for rpc in (b"Spawn", b"Run", b"List", b"Attach", b"Wait", b"Signal", b"Remove"):
        assert b"rpc " + rpc in out.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_credentials(procs):
    m = procs.m
    r = procs.run(["sh", "-c", "id -u; id -g; id -G"],
                  user=m.Credentials(uid=65534, gid=65533, groups=[65532, 65531]))
    assert r.exit.exit_code == 0, r.stderr
    uid, gid, groups = r.stdout.decode().split("\n")[:3]
    assert (uid, gid) == ("65534", "65533")
    assert sorted(groups.split()) == ["65531", "65532", "65533"]
    # Unset: the daemon's own.
    assert procs.run(["id", "-u"]).stdout == b"0\n"
    # A process that cannot get its privileges back.
    r = procs.run(["sh", "-c", "cat /proc/self/status | grep -E '^(Uid|CapEff)'"],
                  user=m.Credentials(uid=1000, gid=1000))
    assert b"Uid:\t1000\t1000\t1000\t1000" in r.stdout
    assert b"CapEff:\t0000000000000000" in r.stdout


def test_rlimits(procs):
    m = procs.m
    r = procs.run(["sh", "-c", "ulimit -n; ulimit -Hn; ulimit -c"],
                  rlimits=[m.ResourceLimit(name="nofile", soft=123, hard=456),
                           m.ResourceLimit(name="core", soft=0)])
    assert r.stdout == b"123\n456\n0\n", r.stderr
    r = procs.run(["sh", "-c", "ulimit -c"], rlimits=[m.ResourceLimit(name="core", soft=2**64 - 1)])
    assert r.stdout == b"unlimited\n"
    bad = [m.ResourceLimit(name="nofiles", soft=1)]
    assert code(lambda: procs.run(["true"], rlimits=bad)) == grpc.StatusCode.INVALID_ARGUMENT
    bad = [m.ResourceLimit(name="nofile", soft=10, hard=5)]
    assert code(lambda: procs.run(["true"], rlimits=bad)) == grpc.StatusCode.INVALID_ARGUMENT
    # A CPU limit the process runs into: killed by SIGXCPU (or SIGKILL at the hard limit).
    r = procs.run(["sh", "-c", "while :; do :; done"], rlimits=[m.ResourceLimit(name="cpu", soft=1)],
                  timeout=30)
    assert r.exit.signal in (signal.SIGXCPU, signal.SIGKILL)
    assert r.exit.reason == m.EXIT_REASON_SIGNALED


def test_oom_score_adj(procs, sandboxd):
    assert procs.run(["cat", "/proc/self/oom_score_adj"]).stdout == b"1000\n"
    assert sandboxd.client().execute(["cat", "/proc/self/oom_score_adj"]).stdout == b"1000\n"
    own = int(open(f"/proc/{sandboxd.proc.pid}/oom_score_adj").read())
    status = open(f"/proc/{sandboxd.proc.pid}/status").read()
    cap_eff = int(next(ln for ln in status.splitlines() if ln.startswith("CapEff:")).split()[1], 16)
    if cap_eff & (1 << 24):  # CAP_SYS_RESOURCE: allowed to lower it
        assert own == -900
    else:
        assert any("cannot set our oom_score_adj to -900" in ln for ln in sandboxd.lines)


def cgroups_or_skip(d):
    """The daemon's cgroup line ("cgroups v1 for spawned processes: memory pids", then maybe
    "; no memory limits: <why>"), from its log; skips (saying why) without cgroups."""
    for ln in d.lines:
        if "no cgroups for spawned processes" in ln:
            pytest.skip("the kernel gives this daemon no cgroup: " + ln.split(": ", 1)[-1])
        if "cgroups v" in ln and "for spawned processes" in ln:
            return ln
    pytest.fail("the daemon did not say whether it has cgroups:\n" + d.log())


def controllers(line):
    """The controllers a cgroup line names: {"memory", "pids"} or fewer."""
    return set(line.split("for spawned processes:", 1)[1].split(";")[0].split())


def test_memory_limit_oom(sandboxd, procs):
    line = cgroups_or_skip(sandboxd)
    if "memory" not in controllers(line):
        pytest.skip("no memory controller: " + line)
    hog = ["python3", "-c", "b = bytearray(400 << 20); print('survived')"]
    r = procs.run(hog, limits=procs.m.Limits(memory_bytes=64 << 20), timeout=60)
    assert r.exit.reason == procs.m.EXIT_REASON_OOM_KILLED, r
    assert r.exit.signal == signal.SIGKILL and b"survived" not in r.stdout
    # Killed below a shell: the shell's 137 is told apart as an OOM kill too.
    r = procs.run(["sh", "-c", " ".join(hog[:2]) + " \"" + hog[2] + "\""],
                  limits=procs.m.Limits(memory_bytes=64 << 20), timeout=60)
    assert r.exit.exit_code == 137 and r.exit.reason == procs.m.EXIT_REASON_OOM_KILLED, r
    # The hog died, not the daemon; without a limit the same program runs.
    assert sandboxd.client().execute(["echo", "alive"]).stdout == b"alive\n"
    assert procs.run(hog, timeout=60).stdout == b"survived\n"


def test_pids_limit(sandboxd, procs):
    line = cgroups_or_skip(sandboxd)
    if "pids" not in controllers(line):
        pytest.skip("no pids controller: " + line)
    r = procs.run(["sh", "-c", "n=0; for i in $(seq 1 30); do sleep 5 & n=$((n+1)); done; echo $n"],
                  limits=procs.m.Limits(pids=8), timeout=60)
    assert r.exit.exit_code != 0 or int(r.stdout or b"0") < 30
    assert b"fork" in r.stderr.lower() or b"resource temporarily unavailable" in r.stderr.lower()
    assert sandboxd.client().execute(["echo", "alive"]).stdout == b"alive\n"


def test_timeout_holds_for_what_the_process_left_in_its_cgroup(sandboxd, procs, leftovers):
    # A fork bomb's top returns at once: its exit is its own (EXITED), but the timeout still
    # ends the tree it left, here a sleeper and the bomb itself within its pids limit.
    line = cgroups_or_skip(sandboxd)
    if "pids" not in controllers(line):
        pytest.skip("no pids controller: " + line)
    bomb = "sleep 1000 & echo $!; b() { b | b & }; b"
    p = procs.spawn(["sh", "-c", bomb], limits=procs.m.Limits(pids=16), timeout_ms=1500,
                    grace_ms=300)
    done = procs.wait(p.id)
    sleeper = int(procs.attach(p.id)[0])
    leftovers.add(sleeper)
    # Its own exit: 0, or 2 when the bomb had filled the pids limit before the top's last fork
    # (a loaded machine runs the children first), never a signal.
    assert done.exit.reason == procs.m.EXIT_REASON_EXITED and done.exit.exit_code in (0, 2), done
    assert not pid_gone(sleeper), "the sleeper died with the top"
    wait_until(lambda: pid_gone(sleeper), 20, what="the sleeper ended by the timeout")
    wait_until(lambda: any("timeout of 1500 ms: SIGKILL to its tree" in ln for ln in
                           sandboxd.lines), 10, what="the SIGKILL at the end of the grace")
    # The record still tells the process's own exit.
    assert procs.get(p.id).exit.reason == procs.m.EXIT_REASON_EXITED
    # What ends on its own before the deadline is left alone: no signal at the deadline. A
    # second job's deadline, a second later, tells when the first one's has passed.
    p = procs.spawn(["sh", "-c", "sleep 0.3 >/dev/null 2>&1 & echo $!"],
                    limits=procs.m.Limits(pids=16), timeout_ms=1500)
    later = procs.spawn(["sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!"],
                        limits=procs.m.Limits(pids=16), timeout_ms=2500, grace_ms=100)
    procs.wait(p.id)
    leftovers.add(int(procs.attach(p.id)[0]))
    procs.wait(later.id)
    leftovers.add(int(procs.attach(later.id)[0]))
    wait_until(lambda: any(f"job {later.id} (pid {later.pid}): timeout of 2500 ms: SIGKILL" in ln
                           for ln in sandboxd.lines), 20, what="the later deadline")
    assert not any(f"job {p.id} (pid {p.pid}): timeout" in ln for ln in sandboxd.lines)


def test_tree_kill_reaches_orphans_through_the_cgroup(sandboxd, procs, leftovers):
    cgroups_or_skip(sandboxd)
    # The shell exits at once; its setsid child is an orphan (re-parented to sandboxd) that
    # only the job's cgroup still ties to it.
    p = procs.spawn(["sh", "-c", "setsid sleep 1000 & echo $!"])
    done = procs.wait(p.id)
    orphan = int(procs.attach(p.id)[0])
    leftovers.add(orphan)
    assert not pid_gone(orphan)
    assert procs.signal(p.id, signal.SIGKILL, scope=procs.m.SIGNAL_SCOPE_TREE) >= 1
    wait_until(lambda: pid_gone(orphan), 10, what="the orphan gone")
    assert done.exit.exit_code == 0


def test_limits_refused_without_cgroups(sandboxd_factory, protos):
    d = sandboxd_factory(["--cgroups", "off"])
    procs = Procs(d.client().channel, protos)
    for lim in (procs.m.Limits(memory_bytes=1 << 30), procs.m.Limits(pids=100)):
        try:
            procs.run(["true"], limits=lim)
            pytest.fail("a limit without cgroups must be refused")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "unsupported" in e.details() and "--cgroups off" in e.details()
    # Without limits everything works, and tree kill falls back to the process walk.
    assert procs.run(["echo", "ok"]).stdout == b"ok\n"


def test_fd_limit_raised_for_us_not_for_children(sandboxd_factory, protos):
    import resource
    ours = resource.getrlimit(resource.RLIMIT_NOFILE)
    hard = ours[1]
    soft = min(ours[0], 1024) if hard > 1024 else max(ours[0] // 2, 1)
    if soft >= hard:
        pytest.skip(f"the hard fd limit ({hard}) leaves nothing to raise")
    # The daemon inherits a soft limit below the hard one.
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        d = sandboxd_factory()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, ours)
    limits = open(f"/proc/{d.proc.pid}/limits").read()
    line = next(ln for ln in limits.splitlines() if ln.startswith("Max open files"))
    assert line.split()[3:5] == [str(hard), str(hard)], line
    # Children start with the limit the daemon was started with; a request may change it.
    assert d.client().execute(["sh", "-c", "ulimit -n"]).stdout == f"{soft}\n".encode()
    procs = Procs(d.client().channel, protos)
    r = procs.run(["sh", "-c", "ulimit -n"], rlimits=[procs.m.ResourceLimit(name="nofile", soft=64)])
    assert r.stdout == b"64\n"


def test_leftovers_stay_within_limits(sandboxd, procs, leftovers):
    # A background process a run leaves behind keeps its cgroup (and so its limits) until it
    # ends; then the cgroup goes.
    cgroups_or_skip(sandboxd)
    r = procs.run(["sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!"],
                  limits=procs.m.Limits(pids=10))
    pid = int(r.stdout)
    leftovers.add(pid)
    line = next(ln for ln in open(f"/proc/{pid}/cgroup").read().splitlines()
                if ":pids:" in ln or ln.startswith("0::"))
    rel = line.split(":", 2)[2]
    assert "/sandboxd-" in rel, line
    mount = "/sys/fs/cgroup/pids" if ":pids:" in line else "/sys/fs/cgroup"
    cg = next(p for p in (Path(mount + rel), Path("/sys/fs/cgroup/unified" + rel)) if p.exists())
    assert (cg / "pids.max").read_text().strip() == "10"
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: pid_gone(pid), 10, what="the leftover gone")
    # The daemon sweeps empty cgroups a little after its processes end.
    sandboxd.client().execute(["true"])
    wait_until(lambda: not cg.exists(), 40, interval=0.2, what="the empty cgroup removed")


def test_remove_before_the_deadline_ends_the_leftovers(sandboxd, procs, leftovers):
    # A process with a timeout left a background job in its cgroup and exited; removing its
    # record before the deadline ends what it left (its deadline would otherwise be forgotten
    # and the job live on). Without a timeout, what it left is its own business.
    cgroups_or_skip(sandboxd)
    p = procs.spawn(["sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!"], timeout_ms=600000)
    procs.wait(p.id)
    kept = procs.spawn(["sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!"])
    procs.wait(kept.id)
    sleeper, free = int(procs.attach(p.id)[0]), int(procs.attach(kept.id)[0])
    leftovers.add(sleeper, free)
    procs.remove(p.id)
    procs.remove(kept.id)
    wait_until(lambda: pid_gone(sleeper), 10, what="the leftover of the removed job ended")
    time.sleep(0.5)
    assert not pid_gone(free), "a leftover without a deadline was killed"
