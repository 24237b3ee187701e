"""The synchronous client: Sandbox (processes over gRPC), Sandbox.files (files over REST) and
Process, the handle of a started process."""

from __future__ import annotations

import os
import queue
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Iterator, List, Mapping, Optional, Sequence, Union

import grpc
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
from .processes import Processes
from .terminal import Terminal
from .watch import Watch
from .types import (CommandResult, ExitStatus, FileEntry, FileStat, Health, OutputEvent,
                    UploadResult)


class Sandbox:
    """A connection to one sandboxd: gRPC for processes, REST for files.

    Sandbox(host, grpc_port=9090, rest_port=8080) or explicit grpc_target ("host:port",
    "unix:/path") / rest_url; unix_socket=path is the gRPC unix socket. token is sent as
    `authorization: Bearer <token>` on every call (default: $SANDBOXD_TOKEN). timeout bounds
    every unary call and every HTTP read or write. Use it as a context manager, or close() it.
    """

    def __init__(self, host: str = "127.0.0.1", *, grpc_port: int = 9090,
                 rest_port: int = 8080, grpc_target: Optional[str] = None,
                 rest_url: Optional[str] = None, unix_socket: Optional[str] = None,
                 token: Optional[str] = None, timeout: float = 30.0) -> None:
        ep = c.Endpoint.make(host, grpc_port=grpc_port, rest_port=rest_port,
                             grpc_target=grpc_target, rest_url=rest_url,
                             unix_socket=unix_socket, token=token, timeout=timeout)
        channel = grpc.insecure_channel(ep.grpc_target, options=c.GRPC_OPTIONS)
        self._setup(ep, channel, httpx.Client(**rest.client_options(ep)), channel.close)

    def _setup(self, ep: c.Endpoint, channel: grpc.Channel, http: Any,
               release: Callable[[], None]) -> None:
        """Builds the client on a channel and an HTTP client (its own, or a router's shared
        ones wrapped with the sandbox's routing keys); release() runs when it closes."""
        self.endpoint = ep
        self._session = c.Session(ep, "Sandbox")
        self._channel = channel
        self._release = release
        self._stub = pb_grpc.ProcessServiceStub(channel)
        self.files = Files(ep, self._session, channel, http=http)
        self.processes = Processes(self._session, channel)
        self._procs: "weakref.WeakSet[Process]" = weakref.WeakSet()
        self._terms: "weakref.WeakSet[Terminal]" = weakref.WeakSet()

    @classmethod
    def connect(cls, host: str = "127.0.0.1", *, router: Any = None, name: Optional[str] = None,
                namespace: Optional[str] = None, uid: Optional[str] = None,
                pod_ip: Optional[str] = None, **kw: Any) -> "Sandbox":
        """Sandbox(host, **kw); or with router (a URL such as "http://router:8080", or a
        sandboxd.Router) the sandbox called name in namespace (default "default") through
        that sandboxd-router: its routing keys go with every call and request, over one
        gRPC channel and one HTTP connection pool that every Sandbox connected through the
        same router shares. There grpc_port/rest_port, when given, are sent as the target
        port (else the router finds sandboxd's ports), uid and pod_ip as X-Sandbox-UID and
        X-Sandbox-Pod-IP; token and timeout are as for Sandbox(); ca_file (PEM) the CA that
        an https:// router's certificate is checked against."""
        if router is None:
            c.check_no_route(name, namespace, uid, pod_ip)
            return cls(host, **kw)
        from .router import connect_sync
        return connect_sync(router, name, namespace=namespace, uid=uid, pod_ip=pod_ip, **kw)
    def close(self) -> None:
        """Closes the channel and the HTTP pool; processes still streaming are cancelled (the
        daemon kills a process whose Start stream goes away)."""
        if not self._session.closed:
            self._session.closed = True
            for p in list(self._procs):
                p.close()
            for t in list(self._terms):
                t.close()
            self.files.close()
            self._release()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- processes -----------------------------------------------------------------------------

    def start(self, command: c.Command, *, env: Optional[Mapping[str, str]] = None,
              cwd: Optional[str] = None, pty: Optional[c.PtySize] = None) -> "Process":
        """Starts a process (a string runs via /bin/sh -c); returns once the daemon has
        started it. pty=(rows, cols) gives it a terminal (stderr merges into stdout)."""
        self._session.check_open()
        req = c.start_request(command, env, cwd, pty)
        call = self._stub.Start(req, metadata=self._session.metadata())
        p = Process(self, call, self.endpoint.timeout)
        self._procs.add(p)
        return p

    def run(self, command: c.Command, *, env: Optional[Mapping[str, str]] = None,
            cwd: Optional[str] = None, timeout: Optional[float] = None,
            max_output: int = c.DEFAULT_MAX_OUTPUT, stdin: Optional[bytes] = None,
            pty: Optional[c.PtySize] = None, check: bool = False) -> CommandResult:
        """Runs a command to completion and captures its output (at most max_output bytes per
        stream; the rest is dropped and flagged). After timeout seconds the process is killed
        (SIGKILL to its group) and the result says timed_out. check=True raises
        ProcessExitError unless it exited 0."""
        col = c.OutputCollector(max_output)
        deadline = None if timeout is None else time.monotonic() + timeout
        timed_out = False
        with self.start(command, env=env, cwd=cwd, pty=pty) as p:
            feeder = _StdinFeeder(p, stdin) if stdin is not None else None
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0 and not timed_out:
                    timed_out = True
                    p.kill()
                    deadline = time.monotonic() + self.endpoint.timeout
                    continue
                try:
                    ev = p.read(timeout=left)
                except errors.TimeoutError:
                    if timed_out:
                        raise
                    continue
                if ev is None:
                    break
                col.add(ev.stream, ev.data)
            status = p.wait()
            if feeder:
                feeder.finish(self.endpoint.timeout)
        return col.result(status.exit_code, timed_out, p.pid, check)

    def execute(self, command: c.Command, *, env: Optional[Mapping[str, str]] = None,
                cwd: Optional[str] = None, timeout: Optional[float] = None) -> CommandResult:
        """One Execute call: the daemon captures the output (its --max-output-bytes applies)
        and the whole result comes back in one message. stdin is empty."""
        return self._unary(c.execute_call(command, env, cwd, timeout))

    def _unary(self, u: c.Unary[c.T]) -> c.T:
        return rpc.call(self._session, self._stub, u)

    def terminal(self, command: Optional[c.Command] = None, *, cols: int = 80, rows: int = 24,
                 pid: Optional[int] = None, offset: Optional[int] = None) -> Terminal:
        """A terminal over WebSocket: a new login shell (with command, that command through
        `sh -lc`; a list is quoted into one line) of cols x rows, or with pid the terminal of a
        process spawned with a pty, its output from offset (None: the last 50 lines). Closing
        it leaves the process running."""
        self._session.check_open()
        t = Terminal(self.endpoint, _terminal.target(command, cols, rows, pid, offset))
        self._terms.add(t)
        return t

    # -- health --------------------------------------------------------------------------------

    def health(self) -> Health:
        return self.files.health()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Polls /readyz until the daemon is ready; raises TimeoutError after timeout seconds."""
        self.files.wait_ready(timeout)


class Process:
    """A started process. Iterate it for OutputEvents (ends at exit); write()/close_stdin()
    feed its stdin; signal()/kill()/terminate() signal its process group; resize() its PTY;
    wait() returns its ExitStatus. A thread reads the stream into a bounded queue, so a reader
    that falls behind slows the process down instead of growing memory. Leaving the `with`
    block (or close()) while it runs cancels the stream, and the daemon kills the process."""

    def __init__(self, sb: Sandbox, call: Any, timeout: float) -> None:
        self._sb = sb
        self._call = call
        self._q: "queue.Queue[Any]" = queue.Queue(maxsize=c.EVENT_QUEUE)
        self._s = c.StartStream()
        self._started = threading.Event()
        self._error: Optional[BaseException] = None
        self._closing = False
        self._t = threading.Thread(target=self._pump, name="sandboxd-process", daemon=True)
        self._t.start()
        if not self._started.wait(timeout):
            call.cancel()
            raise c.start_timeout(timeout)
        if self._error is not None:
            raise self._error

    @property
    def pid(self) -> int:
        """The daemon's process id (virtual, not an OS pid)."""
        return self._s.pid

    @property
    def exit_status(self) -> Optional[ExitStatus]:
        """The exit status once the stream has delivered it, else None."""
        return self._s.status

    def _put(self, item: Any) -> None:
        # Bounded: blocks while the reader is behind, gives up once the handle is closed.
        while not self._closing:
            try:
                self._q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _pump(self) -> None:
        try:
            for msg in self._call:
                item = self._s.item(msg)
                if item is c.StartStream.STARTED:
                    self._started.set()
                elif item is not None:
                    self._put(item)
            end = self._s.end()
            if end is not None:
                self._put(end)
        except grpc.RpcError as e:
            err = errors.from_grpc(e)
            if not self._started.is_set():
                self._error = err
            elif not self._closing and not self._s.saw_exit:
                self._put(err)
        finally:
            self._started.set()

    def read(self, timeout: Optional[float] = None) -> Optional[OutputEvent]:
        """The next output chunk, or None once the process has exited (its status is then in
        exit_status). Raises TimeoutError when nothing came within timeout seconds."""
        if self._s.done:
            return None
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            raise c.output_timeout(timeout) from None
        return self._s.take(item)

    def __iter__(self) -> Iterator[OutputEvent]:
        while True:
            ev = self.read()
            if ev is None:
                return
            yield ev

    def wait(self, timeout: Optional[float] = None) -> ExitStatus:
        """Waits for the exit, discarding output not read yet. Raises TimeoutError after
        timeout seconds (the process keeps running)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._s.done:
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            try:
                self.read(timeout=left)
            except errors.TimeoutError:
                raise c.exit_timeout(timeout) from None
        assert self._s.status is not None
        return self._s.status

    def write(self, data: Union[bytes, str]) -> None:
        """Writes to its stdin (str as UTF-8), in pieces the daemon accepts."""
        for u in c.write_stdin_calls(self._s.pid, data):
            self._sb._unary(u)

    def close_stdin(self) -> None:
        """End of file on its stdin (on a PTY: the terminal's EOF character)."""
        self._sb._unary(c.close_stdin_call(self._s.pid))

    def signal(self, sig: c.SignalLike) -> None:
        """Sends a signal (number, name or signal.Signals) to its process group."""
        self._sb._unary(c.signal_call(self._s.pid, sig))

    def kill(self) -> None:
        self.signal(9)

    def terminate(self) -> None:
        self.signal(15)

    def interrupt(self) -> None:
        self.signal(2)

    def resize(self, rows: int, cols: int) -> None:
        """Resizes its terminal (FailedPreconditionError without a PTY)."""
        self._sb._unary(c.resize_call(self._s.pid, rows, cols))

    def close(self) -> None:
        """Stops streaming; a process still running is killed by the daemon."""
        self._closing = True
        if not self._s.done:
            self._call.cancel()
            self._s.done = True
        self._t.join(timeout=5)

    def __enter__(self) -> "Process":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _StdinFeeder:
    """Writes run()'s stdin on a thread of its own, so that a process that writes while it
    reads cannot deadlock against us; a process that exits first (NOT_FOUND) is no error."""

    def __init__(self, p: Process, data: bytes) -> None:
        self.error: Optional[BaseException] = None
        self._t = threading.Thread(target=self._run, args=(p, data), daemon=True,
                                   name="sandboxd-stdin")
        self._t.start()

    def _run(self, p: Process, data: bytes) -> None:
        try:
            if data:
                p.write(data)
            p.close_stdin()
        except errors.NotFoundError:
            pass
        except BaseException as e:
            self.error = e

    def finish(self, timeout: float) -> None:
        self._t.join(timeout)
        if self.error is not None:
            raise self.error


class Files:
    """The files of a sandbox, over its REST API. Paths are relative to the sandbox root (a
    leading "/" is the root). Transfers stream: memory stays flat whatever the size."""

    def __init__(self, ep: c.Endpoint, session: Optional[c.Session] = None,
                 channel: Optional[grpc.Channel] = None, *, http: Any = None) -> None:
        self._ep = ep
        self._http = http if http is not None else httpx.Client(**rest.client_options(ep))
        self._session = session or c.Session(ep, "Files")
        self._watch_stub = fpb_grpc.FilesStub(channel) if channel is not None else None

    def close(self) -> None:
        self._http.close()

    def _check(self, r: httpx.Response) -> httpx.Response:
        if r.status_code >= 400:
            try:
                body = r.content
            except httpx.ResponseNotRead:  # a streamed answer: its first 64 KiB at most
                body = b""
                for chunk in r.iter_bytes():
                    body += chunk
                    if len(body) >= rest.ERROR_BODY:
                        break
            raise errors.from_http(r.status_code, body[:rest.ERROR_BODY])
        return r

    def _send(self, req: rest.Request[c.T], **body: Any) -> c.T:
        try:
            r = self._check(self._http.request(req.method, req.url, **req.options(), **body))
        except httpx.TransportError as e:
            raise rest.transport_error(f"{req.method} {req.url}", e) from None
        return req.decode(r)

    # -- watches (gRPC) ------------------------------------------------------------------------

    def watch(self, path: str = "", *, recursive: bool = False, include: Sequence[str] = (),
              exclude: Sequence[str] = (), watch_id: Optional[str] = None, since: int = 0,
              rescan_interval: Optional[float] = None, timeout: Optional[float] = None) -> Watch:
        """Watches a directory (sandboxd.v1.Files/Watch): iterate the Watch for WatchEvents, the
        first "ready" once every directory is watched. include/exclude are globs on the path
        relative to the directory; watch_id and since resume a watch the daemon kept after its
        last reader went (w.watch_id, w.last_seq); rescan_interval (seconds) adds a periodic
        snapshot for changes inotify cannot see; timeout (seconds) ends the call then
        (TimeoutError), None: never."""
        if self._watch_stub is None:
            raise errors.UnimplementedError("watch needs the Sandbox's gRPC channel")
        self._session.check_open()
        req = _watch.request(path, recursive, include, exclude, watch_id, since, rescan_interval)
        return Watch(self._watch_stub.Watch(req, metadata=self._session.metadata(), timeout=timeout))

    # -- small calls ---------------------------------------------------------------------------

    def stat(self, path: str) -> FileStat:
        """lstat of a path: NotFoundError when it does not exist."""
        return self._send(rest.stat(path))

    def exists(self, path: str) -> bool:
        try:
            return self._send(rest.exists(path))
        except errors.NotFoundError:
            return False

    def list(self, path: str = "") -> List[FileEntry]:
        """The entries of a directory, sorted by name."""
        try:
            with self._http.stream("GET", rest.file_url("files", path)) as r:
                self._check(r)
                rest.expect_directory(path, r.headers)
                body = r.read()
        except httpx.TransportError as e:
            raise rest.transport_error(f"GET {path}", e) from None
        return rest.entries(body)

    def mkdir(self, path: str, *, parents: bool = False, mode: Optional[int] = None) -> None:
        self._send(rest.mkdir(path, parents, mode))

    def move(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        self._send(rest.move(src, dst, overwrite))

    def remove(self, path: str, *, recursive: bool = False) -> None:
        self._send(rest.remove(path, recursive))

    def read_bytes(self, path: str, *, max_bytes: int = 64 << 20) -> bytes:
        """A whole (small) file in memory; InvalidArgumentError beyond max_bytes."""
        out = rest.CappedBuffer(max_bytes)
        self.download(path, out)
        return bytes(out.buf)

    def write_bytes(self, path: str, data: bytes, *, mode: Optional[int] = None) -> UploadResult:
        return self.upload(bytes(data), path, mode=mode)

    # -- streaming transfers -------------------------------------------------------------------

    def upload(self, src: Source, path: str, *, mode: Optional[int] = None,
               progress: Optional[c.Progress] = None) -> UploadResult:
        """Writes a file from bytes, a local path or a readable binary file object, streamed
        in CHUNK pieces; the daemon writes atomically. progress(done, total) is called as bytes
        go out (total None when unknown). Returns the size and SHA-256 the daemon wrote."""
        with c.source_file(src) as f:
            total = c.source_size(f)
            return self._send(rest.upload(path, mode, total),
                              content=c.file_chunks(f, c.Meter(progress, total)))

    def download(self, path: str, dst: Dest, *, offset: int = 0, length: Optional[int] = None,
                 progress: Optional[c.Progress] = None) -> int:
        """Reads a file into a local path (written to a temp file beside it, then renamed) or a
        writable binary file object, streamed. offset/length read a byte range. Returns the
        number of bytes written."""
        if isinstance(dst, (str, os.PathLike)):
            with c.AtomicTarget(dst) as f:
                return self.download(path, f, offset=offset, length=length, progress=progress)
        headers = rest.range_headers(offset, length)
        try:
            with self._http.stream("GET", rest.file_url("files", path), headers=headers) as r:
                self._check(r)
                meter = c.Meter(progress, rest.download_size(path, r.headers))
                meter.begin()
                for chunk in r.iter_raw(c.CHUNK):
                    dst.write(chunk)
                    meter.add(chunk)
                return rest.downloaded(path, meter)
        except httpx.TransportError as e:
            raise rest.transport_error(f"GET {path}", e) from None

    def upload_dir(self, local_dir: c.PathLike, path: str, *,
                   progress: Optional[c.Progress] = None) -> int:
        """Sends a local directory's tree into the directory `path` (created) as a tar stream:
        files, directories, modes, mtimes and symlinks. Returns the entries unpacked."""
        prod = c.TarProducer(Path(local_dir))
        timeout = self._ep.timeout
        meter = c.Meter(progress)

        def body() -> Iterator[bytes]:
            while True:
                chunk = prod.next_chunk(timeout)
                if chunk is None:
                    return
                yield meter.add(chunk)

        try:
            return self._send(rest.upload_dir(path), content=body())
        finally:
            prod.stop()

    def download_dir(self, path: str, local_dir: c.PathLike, *,
                     progress: Optional[c.Progress] = None) -> int:
        """Fetches the tree of the directory `path` as a tar stream and unpacks it into
        local_dir (created); entries that would land outside it are refused. Returns the
        number of entries."""
        ex = c.Extractor(Path(local_dir))
        reader = ex.reader
        meter = c.Meter(progress)
        try:
            with self._http.stream("GET", rest.file_url("files", path),
                                   params=rest.tar_query()) as r:
                self._check(r)
                for chunk in r.iter_raw(c.CHUNK):
                    reader.feed(meter.add(chunk), self._ep.timeout)
                    if reader.closed.is_set():
                        break
            reader.feed(None, self._ep.timeout)
        except httpx.TransportError as e:
            reader.fail(errors.UnavailableError(f"GET {path}: {e}"))
        except BaseException as e:
            reader.fail(e)
            raise
        finally:
            ex.join(self._ep.timeout)
        return ex.result()

    # -- runtime -------------------------------------------------------------------------------

    def health(self) -> Health:
        return self._send(rest.health())

    def metadata(self) -> Mapping[str, str]:
        return self._send(rest.metadata())

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Optional[BaseException] = None
        while time.monotonic() < deadline:
            try:
                last = rest.readiness(self._http.get(rest.READY_PATH,
                                                     timeout=rest.ready_timeout(self._ep)))
                if last is None:
                    return
            except httpx.TransportError as e:
                last = e
            time.sleep(rest.READY_POLL)
        raise rest.not_ready(timeout, last)
