"""process.v1.ProcessService driven with grpcio against the real daemon."""

import base64
import json
import os
import re
import select
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from conftest import pid_cmdline, pid_gone, pid_state, sha256, status_of, wait_until

SC = grpc.StatusCode
PY = sys.executable


@pytest.fixture(scope="module")
def root(sandboxd):
    """The daemon's root, with a small tree the cwd tests use."""
    r = sandboxd.root
    (r / "sub" / "dir").mkdir(parents=True, exist_ok=True)
    for name, target in [("link_tmp", "/tmp"), ("link_root", "/"), ("link_up", ".."),
                         ("link_up_sub", "../" + r.name + "/../.."),
                         ("link_in_abs", str(r / "sub")), ("link_in_rel", "sub/dir")]:
        p = r / name
        if not p.is_symlink():
            p.symlink_to(target)
    return r


# ---------------------------------------------------------------------------------------------
# Execute


def test_echo(client):
    r = client.execute(["echo", "hello", "world"])
    assert (r.exit_code, r.stdout, r.stderr) == (0, b"hello world\n", b"")


def test_exit_codes_0_to_255(client):
    def one(n):
        r = client.execute(["sh", "-c", f"exit {n}"])
        return n, r.exit_code, r.stdout, r.stderr

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, range(256)))
    wrong = [(n, code) for n, code, out, err in results if code != n or out or err]
    assert not wrong, f"(expected, got) exit codes: {wrong[:20]}"


def test_stderr_separate_from_stdout(client):
    r = client.execute(["sh", "-c", "echo out; echo err >&2; printf 'more err' >&2; exit 7"])
    assert r.exit_code == 7
    assert r.stdout == b"out\n"
    assert r.stderr == b"err\nmore err"


def test_binary_output_is_not_mangled(client):
    data = bytes(range(256)) * 4
    r = client.execute([PY, "-c", "import sys; sys.stdout.buffer.write(bytes(range(256)) * 4)"])
    assert r.exit_code == 0 and r.stdout == data


def test_execute_killed_by_signal_exit_code_is_minus_1(client):
    r = client.execute(["sh", "-c", "kill -KILL $$"])
    assert r.exit_code == -1


def test_env_vars_add_to_daemon_env(client):
    r = client.execute(["env"], env={"SBX_ITEST_REQ": "a b=c", "SBX_ITEST_OVERRIDE": "req-value"})
    assert r.exit_code == 0
    lines = r.stdout.decode().splitlines()
    assert "SBX_ITEST_REQ=a b=c" in lines
    # The daemon's own environment is still there ...
    assert "SBX_ITEST_DAEMON_VAR=from-daemon" in lines
    assert any(ln.startswith("PATH=") for ln in lines)
    # ... and a request variable wins over the daemon's, with no duplicate left behind.
    assert [ln for ln in lines if ln.startswith("SBX_ITEST_OVERRIDE=")] == ["SBX_ITEST_OVERRIDE=req-value"]


def test_env_without_request_vars_is_daemon_env(client):
    r = client.execute(["env"])
    lines = r.stdout.decode().splitlines()
    assert "SBX_ITEST_DAEMON_VAR=from-daemon" in lines
    assert "SBX_ITEST_OVERRIDE=daemon-value" in lines


def test_children_get_no_daemon_fds(client):
    """Only stdin, stdout and stderr reach a child (ls adds fd 3 for the directory it reads)."""
    r = client.execute(["ls", "/proc/self/fd"])
    assert r.stdout.split() == [b"0", b"1", b"2", b"3"]
    s = client.start(["ls", "/proc/self/fd"]).wait_done()
    assert s.stdout().split() == [b"0", b"1", b"2", b"3"]
    s = client.start(["ls", "/proc/self/fd"], pty=(24, 80)).wait_done()
    assert s.stdout().split() == [b"0", b"1", b"2", b"3"]


def test_children_have_default_signal_state(client):
    """The daemon blocks signals (signalfd) and ignores SIGPIPE; none of that reaches a child."""
    r = client.execute(["grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"])
    assert r.stdout.decode().split() == ["SigBlk:", "0" * 16, "SigIgn:", "0" * 16]
    # A writer to a closed pipe dies of SIGPIPE quietly (with SIGPIPE ignored, yes would report
    # "Broken pipe" on stderr).
    r = client.execute(["sh", "-c", "yes | head -c 1 >/dev/null; echo done"])
    assert (r.stdout, r.stderr) == (b"done\n", b"")


def test_child_is_a_process_group_leader(client):
    r = client.execute(["sh", "-c", "ps -o pid=,pgid= -p $$"])
    pid, pgid = r.stdout.split()
    assert pid == pgid


def test_pwd_env_matches_cwd(client, root):
    r = client.execute(["sh", "-c", 'printf %s "$PWD"'], cwd="sub")
    assert r.stdout.decode() == str(root / "sub")
    r = client.execute(["sh", "-c", 'printf %s "$PWD"'])
    assert r.stdout.decode() == str(root)


def test_cwd_default_is_root(client, root):
    r = client.execute(["pwd", "-P"])
    assert (r.exit_code, r.stdout.decode().strip()) == (0, str(root))


@pytest.mark.parametrize("cwd,expect", [
    ("sub", "sub"),
    ("sub/dir", "sub/dir"),
    ("./sub//dir/", "sub/dir"),
    ("sub/dir/..", "sub"),
    (".", ""),
    ("", ""),
    ("/sub/dir", "sub/dir"),  # absolute paths are confined: taken relative to the root
    ("<root>/sub", "sub"),  # an absolute path under the root
    ("<root>", ""),
    ("link_in_abs", "sub"),  # an absolute symlink that stays inside the root
    ("link_in_rel", "sub/dir"),
])
def test_cwd_inside_root(client, root, cwd, expect):
    cwd = cwd.replace("<root>", str(root))
    r = client.execute(["pwd", "-P"], cwd=cwd)
    want = str(root / expect) if expect else str(root)
    assert (r.exit_code, r.stdout.decode().strip(), r.stderr) == (0, want, b"")


@pytest.mark.parametrize("cwd", [
    "..", "../..", "sub/../..", "sub/dir/../../..", "../" + "x",
    "link_tmp", "link_root", "link_up", "link_up_sub", "link_tmp/", "link_root/tmp",
    "sub/../link_root", "<root>/link_tmp", "<root>/link_up",
])
def test_cwd_escaping_root_is_permission_denied(client, root, cwd):
    cwd = cwd.replace("<root>", str(root))
    code, details, r = status_of(lambda: client.execute(["pwd", "-P"], cwd=cwd))
    assert code == SC.PERMISSION_DENIED, f"cwd {cwd!r}: {code} {details!r} {r}"
    # The same check guards Start.
    s = client.start(["pwd", "-P"], cwd=cwd).wait_done()
    assert s.error is not None and s.error.code() == SC.PERMISSION_DENIED, s.summary()
    assert s.events == []


def test_cwd_missing_dir_is_not_found(client):
    code, details, _ = status_of(lambda: client.execute(["true"], cwd="no/such/dir"))
    assert code == SC.NOT_FOUND, details


def test_missing_binary_is_not_found(client):
    code, details, _ = status_of(lambda: client.execute(["no-such-binary-xyz"]))
    assert code == SC.NOT_FOUND, details
    assert "no-such-binary-xyz" in details
    code, details, _ = status_of(lambda: client.execute(["/no/such/path"]))
    assert code == SC.NOT_FOUND, details
    s = client.start(["no-such-binary-xyz"]).wait_done()
    assert s.error is not None and s.error.code() == SC.NOT_FOUND, s.summary()
    assert s.events == []


def test_cwd_that_is_a_file_is_failed_precondition(client, root):
    """Deliberately not the reference's INTERNAL: the request is wrong, not the daemon."""
    (root / "plain.txt").write_text("a file\n")
    code, details, _ = status_of(lambda: client.execute(["pwd"], cwd="plain.txt"))
    assert code == SC.FAILED_PRECONDITION, details
    assert details.startswith("failed to execute command: "), details


def test_command_is_looked_up_in_the_request_path(client, root):
    """Deliberately unlike the reference (which searches the daemon's PATH): the command is found
    where the process's own PATH says, as a shell would."""
    bindir = root / "mybin"
    bindir.mkdir(exist_ok=True)
    tool = bindir / "mytool"
    tool.write_text("#!/bin/sh\necho from mytool\n")
    tool.chmod(0o755)
    r = client.execute(["mytool"], env={"PATH": f"{bindir}:/usr/bin:/bin"})
    assert (r.exit_code, r.stdout) == (0, b"from mytool\n")
    code, details, _ = status_of(lambda: client.execute(["echo", "x"], env={"PATH": "/nonexistent"}))
    assert code == SC.NOT_FOUND, details


def test_failed_start_takes_no_id(client):
    """Deliberately unlike the reference: ids stay dense, a Start that fails to spawn takes none."""
    first = client.start(["true"]).wait_done().events[0][1]
    s = client.start(["no-such-binary-xyz"]).wait_done()
    assert s.error is not None and s.error.code() == SC.NOT_FOUND
    second = client.start(["true"]).wait_done().events[0][1]
    assert second == first + 1, (first, second)


def test_non_executable_file_is_permission_denied(client, root):
    (root / "plain.txt").write_text("not a program\n")
    code, details, _ = status_of(lambda: client.execute(["./plain.txt"]))
    assert code == SC.PERMISSION_DENIED, details


@pytest.mark.parametrize("variant", ["empty-command", "no-config"])
def test_empty_command_is_invalid_argument(client, variant):
    pb = client.pb
    req = pb.ExecuteRequest() if variant == "no-config" else pb.ExecuteRequest(config=pb.ProcessConfig(cwd="sub"))
    code, details, _ = status_of(lambda: client.execute_req(req))
    assert code == SC.INVALID_ARGUMENT, details
    sreq = pb.StartRequest() if variant == "no-config" else pb.StartRequest(config=pb.ProcessConfig())
    s = client.start_req(sreq).wait_done()
    assert s.error is not None and s.error.code() == SC.INVALID_ARGUMENT, s.summary()


# ---------------------------------------------------------------------------------------------
# Start


def test_start_event_order(client):
    s = client.start(["sh", "-c", "echo a; echo b >&2; echo c; exit 3"]).wait_done()
    assert s.error is None, s.error
    kinds = s.kinds()
    assert kinds[0] == "init" and kinds.count("init") == 1, s.summary()
    assert s.events[0][1] >= 1
    assert kinds[-1] == "exit" and kinds.count("exit") == 1, s.summary()
    assert set(kinds[1:-1]) <= {"stdout", "stderr"}, s.summary()
    assert all(v for k, v in s.events if k in ("stdout", "stderr")), "an empty output chunk"
    assert (s.stdout(), s.stderr(), s.exit_code()) == (b"a\nc\n", b"b\n", 3)


def test_start_ids_are_distinct_and_positive(client):
    ids = [client.start(["true"]).wait_done().events[0][1] for _ in range(5)]
    assert all(i >= 1 for i in ids) and len(set(ids)) == 5, ids
    assert ids == sorted(ids), ids


def test_stdin_round_trip_with_eof(client):
    s = client.start(["cat"])
    pid = s.wait_init()
    client.write_stdin(pid, b"hello\n")
    s.wait_stdout(lambda out: out == b"hello\n", what="the first echo")
    client.write_stdin(pid, b"")  # an empty write is fine
    client.write_stdin(pid, b"world, no newline")
    s.wait_stdout(lambda out: out.endswith(b"no newline"), what="the second echo")
    assert not s.done
    client.write_stdin(pid, eof=True)
    s.wait_done()
    assert (s.stdout(), s.stderr(), s.exit_code()) == (b"hello\nworld, no newline", b"", 0)
    # The process is gone: its id is no longer known.
    code, _, _ = status_of(lambda: client.write_stdin(pid, b"late"))
    assert code == SC.NOT_FOUND


def test_write_after_eof_is_failed_precondition(client):
    """Stdin closed by an earlier EOF: a later write (or EOF) is refused with a clear status.
    (The reference answers INTERNAL "file already closed" here.)"""
    s = client.start(["sleep", "1000"])
    vid = s.wait_init()
    try:
        client.write_stdin(vid, eof=True)
        for call in (lambda: client.write_stdin(vid, b"x"), lambda: client.write_stdin(vid, eof=True)):
            code, details, _ = status_of(call)
            assert code == SC.FAILED_PRECONDITION, (code, details)
        assert not s.done
    finally:
        status_of(lambda: client.send_signal(vid, client.pb.SIGNAL_SIGKILL))
    s.wait_done()
    assert s.exit_code() == -1


def test_stdin_large_write(client):
    data = os.urandom(1 << 20)
    s = client.start(["sha256sum"])
    pid = s.wait_init()
    for i in range(0, len(data), 256 << 10):
        client.write_stdin(pid, data[i:i + (256 << 10)])
    client.write_stdin(pid, eof=True)
    s.wait_done()
    assert s.exit_code() == 0
    assert s.stdout().split()[0].decode() == sha256(data)


TREE = (
    "import os, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
    "kids = []\n"
    "for _ in range(2):\n"
    "    pid = os.fork()\n"
    "    if pid == 0:\n"
    "        os.execvp('sleep', ['sleep', '1000'])\n"
    "    kids.append(pid)\n"
    "print(os.getpid(), *kids, flush=True)\n"
    "while True:\n"
    "    os.wait()\n"
)


def _start_tree(client):
    """A process with two children (sleep 1000), all with default signal dispositions; returns the
    stream, the virtual id and the OS pids [parent, child, child]."""
    s = client.start([PY, "-c", TREE])
    vid = s.wait_init()
    out = s.wait_stdout(lambda o: o.endswith(b"\n") and o, what="the pids")
    pids = [int(x) for x in out.split()]
    assert len(pids) == 3
    for p in pids[1:]:
        wait_until(lambda p=p: (pid_cmdline(p) or [b""])[0] == b"sleep", 5, what=f"child {p} to exec sleep")
    return s, vid, pids


@pytest.mark.parametrize("sig", ["SIGNAL_SIGINT", "SIGNAL_SIGTERM", "SIGNAL_SIGKILL"])
def test_signal_reaches_process_group(client, sig, leftovers):
    s, vid, pids = _start_tree(client)
    leftovers.add(*pids)
    client.send_signal(vid, client.pb.Signal.Value(sig))
    s.wait_done()
    assert s.exit_code() == -1, "killed by a signal: the exit code must be -1"
    for p in pids:
        wait_until(lambda p=p: pid_gone(p), 5, what=f"pid {p} (state {pid_state(p)}) to be gone")


def test_signal_unspecified_is_invalid_argument(client):
    s = client.start(["sleep", "1000"])
    vid = s.wait_init()
    try:
        code, details, _ = status_of(lambda: client.send_signal(vid, 0))
        assert code == SC.INVALID_ARGUMENT, details
        code, details, _ = status_of(lambda: client.send_signal(vid, 7))  # not in the enum
        assert code == SC.INVALID_ARGUMENT, details
        assert not s.done, "a refused signal must not touch the process"
    finally:
        client.send_signal(vid, client.pb.SIGNAL_SIGKILL)
    s.wait_done()
    assert s.exit_code() == -1


@pytest.mark.parametrize("pid", [0, -1, 424242, 2**31 - 1])
def test_unknown_process_id_is_not_found(client, pid):
    pb = client.pb
    for name, call in [
        ("WriteStdin", lambda: client.write_stdin(pid, b"x")),
        ("WriteStdin eof", lambda: client.write_stdin(pid, eof=True)),
        ("SendSignal", lambda: client.send_signal(pid, pb.SIGNAL_SIGTERM)),
        ("ResizeTTY", lambda: client.resize(pid, 24, 80)),
    ]:
        code, details, _ = status_of(call)
        assert code == SC.NOT_FOUND, f"{name}({pid}): {code} {details!r}"
        assert details == f"process {pid} not found", f"{name}: {details!r}"


def test_execute_does_not_consume_a_process_id(client):
    """Execute's processes are not addressable and take no id: the next Start gets the id after
    the last Start's, even with an Execute running in between."""
    last = client.start(["true"]).wait_done().events[0][1]
    with ThreadPoolExecutor(max_workers=1) as pool:
        fut = pool.submit(client.execute, ["cat"], None, None, 10)  # cat waits on its stdin
        code, _, _ = status_of(lambda: client.write_stdin(last + 1, eof=True))
        s = client.start(["true"]).wait_done()
        r = fut.result(timeout=10)
    assert code == SC.NOT_FOUND
    assert r.exit_code == 0 and r.stdout == b"", "Execute's stdin is empty (at EOF)"
    assert s.events[0] == ("init", last + 1)


# ---------------------------------------------------------------------------------------------
# PTY


def test_pty_output_through_terminal(client):
    s = client.start(["sh", "-c", "tty; echo to-stderr >&2"], pty=(24, 80)).wait_done()
    assert s.exit_code() == 0
    out = s.stdout().decode()
    assert re.match(r"/dev/pts/\d+\r?\n", out), out
    assert "to-stderr" in out, "a PTY merges stderr into stdout"
    assert "stderr" not in s.kinds()


def test_pty_initial_size(client):
    s = client.start(["stty", "size"], pty=(33, 101)).wait_done()
    assert s.exit_code() == 0
    assert s.stdout().decode().strip() == "33 101"


def test_pty_without_size_still_works(client):
    s = client.start_req(client.pb.StartRequest(
        config=client.pb.ProcessConfig(command=["sh", "-c", "test -t 0 && test -t 1 && echo isatty"]),
        pty=client.pb.PTY())).wait_done()
    assert s.exit_code() == 0
    assert s.stdout().strip() == b"isatty"


def test_pty_resize(client):
    s = client.start(["sh", "-c", "stty size; read x; stty size; read y; stty size"], pty=(24, 80))
    vid = s.wait_init()
    s.wait_stdout(lambda o: b"24 80" in o, what="the initial size")
    client.resize(vid, rows=50, cols=132)
    client.write_stdin(vid, b"go\n")
    s.wait_stdout(lambda o: b"50 132" in o, what="the new size")
    client.resize(vid, rows=7, cols=9)
    client.write_stdin(vid, b"go\n")
    s.wait_done()
    assert s.exit_code() == 0
    sizes = re.findall(rb"^(\d+ \d+)\r?$", s.stdout(), re.M)
    assert sizes == [b"24 80", b"50 132", b"7 9"], s.stdout()


def test_pty_stdin_and_eof(client):
    s = client.start(["cat"], pty=(24, 80))
    vid = s.wait_init()
    client.write_stdin(vid, b"abc\n")
    s.wait_stdout(lambda o: o.count(b"abc") >= 2, what="echo and output of abc")
    client.write_stdin(vid, eof=True)
    s.wait_done(10)
    assert s.exit_code() == 0


def test_resize_without_pty_is_failed_precondition(client):
    s = client.start(["cat"])
    vid = s.wait_init()
    code, details, _ = status_of(lambda: client.resize(vid, rows=10, cols=10))
    client.write_stdin(vid, eof=True)
    s.wait_done()
    assert code == SC.FAILED_PRECONDITION, details
    assert s.exit_code() == 0


# ---------------------------------------------------------------------------------------------
# Volume and concurrency


def test_10mib_streamed_intact_and_in_order(client, root):
    n = 10 * 1024 * 1024
    s = client.start(["sh", "-c", f"head -c {n} /dev/urandom | tee big.bin"], timeout=60).wait_done(60)
    assert s.exit_code() == 0
    out = s.stdout()
    assert len(out) == n
    assert sha256(out) == sha256((root / "big.bin").read_bytes())
    sizes = [len(v) for k, v in s.events if k == "stdout"]
    assert max(sizes) <= 4096, "chunks are at most --stream-chunk-size (4096)"
    (root / "big.bin").unlink()


@pytest.mark.parametrize("pty", [None, (24, 80)], ids=["pipes", "pty"])
def test_a_burst_is_delivered_without_waiting_for_more_output(client, pty):
    """Chunks of a burst may be batched by the transport, but the last one flushes the lot: the
    process then waits for stdin, which the test writes only once it has the whole burst."""
    n = 2 * 4096  # whole chunks: the last one full too
    s = client.start(["sh", "-c", f"head -c {n} /dev/zero; read x; echo done"], pty=pty, timeout=30)
    pid = s.wait_init(10)
    wait_until(lambda: len(s.stdout()) >= n, 20, what=f"{n} bytes of the burst")
    client.write_stdin(pid, b"go\n")
    s.wait_done(20)
    assert s.stdout().endswith(b"done\n") or s.stdout().endswith(b"done\r\n")


def test_10mib_execute(client):
    n = 10 * 1024 * 1024
    r = client.execute(["sh", "-c", f"head -c {n} /dev/zero | tr '\\0' x"], timeout=30)
    assert r.exit_code == 0 and len(r.stdout) == n and r.stdout == b"x" * n


def test_100_concurrent_starts(client):
    """100 processes alive at once (each waits for its stdin), each fed through its own id."""
    n = 100
    script = 'read x; echo "$0:$x"; echo "e$0" >&2; exit $(($0 % 256))'
    streams = [client.start(["sh", "-c", script, str(i + 200)], timeout=60) for i in range(n)]
    ids = [s.wait_init(20) for s in streams]
    assert len(set(ids)) == n, "process ids must be distinct"
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda iv: client.write_stdin(iv[1], f"v{iv[0]}\n".encode()), enumerate(ids)))
    for i, s in enumerate(streams):
        s.wait_done(30)
        assert s.exit_code() == (i + 200) % 256
        assert s.stdout() == f"{i + 200}:v{i}\n".encode()
        assert s.stderr() == f"e{i + 200}\n".encode()


def test_max_processes_is_resource_exhausted_beyond(sandboxd_factory):
    """--max-processes bounds what runs at once: beyond it a clear RESOURCE_EXHAUSTED, nothing
    started, and a place frees up when a process ends."""
    d = sandboxd_factory(["--max-processes", "2"])
    c = d.client()
    s1 = c.start(["sleep", "30"], timeout=40)
    s2 = c.start(["sleep", "30"], timeout=40)
    p1 = s1.wait_init(10)
    s2.wait_init(10)
    code, details, _ = status_of(lambda: c.execute(["true"]))
    assert code == SC.RESOURCE_EXHAUSTED, details
    assert "--max-processes" in details, details
    s3 = c.start(["true"]).wait_done()
    assert s3.error is not None and s3.error.code() == SC.RESOURCE_EXHAUSTED, s3.summary()
    c.send_signal(p1, c.pb.SIGNAL_SIGKILL)
    s1.wait_done(20)
    wait_until(lambda: status_of(lambda: c.execute(["true"]))[0] == SC.OK, 10,
               what="a place after a process ended")


def test_16_concurrent_execute_clients(client):
    """Closed-loop Executes from 16 threads: every one answered right, the daemon stays up (a
    use-after-free once showed here, when a process was freed under an event of the loop)."""
    def loop(i):
        for j in range(40):
            r = client.execute(["sh", "-c", f"echo {i}-{j}"])
            assert (r.exit_code, r.stdout) == (0, f"{i}-{j}\n".encode())
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(loop, range(16)))


def _cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_closed_stdin_does_not_spin(sandboxd, client):
    """A process that closes its stdin and lives on: the daemon must not busy-loop on the error
    epoll reports for the pipe's write end."""
    s = client.start(["sh", "-c", "exec 0<&-; sleep 3"], timeout=20)
    s.wait_init(10)
    time.sleep(0.3)
    before = _cpu_seconds(sandboxd.proc.pid)
    time.sleep(1.5)
    used = _cpu_seconds(sandboxd.proc.pid) - before
    assert used < 0.5, f"the daemon used {used:.2f} s of CPU in 1.5 s while idle"
    s.wait_done(20)
    assert s.exit_code() == 0


@pytest.mark.parametrize("pty", [None, (24, 80)], ids=["pipes", "pty"])
def test_client_cancel_kills_process(client, leftovers, pty):
    s = client.start(["sh", "-c", "sleep 1000 & echo $$ $!; while :; do echo tick; sleep 0.05; done"],
                     pty=pty)
    s.wait_init()
    out = s.wait_stdout(lambda o: b"tick" in o and o, what="the pids")
    pids = [int(x) for x in out.split(b"\n")[0].split()]
    leftovers.add(*pids)
    assert all(not pid_gone(p) for p in pids)
    s.cancel()
    s.wait_done()
    assert s.error is not None and s.error.code() == SC.CANCELLED
    for p in pids:
        wait_until(lambda p=p: pid_gone(p), 5, what=f"pid {p} (state {pid_state(p)}) to be killed")
    # The daemon is still healthy and serving.
    assert client.health().status == 1
    assert client.execute(["echo", "ok"]).stdout == b"ok\n"


def test_client_disconnect_kills_process(sandboxd, tools, leftovers):
    """The client process dies (SIGKILL) mid-stream: its connection just drops, no cancel sent."""
    req = json.dumps({"config": {"command": ["sh", "-c", "echo $$; exec sleep 1000"]}})
    p = subprocess.Popen([str(tools["grpcurl"]), "-plaintext", "-max-time", "30", "-d", req,
                          sandboxd.target, "process.v1.ProcessService/Start"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        buf = b""
        deadline = time.monotonic() + 10
        while b'"stdout"' not in buf or not buf.rstrip().endswith(b"}"):
            assert time.monotonic() < deadline, f"no pid from grpcurl: {buf!r}"
            r, _, _ = select.select([p.stdout], [], [], 0.5)
            if r:
                chunk = os.read(p.stdout.fileno(), 4096)
                assert chunk, f"grpcurl ended early: {buf!r}"
                buf += chunk
        pid = int(base64.b64decode(re.search(rb'"stdout": "([^"]+)"', buf).group(1)))
        leftovers.add(pid)
        assert not pid_gone(pid)
    finally:
        p.kill()
        p.wait(timeout=10)
    wait_until(lambda: pid_gone(pid), 5, what=f"pid {pid} (state {pid_state(pid)}) to be killed")
    assert sandboxd.client().execute(["true"]).exit_code == 0


def test_output_after_cancel_does_not_block_others(client):
    """A stream whose reader went away must not stall other calls."""
    s = client.start(["sh", "-c", "exec yes"])
    s.wait_stdout(lambda o: len(o) > 0, what="output")
    s.cancel()
    s.wait_done()
    r = client.execute(["echo", "still fine"], timeout=5)
    assert r.stdout == b"still fine\n"


def test_execute_deadline_kills_process(client, root, leftovers):
    pidfile = root / "exec-deadline.pid"
    code, _, _ = status_of(lambda: client.execute(
        ["sh", "-c", f"echo $$ > {pidfile}; exec sleep 1000"], timeout=1.0))
    assert code == SC.DEADLINE_EXCEEDED
    pid = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 5, what="the pid file"))
    leftovers.add(pid)
    wait_until(lambda: pid_gone(pid), 5, what=f"pid {pid} (state {pid_state(pid)}) to be killed")
    assert client.execute(["true"]).exit_code == 0


def test_start_deadline_kills_process(client, leftovers):
    s = client.start(["sh", "-c", "echo $$; exec sleep 1000"], timeout=1.5)
    s.wait_init()
    pid = int(s.wait_stdout(lambda o: o.endswith(b"\n") and o, what="the pid"))
    leftovers.add(pid)
    s.wait_done(10)
    assert s.error is not None and s.error.code() == SC.DEADLINE_EXCEEDED
    wait_until(lambda: pid_gone(pid), 5, what=f"pid {pid} (state {pid_state(pid)}) to be killed")


def test_orphans_are_reaped(client):
    """A background child outliving its parent is reparented to the daemon (a subreaper, or PID
    1) and must be reaped when it exits: no zombie is left behind."""
    s = client.start(["sh", "-c", "sleep 0.3 & echo $!"]).wait_done()
    assert s.exit_code() == 0
    pid = int(s.stdout())
    wait_until(lambda: pid_gone(pid), 5, what=f"orphan {pid} (state {pid_state(pid)}) to be reaped")


def test_stream_chunk_size_flag(sandboxd_factory):
    d = sandboxd_factory(["--stream-chunk-size", "100"])
    c = d.client()
    s = c.start(["sh", "-c", "head -c 10000 /dev/zero; head -c 5000 /dev/zero >&2"]).wait_done()
    assert s.exit_code() == 0
    assert len(s.stdout()) == 10000 and len(s.stderr()) == 5000
    sizes = [len(v) for k, v in s.events if k in ("stdout", "stderr")]
    assert max(sizes) <= 100, f"chunk sizes {sorted(set(sizes))}"


# ---------------------------------------------------------------------------------------------
# Unix socket


def test_unix_socket_listener(sandboxd_factory, tmp_path):
    sock = tmp_path / "sbx.sock"
    d = sandboxd_factory(socket_path=str(sock))
    assert sock.is_socket()
    c = d.client(f"unix:{sock}")
    r = c.execute(["echo", "over unix"])
    assert (r.exit_code, r.stdout) == (0, b"over unix\n")
    s = c.start(["sh", "-c", "echo streamed"]).wait_done()
    assert (s.stdout(), s.exit_code()) == (b"streamed\n", 0)
    # TCP works side by side.
    assert d.client().execute(["true"]).exit_code == 0
