"""sandbox.commands and sandbox.pty of the unmodified E2B SDK against sandboxd's E2B port."""

import os
import re
import time

import pytest
from e2b import PtySize
from e2b.exceptions import (AuthenticationException, NotFoundException, RateLimitException,
                            TimeoutException)
from e2b.sandbox.commands.command_handle import CommandExitException

from conftest import sdk_sandbox


def test_run_output_and_exit_code(sandbox):
    r = sandbox.commands.run("echo out; echo err >&2")
    assert (r.stdout, r.stderr, r.exit_code) == ("out\n", "err\n", 0)


def test_failed_command_raises_the_sdks_exception(sandbox):
    with pytest.raises(CommandExitException) as e:
        sandbox.commands.run("echo gone >&2; exit 3")
    assert e.value.exit_code == 3
    assert e.value.stderr == "gone\n"


def test_env_and_cwd(sandbox, tmp_path):
    r = sandbox.commands.run("echo $FOO; pwd", envs={"FOO": "bar baz"}, cwd=str(tmp_path))
    assert r.stdout == f"bar baz\n{tmp_path}\n"


def test_missing_cwd_is_invalid_argument(sandbox):
    from e2b.exceptions import InvalidArgumentException
    with pytest.raises(InvalidArgumentException, match="no-such-dir"):
        sandbox.commands.run("true", cwd="/no-such-dir")


def test_timeout_raises_and_kills(sandbox, tmp_path):
    marker = tmp_path / "pid"
    # 3 s: bash -l alone takes a quarter of a second here, more on a loaded machine.
    with pytest.raises(TimeoutException):
        sandbox.commands.run(f"echo $$ > {marker}; exec sleep 30", timeout=3)
    pid = int(marker.read_text())
    # Connect-Timeout-Ms is the process's timeout, as envd treats it: it is killed.
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}")


def test_background_and_wait(sandbox):
    h = sandbox.commands.run("read x; echo got $x", background=True, stdin=True)
    assert h.pid > 0
    sandbox.commands.send_stdin(h.pid, "it\n")
    r = h.wait()
    assert (r.stdout, r.exit_code) == ("got it\n", 0)


def test_stdin_and_close(sandbox):
    h = sandbox.commands.run("cat; echo done", background=True, stdin=True)
    sandbox.commands.send_stdin(h.pid, "one\n")
    sandbox.commands.send_stdin(h.pid, b"two\n")
    sandbox.commands.close_stdin(h.pid)
    assert h.wait().stdout == "one\ntwo\ndone\n"


def test_stdin_off_reads_eof(sandbox):
    assert sandbox.commands.run("cat; echo eof").stdout == "eof\n"


def test_list_and_kill(sandbox):
    h = sandbox.commands.run("sleep 30", background=True, timeout=0)
    procs = {p.pid: p for p in sandbox.commands.list()}
    assert h.pid in procs
    assert procs[h.pid].cmd == "/bin/bash"
    assert procs[h.pid].args == ["-l", "-c", "sleep 30"]
    assert sandbox.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException) as e:
        h.wait()
    assert e.value.exit_code == -1
    assert h.pid not in {p.pid for p in sandbox.commands.list()}


def test_list_shows_envs_and_cwd_as_start_was_given_them(sandbox, tmp_path):
    """envd's List answers each process's config as its Start asked: the request's own envs
    (not the whole environment) and its cwd, unset when it named none."""
    h = sandbox.commands.run("sleep 30", background=True, timeout=0, cwd=str(tmp_path),
                             envs={"A_VAR": "a value=with =", "EMPTY": ""})
    plain = sandbox.commands.run("sleep 30", background=True, timeout=0)
    try:
        procs = {p.pid: p for p in sandbox.commands.list()}
        assert procs[h.pid].envs == {"A_VAR": "a value=with =", "EMPTY": ""}
        assert procs[h.pid].cwd == str(tmp_path)
        assert (procs[plain.pid].envs, procs[plain.pid].cwd) == ({}, None)
    finally:
        assert sandbox.commands.kill(h.pid) and sandbox.commands.kill(plain.pid)


def test_kill_of_an_unknown_pid_is_false(sandbox):
    assert sandbox.commands.kill(2**31 - 7) is False


def test_kill_takes_the_tree(sandbox, tmp_path):
    marker = tmp_path / "child"
    h = sandbox.commands.run(f"sleep 30 & echo $! > {marker}; wait", background=True, timeout=0)
    deadline = time.monotonic() + 10
    while not (marker.exists() and marker.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(marker.read_text())
    assert sandbox.commands.kill(h.pid)
    with pytest.raises(CommandExitException):
        h.wait()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{child}"), "the background child outlived the kill"


def test_connect_to_a_running_command(sandbox):
    h = sandbox.commands.run("while read x; do echo seen $x; done", background=True, stdin=True,
                             timeout=0)
    sandbox.commands.send_stdin(h.pid, "before\n")
    h2 = sandbox.commands.connect(h.pid)
    assert h2.pid == h.pid
    sandbox.commands.send_stdin(h.pid, "after\n")
    sandbox.commands.close_stdin(h.pid)
    r2 = h2.wait()
    # Output from the connection on, as envd streams it (what came before is not sent again).
    assert "seen after\n" in r2.stdout
    assert h.wait().stdout == "seen before\nseen after\n"


def test_connect_to_an_unknown_pid_is_not_found(sandbox):
    with pytest.raises(NotFoundException):
        sandbox.commands.connect(2**31 - 7)


def test_unknown_user_is_the_sdks_authentication_error(sandbox):
    with pytest.raises(AuthenticationException, match="nosuchuser"):
        sandbox.commands.run("true", user="nosuchuser")


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_user_switch(sandbox):
    r = sandbox.commands.run("id -un; echo $HOME; echo $USER", user="nobody", cwd="/")
    assert r.stdout.split("\n")[0] == "nobody"
    assert r.stdout.split("\n")[2] == "nobody"


def test_pty_create_resize_input(sandbox):
    pty = sandbox.pty.create(size=PtySize(rows=24, cols=80))
    sandbox.pty.resize(pty.pid, PtySize(rows=33, cols=101))
    sandbox.pty.send_stdin(pty.pid, b"stty size; exit 7\n")
    out = []
    with pytest.raises(CommandExitException) as e:
        pty.wait(on_pty=out.append)
    assert e.value.exit_code == 7
    assert b"33 101" in b"".join(out)


def test_many_runs_leave_nothing(sandbox):
    for i in range(20):
        assert sandbox.commands.run(f"echo {i}").stdout == f"{i}\n"
    assert sandbox.commands.list() == []


def test_large_output_is_whole(sandbox):
    r = sandbox.commands.run("head -c 3000000 /dev/zero | tr '\\0' x")
    assert r.stdout == "x" * 3000000


def test_send_stdin_large_and_past_the_bound(sandbox):
    """One send_stdin is one SendInput message, its bytes base64 in JSON: 16 MiB goes whole;
    past --e2b-max-message-bytes (32 MiB of message) it is Connect's resource_exhausted, which
    the SDK calls RateLimitException (envd sets no bound)."""
    h = sandbox.commands.run("wc -c", background=True, stdin=True)
    with pytest.raises(RateLimitException, match="larger than the limit"):
        sandbox.commands.send_stdin(h.pid, "x" * (25 << 20))
    sandbox.commands.send_stdin(h.pid, "x" * (16 << 20))
    sandbox.commands.close_stdin(h.pid)
    assert h.wait().stdout.strip() == str(16 << 20)


def test_send_stdin_waits_for_the_process_to_read(sandbox):
    """As envd's write to the pipe: send_stdin is answered once the process has the bytes, so
    one that does not read holds the call (and the daemon holds one message, not all sent)."""
    h = sandbox.commands.run("sleep 30", background=True, stdin=True, timeout=0)
    try:
        with pytest.raises(TimeoutException):
            sandbox.commands.send_stdin(h.pid, "x" * (1 << 20), request_timeout=1)  # > a pipe
    finally:
        assert sandbox.commands.kill(h.pid)


def test_stream_input(sandbox):
    h = sandbox.commands.run("cat", background=True, stdin=True)
    sandbox.commands.stream_input(h.pid, ["a\n", b"b\n", "c" * 100000 + "\n"])
    sandbox.commands.close_stdin(h.pid)
    assert h.wait().stdout == "a\nb\n" + "c" * 100000 + "\n"


def test_stream_input_to_an_unknown_pid_is_not_found(sandbox):
    with pytest.raises(NotFoundException):
        sandbox.commands.stream_input(2**31 - 7, ["x"])


def test_parallel_commands(sandbox):
    from concurrent.futures import ThreadPoolExecutor

    def one(i):
        h = sandbox.commands.run(f"read x; echo $x {i}; echo err {i} >&2", background=True,
                                 stdin=True)
        sandbox.commands.send_stdin(h.pid, f"in{i}\n")
        r = h.wait()
        return r.stdout, r.stderr

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(48)))
    assert [out for out, _ in results] == [f"in{i} {i}\n" for i in range(48)]
    # stderr whole and each process's own; commands.run is `bash -l`, whose login profile may
    # complain first on a busy machine (a pyenv in root's .bashrc racing for its rehash lock)
    errs = [[x for x in err.splitlines() if re.fullmatch(r"err \d+", x)] for _, err in results]
    assert errs == [[f"err {i}"] for i in range(48)]
    assert all(err.endswith(f"err {i}\n") for i, (_, err) in enumerate(results))
    assert sandbox.commands.list() == []
