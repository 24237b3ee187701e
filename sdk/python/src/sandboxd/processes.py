"""sandboxd.v1.Processes with the sync client (Sandbox.processes): processes that outlive
the calls that start them, listed, reattached from any output offset, waited for, signalled
(any signal, to the group, the process or its whole tree), with exit detail."""

from __future__ import annotations

from typing import Any, Iterator, List, Mapping, Optional, Union

import grpc

from . import _common as c
from . import _ext as x
from . import _rpc as rpc
from ._ext import AttachEvent as AttachEvent  # re-exported: a name of this module
from ._gen.sandboxd.v1 import processes_pb2_grpc as xpb_grpc
from .types import CommandResult, ExitDetail, OutputChunk, ProcessInfo


class Processes:
    """Sandbox.processes. Needs a sandboxd that serves sandboxd.v1.Processes (the reference
    daemon does not: UnimplementedError)."""

    def __init__(self, session: c.Session, channel: grpc.Channel) -> None:
        self._session = session
        self._stub = xpb_grpc.ProcessesStub(channel)

    def _call(self, u: c.Unary[c.T]) -> c.T:
        return rpc.call(self._session, self._stub, u)

    def spawn(self, command: c.Command, *, env: Optional[Mapping[str, str]] = None,
              cwd: Optional[str] = None, tag: str = "", stdin: bool = False,
              pty: Optional[c.PtySize] = None, timeout: Optional[float] = None,
              grace: Optional[float] = None, user: Optional[x.User] = None,
              rlimits: Optional[x.Rlimits] = None, memory_limit: Optional[int] = None,
              pids_limit: Optional[int] = None,
              seccomp: Optional[str] = None) -> "SpawnedProcess":
        """Starts a process that runs until it exits, whoever is attached. stdin=True keeps
        a pipe open for write(); timeout (seconds) sends SIGTERM to its tree, then SIGKILL
        after grace; user is a uid or (uid, gid[, groups]); rlimits maps setrlimit names to
        soft or (soft, hard); memory_limit/pids_limit bound its whole tree (a cgroup);
        seccomp is "default" or "off" (None: the daemon's --seccomp)."""
        info = self._call(x.spawn_call(
            command, env=env, cwd=cwd, tag=tag, stdin=stdin, pty=pty, timeout=timeout,
            grace=grace, user=user, rlimits=rlimits, memory_limit=memory_limit,
            pids_limit=pids_limit, seccomp=seccomp))
        return SpawnedProcess(self, info.id, info)

    def run(self, command: c.Command, *, env: Optional[Mapping[str, str]] = None,
            cwd: Optional[str] = None, stdin: bytes = b"", timeout: Optional[float] = None,
            grace: Optional[float] = None, user: Optional[x.User] = None,
            rlimits: Optional[x.Rlimits] = None, memory_limit: Optional[int] = None,
            pids_limit: Optional[int] = None, max_output: int = 0,
            check: bool = False, seccomp: Optional[str] = None) -> CommandResult:
        """Runs to completion in one call; the daemon keeps the last max_output bytes per
        stream (0: its --max-output-bytes) and says how the process ended (result.exit)."""
        return self._call(x.run_call(
            command, env=env, cwd=cwd, stdin=stdin, timeout=timeout, grace=grace, user=user,
            rlimits=rlimits, memory_limit=memory_limit, pids_limit=pids_limit,
            max_output=max_output, check=check, seccomp=seccomp,
            rpc_timeout=self._session.endpoint.timeout))

    def list(self, tag: str = "") -> List[ProcessInfo]:
        """Spawned processes: running ones, and exited ones still kept (with tag: only those)."""
        return self._call(x.list_call(tag))

    def get(self, process_id: int) -> ProcessInfo:
        return self._call(x.get_call(process_id))

    def handle(self, process_id: int) -> "SpawnedProcess":
        """The handle of a process spawned earlier (by anyone): checks it exists."""
        return SpawnedProcess(self, process_id, self.get(process_id))


class SpawnedProcess:
    """A process spawned with Processes.spawn (or found with handle()). Nothing here kills it
    when the handle goes away: it runs until it exits."""

    def __init__(self, procs: Processes, process_id: int, info: ProcessInfo) -> None:
        self._p = procs
        self.id = process_id
        self.info = info

    def refresh(self) -> ProcessInfo:
        self.info = self._p.get(self.id)
        return self.info

    def attach(self, *, stdout_offset: int = 0, stderr_offset: int = 0, follow: bool = True,
               stdout: bool = True, stderr: bool = True) -> "Attachment":
        """Output from these absolute offsets: what the rings hold, then (follow) new output
        until the exit. Dropped output shows as Truncated events, never silently."""
        req = x.attach_request(self.id, stdout_offset, stderr_offset, follow, stdout, stderr)
        self._p._session.check_open()
        call = self._p._stub.Attach(req, metadata=self._p._session.metadata())
        return Attachment(call)

    def wait(self, timeout: Optional[float] = None) -> ExitDetail:
        """Waits for the exit (TimeoutError after timeout seconds; the process keeps running)."""
        info = self._p._call(x.wait_call(self.id, timeout))
        self.info = info
        assert info.exit is not None
        return info.exit

    def signal(self, sig: c.SignalLike, scope: str = "group") -> int:
        """Any signal (number or name) to its process group, the process alone ("process") or
        its whole tree ("tree"); returns how many processes got it."""
        return self._p._call(x.signal_call(self.id, sig, scope))

    def kill(self, scope: str = "tree") -> int:
        return self.signal(9, scope)

    def write(self, data: Union[bytes, str], eof: bool = False) -> None:
        """Writes to its stdin (spawned with stdin=True, or a PTY); eof closes it after."""
        for u in x.write_calls(self.id, data, eof):
            self._p._call(u)

    def close_stdin(self) -> None:
        self.write(b"", eof=True)

    def resize(self, rows: int, cols: int) -> None:
        self._p._call(x.resize_call(self.id, rows, cols))

    def remove(self) -> None:
        """Forgets the (exited) process and its output now."""
        self._p._call(x.remove_call(self.id))


class Attachment:
    """An Attach stream: iterate it for OutputChunk and Truncated events; it ends at the
    process's exit (then in .exit) or, without follow, after the output held now. Leaving the
    `with` block (or close()) stops reading and leaves the process alone."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._closed = False
        self.exit: Optional[ExitDetail] = None

    def __iter__(self) -> Iterator[AttachEvent]:
        try:
            for m in self._call:
                ev = x.attach_event(m)
                if isinstance(ev, ExitDetail):
                    self.exit = ev
                    return
                if ev is not None:
                    yield ev
        except grpc.RpcError as e:
            err = x.attach_failure(e, self._closed)
            if err is not None:
                raise err from None

    def output(self) -> bytes:
        """Everything until the end, stdout and stderr in arrival order (for small outputs)."""
        return b"".join(ev.data for ev in self if isinstance(ev, OutputChunk))

    def close(self) -> None:
        self._closed = True
        self._call.cancel()

    def __enter__(self) -> "Attachment":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
