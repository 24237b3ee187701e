"""What the sync and asyncio terminals share: the WebSocket URL and headers of the terminal
routes, the control messages (both ways) and the state a terminal keeps from them (its process
id, the offset of the next byte, the gaps, the exit), and how a refused or lost connection
becomes the SDK's error. Only the sending and waiting are terminal's and aio_terminal's."""

from __future__ import annotations

import builtins
import json
import shlex
import urllib.parse
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Union

from websockets.exceptions import InvalidHandshake, InvalidStatus

from . import _common as c
from . import errors
from .types import ExitDetail, Truncated

PIECE = 16 << 10  # bytes per binary frame written: well below the daemon's 64 KiB message limit
MAX_FRAME = 1 << 20  # the largest frame taken from the daemon (it sends 16 KiB at most)
MAX_SIZE = 0xFFFF  # columns and rows of a terminal
# The daemon's reason names that differ from those of sandboxd.v1.Processes.
_REASONS = {"oom": "oom_killed"}


@dataclass(frozen=True)
class Target:
    """What a terminal connects to: a new login shell (pid None), or process pid's terminal.
    resume() is where a reconnect goes: the same process, from an offset."""

    command: Optional[str] = None
    cols: int = 80
    rows: int = 24
    pid: Optional[int] = None
    offset: Optional[int] = None

    def path(self) -> str:
        if self.pid is None:
            q: Dict[str, Any] = {"cols": self.cols, "rows": self.rows}
            if self.command is not None:
                q["command"] = self.command
            return "/v1/terminal?" + urllib.parse.urlencode(q)
        path = f"/v1/processes/{self.pid}/terminal"
        return path if self.offset is None else f"{path}?offset={self.offset}"


def target(command: Optional[c.Command], cols: int, rows: int, pid: Optional[int],
           offset: Optional[int]) -> Target:
    """Sandbox.terminal()'s arguments, checked: a command (a string runs as `sh -lc`, a list
    is quoted into one) or none for a login shell; or pid (and offset) to attach."""
    if pid is not None:
        if command is not None:
            raise ValueError("terminal: give a command or a pid, not both")
        if int(pid) < 1:
            raise ValueError("terminal: pid must be positive")
        if offset is not None and int(offset) < 0:
            raise ValueError("terminal: offset must be >= 0")
        return Target(pid=int(pid), offset=None if offset is None else int(offset))
    if offset is not None:
        raise ValueError("terminal: offset needs a pid (a new terminal starts at 0)")
    check_size(cols, rows)
    if command is not None and not isinstance(command, str):
        command = shlex.join(c.argv(command))
    if command == "":
        raise ValueError("terminal: command must not be empty")
    return Target(command=command, cols=int(cols), rows=int(rows))


def check_size(cols: int, rows: int) -> None:
    if not (1 <= int(cols) <= MAX_SIZE and 1 <= int(rows) <= MAX_SIZE):
        raise ValueError(f"terminal: cols and rows must be from 1 to {MAX_SIZE}")


def url(ep: c.Endpoint, path: str) -> str:
    """The WebSocket URL of a route on the REST port (ws:// for http://, wss:// for https://)."""
    scheme, rest = ep.rest_url.split("://", 1)
    return ("wss" if scheme == "https" else "ws") + "://" + rest + path


def options(ep: c.Endpoint) -> Dict[str, Any]:
    """The websockets client's settings, sync and asyncio alike: the token as a header, no
    environment proxy (as the HTTP client), no compression (the daemon has none)."""
    opts = dict(additional_headers=ep.headers(), proxy=None, compression=None,
                open_timeout=ep.timeout, close_timeout=ep.timeout, max_size=MAX_FRAME)
    if ep.ssl_context is not None and ep.rest_url.startswith("https://"):
        opts["ssl"] = ep.ssl_context
    return opts


def resize_message(cols: int, rows: int) -> str:
    check_size(cols, rows)
    return json.dumps({"type": "resize", "cols": int(cols), "rows": int(rows)})


def pieces(data: Union[bytes, bytearray, memoryview, str]) -> Iterator[bytes]:
    """What write() sends (str as UTF-8), one binary frame per piece."""
    b = data.encode() if isinstance(data, str) else bytes(data)
    for i in range(0, len(b), PIECE):
        yield b[i:i + PIECE]


def open_error(target_: Target, e: BaseException) -> errors.SandboxError:
    """The SDK's error for a connection that did not open: the daemon's refusal (its HTTP
    status and JSON body), a timeout, or no daemon there."""
    what = target_.path().split("?", 1)[0]
    if isinstance(e, InvalidStatus):
        r = e.response
        return errors.from_http(r.status_code, bytes(r.body or b""))
    if isinstance(e, builtins.TimeoutError):
        return errors.TimeoutError(f"terminal {what}: no answer: {e}")
    if isinstance(e, (OSError, InvalidHandshake)):
        return errors.UnavailableError(f"terminal {what}: {e}")
    raise e


class State:
    """What a terminal learnt from its connections: take() each message received."""

    def __init__(self) -> None:
        self.id = 0
        self.offset = 0  # of the next byte read() returns
        self.exit: Optional[ExitDetail] = None
        self.truncated: List[Truncated] = []
        self.errors: List[str] = []
        self.attached = False  # the current connection said where it begins

    def take(self, msg: Union[str, bytes]) -> Optional[bytes]:
        """The terminal bytes of a binary message (the offset moves past them); None for a
        control message, whose news is kept."""
        if not isinstance(msg, str):
            data = bytes(msg)
            self.offset += len(data)
            return data
        try:
            m = json.loads(msg)
            kind = m["type"]
        except (ValueError, KeyError, TypeError):
            raise errors.InternalError(f"the daemon sent a bad control message: {msg[:200]!r}")
        if kind == "attached":
            self.id, self.offset, self.attached = int(m["id"]), int(m["offset"]), True
        elif kind == "truncated":
            # Output [from, to) left the ring before this client got it: said, never silent.
            self.truncated.append(Truncated("stdout", int(m["from"]), int(m["to"])))
            self.offset = int(m["to"])
        elif kind == "exit":
            reason = str(m.get("reason", "exited"))
            self.exit = ExitDetail(int(m["exit_code"]), int(m.get("signal", 0)), False,
                                   _REASONS.get(reason, reason))
        elif kind == "error":
            self.errors.append(str(m.get("message", "")))
        return None

    def lost(self, e: BaseException) -> errors.SandboxError:
        """The error of a connection that ended before the exit."""
        return errors.UnavailableError(
            f"terminal {self.id}: the connection ended at offset {self.offset} before the "
            f"process exited ({e}); reconnect() resumes from there")

    def resume(self) -> Target:
        return Target(pid=self.id, offset=self.offset)


class Facts:
    """What a terminal tells, sync and asyncio alike (the subclass keeps its State in _s)."""

    _s: State

    @property
    def id(self) -> int:
        """The process's id (sandboxd.v1.Processes: sb.processes.handle(id) finds it)."""
        return self._s.id

    @property
    def offset(self) -> int:
        """The offset of the next byte read() returns: where reconnect() resumes."""
        return self._s.offset

    @property
    def exit(self) -> Optional[ExitDetail]:
        """How the process ended, once read() has reached its exit; else None."""
        return self._s.exit

    @property
    def truncated(self) -> List[Truncated]:
        """Output gone from the daemon's ring before it was read: said, never silent."""
        return self._s.truncated

    @property
    def errors(self) -> List[str]:
        """The daemon's answers to control messages it could not act on."""
        return self._s.errors
