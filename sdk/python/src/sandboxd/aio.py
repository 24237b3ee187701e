"""The asyncio flavour of the client: AsyncSandbox, AsyncFiles and AsyncProcess have the names,
arguments and results of Sandbox, Files and Process, with `async` methods."""

from __future__ import annotations

import asyncio
import os
import weakref
from pathlib import Path
from typing import (Any, AsyncIterator, Awaitable, Callable, List, Mapping, Optional, Sequence,
                    Union)

import grpc
import grpc.aio
import httpx

from . import _common as c
from . import _rest as rest
from . import _rpc as rpc
from . import _terminal
from . import _watch
from . import errors
from ._common import Dest, Source
from ._gen.process.v1 import process_pb2_grpc as pb_grpc
from ._gen.sandboxd.v1 import files_pb2_grpc as fpb_grpc
from .aio_processes import AsyncProcesses
from .aio_terminal import AsyncTerminal, open_terminal
from .watch import AsyncWatch
from .types import (CommandResult, ExitStatus, FileEntry, FileStat, Health, OutputEvent,
                    UploadResult)


class AsyncSandbox:
    """See sandboxd.Sandbox; use `async with AsyncSandbox(...) as sb:` or `await sb.close()`."""

    def __init__(self, host: str = "127.0.0.1", *, grpc_port: int = 9090,
                 rest_port: int = 8080, grpc_target: Optional[str] = None,
                 rest_url: Optional[str] = None, unix_socket: Optional[str] = None,
                 token: Optional[str] = None, timeout: float = 30.0) -> None:
        ep = c.Endpoint.make(host, grpc_port=grpc_port, rest_port=rest_port,
                             grpc_target=grpc_target, rest_url=rest_url,
                             unix_socket=unix_socket, token=token, timeout=timeout)
        channel = grpc.aio.insecure_channel(ep.grpc_target, options=c.GRPC_OPTIONS)
        self._setup(ep, channel, httpx.AsyncClient(**rest.client_options(ep)), channel.close)

    def _setup(self, ep: c.Endpoint, channel: grpc.aio.Channel, http: Any,
               release: Callable[[], Awaitable[None]]) -> None:
        """See Sandbox._setup; release() is awaited when it closes."""
        self.endpoint = ep
        self._session = c.Session(ep, "AsyncSandbox")
        self._channel = channel
        self._release = release
        self._stub = pb_grpc.ProcessServiceStub(channel)
        self.files = AsyncFiles(ep, self._session, channel, http=http)
        self.processes = AsyncProcesses(self._session, channel)
        self._procs: "weakref.WeakSet[AsyncProcess]" = weakref.WeakSet()
        self._terms: "weakref.WeakSet[AsyncTerminal]" = weakref.WeakSet()

    @classmethod
    def connect(cls, host: str = "127.0.0.1", *, router: Any = None, name: Optional[str] = None,
                namespace: Optional[str] = None, uid: Optional[str] = None,
                pod_ip: Optional[str] = None, **kw: Any) -> "AsyncSandbox":
        """See Sandbox.connect; router is a URL or a sandboxd.router.AsyncRouter (a URL's
        connection is shared by the AsyncSandboxes of one event loop)."""
        if router is None:
            c.check_no_route(name, namespace, uid, pod_ip)
            return cls(host, **kw)
        from .router import connect_async
        return connect_async(router, name, namespace=namespace, uid=uid, pod_ip=pod_ip, **kw)

    async def close(self) -> None:
        if not self._session.closed:
            self._session.closed = True
            for p in list(self._procs):
                await p.close()
            for t in list(self._terms):
                await t.close()
            await self.files.close()
            await self._release()

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def start(self, command: c.Command, *, env: Optional[Mapping[str, str]] = None,
                    cwd: Optional[str] = None,
                    pty: Optional[c.PtySize] = None) -> "AsyncProcess":
        self._session.check_open()
        req = c.start_request(command, env, cwd, pty)
        call = self._stub.Start(req, metadata=self._session.metadata())
        p = AsyncProcess(self, call)
        self._procs.add(p)
        await p._wait_started(self.endpoint.timeout)
        return p

    async def run(self, command: c.Command, *, env: Optional[Mapping[str, str]] = None,
                  cwd: Optional[str] = None, timeout: Optional[float] = None,
                  max_output: int = c.DEFAULT_MAX_OUTPUT, stdin: Optional[bytes] = None,
                  pty: Optional[c.PtySize] = None, check: bool = False) -> CommandResult:
        col = c.OutputCollector(max_output)
        timed_out = False
        async with await self.start(command, env=env, cwd=cwd, pty=pty) as p:
            feeder = asyncio.ensure_future(_feed(p, stdin)) if stdin is not None else None

            async def collect() -> None:
                async for ev in p:
                    col.add(ev.stream, ev.data)

            task = asyncio.ensure_future(collect())
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout)
            except asyncio.TimeoutError:
                timed_out = True
                await p.kill()
                await asyncio.wait_for(task, self.endpoint.timeout)
            status = await p.wait()
            if feeder:
                await asyncio.wait_for(feeder, self.endpoint.timeout)
        return col.result(status.exit_code, timed_out, p.pid, check)

    async def execute(self, command: c.Command, *, env: Optional[Mapping[str, str]] = None,
                      cwd: Optional[str] = None,
                      timeout: Optional[float] = None) -> CommandResult:
        return await self._unary(c.execute_call(command, env, cwd, timeout))

    async def _unary(self, u: c.Unary[c.T]) -> c.T:
        return await rpc.acall(self._session, self._stub, u)

    async def terminal(self, command: Optional[c.Command] = None, *, cols: int = 80,
                       rows: int = 24, pid: Optional[int] = None,
                       offset: Optional[int] = None) -> AsyncTerminal:
        """See Sandbox.terminal: `async with await sb.terminal() as term:`."""
        self._session.check_open()
        t = await open_terminal(self.endpoint, _terminal.target(command, cols, rows, pid, offset))
        self._terms.add(t)
        return t

    async def health(self) -> Health:
        return await self.files.health()

    async def wait_ready(self, timeout: float = 30.0) -> None:
        await self.files.wait_ready(timeout)


async def _feed(p: "AsyncProcess", data: bytes) -> None:
    """run()'s stdin, written beside the output reader; a process gone first is no error."""
    try:
        if data:
            await p.write(data)
        await p.close_stdin()
    except errors.NotFoundError:
        pass


class AsyncProcess:
    """See sandboxd.Process: `async for ev in p`, `await p.write(...)`, `await p.wait()`. A task
    reads the stream into a bounded queue (backpressure instead of memory growth)."""

    def __init__(self, sb: AsyncSandbox, call: Any) -> None:
        self._sb = sb
        self._call = call
        self._q: "asyncio.Queue[Any]" = asyncio.Queue(maxsize=c.EVENT_QUEUE)
        self._s = c.StartStream()
        self._started = asyncio.Event()
        self._error: Optional[BaseException] = None
        self._task = asyncio.ensure_future(self._pump())

    @property
    def pid(self) -> int:
        return self._s.pid

    @property
    def exit_status(self) -> Optional[ExitStatus]:
        return self._s.status

    async def _wait_started(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self._started.wait(), timeout)
        except asyncio.TimeoutError:
            await self.close()
            raise c.start_timeout(timeout) from None
        if self._error is not None:
            raise self._error

    async def _pump(self) -> None:
        try:
            async for msg in self._call:
                item = self._s.item(msg)
                if item is c.StartStream.STARTED:
                    self._started.set()
                elif item is not None:
                    await self._q.put(item)
            end = self._s.end()
            if end is not None:
                await self._q.put(end)
        except grpc.RpcError as e:
            err = errors.from_grpc(e)
            if not self._started.is_set():
                self._error = err
            elif not self._s.saw_exit and not self._call.cancelled():
                await self._q.put(err)
        finally:
            self._started.set()

    async def read(self, timeout: Optional[float] = None) -> Optional[OutputEvent]:
        if self._s.done:
            return None
        try:
            item = await asyncio.wait_for(self._q.get(), timeout)
        except asyncio.TimeoutError:
            raise c.output_timeout(timeout) from None
        return self._s.take(item)

    def __aiter__(self) -> AsyncIterator[OutputEvent]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[OutputEvent]:
        while True:
            ev = await self.read()
            if ev is None:
                return
            yield ev

    async def wait(self, timeout: Optional[float] = None) -> ExitStatus:
        async def drain() -> None:
            while not self._s.done:
                await self.read()

        try:
            await asyncio.wait_for(drain(), timeout)
        except asyncio.TimeoutError:
            raise c.exit_timeout(timeout) from None
        assert self._s.status is not None
        return self._s.status

    async def write(self, data: Union[bytes, str]) -> None:
        for u in c.write_stdin_calls(self._s.pid, data):
            await self._sb._unary(u)

    async def close_stdin(self) -> None:
        await self._sb._unary(c.close_stdin_call(self._s.pid))

    async def signal(self, sig: c.SignalLike) -> None:
        await self._sb._unary(c.signal_call(self._s.pid, sig))

    async def kill(self) -> None:
        await self.signal(9)

    async def terminate(self) -> None:
        await self.signal(15)

    async def interrupt(self) -> None:
        await self.signal(2)

    async def resize(self, rows: int, cols: int) -> None:
        await self._sb._unary(c.resize_call(self._s.pid, rows, cols))

    async def close(self) -> None:
        if not self._s.done:
            self._call.cancel()
            self._s.done = True
        self._task.cancel()
        try:
            await self._task
        except (asyncio.CancelledError, Exception):
            pass

    async def __aenter__(self) -> "AsyncProcess":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncFiles:
    """See sandboxd.Files."""

    def __init__(self, ep: c.Endpoint, session: Optional[c.Session] = None,
                 channel: Optional[grpc.aio.Channel] = None, *, http: Any = None) -> None:
        self._ep = ep
        self._http = http if http is not None else httpx.AsyncClient(**rest.client_options(ep))
        self._session = session or c.Session(ep, "AsyncFiles")
        self._watch_stub = fpb_grpc.FilesStub(channel) if channel is not None else None

    def watch(self, path: str = "", *, recursive: bool = False, include: Sequence[str] = (),
              exclude: Sequence[str] = (), watch_id: Optional[str] = None, since: int = 0,
              rescan_interval: Optional[float] = None,
              timeout: Optional[float] = None) -> AsyncWatch:
        """See sandboxd.Files.watch: `async with sb.files.watch(...) as w: async for ev in w`."""
        if self._watch_stub is None:
            raise errors.UnimplementedError("watch needs the AsyncSandbox's gRPC channel")
        self._session.check_open()
        req = _watch.request(path, recursive, include, exclude, watch_id, since, rescan_interval)
        return AsyncWatch(self._watch_stub.Watch(req, metadata=self._session.metadata(),
                                                 timeout=timeout))

    async def close(self) -> None:
        await self._http.aclose()

    async def _check(self, r: httpx.Response) -> httpx.Response:
        if r.status_code >= 400:
            try:
                body = r.content
            except httpx.ResponseNotRead:  # a streamed answer: its first 64 KiB at most
                body = b""
                async for chunk in r.aiter_bytes():
                    body += chunk
                    if len(body) >= rest.ERROR_BODY:
                        break
            raise errors.from_http(r.status_code, body[:rest.ERROR_BODY])
        return r

    async def _send(self, req: rest.Request[c.T], **body: Any) -> c.T:
        try:
            r = await self._check(await self._http.request(req.method, req.url, **req.options(),
                                                           **body))
        except httpx.TransportError as e:
            raise rest.transport_error(f"{req.method} {req.url}", e) from None
        return req.decode(r)

    async def stat(self, path: str) -> FileStat:
        return await self._send(rest.stat(path))

    async def exists(self, path: str) -> bool:
        try:
            return await self._send(rest.exists(path))
        except errors.NotFoundError:
            return False

    async def list(self, path: str = "") -> List[FileEntry]:
        try:
            async with self._http.stream("GET", rest.file_url("files", path)) as r:
                await self._check(r)
                rest.expect_directory(path, r.headers)
                body = await r.aread()
        except httpx.TransportError as e:
            raise rest.transport_error(f"GET {path}", e) from None
        return rest.entries(body)

    async def mkdir(self, path: str, *, parents: bool = False,
                    mode: Optional[int] = None) -> None:
        await self._send(rest.mkdir(path, parents, mode))

    async def move(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        await self._send(rest.move(src, dst, overwrite))

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        await self._send(rest.remove(path, recursive))

    async def read_bytes(self, path: str, *, max_bytes: int = 64 << 20) -> bytes:
        out = rest.CappedBuffer(max_bytes)
        await self.download(path, out)
        return bytes(out.buf)

    async def write_bytes(self, path: str, data: bytes, *,
                          mode: Optional[int] = None) -> UploadResult:
        return await self.upload(bytes(data), path, mode=mode)

    async def upload(self, src: Source, path: str, *, mode: Optional[int] = None,
                     progress: Optional[c.Progress] = None) -> UploadResult:
        with c.source_file(src) as f:
            total = c.source_size(f)
            meter = c.Meter(progress, total)

            async def body() -> AsyncIterator[bytes]:
                meter.begin()
                while True:
                    b = await asyncio.to_thread(f.read, c.CHUNK)
                    if not b:
                        return
                    yield meter.add(b)

            return await self._send(rest.upload(path, mode, total), content=body())

    async def download(self, path: str, dst: Dest, *, offset: int = 0,
                       length: Optional[int] = None,
                       progress: Optional[c.Progress] = None) -> int:
        if isinstance(dst, (str, os.PathLike)):
            with c.AtomicTarget(dst) as f:
                return await self.download(path, f, offset=offset, length=length,
                                           progress=progress)
        headers = rest.range_headers(offset, length)
        try:
            async with self._http.stream("GET", rest.file_url("files", path),
                                         headers=headers) as r:
                await self._check(r)
                meter = c.Meter(progress, rest.download_size(path, r.headers))
                meter.begin()
                async for chunk in r.aiter_raw(c.CHUNK):
                    await asyncio.to_thread(dst.write, chunk)
                    meter.add(chunk)
                return rest.downloaded(path, meter)
        except httpx.TransportError as e:
            raise rest.transport_error(f"GET {path}", e) from None

    async def upload_dir(self, local_dir: c.PathLike, path: str, *,
                         progress: Optional[c.Progress] = None) -> int:
        prod = c.TarProducer(Path(local_dir))
        timeout = self._ep.timeout
        meter = c.Meter(progress)

        async def body() -> AsyncIterator[bytes]:
            while True:
                chunk = await asyncio.to_thread(prod.next_chunk, timeout)
                if chunk is None:
                    return
                yield meter.add(chunk)

        try:
            return await self._send(rest.upload_dir(path), content=body())
        finally:
            await asyncio.to_thread(prod.stop)

    async def download_dir(self, path: str, local_dir: c.PathLike, *,
                           progress: Optional[c.Progress] = None) -> int:
        ex = c.Extractor(Path(local_dir))
        reader = ex.reader
        meter = c.Meter(progress)
        try:
            async with self._http.stream("GET", rest.file_url("files", path),
                                         params=rest.tar_query()) as r:
                await self._check(r)
                async for chunk in r.aiter_raw(c.CHUNK):
                    await asyncio.to_thread(reader.feed, meter.add(chunk), self._ep.timeout)
                    if reader.closed.is_set():
                        break
            await asyncio.to_thread(reader.feed, None, self._ep.timeout)
        except httpx.TransportError as e:
            reader.fail(errors.UnavailableError(f"GET {path}: {e}"))
        except BaseException as e:
            reader.fail(e)
            raise
        finally:
            await asyncio.to_thread(ex.join, self._ep.timeout)
        return ex.result()

    async def health(self) -> Health:
        return await self._send(rest.health())

    async def metadata(self) -> Mapping[str, str]:
        return await self._send(rest.metadata())

    async def wait_ready(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last: Optional[BaseException] = None
        while loop.time() < deadline:
            try:
                last = rest.readiness(await self._http.get(rest.READY_PATH,
                                                           timeout=rest.ready_timeout(self._ep)))
                if last is None:
                    return
            except httpx.TransportError as e:
                last = e
            await asyncio.sleep(rest.READY_POLL)
        raise rest.not_ready(timeout, last)
