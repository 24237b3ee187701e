"""sandboxd.v1.Processes with the asyncio client (AsyncSandbox.processes): the names,
arguments and results of sandboxd.processes, with `async` methods."""

from __future__ import annotations

from typing import Any, AsyncIterator, List, Mapping, Optional, Union

import grpc
import grpc.aio

from . import _common as c
from . import _ext as x
from . import _rpc as rpc
from ._ext import AttachEvent
from ._gen.sandboxd.v1 import processes_pb2_grpc as xpb_grpc
from .types import CommandResult, ExitDetail, OutputChunk, ProcessInfo


class AsyncProcesses:
    """See sandboxd.processes.Processes."""

    def __init__(self, session: c.Session, channel: grpc.aio.Channel) -> None:
        self._session = session
        self._stub = xpb_grpc.ProcessesStub(channel)

    async def _call(self, u: c.Unary[c.T]) -> c.T:
        return await rpc.acall(self._session, self._stub, u)

    async def spawn(self, command: c.Command, *, env: Optional[Mapping[str, str]] = None,
                    cwd: Optional[str] = None, tag: str = "", stdin: bool = False,
                    pty: Optional[c.PtySize] = None, timeout: Optional[float] = None,
                    grace: Optional[float] = None, user: Optional[x.User] = None,
                    rlimits: Optional[x.Rlimits] = None, memory_limit: Optional[int] = None,
                    pids_limit: Optional[int] = None,
                    seccomp: Optional[str] = None) -> "AsyncSpawnedProcess":
        info = await self._call(x.spawn_call(
            command, env=env, cwd=cwd, tag=tag, stdin=stdin, pty=pty, timeout=timeout,
            grace=grace, user=user, rlimits=rlimits, memory_limit=memory_limit,
            pids_limit=pids_limit, seccomp=seccomp))
        return AsyncSpawnedProcess(self, info.id, info)

    async def run(self, command: c.Command, *, env: Optional[Mapping[str, str]] = None,
                  cwd: Optional[str] = None, stdin: bytes = b"",
                  timeout: Optional[float] = None, grace: Optional[float] = None,
                  user: Optional[x.User] = None, rlimits: Optional[x.Rlimits] = None,
                  memory_limit: Optional[int] = None, pids_limit: Optional[int] = None,
                  max_output: int = 0, check: bool = False,
                  seccomp: Optional[str] = None) -> CommandResult:
        return await self._call(x.run_call(
            command, env=env, cwd=cwd, stdin=stdin, timeout=timeout, grace=grace, user=user,
            rlimits=rlimits, memory_limit=memory_limit, pids_limit=pids_limit,
            max_output=max_output, check=check, seccomp=seccomp,
            rpc_timeout=self._session.endpoint.timeout))

    async def list(self, tag: str = "") -> List[ProcessInfo]:
        return await self._call(x.list_call(tag))

    async def get(self, process_id: int) -> ProcessInfo:
        return await self._call(x.get_call(process_id))

    async def handle(self, process_id: int) -> "AsyncSpawnedProcess":
        return AsyncSpawnedProcess(self, process_id, await self.get(process_id))


class AsyncSpawnedProcess:
    """See sandboxd.processes.SpawnedProcess."""

    def __init__(self, procs: AsyncProcesses, process_id: int, info: ProcessInfo) -> None:
        self._p = procs
        self.id = process_id
        self.info = info

    async def refresh(self) -> ProcessInfo:
        self.info = await self._p.get(self.id)
        return self.info

    def attach(self, *, stdout_offset: int = 0, stderr_offset: int = 0, follow: bool = True,
               stdout: bool = True, stderr: bool = True) -> "AsyncAttachment":
        req = x.attach_request(self.id, stdout_offset, stderr_offset, follow, stdout, stderr)
        self._p._session.check_open()
        return AsyncAttachment(self._p._stub.Attach(req, metadata=self._p._session.metadata()))

    async def wait(self, timeout: Optional[float] = None) -> ExitDetail:
        self.info = await self._p._call(x.wait_call(self.id, timeout))
        assert self.info.exit is not None
        return self.info.exit

    async def signal(self, sig: c.SignalLike, scope: str = "group") -> int:
        return await self._p._call(x.signal_call(self.id, sig, scope))

    async def kill(self, scope: str = "tree") -> int:
        return await self.signal(9, scope)

    async def write(self, data: Union[bytes, str], eof: bool = False) -> None:
        for u in x.write_calls(self.id, data, eof):
            await self._p._call(u)

    async def close_stdin(self) -> None:
        await self.write(b"", eof=True)

    async def resize(self, rows: int, cols: int) -> None:
        await self._p._call(x.resize_call(self.id, rows, cols))

    async def remove(self) -> None:
        await self._p._call(x.remove_call(self.id))


class AsyncAttachment:
    """See sandboxd.processes.Attachment: `async with p.attach() as att: async for ev in att`."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._closed = False
        self.exit: Optional[ExitDetail] = None

    def __aiter__(self) -> AsyncIterator[AttachEvent]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[AttachEvent]:
        try:
            async for m in self._call:
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

    async def output(self) -> bytes:
        return b"".join([ev.data async for ev in self if isinstance(ev, OutputChunk)])

    async def close(self) -> None:
        self._closed = True
        self._call.cancel()

    async def __aenter__(self) -> "AsyncAttachment":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
