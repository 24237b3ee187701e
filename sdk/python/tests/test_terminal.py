"""Terminals over WebSocket with both clients, against the real daemon: output, input,
resize, exit detail, a lost connection resumed from the offset with nothing lost or doubled
(compared with the process's whole output read over gRPC), refusals, the token."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from sandboxd import errors
from sandboxd.types import ExitDetail, OutputChunk

WAIT = 20.0


def read_until(term, needle: bytes) -> bytes:
    got = b""
    while needle not in got:
        chunk = term.read(timeout=WAIT)
        assert chunk, f"the process exited before {needle!r}: {got!r}"
        got += chunk
    return got


def prompt(term) -> bytes:
    """Reads until a login shell shows its prompt: what is typed before a shell sets up its
    line editor may be thrown away, so a test types after it, as a person would."""
    got = b""
    while not got.rstrip().endswith((b"$", b"#")):
        chunk = term.read(timeout=WAIT)
        assert chunk, f"the shell exited before its prompt: {got!r}"
        got += chunk
    return got


def wait_for(pred, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not pred():
        assert time.monotonic() < deadline, f"no {what} within {WAIT}s"
        time.sleep(0.01)


def whole_output(sb, pid: int) -> bytes:
    """All the process wrote, as sandboxd.v1.Processes/Attach gives it from offset 0."""
    with sb.processes.handle(pid).attach() as att:
        events = list(att)
    assert all(isinstance(ev, OutputChunk) for ev in events), events
    return b"".join(ev.data for ev in events)


def test_new_shell_output_input_and_exit(sb, daemon):
    with sb.terminal(cols=91, rows=31) as term:
        assert term.id > 0 and term.offset == 0 and term.exit is None
        out = prompt(term)
        term.write("echo T=$TERM; pwd; stty size\n")
        out += read_until(term, b"31 91")
        term.write(b"exit 4\n")
        out += b"".join(term)
        assert term.exit == ExitDetail(4, 0, False, "exited")
        assert term.read() == b""  # after the exit, the end
    text = out.decode()
    assert "T=xterm-256color" in text and str(daemon.root) in text
    # offset counted every byte returned, and that is all the process wrote.
    assert term.offset == len(out) == sb.processes.get(term.id).stdout.end
    assert out == whole_output(sb, term.id) and term.truncated == []


def test_command_resize_and_a_signal(sb):
    with sb.terminal("stty size; read x; stty size", cols=80, rows=24) as term:
        read_until(term, b"24 80")
        term.resize(100, 30)
        term.write("\n")
        out = b"".join(term)
    assert b"30 100" in out and term.exit.exit_code == 0
    # A list is one command line, quoted: its words arrive intact.
    with sb.terminal(["printf", "%s|%s\\n", "a b", "c'd"]) as term:
        assert b"".join(term) == b"a b|c'd\r\n"
    with sb.terminal("echo up; exec sleep 60") as term:
        read_until(term, b"up")
        sb.processes.handle(term.id).signal("KILL")
        assert b"".join(term) == b""
    assert (term.exit.exit_code, term.exit.signal, term.exit.reason) == (-1, 9, "killed")


class Cutter:
    """A TCP relay to the daemon's REST port whose connections the test can cut: a dropped
    network, as a client sees it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.srv.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                a, _ = self.srv.accept()
            except OSError:
                return
            b = socket.create_connection(("127.0.0.1", self.port))
            self.conns += [a, b]
            for x, y in ((a, b), (b, a)):
                threading.Thread(target=self._pipe, args=(x, y), daemon=True).start()

    @staticmethod
    def _pipe(x, y) -> None:
        try:
            while True:
                data = x.recv(65536)
                if not data:
                    break
                y.sendall(data)
        except OSError:
            pass
        for s in (x, y):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        for s in self.conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.conns = []

    def close(self) -> None:
        self.cut()
        self.srv.close()


def ring_holds(sb, pid: int, needle: bytes) -> bool:
    with sb.processes.handle(pid).attach(follow=False) as att:
        return needle in b"".join(ev.data for ev in att)


def test_reconnect_and_lost_connection_lose_and_double_nothing(sb, daemon):
    cutter = Cutter(daemon.rest_port)
    p = sb.processes.spawn(["sh"], pty=(24, 80), stdin=True)
    try:
        with daemon.sandbox(rest_url=cutter.url()) as via:
            term = via.terminal(pid=p.id, offset=0)
            term.write("echo one-$((3*3))\n")
            seen = read_until(term, b"one-9\r\n")
            # Output the client has received but not read when it reconnects comes again
            # from the offset, once.
            p.write("echo two-$((4*4))\n")
            wait_for(lambda: ring_holds(sb, p.id, b"two-16\r\n"), "two-16")
            term.reconnect()
            assert term.offset == len(seen)
            seen += read_until(term, b"two-16\r\n")
            # A dropped connection: read() says so, with the offset to resume from.
            p.write("echo three-$((5*5))\n")
            wait_for(lambda: ring_holds(sb, p.id, b"three-25\r\n"), "three-25")
            cutter.cut()
            with pytest.raises(errors.UnavailableError) as ei:
                while True:
                    seen += term.read(timeout=WAIT)
            assert term.offset == len(seen) and f"offset {term.offset}" in str(ei.value)
            term.reconnect()
            assert term.offset == len(seen)
            term.write("exit 3\n")
            seen += b"".join(term)
            term.close()
        assert term.exit.exit_code == 3 and term.truncated == []
        assert seen == whole_output(sb, p.id)
        assert seen.count(b"two-16\r\n") == 1 and seen.count(b"three-25\r\n") == 1
    finally:
        cutter.close()


def test_attach_refusals_and_close_leaves_the_process(sb):
    p = sb.processes.spawn("exec sleep 60")
    with pytest.raises(errors.FailedPreconditionError):
        sb.terminal(pid=p.id)  # no pty
    p.kill()
    with pytest.raises(errors.NotFoundError):
        sb.terminal(pid=999999)
    with pytest.raises(ValueError):
        sb.terminal("true", pid=1)
    with pytest.raises(ValueError):
        sb.terminal(cols=0)
    term = sb.terminal("echo hi; exec sleep 60")
    read_until(term, b"hi\r\n")
    with pytest.raises(errors.TimeoutError):
        term.read(timeout=0.2)  # sleep writes nothing
    with pytest.raises(ValueError):
        term.resize(70000, 5)
    term.close()
    with pytest.raises(errors.UnavailableError):
        term.write("x")
    info = sb.processes.get(term.id)
    assert info.running and info.tag == "terminal"
    # The default replay of an attach: the last lines, here all of them.
    with sb.terminal(pid=term.id) as again:
        assert again.offset == 0 and read_until(again, b"hi\r\n") == b"hi\r\n"
    sb.processes.handle(term.id).kill()


def test_token(daemon_factory, tmp_path):
    tf = tmp_path / "token"
    tf.write_text("term-token\n")
    d = daemon_factory(["--token-file", str(tf)])
    with d.sandbox(token="term-token") as s:
        with s.terminal("echo authed") as term:
            assert b"".join(term) == b"authed\r\n"
    for tok in ("wrong", None):
        with d.sandbox(token=tok) as s:
            with pytest.raises(errors.UnauthenticatedError):
                s.terminal("echo no")


async def test_async_terminal(daemon):
    from sandboxd.aio import AsyncSandbox

    async with AsyncSandbox("127.0.0.1", grpc_port=daemon.grpc_port,
                            rest_port=daemon.rest_port, timeout=20) as sb:
        async with await sb.terminal(cols=90, rows=20) as term:
            assert term.id > 0 and term.offset == 0
            out = b""
            while not out.rstrip().endswith((b"$", b"#")):
                out += await term.read(timeout=WAIT)
            await term.write("stty size\n")
            while b"20 90" not in out:
                out += await term.read(timeout=WAIT)
            await term.resize(120, 40)
            await term.write(b"stty size\n")
            while b"40 120" not in out:
                out += await term.read(timeout=WAIT)
            # A new connection from the offset: nothing seen comes again.
            await term.reconnect()
            assert term.offset == len(out)
            await term.write("exit 6\n")
            out += b"".join([c async for c in term])
        assert term.exit == ExitDetail(6, 0, False, "exited")
        p = await sb.processes.handle(term.id)
        async with p.attach() as att:
            whole = await att.output()
        assert out == whole
        with pytest.raises(errors.NotFoundError):
            await sb.terminal(pid=999999)


def test_output_gone_from_the_ring_is_said(daemon_factory):
    d = daemon_factory(["--output-ring-bytes", "4096"])
    with d.sandbox() as s:
        p = s.processes.spawn("head -c 20000 /dev/zero | tr '\\0' x; echo; echo end",
                              pty=(24, 80))
        p.wait(WAIT)
        with s.terminal(pid=p.id, offset=0) as term:
            assert term.offset == 0
            out = b"".join(term)
        [gap] = term.truncated
        assert (gap.start, gap.end) == (0, p.refresh().stdout.start) and gap.end > 15000
        assert out.endswith(b"end\r\n") and gap.end + len(out) == term.offset
        assert term.offset == p.info.stdout.end and term.exit.exit_code == 0
