"""Plain data returned by the SDK."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

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
    timed_out: the timeout passed and the process was killed."""

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = False
    process_id: int = 0

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
