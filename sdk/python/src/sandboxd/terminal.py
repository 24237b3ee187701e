"""Terminals over WebSocket with the sync client (Sandbox.terminal): a new login shell, or the
terminal of a process spawned with a pty, read from any offset its ring holds and resumed
after a lost connection without a byte lost or doubled."""

from __future__ import annotations

import builtins
import time
from typing import Any, Iterator, Optional, Union

from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import ClientConnection, connect

from . import _common as c
from . import _terminal as t
from . import errors


class Terminal(t.Facts):
    """A terminal in the sandbox. read() (or iterating) gives its output as it comes, until
    the process exits (then exit tells how); write() types into it; resize() sets its size.
    offset is that of the next byte read() returns: reconnect() resumes there on a new
    connection. Gaps (output gone from the daemon's ring before it was read) are in truncated,
    never silent. close() (or leaving `with`) closes the connection and leaves the process
    running."""

    def __init__(self, ep: c.Endpoint, target: t.Target) -> None:
        self._ep = ep
        self._s = t.State()
        self._ws: Optional[ClientConnection] = None
        self._closed = False
        self._open(target)

    def _open(self, target: t.Target) -> None:
        try:
            # Entered as a context manager: the one way to hold a connection that every
            # websockets from 15 on accepts without a warning (17.1 deprecates the other).
            self._ws = connect(t.url(self._ep, target.path()), **t.options(self._ep)).__enter__()
        except (OSError, InvalidHandshake, builtins.TimeoutError) as e:
            raise t.open_error(target, e) from None
        self._s.attached = False
        try:
            while not self._s.attached:  # the daemon's first message says where output begins
                self._s.take(self._ws.recv(timeout=self._ep.timeout))
        except (ConnectionClosed, builtins.TimeoutError) as e:
            self._ws.close()
            raise errors.UnavailableError(f"terminal {target.path()}: not attached: {e}") from None

    def _conn(self) -> ClientConnection:
        if self._closed or self._ws is None:
            raise errors.UnavailableError("the terminal is closed")
        return self._ws

    def read(self, timeout: Optional[float] = None) -> bytes:
        """The next output chunk; b"" once the process has exited. TimeoutError when nothing
        came within timeout seconds; UnavailableError when the connection is lost first
        (reconnect() then resumes from offset)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._s.exit is None:
            ws = self._conn()
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            try:
                msg = ws.recv(timeout=left)
            except builtins.TimeoutError:
                raise c.output_timeout(timeout) from None
            except ConnectionClosed as e:
                raise self._s.lost(e) from None
            data = self._s.take(msg)
            if data:
                return data
        return b""

    def __iter__(self) -> Iterator[bytes]:
        while True:
            data = self.read()
            if not data:
                return
            yield data

    def write(self, data: Union[bytes, str]) -> None:
        """Types data (str as UTF-8) into the terminal."""
        ws = self._conn()
        try:
            for piece in t.pieces(data):
                ws.send(piece)
        except ConnectionClosed as e:
            raise self._s.lost(e) from None

    def resize(self, cols: int, rows: int) -> None:
        """Sets the terminal's size (the process gets SIGWINCH)."""
        msg = t.resize_message(cols, rows)
        try:
            self._conn().send(msg)
        except ConnectionClosed as e:
            raise self._s.lost(e) from None

    def reconnect(self) -> None:
        """A new connection to the same process, its output resumed at offset: nothing read
        is sent again, nothing unread is skipped (a gap the ring lost is in truncated)."""
        self._close_ws()
        self._closed = False
        self._open(self._s.resume())

    def _close_ws(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            ws.close()

    def close(self) -> None:
        """Closes the connection; the process goes on (reconnect() or terminal(pid=id) finds
        it again)."""
        self._closed = True
        self._close_ws()

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
