"""sandboxd.v1.Processes with the sync client: spawned processes that outlive their calls."""

from __future__ import annotations

import os

import pytest

import sandboxd
from sandboxd import errors
from sandboxd.types import ExitDetail, OutputChunk, Truncated


def collect(att):
    out = {"stdout": b"", "stderr": b""}
    events = []
    for ev in att:
        events.append(ev)
        if isinstance(ev, OutputChunk):
            out[ev.stream] += ev.data
    return out, events


def test_spawn_list_get_attach_wait(sb):
    p = sb.processes.spawn("echo out; echo err >&2; exit 3", tag="sdk-basic")
    assert p.id > 0 and p.info.tag == "sdk-basic" and p.info.command[-1].startswith("echo out")
    ex = p.wait(timeout=20)
    assert ex == ExitDetail(exit_code=3, signal=0, core_dumped=False, reason="exited")
    with p.attach() as att:
        out, _ = collect(att)
    assert out == {"stdout": b"out\n", "stderr": b"err\n"} and att.exit == ex
    listed = sb.processes.list(tag="sdk-basic")
    assert [i.id for i in listed] == [p.id] and listed[0].state == "exited"
    info = sb.processes.get(p.id)
    assert info.exit == ex and info.stdout.end == 4 and info.stderr.end == 4
    assert info.started_at and info.exited_at and info.exited_at >= info.started_at
    p.remove()
    with pytest.raises(errors.NotFoundError):
        sb.processes.get(p.id)


def test_outlives_the_client_and_reattaches_from_an_offset(daemon):
    with daemon.sandbox() as a:
        p = a.processes.spawn("printf abcdef; read x; printf ghi", stdin=True, tag="sdk-outlive")
        with p.attach() as att:
            first = next(iter(att))
        assert first == OutputChunk("stdout", 0, b"abcdef")
    # The first client is gone; the process still runs and a new one finds it.
    with daemon.sandbox() as b:
        q = b.processes.handle(p.id)
        assert q.info.running and q.info.stdout.end == 6
        with q.attach(stdout_offset=3, follow=False) as att:
            out, _ = collect(att)
        assert out["stdout"] == b"def" and att.exit is None
        q.write("go\n")
        with q.attach(stdout_offset=6) as att:
            out, _ = collect(att)
        assert out["stdout"] == b"ghi" and att.exit.reason == "exited"


def test_truncation_is_reported(sb):
    p = sb.processes.spawn("head -c 3000000 /dev/zero")
    p.wait(20)
    with p.attach() as att:
        out, events = collect(att)
    assert isinstance(events[0], Truncated) and events[0].start == 0
    assert events[0].end == 3000000 - len(out["stdout"]) and out["stdout"]
    assert p.refresh().stdout.end == 3000000


def test_signals_any_signal_and_tree(sb):
    p = sb.processes.spawn("trap 'echo usr1; exit 9' USR1; echo armed; "
                           "while :; do sleep 0.05; done")
    with p.attach() as att:
        assert next(iter(att)).data == b"armed\n"
    assert p.signal("SIGUSR1") >= 1
    assert p.wait(20) == ExitDetail(9, 0, False, "exited")
    t = sb.processes.spawn(["sh", "-c", "setsid sleep 60 & sleep 60 & echo up; wait"])
    with t.attach() as att:
        assert next(iter(att)).data == b"up\n"
    assert t.kill(scope="tree") >= 3  # the shell, its sleep, and the one in a new session
    ex = t.wait(20)
    assert (ex.exit_code, ex.signal, ex.reason) == (-1, 9, "killed")
    with pytest.raises(ValueError):
        t.signal(9, scope="galaxy")


def test_timeout_stdin_and_pty(sb):
    p = sb.processes.spawn("exec sleep 60", timeout=0.3, grace=0.2)
    assert p.wait(20).reason == "timed_out"
    c = sb.processes.spawn(["cat"], stdin=True)
    c.write(b"x" * (3 << 20) + b"end", eof=True)
    assert c.wait(20).exit_code == 0
    assert c.refresh().stdout.end == (3 << 20) + 3
    t = sb.processes.spawn("stty size; read x; stty size", pty=(24, 80))
    with t.attach() as att:
        it = iter(att)
        got = b""
        while b"24 80" not in got:
            got += next(it).data
        t.resize(30, 100)
        t.write("\n")
        got = b"".join(ev.data for ev in it)
    assert b"30 100" in got and att.exit.exit_code == 0


def test_run_with_exit_detail_user_and_limits(sb):
    r = sb.processes.run("echo hi; echo e >&2; exit 2")
    assert (r.exit_code, r.stdout, r.stderr, r.exit.reason) == (2, b"hi\n", b"e\n", "exited")
    r = sb.processes.run(["cat"], stdin=b"in")
    assert r.stdout == b"in"
    r = sb.processes.run("seq 1 100000", max_output=10)
    assert r.stdout_truncated and r.stdout == b"\n99999\n100000\n"[-10:]
    assert r.stdout_total == len("".join(f"{i}\n" for i in range(1, 100001)))
    assert r.truncated == {"stdout": r.stdout_total - 10}
    r = sb.processes.run("sleep 30", timeout=0.3, grace=0.2)
    assert r.timed_out and r.exit.reason == "timed_out"
    r = sb.processes.run("ulimit -n", rlimits={"nofile": 77})
    assert r.stdout == b"77\n"
    if os.geteuid() == 0:
        r = sb.processes.run("id -u; id -g", user=(65534, 65534))
        assert r.stdout == b"65534\n65534\n"
    with pytest.raises(errors.ProcessExitError):
        sb.processes.run("exit 1", check=True)


def test_errors(sb):
    with pytest.raises(errors.NotFoundError):
        sb.processes.get(999999)
    with pytest.raises(errors.NotFoundError):
        sb.processes.spawn(["/no/such/binary"])
    p = sb.processes.spawn("exec sleep 60")
    with pytest.raises(errors.TimeoutError):
        p.wait(timeout=0.2)
    with pytest.raises(errors.SandboxError) as ei:
        p.remove()  # still running
    assert ei.value.code in ("FAILED_PRECONDITION", "CONFLICT")
    p.kill()
    assert p.wait(20).reason == "killed"


def test_reference_daemon_lacks_processes():
    # A daemon without sandboxd.v1 answers UNIMPLEMENTED: shown with a plain grpc server.
    import grpc
    from concurrent import futures

    s = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = s.add_insecure_port("127.0.0.1:0")
    s.start()
    try:
        with sandboxd.Sandbox(grpc_port=port, rest_port=1, timeout=5) as c:
            with pytest.raises(errors.UnimplementedError):
                c.processes.list()
    finally:
        s.stop(0)


def seccomp_filters(pid="self"):
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("Seccomp_filters:"):
                return int(ln.split()[1])
    pytest.skip("this kernel does not show Seccomp_filters")


PROBE = "awk '/^Seccomp_filters:/ {print $2}' /proc/self/status"


def test_seccomp_per_process(sb, daemon, daemon_factory):
    own = seccomp_filters(daemon.proc.pid)
    # Under the daemon's default profile a process gets one filter more than the daemon has;
    # "off" drops it for that process alone.
    assert sb.processes.run(PROBE).stdout == f"{own + 1}\n".encode()
    assert sb.processes.run(PROBE, seccomp="default").stdout == f"{own + 1}\n".encode()
    assert sb.processes.run(PROBE, seccomp="off").stdout == f"{own}\n".encode()
    p = sb.processes.spawn(PROBE, seccomp="off")
    p.wait(20)
    with p.attach() as att:
        assert b"".join(ev.data for ev in att) == f"{own}\n".encode()
    with pytest.raises(errors.InvalidArgumentError) as ei:
        sb.processes.run(PROBE, seccomp="strict")
    assert "seccomp" in ei.value.message
    # A daemon started with --seccomp=off still gives the default profile to who asks.
    off = daemon_factory(["--seccomp", "off"])
    with off.sandbox() as s:
        assert s.processes.run(PROBE).stdout == f"{own}\n".encode()
        assert s.processes.run(PROBE, seccomp="default").stdout == f"{own + 1}\n".encode()
