"""Processes with the sync client against a real sandboxd."""

from __future__ import annotations

import os
import sys
import time

import pytest

import sandboxd
from sandboxd import errors

PY = sys.executable


def test_run_captures_exit_code_stdout_stderr(sb):
    r = sb.run(["sh", "-c", "echo out; echo err >&2; exit 7"])
    assert (r.exit_code, r.stdout, r.stderr) == (7, b"out\n", b"err\n")
    assert not r.ok and not r.timed_out and r.process_id > 0


def test_run_string_goes_through_sh(sb):
    assert sb.run("echo $((6 * 7))").stdout == b"42\n"


def test_run_env_and_cwd(sb, daemon, area):
    r = sb.run(["sh", "-c", "echo $SDK_A; pwd"], env={"SDK_A": "a b=c"}, cwd=area)
    assert r.stdout.decode().splitlines() == ["a b=c", str(daemon.root / area)]


def test_run_binary_output_intact(sb):
    r = sb.run([PY, "-c", "import sys; sys.stdout.buffer.write(bytes(range(256)) * 64)"])
    assert r.stdout == bytes(range(256)) * 64


def test_run_output_cap_truncates_client_side(sb):
    r = sb.run("head -c 300000 /dev/zero; head -c 10 /dev/zero >&2", max_output=1000)
    assert r.exit_code == 0
    assert r.stdout == b"\0" * 1000 and r.stdout_truncated
    assert r.stderr == b"\0" * 10 and not r.stderr_truncated


def test_run_timeout_kills_the_process(sb):
    r = sb.run("echo started; exec sleep 60", timeout=0.5)
    # What it printed before the kill is kept (if it got that far under load).
    assert r.timed_out and r.exit_code == -1 and r.stdout in (b"", b"started\n")
    assert not r.ok


def test_run_stdin(sb):
    r = sb.run(["sh", "-c", "tr a-z A-Z"], stdin=b"hello stdin")
    assert r.stdout == b"HELLO STDIN"


def test_run_check_raises_process_exit_error(sb):
    with pytest.raises(errors.ProcessExitError) as ei:
        sb.run("echo no; exit 3", check=True)
    assert ei.value.exit_code == 3 and ei.value.result.stdout == b"no\n"
    assert sb.run("true", check=True).ok


def test_execute_unary(sb):
    r = sb.execute(["sh", "-c", "echo x; echo y >&2; exit 2"])
    assert (r.exit_code, r.stdout, r.stderr) == (2, b"x\n", b"y\n")


def test_execute_says_what_the_daemon_dropped(daemon_factory):
    # The daemon keeps 1 MiB per stream here; what it dropped comes in the call's trailers.
    sb = daemon_factory(["--max-output-bytes", str(1 << 20)]).sandbox()
    with pytest.warns(sandboxd.OutputTruncatedWarning, match="bytes of stdout") as w:
        r = sb.execute("head -c 3000000 /dev/zero; head -c 1048580 /dev/zero >&2")
    assert w[0].filename == __file__, "the warning points at the caller"
    assert (len(r.stdout), len(r.stderr)) == (1 << 20, 1 << 20)
    assert r.truncated == {"stdout": 3000000 - (1 << 20), "stderr": 4}
    assert r.stdout_truncated and r.stderr_truncated


def test_execute_under_the_cap_is_not_truncated(sb, recwarn):
    r = sb.execute("head -c 100000 /dev/zero")
    assert len(r.stdout) == 100000
    assert r.truncated == {} and not r.stdout_truncated and not r.stderr_truncated
    assert not [w for w in recwarn if issubclass(w.category, sandboxd.OutputTruncatedWarning)]


def test_start_streams_output_before_exit(sb):
    # The process prints, then blocks on stdin: the first line must arrive while it runs.
    with sb.start("echo first; read line; echo got $line; echo err >&2") as p:
        ev = p.read(timeout=10)
        assert ev == sandboxd.OutputEvent("stdout", b"first\n")
        assert p.exit_status is None
        p.write("second\n")
        rest = list(p)
        assert b"".join(e.data for e in rest if e.stream == "stdout") == b"got second\n"
        assert b"".join(e.data for e in rest if e.stream == "stderr") == b"err\n"
        assert p.exit_status == sandboxd.ExitStatus(0)
        assert p.wait() == sandboxd.ExitStatus(0)


def test_start_long_output_streams_in_order(sb):
    n = 20000
    with sb.start(["seq", "1", str(n)]) as p:
        data = b"".join(e.data for e in p)
    assert data.decode().split() == [str(i) for i in range(1, n + 1)]


def test_start_large_output_through_iteration(sb):
    total = 0
    with sb.start("head -c 67108864 /dev/zero") as p:
        for ev in p:
            total += len(ev.data)
        assert p.wait().exit_code == 0
    assert total == 64 << 20


def test_stdin_interactive_round_trips(sb):
    with sb.start(["cat"]) as p:
        for i in range(20):
            msg = f"line {i}\n".encode()
            p.write(msg)
            got = b""
            while len(got) < len(msg):
                got += p.read(timeout=10).data
            assert got == msg
        p.close_stdin()
        assert p.wait(timeout=10).exit_code == 0


def test_pty_tty_size_and_resize(sb):
    with sb.start("tty; stty size; read x; stty size", pty=(24, 80)) as p:
        out = b""
        while b"24 80" not in out:
            out += p.read(timeout=10).data
        assert b"/dev/pts/" in out
        p.resize(40, 132)
        p.write("\n")
        rest = b"".join(e.data for e in p)
        assert b"40 132" in rest
        assert p.exit_status.exit_code == 0


def test_pty_merges_stderr(sb):
    with sb.start("echo to-err >&2", pty=(24, 80)) as p:
        evs = list(p)
    assert {e.stream for e in evs} == {"stdout"}
    assert b"to-err" in b"".join(e.data for e in evs)


def test_signals_term_int_kill(sb):
    with sb.start("exec sleep 60") as p:
        p.terminate()
        assert p.wait(10).exit_code == -1
    with sb.start("trap 'echo caught INT; exit 5' INT; echo armed; while :; do sleep 0.05; done") as p:
        assert p.read(10).data == b"armed\n"
        p.signal("SIGINT")
        assert b"".join(e.data for e in p) == b"caught INT\n"
        assert p.exit_status.exit_code == 5
    with sb.start("trap '' TERM; echo armed; exec sleep 60") as p:
        assert p.read(10).data == b"armed\n"
        p.kill()
        assert p.wait(10).exit_code == -1


def test_wait_timeout_leaves_process_running(sb):
    with sb.start("exec sleep 60") as p:
        with pytest.raises(errors.TimeoutError):
            p.wait(timeout=0.2)
        assert p.exit_status is None
        p.kill()
        assert p.wait(10).exit_code == -1


def test_close_kills_running_process(sb):
    # The shell tells its OS pid (same machine), then would run for a minute.
    with sb.start("echo $$; exec sleep 60") as p:
        pid = int(p.read(10).data)
        assert os.path.exists(f"/proc/{pid}")
    # The stream went away: the daemon kills the group (bounded wait, polled).
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and _state(pid) != "Z":
        assert time.monotonic() < deadline, f"process {pid} still alive after close"
        time.sleep(0.02)


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
        return data[data.rindex(")") + 2]
    except (FileNotFoundError, ProcessLookupError):
        return None


def test_typed_errors(sb):
    with pytest.raises(errors.NotFoundError) as ei:
        sb.run(["/no/such/binary"])
    assert ei.value.code == "NOT_FOUND" and "no/such/binary" in ei.value.message
    with pytest.raises(errors.NotFoundError):
        sb.run("true", cwd="no-such-dir")
    with sb.start("true") as p:
        p.wait(10)
        with pytest.raises(errors.NotFoundError):
            p.write("late")
        with pytest.raises(errors.NotFoundError):
            p.signal(15)
    with sb.start("read x") as p:
        with pytest.raises(errors.FailedPreconditionError) as ei:
            p.resize(10, 10)
        assert ei.value.code == "FAILED_PRECONDITION"
        with pytest.raises(errors.InvalidArgumentError):
            p.signal("SIGUSR1")  # process.v1 carries INT, KILL and TERM only
        p.close_stdin()
        assert p.wait(10).exit_code != -1
    with pytest.raises(ValueError):
        sb.run([])
    with pytest.raises(ValueError):
        sandboxd.Sandbox(timeout=0)


def test_unreachable_daemon_is_unavailable():
    with sandboxd.Sandbox("127.0.0.1", grpc_port=1, rest_port=1, timeout=2) as s:
        with pytest.raises(errors.UnavailableError):
            s.run("true")
        with pytest.raises(errors.UnavailableError):
            s.files.stat("x")


def test_unix_socket(daemon):
    with sandboxd.Sandbox(unix_socket=daemon.socket, rest_port=daemon.rest_port) as s:
        assert s.run("echo via-unix").stdout == b"via-unix\n"


def test_token_is_accepted(daemon):
    # The daemon does not check tokens yet; a client with one must keep working against it.
    with daemon.sandbox(token="s3cret") as s:
        assert s.run("echo ok").stdout == b"ok\n"
        assert s.files.health().status == "ok"


def test_run_large_stdin_through_a_filter(sb):
    # 20 MiB in while the same comes out: stdin goes in pieces, beside the output reader.
    data = os.urandom(10 << 20) * 2
    r = sb.run(["cat"], stdin=data, max_output=len(data))
    assert r.exit_code == 0 and len(r.stdout) == len(data) and r.stdout == data


def test_closing_the_sandbox_ends_its_processes(daemon):
    s = daemon.sandbox()
    p = s.start("echo up; exec sleep 60")
    assert p.read(10).data == b"up\n"
    q = s.start("head -c 10000000 /dev/zero")  # never read: its handle's queue fills up
    s.close()
    assert p.exit_status is None
    with pytest.raises(errors.UnavailableError):
        p.write("x")
    with pytest.raises(errors.UnavailableError):
        s.run("true")
    assert not p._t.is_alive() and not q._t.is_alive()
