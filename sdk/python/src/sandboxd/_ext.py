"""Requests and results of sandboxd.v1.Processes, shared by the sync and asyncio clients: each
call as a _common.Unary (request, deadline, decoding), the Attach stream's request and events."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import grpc

from . import _common as c
from . import errors
from ._gen.sandboxd.v1 import processes_pb2 as xpb
from .types import (CommandResult, ExitDetail, OutputChunk, ProcessInfo, StreamOffsets,
                    Truncated)

Rlimits = Mapping[str, Union[int, Tuple[int, int]]]  # name → soft, or (soft, hard)
User = Union[int, Tuple[int, int], Tuple[int, int, Sequence[int]]]  # uid, (uid, gid[, groups])

AttachEvent = Union[OutputChunk, Truncated]

NO_DEADLINE = 24 * 3600.0  # of the calls that wait for a process: Run without a timeout, Wait

SCOPES = {"group": xpb.SIGNAL_SCOPE_GROUP, "process": xpb.SIGNAL_SCOPE_PROCESS,
          "tree": xpb.SIGNAL_SCOPE_TREE}
_REASONS = {xpb.EXIT_REASON_EXITED: "exited", xpb.EXIT_REASON_SIGNALED: "signaled",
            xpb.EXIT_REASON_KILLED: "killed", xpb.EXIT_REASON_TIMED_OUT: "timed_out",
            xpb.EXIT_REASON_OOM_KILLED: "oom_killed", xpb.EXIT_REASON_SHUTDOWN: "shutdown"}
_STREAMS = {xpb.STREAM_STDOUT: "stdout", xpb.STREAM_STDERR: "stderr"}


def spec(command: c.Command, *, env: Optional[Mapping[str, str]] = None,
         cwd: Optional[str] = None, tag: str = "", stdin: bool = False,
         pty: Optional[c.PtySize] = None, timeout: Optional[float] = None,
         grace: Optional[float] = None, user: Optional[User] = None,
         rlimits: Optional[Rlimits] = None, memory_limit: Optional[int] = None,
         pids_limit: Optional[int] = None, seccomp: Optional[str] = None) -> Any:
    """A ProcessSpec. timeout/grace in seconds; user is a uid or (uid, gid[, groups]);
    rlimits maps setrlimit names (lower case, "nofile") to soft or (soft, hard); seccomp is
    "default", "off" or None/"" for the daemon's own profile (--seccomp); the daemon refuses
    anything else (InvalidArgumentError)."""
    s = xpb.ProcessSpec(command=c.argv(command), tag=tag, stdin=stdin)
    if seccomp:
        s.seccomp = str(seccomp)
    if env:
        s.env.update({str(k): str(v) for k, v in env.items()})
    if cwd is not None:
        s.cwd = str(cwd)
    if pty is not None:
        s.pty.rows, s.pty.cols = int(pty[0]), int(pty[1])
    if timeout is not None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        s.timeout_ms = max(int(timeout * 1000), 1)
    if grace is not None:
        s.grace_ms = int(grace * 1000)
    if user is not None:
        uid, gid, groups = _user(user)
        s.user.uid, s.user.gid = uid, gid
        s.user.groups.extend(groups)
    for name, v in (rlimits or {}).items():
        soft, hard = (v, v) if isinstance(v, int) else v
        s.rlimits.add(name=name, soft=int(soft), hard=int(hard))
    if memory_limit is not None:
        s.limits.memory_bytes = int(memory_limit)
    if pids_limit is not None:
        s.limits.pids = int(pids_limit)
    return s


def _user(user: User) -> Tuple[int, int, List[int]]:
    """uid, or (uid, gid), or (uid, gid, groups) → (uid, gid, groups); gid defaults to uid."""
    if isinstance(user, int):
        return user, user, []
    uid, gid = int(user[0]), int(user[1])
    groups: List[int] = [int(g) for g in user[2]] if len(user) > 2 else []  # type: ignore[misc]
    return uid, gid, groups


def exit_detail(e: Any) -> ExitDetail:
    return ExitDetail(e.exit_code, e.signal, e.core_dumped, _REASONS.get(e.reason, "unknown"))


def _ts(t: Any) -> Optional[_dt.datetime]:
    return t.ToDatetime(tzinfo=_dt.timezone.utc) if t.seconds or t.nanos else None


def process_info(m: Any) -> ProcessInfo:
    exited = m.state == xpb.STATE_EXITED
    return ProcessInfo(
        id=m.id, pid=m.pid, tag=m.tag, command=list(m.command),
        state="exited" if exited else "running",
        started_at=_ts(m.started_at), exited_at=_ts(m.exited_at) if exited else None,
        exit=exit_detail(m.exit) if exited and m.HasField("exit") else None,
        stdout=StreamOffsets(m.stdout.start, m.stdout.end),
        stderr=StreamOffsets(m.stderr.start, m.stderr.end), pty=m.pty, stdin=m.stdin)


def attach_request(pid: int, stdout_offset: int, stderr_offset: int, follow: bool,
                   stdout: bool, stderr: bool) -> Any:
    if stdout_offset < 0 or stderr_offset < 0:
        raise ValueError("offsets must be >= 0")
    return xpb.AttachRequest(id=pid, stdout_offset=stdout_offset, stderr_offset=stderr_offset,
                             follow=follow, skip_stdout=not stdout, skip_stderr=not stderr)


def attach_event(m: Any) -> Union[OutputChunk, Truncated, ExitDetail, None]:
    kind = m.WhichOneof("event")
    if kind == "output":
        o = m.output
        return OutputChunk(_STREAMS.get(o.stream, "stdout"), o.offset, o.data)
    if kind == "truncated":
        t = m.truncated
        return Truncated(_STREAMS.get(t.stream, "stdout"), getattr(t, "from"), t.to)
    if kind == "exit":
        return exit_detail(m.exit)
    return None


def signal_request(pid: int, sig: c.SignalLike, scope: str) -> Any:
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {sorted(SCOPES)}, not {scope!r}")
    return xpb.SignalRequest(id=pid, signal=c.signal_number(sig), scope=SCOPES[scope])


def run_result(r: Any) -> CommandResult:
    d = exit_detail(r.exit)
    return CommandResult(exit_code=d.exit_code, stdout=r.stdout, stderr=r.stderr,
                         stdout_truncated=r.stdout_truncated, stderr_truncated=r.stderr_truncated,
                         timed_out=d.reason == "timed_out", exit=d,
                         stdout_total=r.stdout_total, stderr_total=r.stderr_total,
                         truncated={s: n for s, n in (("stdout", r.stdout_total - len(r.stdout)),
                                                      ("stderr", r.stderr_total - len(r.stderr)))
                                    if n > 0})


def attach_failure(e: grpc.RpcError, closed: bool) -> Optional[errors.SandboxError]:
    """The error an Attach stream failed with; None when close() cancelled it."""
    if e.code() == grpc.StatusCode.CANCELLED and closed:
        return None
    return errors.from_grpc(e)


# The unary calls, with the arguments of Processes' and SpawnedProcess' methods.

def spawn_call(command: c.Command, **kw: Any) -> c.Unary[ProcessInfo]:
    """Spawn; kw are spec()'s."""
    return c.Unary("Spawn", xpb.SpawnRequest(spec=spec(command, **kw)), process_info)


def run_call(command: c.Command, *, stdin: bytes, max_output: int, check: bool,
             timeout: Optional[float], grace: Optional[float], rpc_timeout: float,
             **kw: Any) -> c.Unary[CommandResult]:
    """Run; kw are spec()'s. The deadline leaves the process its timeout and grace (5 s when
    unset) and the call rpc_timeout more; without a timeout, NO_DEADLINE."""
    s = spec(command, timeout=timeout, grace=grace, **kw)
    req = xpb.RunRequest(spec=s, stdin=bytes(stdin), output_limit_bytes=max_output)
    deadline = (timeout + (grace or 5.0) + rpc_timeout) if timeout else None
    return c.Unary("Run", req, lambda r: c.checked(run_result(r), check),
                   deadline or NO_DEADLINE)


def _process_list(r: Any) -> List[ProcessInfo]:
    return [process_info(m) for m in r.processes]


def list_call(tag: str) -> c.Unary[List[ProcessInfo]]:
    return c.Unary("List", xpb.ListRequest(tag=tag), _process_list)


def get_call(pid: int) -> c.Unary[ProcessInfo]:
    return c.Unary("Get", xpb.GetRequest(id=pid), process_info)


def wait_call(pid: int, timeout: Optional[float]) -> c.Unary[ProcessInfo]:
    return c.Unary("Wait", xpb.WaitRequest(id=pid), process_info, timeout or NO_DEADLINE)


def signal_call(pid: int, sig: c.SignalLike, scope: str) -> c.Unary[int]:
    return c.Unary("Signal", signal_request(pid, sig, scope), lambda r: int(r.count))


def write_calls(pid: int, data: Union[bytes, str], eof: bool) -> Iterator[c.Unary[None]]:
    """The WriteStdin calls that write data in pieces the daemon accepts (one, empty, for no
    data); eof goes with the last."""
    pieces = list(c.stdin_pieces(data)) or [b""]
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        yield c.Unary("WriteStdin", xpb.WriteStdinRequest(id=pid, data=piece, eof=eof and last),
                      c.ignore)


def resize_call(pid: int, rows: int, cols: int) -> c.Unary[None]:
    size = xpb.TerminalSize(rows=rows, cols=cols)
    return c.Unary("Resize", xpb.ResizeRequest(id=pid, size=size), c.ignore)


def remove_call(pid: int) -> c.Unary[None]:
    return c.Unary("Remove", xpb.RemoveRequest(id=pid), c.ignore)
