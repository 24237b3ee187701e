"""SIGTERM: health NOT_SERVING, children get SIGTERM then SIGKILL after the grace, in-flight calls
end cleanly, the daemon exits 0 within --shutdown-timeout."""

import signal
import time

import grpc

from conftest import pid_cmdline, pid_gone, pid_state, status_of, wait_until

SC = grpc.StatusCode


def _start_with_pid(c, leftovers, script):
    """Starts sh -c script (which must print its pids on the first line); returns (stream, pids)."""
    s = c.start(["sh", "-c", script], timeout=30)
    s.wait_init()
    out = s.wait_stdout(lambda o: b"\n" in o and o, what="the pids")
    pids = [int(x) for x in out.split(b"\n")[0].split()]
    leftovers.add(*pids)
    return s, pids


def test_sigterm_ends_running_stream_and_exits_0(sandboxd_factory, leftovers):
    d = sandboxd_factory(["--termination-grace", "3s"], shutdown_timeout=6.0)
    c = d.client()
    s, pids = _start_with_pid(c, leftovers, "sleep 1000 & echo $$ $!; wait")
    t0 = time.monotonic()
    d.sigterm()
    s.wait_done(10)
    # The stream ends cleanly with an exit event: the shell died of SIGTERM.
    assert s.error is None, f"stream failed: {s.error!r}"
    assert s.exit_code() == -1
    rc = d.wait_exit(10)
    elapsed = time.monotonic() - t0
    assert rc == 0, f"exit status {rc}"
    # sleep and sh die of SIGTERM at once: no need to wait for the grace or the timeout.
    assert elapsed < 2.5, f"took {elapsed:.2f}s although every child died of SIGTERM"
    # (The daemon may exit before it reaps a dying orphan; whoever inherits it reaps it then.)
    for p in pids:
        wait_until(lambda p=p: pid_gone(p), 3, what=f"pid {p} (state {pid_state(p)}) to be gone")


def test_child_ignoring_sigterm_is_killed_after_grace(sandboxd_factory, leftovers):
    grace = 1.0
    d = sandboxd_factory(["--termination-grace", f"{int(grace * 1000)}ms"], shutdown_timeout=5.0)
    c = d.client()
    s, pids = _start_with_pid(c, leftovers, "trap '' TERM; sleep 1000 & echo $$ $!; wait")
    t0 = time.monotonic()
    d.sigterm()
    # During the grace the processes are still alive (SIGTERM is ignored) ...
    time.sleep(grace / 3)  # a deliberate pause: we check that nothing happened before the grace
    assert all(not pid_gone(p) for p in pids), "killed before the termination grace ended"
    assert not s.done
    # ... and new calls are refused while draining.
    code, details, _ = status_of(lambda: c.execute(["true"], timeout=3))
    assert code == SC.UNAVAILABLE, (code, details)
    s.wait_done(10)
    killed_after = time.monotonic() - t0
    assert s.error is None, f"stream failed: {s.error!r}"
    assert s.exit_code() == -1
    assert grace * 0.9 <= killed_after < grace + 2, f"SIGKILL came after {killed_after:.2f}s"
    rc = d.wait_exit(10)
    elapsed = time.monotonic() - t0
    assert rc == 0, f"exit status {rc}"
    assert elapsed < 5.0, f"exited after {elapsed:.2f}s, over the shutdown timeout"
    for p in pids:
        wait_until(lambda p=p: pid_gone(p), 3, what=f"pid {p} (state {pid_state(p)}) to be gone")


def test_group_member_ignoring_sigterm_is_killed_after_grace(sandboxd_factory, leftovers):
    """The process dies of SIGTERM but a child in its process group ignores it: the daemon must
    still SIGKILL the group after the grace instead of exiting and leaving the child running."""
    grace = 1.0
    d = sandboxd_factory(["--termination-grace", f"{int(grace * 1000)}ms"], shutdown_timeout=5.0)
    c = d.client()
    s, pids = _start_with_pid(c, leftovers, "(trap '' TERM; exec sleep 1000) & echo $!; wait")
    child = pids[0]
    wait_until(lambda: (pid_cmdline(child) or [b""])[0] == b"sleep", 5, what="the child to exec sleep")
    t0 = time.monotonic()
    d.sigterm()
    s.wait_done(10)
    assert s.exit_code() == -1
    rc = d.wait_exit(10)
    assert rc == 0, f"exit status {rc}"
    assert time.monotonic() - t0 < 5.0
    wait_until(lambda: pid_gone(child), 3,
               what=f"group member {child} (state {pid_state(child)}) to be killed")


def test_shutdown_timeout_bounds_the_drain(sandboxd_factory, leftovers):
    """A grace longer than the shutdown timeout: the daemon still exits within the timeout."""
    d = sandboxd_factory(["--termination-grace", "30s"], shutdown_timeout=2.0)
    c = d.client()
    s, pids = _start_with_pid(c, leftovers, "trap '' TERM; echo $$; exec sleep 1000")
    t0 = time.monotonic()
    d.sigterm()
    rc = d.wait_exit(10)
    elapsed = time.monotonic() - t0
    assert rc == 0, f"exit status {rc}"
    assert elapsed < 2.0 + 1.0, f"exited after {elapsed:.2f}s; --shutdown-timeout is 2s"
    s.wait_done(5)
    assert s.error is None or s.error.code() in (SC.CANCELLED, SC.UNAVAILABLE), s.error
    for p in pids:
        wait_until(lambda p=p: pid_gone(p), 3, what=f"pid {p} to be gone")


def test_sigterm_with_execute_in_flight(sandboxd_factory, leftovers):
    """An Execute running at SIGTERM ends with its process's death (exit code -1), not a hang."""
    d = sandboxd_factory(["--termination-grace", "3s"], shutdown_timeout=6.0)
    c = d.client()
    fut = c._execute.future(
        c.pb.ExecuteRequest(config=c.config(["sh", "-c", "echo started > marker; exec sleep 1000"])),
        timeout=15)
    wait_until(lambda: (d.root / "marker").exists(), 5, what="the Execute's process to start")
    d.sigterm()
    r = fut.result(timeout=10)
    assert r.exit_code == -1
    assert d.wait_exit(10) == 0


def test_sigterm_idle_exits_fast(sandboxd_factory, leftovers):
    d = sandboxd_factory(shutdown_timeout=10.0)
    assert d.client().execute(["true"]).exit_code == 0
    d.close_clients()
    t0 = time.monotonic()
    d.sigterm()
    assert d.wait_exit(10) == 0
    assert time.monotonic() - t0 < 1.5, "an idle daemon must not wait for any timeout"


def test_sigterm_with_idle_open_connection_exits_within_timeout(sandboxd_factory, leftovers):
    """A client that keeps its (idle) connection open cannot hold the daemon past the timeout."""
    d = sandboxd_factory(shutdown_timeout=2.0)
    c = d.client()
    assert c.execute(["true"]).exit_code == 0
    t0 = time.monotonic()
    d.sigterm()
    assert d.wait_exit(10) == 0
    assert time.monotonic() - t0 < 2.0 + 1.0


def test_sigint_drains_like_sigterm(sandboxd_factory, leftovers):
    d = sandboxd_factory(shutdown_timeout=5.0)
    c = d.client()
    s, pids = _start_with_pid(c, leftovers, "echo $$; exec sleep 1000")
    d.term_sent = time.monotonic()
    d.signal(signal.SIGINT)
    s.wait_done(10)
    assert s.exit_code() == -1
    assert d.wait_exit(10) == 0
