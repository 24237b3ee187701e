"""sandboxd.v1.Processes with the asyncio client (AsyncSandbox.processes): the names,
arguments and results of sandboxd.processes, with `async` methods."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, AsyncIterator, List, Mapping, Optional, Union

import grpc
import grpc.aio

from . import _common as c
from . import _ext as x
from . import errors
from ._gen.sandboxd.v1 import processes_pb2 as xpb
from ._gen.sandboxd.v1 import processes_pb2_grpc as xpb_grpc
from .processes import AttachEvent
from .types import CommandResult, ExitDetail, OutputChunk, ProcessInfo

if TYPE_CHECKING:
    from .aio import AsyncSandbox


class AsyncProcesses:
    """See sandboxd.processes.Processes."""

    def __init__(self, sb: "AsyncSandbox", channel: grpc.aio.Channel) -> None:
        self._sb = sb
        self._stub = xpb_grpc.ProcessesStub(channel)

    async def _call(self, name: str, req: Any, timeout: Optional[float] = None) -> Any:
        if self._sb._closed:
            raise errors.UnavailableError("the AsyncSandbox is closed")
        try:
            return await getattr(self._stub, name)(
                req, metadata=self._sb.endpoint.metadata(),
                timeout=timeout or self._sb.endpoint.timeout)
        except grpc.RpcError as e:
            raise errors.from_grpc(e) from None

    async def spawn(self, command: c.Command, *, env: Optional[Mapping[str, str]] = None,
                    cwd: Optional[str] = None, tag: str = "", stdin: bool = False,
                    pty: Optional[c.PtySize] = None, timeout: Optional[float] = None,
                    grace: Optional[float] = None, user: Optional[x.User] = None,
                    rlimits: Optional[x.Rlimits] = None, memory_limit: Optional[int] = None,
                    pids_limit: Optional[int] = None,
                    seccomp: Optional[str] = None) -> "AsyncSpawnedProcess":
        s = x.spec(command, env=env, cwd=cwd, tag=tag, stdin=stdin, pty=pty, timeout=timeout,
                   grace=grace, user=user, rlimits=rlimits, memory_limit=memory_limit,
                   pids_limit=pids_limit, seccomp=seccomp)
        info = x.process_info(await self._call("Spawn", xpb.SpawnRequest(spec=s)))
        return AsyncSpawnedProcess(self, info.id, info)

    async def run(self, command: c.Command, *, env: Optional[Mapping[str, str]] = None,
                  cwd: Optional[str] = None, stdin: bytes = b"",
                  timeout: Optional[float] = None, grace: Optional[float] = None,
                  user: Optional[x.User] = None, rlimits: Optional[x.Rlimits] = None,
                  memory_limit: Optional[int] = None, pids_limit: Optional[int] = None,
                  max_output: int = 0, check: bool = False,
                  seccomp: Optional[str] = None) -> CommandResult:
        s = x.spec(command, env=env, cwd=cwd, timeout=timeout, grace=grace, user=user,
                   rlimits=rlimits, memory_limit=memory_limit, pids_limit=pids_limit,
                   seccomp=seccomp)
        req = xpb.RunRequest(spec=s, stdin=bytes(stdin), output_limit_bytes=max_output)
        deadline = (timeout + (grace or 5.0) + self._sb.endpoint.timeout) if timeout else None
        res = CommandResult(**x.run_result(await self._call("Run", req,
                                                            timeout=deadline or 24 * 3600.0)))
        if check and not res.ok:
            raise errors.ProcessExitError(res, res.exit_code)
        return res

    async def list(self, tag: str = "") -> List[ProcessInfo]:
        r = await self._call("List", xpb.ListRequest(tag=tag))
        return [x.process_info(m) for m in r.processes]

    async def get(self, process_id: int) -> ProcessInfo:
        return x.process_info(await self._call("Get", xpb.GetRequest(id=process_id)))

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
        if self._p._sb._closed:
            raise errors.UnavailableError("the AsyncSandbox is closed")
        return AsyncAttachment(self._p._stub.Attach(req, metadata=self._p._sb.endpoint.metadata()))

    async def wait(self, timeout: Optional[float] = None) -> ExitDetail:
        self.info = x.process_info(await self._p._call("Wait", xpb.WaitRequest(id=self.id),
                                                       timeout=timeout or 24 * 3600.0))
        assert self.info.exit is not None
        return self.info.exit

    async def signal(self, sig: c.SignalLike, scope: str = "group") -> int:
        r = await self._p._call("Signal", x.signal_request(self.id, sig, scope))
        return int(r.count)

    async def kill(self, scope: str = "tree") -> int:
        return await self.signal(9, scope)

    async def write(self, data: Union[bytes, str], eof: bool = False) -> None:
        pieces = list(c.stdin_pieces(data)) or [b""]
        for i, piece in enumerate(pieces):
            await self._p._call("WriteStdin", xpb.WriteStdinRequest(
                id=self.id, data=piece, eof=eof and i == len(pieces) - 1))

    async def close_stdin(self) -> None:
        await self.write(b"", eof=True)

    async def resize(self, rows: int, cols: int) -> None:
        await self._p._call("Resize", xpb.ResizeRequest(id=self.id, size=xpb.TerminalSize(
            rows=rows, cols=cols)))

    async def remove(self) -> None:
        await self._p._call("Remove", xpb.RemoveRequest(id=self.id))


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
            if e.code() == grpc.StatusCode.CANCELLED and self._closed:
                return
            raise errors.from_grpc(e) from None

    async def output(self) -> bytes:
        return b"".join([ev.data async for ev in self if isinstance(ev, OutputChunk)])

    async def close(self) -> None:
        self._closed = True
        self._call.cancel()

    async def __aenter__(self) -> "AsyncAttachment":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
