"""Plain data returned by the SDK."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

STDOUT = "stdout"
STDERR = "stderr"


@dataclass(frozen=True)
class OutputEvent:
    """A chunk of a process's output: stream is "stdout" or "stderr" (a PTY has only stdout)."""

    stream: str
    data: bytes


@dataclass(frozen=True)
class ExitStatus:
    """How a process ended. exit_code is -1 when it was killed by a signal (the daemon's
    process.v1 contract tells no more yet)."""

    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass
class CommandResult:
    """What run() captured. *_truncated: output beyond max_output was dropped (client side).
    timed_out: the timeout passed and the process was killed.

    From execute(): truncated maps "stdout"/"stderr" to the bytes the daemon dropped past its
    --max-output-bytes (or its output memory bound), as its call's trailing metadata tells
    (empty when nothing was dropped); *_truncated are set with it, and an
    OutputTruncatedWarning is issued."""

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = False
    process_id: int = 0
    # Only from Sandbox.processes.run: how it ended, and all the bytes it wrote per stream.
    exit: Optional["ExitDetail"] = None
    stdout_total: Optional[int] = None
    stderr_total: Optional[int] = None
    truncated: Dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")


def _time(s: Optional[str]) -> Optional[_dt.datetime]:
    if not s:
        return None
    try:
        return _dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True)
class FileEntry:
    """An entry of a directory listing. type is "file" or "directory"."""

    name: str
    type: str
    size: int
    mode: int
    modified_at: Optional[_dt.datetime]

    @property
    def is_dir(self) -> bool:
        return self.type == "directory"

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "FileEntry":
        return cls(name=str(d["name"]), type=str(d["type"]), size=int(d.get("size", 0)),
                   mode=int(str(d.get("mode", "0")), 8), modified_at=_time(d.get("modified_at")))


@dataclass(frozen=True)
class FileStat:
    """What a path is (lstat): type is "file", "directory", "symlink" or "other"."""

    path: str
    name: str
    type: str
    size: int
    mode: int
    uid: int
    gid: int
    modified_at: Optional[_dt.datetime]
    symlink_target: Optional[str] = None

    @property
    def is_dir(self) -> bool:
        return self.type == "directory"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "FileStat":
        return cls(path=str(d["path"]), name=str(d.get("name", "")), type=str(d["type"]),
                   size=int(d.get("size", 0)), mode=int(str(d.get("mode", "0")), 8),
                   uid=int(d.get("uid", 0)), gid=int(d.get("gid", 0)),
                   modified_at=_time(d.get("modified_at")),
                   symlink_target=d.get("symlink_target"))


@dataclass(frozen=True)
class UploadResult:
    """What the daemon wrote: its size and SHA-256 (hex), from its answer."""

    size: int
    sha256: Optional[str]


@dataclass(frozen=True)
class Health:
    status: str
    uptime_seconds: int
    raw: Dict[str, Any] = field(default_factory=dict)


# -- sandboxd.v1.Processes (processes that outlive their calls) --------------------------------

@dataclass(frozen=True)
class ExitDetail:
    """How a spawned process ended. exit_code is -1 when a signal ended it; signal is that
    signal (else 0); reason is "exited", "signaled" (a signal nobody here sent), "killed"
    (after a client's signal), "timed_out", "oom_killed" or "shutdown"."""

    exit_code: int
    signal: int = 0
    core_dumped: bool = False
    reason: str = "exited"

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class StreamOffsets:
    """A stream's ring holds bytes [start, end); end is all the process wrote."""

    start: int
    end: int


@dataclass(frozen=True)
class ProcessInfo:
    """A spawned process as the daemon lists it; state is "running" or "exited"."""

    id: int
    pid: int
    tag: str
    command: List[str]
    state: str
    started_at: Optional[_dt.datetime]
    exited_at: Optional[_dt.datetime]
    exit: Optional[ExitDetail]
    stdout: StreamOffsets
    stderr: StreamOffsets
    pty: bool
    stdin: bool

    @property
    def running(self) -> bool:
        return self.state == "running"


@dataclass(frozen=True)
class OutputChunk:
    """Output of a spawned process read by attach: offset is that of data's first byte in its
    stream."""

    stream: str
    offset: int
    data: bytes


@dataclass(frozen=True)
class Truncated:
    """Output in [start, end) of a stream was dropped from its ring before this reader got it."""

    stream: str
    start: int
    end: int


@dataclass(frozen=True)
class WatchEvent:
    """A change beneath a watched directory (Files.watch). kind: "ready" (every directory is
    watched; watch_id resumes the watch), "create", "write", "chmod", "remove", "rename"
    (old_path -> path), "overflow" (the events numbered lost[0]..lost[1] were lost: list the
    tree again). seq numbers a watch's events consecutively; path is relative to the watched
    directory."""

    seq: int
    kind: str
    path: str = ""
    is_dir: bool = False
    old_path: str = ""
    lost: Optional[Tuple[int, int]] = None
    reason: str = ""
    watch_id: str = ""
    resumed: bool = False
    directories: int = 0
