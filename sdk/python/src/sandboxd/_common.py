"""What the sync and asyncio clients share: connection settings, the calls of process.v1 (the
requests, and the decoding of the answers and of the Start stream), signals, and the local side
of transfers (sources, targets, progress, tar). The REST requests are _rest's, those of
sandboxd.v1.Processes _ext's; _rpc makes the unary gRPC calls."""

from __future__ import annotations

import contextlib
import io
import os
import queue
import signal as _signal
import tarfile
import tempfile
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import (IO, Any, Callable, Dict, Generic, Iterator, List, Mapping, Optional,
                    Protocol, Sequence, Tuple, TypeVar, Union)

from . import errors
from ._gen.process.v1 import process_pb2 as pb
from .types import CommandResult, ExitStatus, OutputEvent

Command = Union[str, Sequence[str]]
PtySize = Tuple[int, int]  # (rows, cols)
Progress = Callable[[int, Optional[int]], None]  # (bytes done, total bytes or None)
SignalLike = Union[int, str, _signal.Signals]
PathLike = Union[str, "os.PathLike[str]"]
T = TypeVar("T")



class Writable(Protocol):
    """Where a download goes: anything with write(bytes)."""

    def write(self, data: bytes, /) -> Any: ...


Source = Union[bytes, bytearray, memoryview, PathLike, IO[bytes]]  # what an upload sends
Dest = Union[PathLike, Writable]  # where a download goes

CHUNK = 1 << 20  # bytes per read/write of a transfer
DEFAULT_MAX_OUTPUT = 16 << 20
EVENT_QUEUE = 64  # output chunks buffered per process handle before gRPC flow control pushes back
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.max_send_message_length", 64 << 20),
]


@dataclass(frozen=True)
class Endpoint:
    """Where a sandboxd listens and how to authenticate to it."""

    grpc_target: str
    rest_url: str
    token: Optional[str]
    timeout: float  # deadline of a unary call and of one HTTP read/write
    # Through a sandboxd-router: the routing keys of every gRPC call (metadata) and of every
    # HTTP request (headers); empty when the daemon is reached directly.
    grpc_route: Tuple[Tuple[str, str], ...] = ()
    http_route: Tuple[Tuple[str, str], ...] = ()
    # The TLS context of wss:// terminals through a router with a private CA (None: defaults).
    ssl_context: Any = None

    @classmethod
    def make(cls, host: str = "127.0.0.1", *, grpc_port: int = 9090, rest_port: int = 8080,
             grpc_target: Optional[str] = None, rest_url: Optional[str] = None,
             unix_socket: Optional[str] = None, token: Optional[str] = None,
             timeout: float = 30.0) -> "Endpoint":
        if grpc_target is None:
            if unix_socket:
                grpc_target = "unix:" + str(unix_socket)
            else:
                h = f"[{host}]" if ":" in host and not host.startswith("[") else host
                grpc_target = f"{h}:{int(grpc_port)}"
        if rest_url is None:
            h = f"[{host}]" if ":" in host and not host.startswith("[") else host
            rest_url = f"http://{h}:{int(rest_port)}"
        if token is None:
            token = os.environ.get("SANDBOXD_TOKEN") or None
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        return cls(grpc_target, rest_url.rstrip("/"), token, float(timeout))

    def metadata(self) -> List[Tuple[str, str]]:
        auth = [("authorization", f"Bearer {self.token}")] if self.token else []
        return auth + list(self.grpc_route)

    def headers(self) -> Dict[str, str]:
        auth = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return {**auth, **dict(self.http_route)}


def check_no_route(*keys: Optional[str]) -> None:
    """connect() without router=: the routing keys (name, namespace, uid, pod_ip) are refused."""
    if any(k is not None for k in keys):
        raise ValueError("name, namespace, uid and pod_ip go with router=")


class Session:
    """What the modules of one client (the client's and its processes') share about its
    connection: the endpoint, and whether the client is closed (check_open() then refuses,
    naming the client: "the Sandbox is closed")."""

    def __init__(self, endpoint: Endpoint, client: str) -> None:
        self.endpoint = endpoint
        self.client = client
        self.closed = False

    def check_open(self) -> None:
        if self.closed:
            raise errors.UnavailableError(f"the {self.client} is closed")

    def metadata(self) -> List[Tuple[str, str]]:
        return self.endpoint.metadata()

    def deadline(self, timeout: Optional[float]) -> float:
        """The deadline of a unary call: its own timeout, else the endpoint's."""
        return timeout or self.endpoint.timeout


@dataclass(frozen=True)
class Unary(Generic[T]):
    """One unary gRPC call as data, made the same way by the sync and asyncio clients: the
    stub's method, the request, how the response becomes the SDK's value, and the deadline
    (None: the endpoint's timeout). check_open=False: no check that the client is open."""

    method: str
    request: Any
    decode: Callable[[Any], T]
    timeout: Optional[float] = None
    check_open: bool = True
    trailers: bool = False  # decode(response, trailing metadata)


def ignore(response: Any) -> None:
    """The decoding of a call whose answer carries nothing."""
    return None


def argv(command: Command) -> List[str]:
    """A string runs through /bin/sh -c; a sequence is the argv itself."""
    if isinstance(command, str):
        return ["/bin/sh", "-c", command]
    out = [str(a) for a in command]
    if not out:
        raise ValueError("command must not be empty")
    return out


def process_config(command: Command, env: Optional[Mapping[str, str]],
                   cwd: Optional[str]) -> Any:
    c = pb.ProcessConfig(command=argv(command))
    if env:
        c.env_vars.update({str(k): str(v) for k, v in env.items()})
    if cwd is not None:
        c.cwd = str(cwd)
    return c


def start_request(command: Command, env: Optional[Mapping[str, str]], cwd: Optional[str],
                  pty: Optional[PtySize]) -> Any:
    req = pb.StartRequest(config=process_config(command, env, cwd))
    if pty is not None:
        rows, cols = pty
        req.pty.rows, req.pty.cols = int(rows), int(cols)
    return req


def signal_number(sig: SignalLike) -> int:
    """SIGTERM, "TERM", "SIGTERM", signal.SIGTERM or 15 → 15."""
    if isinstance(sig, str):
        name = sig.upper()
        name = name if name.startswith("SIG") else "SIG" + name
        try:
            return int(_signal.Signals[name])
        except KeyError:
            raise ValueError(f"unknown signal {sig!r}") from None
    n = int(sig)
    if not 0 < n < 65:
        raise ValueError(f"signal number {n} out of range")
    return n


def signal_request(pid: int, sig: SignalLike) -> Any:
    return pb.SendSignalRequest(process_id=pid, signal=signal_number(sig))  # type: ignore[arg-type]


def checked(res: CommandResult, check: bool) -> CommandResult:
    """run(..., check=True): ProcessExitError unless the command exited 0."""
    if check and not res.ok:
        raise errors.ProcessExitError(res, res.exit_code)
    return res


STDIN_PIECE = 1 << 20  # bytes per WriteStdin call, well below the daemon's message limit


def stdin_pieces(data: Union[bytes, bytearray, memoryview, str]) -> Iterator[bytes]:
    b = data.encode() if isinstance(data, str) else bytes(data)
    for i in range(0, len(b), STDIN_PIECE):
        yield b[i:i + STDIN_PIECE]


def stdin_request(pid: int, data: Optional[bytes]) -> Any:
    req = pb.WriteStdinRequest(process_id=pid)
    if data is None:
        req.eof.SetInParent()
    else:
        req.input = data
    return req


# The unary calls of process.v1.ProcessService.

# Execute's trailing metadata: bytes the daemon dropped past its caps, per stream.
TRUNCATED_KEYS = {"stdout": "sandboxd-stdout-truncated", "stderr": "sandboxd-stderr-truncated"}


def dropped_bytes(trailers: Any) -> Dict[str, int]:
    """The bytes dropped per stream that a call's trailing metadata tells (none: {})."""
    md = {k: v for k, v in (trailers or ())}
    out: Dict[str, int] = {}
    for stream, key in TRUNCATED_KEYS.items():
        v = md.get(key)
        if isinstance(v, str) and v.isdigit() and int(v) > 0:
            out[stream] = int(v)
    return out


def _execute_result(r: Any, trailers: Any = ()) -> CommandResult:
    dropped = dropped_bytes(trailers)
    res = CommandResult(r.exit_code, r.stdout, r.stderr, stdout_truncated="stdout" in dropped,
                        stderr_truncated="stderr" in dropped, truncated=dropped)
    if dropped:
        told = ", ".join(f"{n} bytes of {s}" for s, n in dropped.items())
        # user code -> execute -> _unary -> call/acall -> here
        warnings.warn(f"execute: the daemon dropped {told} (its output cap)",
                      errors.OutputTruncatedWarning, stacklevel=5)
    return res


def execute_call(command: Command, env: Optional[Mapping[str, str]], cwd: Optional[str],
                 timeout: Optional[float]) -> Unary[CommandResult]:
    # Execute has never checked that the client is open: on a closed one grpc refuses the call
    # itself (ValueError, under asyncio UsageError), not with the UnavailableError of the rest.
    req = pb.ExecuteRequest(config=process_config(command, env, cwd))
    return Unary("Execute", req, _execute_result, timeout, check_open=False, trailers=True)


def write_stdin_calls(pid: int, data: Union[bytes, str]) -> Iterator[Unary[None]]:
    """The WriteStdin calls that write data (str as UTF-8), in pieces the daemon accepts."""
    for piece in stdin_pieces(data):
        yield Unary("WriteStdin", stdin_request(pid, piece), ignore)


def close_stdin_call(pid: int) -> Unary[None]:
    return Unary("WriteStdin", stdin_request(pid, None), ignore)


def signal_call(pid: int, sig: SignalLike) -> Unary[None]:
    return Unary("SendSignal", signal_request(pid, sig), ignore)


def resize_call(pid: int, rows: int, cols: int) -> Unary[None]:
    return Unary("ResizeTTY", pb.ResizeTTYRequest(process_id=pid, rows=rows, cols=cols), ignore)


class StartStream:
    """What a process handle (Process, AsyncProcess) makes of its Start stream. The handle reads
    the stream with its own queue and event: it passes each message to item() and queues what
    comes back, queues end() when the stream ends, and read() passes each queued item to
    take()."""

    STARTED = object()  # item()'s answer to the init event: the process runs, pid is set

    def __init__(self) -> None:
        self.pid = 0
        self.saw_exit = False
        self.status: Optional[ExitStatus] = None  # once read() has reached the exit
        self.done = False  # read() has nothing more to give
        self._init = False

    def item(self, msg: Any) -> Any:
        """STARTED for the first init event; the OutputEvent or ExitStatus to queue; else None."""
        kind = msg.WhichOneof("event")
        if kind == "init":
            if self._init:
                return None
            self._init = True
            self.pid = msg.init.process_id
            return self.STARTED
        if kind in ("stdout", "stderr"):
            return OutputEvent(kind, getattr(msg, kind))
        if kind == "exit":
            self.saw_exit = True
            return ExitStatus(msg.exit.exit_code)
        return None

    def end(self) -> Optional[errors.SandboxError]:
        """What to queue when the stream ends without an error: nothing after the exit event."""
        return None if self.saw_exit else errors.InternalError(
            "the stream ended without an exit event")

    def take(self, item: Any) -> Optional[OutputEvent]:
        """read()'s answer for a queued item: the OutputEvent; None at the exit (its status is
        kept); the error the stream ended with is raised. Anything but output ends reading."""
        if isinstance(item, OutputEvent):
            return item
        self.done = True
        if isinstance(item, ExitStatus):
            self.status = item
            return None
        raise item


def start_timeout(timeout: float) -> errors.TimeoutError:
    return errors.TimeoutError(f"the process did not start within {timeout}s")


def output_timeout(timeout: Optional[float]) -> errors.TimeoutError:
    return errors.TimeoutError(f"no output within {timeout}s")


def exit_timeout(timeout: Optional[float]) -> errors.TimeoutError:
    return errors.TimeoutError(f"the process did not exit within {timeout}s")


class AtomicTarget:
    """A temp file beside a download's target, renamed over it on success, removed on failure.
    As a context manager it gives the temp file, and commits or discards as the block ends."""

    def __init__(self, target: PathLike) -> None:
        self.target = Path(target)
        fd, self.tmp = tempfile.mkstemp(prefix=f".{self.target.name}.", suffix=".part",
                                        dir=str(self.target.parent))
        self.file = os.fdopen(fd, "wb")

    def commit(self) -> None:
        self.file.close()
        os.replace(self.tmp, self.target)

    def discard(self) -> None:
        self.file.close()
        try:
            os.unlink(self.tmp)
        except FileNotFoundError:
            pass

    def __enter__(self) -> IO[bytes]:
        return self.file

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None:
            self.discard()
            return
        try:
            self.commit()
        except BaseException:
            self.discard()
            raise


@contextlib.contextmanager
def source_file(src: Source) -> Iterator[IO[bytes]]:
    """An upload's source as a readable binary file: bytes in memory, a local path opened (and
    closed after), a file object as it is."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        yield io.BytesIO(bytes(src))
    elif isinstance(src, (str, os.PathLike)):
        with open(src, "rb") as f:
            yield f
    else:
        yield src


class Meter:
    """The bytes a transfer has moved, told to progress(done, total) as they grow."""

    def __init__(self, progress: Optional[Progress], total: Optional[int] = None) -> None:
        self.progress = progress
        self.total = total
        self.done = 0

    def begin(self) -> None:
        """progress(0, total) before the first byte (the transfers of a file say it)."""
        if self.progress:
            self.progress(0, self.total)

    def add(self, chunk: bytes) -> bytes:
        self.done += len(chunk)
        if self.progress:
            self.progress(self.done, self.total)
        return chunk


class OutputCollector:
    """Captured output with a cap per stream; what goes beyond is dropped and flagged."""

    def __init__(self, cap: int) -> None:
        if cap < 0:
            raise ValueError("max_output must be >= 0")
        self.cap = cap
        self.bufs = {"stdout": bytearray(), "stderr": bytearray()}
        self.truncated = {"stdout": False, "stderr": False}

    def add(self, stream: str, data: bytes) -> None:
        buf = self.bufs[stream]
        room = self.cap - len(buf)
        if len(data) > room:
            self.truncated[stream] = True
            data = data[:max(room, 0)]
        buf += data

    def result(self, exit_code: int, timed_out: bool, pid: int, check: bool) -> CommandResult:
        res = CommandResult(exit_code, bytes(self.bufs["stdout"]), bytes(self.bufs["stderr"]),
                            self.truncated["stdout"], self.truncated["stderr"], timed_out, pid)
        return checked(res, check)


# ---------------------------------------------------------------------------------------------
# Directory transfers: a tar stream made or read on a thread of its own, handed over through a
# bounded queue, so that memory stays flat whatever the tree's size.

_END = object()


class TarProducer:
    """Writes the tar of a local directory on a thread; chunks() yields it (CHUNK at a time).
    stop() makes the thread give up (the upload failed)."""

    def __init__(self, src: Path) -> None:
        if not src.is_dir():
            raise NotADirectoryError(f"{src} is not a directory")
        self.src = src
        self.q: "queue.Queue[Any]" = queue.Queue(maxsize=8)
        self.stopped = threading.Event()
        self.buf = bytearray()
        self.thread = threading.Thread(target=self._run, name="sandboxd-tar", daemon=True)
        self.thread.start()

    def _put(self, item: Any) -> None:
        while not self.stopped.is_set():
            try:
                self.q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        raise _Stopped()

    def write(self, b: bytes) -> int:
        self.buf += b
        if len(self.buf) >= CHUNK:
            self._put(bytes(self.buf))
            self.buf.clear()
        return len(b)

    def _run(self) -> None:
        try:
            with tarfile.open(fileobj=self, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
                for entry in sorted(self.src.iterdir()):
                    tar.add(str(entry), arcname=entry.name, recursive=True)
            if self.buf:
                self._put(bytes(self.buf))
            self._put(_END)
        except _Stopped:
            pass
        except BaseException as e:  # handed to the reader
            try:
                self._put(e)
            except _Stopped:
                pass

    def next_chunk(self, timeout: float) -> Optional[bytes]:
        """The next chunk, or None at the end; raises what the tar thread met."""
        try:
            item = self.q.get(timeout=timeout)
        except queue.Empty:
            raise errors.TimeoutError("reading the local tree took too long") from None
        if item is _END:
            return None
        if isinstance(item, BaseException):
            raise item
        return item

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)


class _Stopped(Exception):
    pass


class QueueReader:
    """A readable file over chunks put into a bounded queue (by the HTTP side); tarfile reads it
    on another thread. feed(None) marks the end; fail(e) hands an error over."""

    def __init__(self) -> None:
        self.q: "queue.Queue[Any]" = queue.Queue(maxsize=8)
        self.cur = memoryview(b"")
        self.eof = False
        self.closed = threading.Event()

    def feed(self, chunk: Optional[bytes], timeout: float) -> None:
        deadline = timeout
        while not self.closed.is_set():
            try:
                self.q.put(_END if chunk is None else chunk, timeout=0.1)
                return
            except queue.Full:
                deadline -= 0.1
                if deadline <= 0:
                    raise errors.TimeoutError("writing the local tree took too long")
        # the extracting side gave up: its error is reported by the caller

    def fail(self, e: BaseException) -> None:
        try:
            self.q.put_nowait(e)
        except queue.Full:
            self.closed.set()

    def read(self, n: int = -1) -> bytes:
        out = bytearray()
        while (n < 0 or len(out) < n) and not self.eof:
            if not self.cur:
                item = self.q.get()
                if item is _END:
                    self.eof = True
                    break
                if isinstance(item, BaseException):
                    raise item
                self.cur = memoryview(item)
                continue
            take = len(self.cur) if n < 0 else min(n - len(out), len(self.cur))
            out += self.cur[:take]
            self.cur = self.cur[take:]
        return bytes(out)

    def close(self) -> None:
        self.closed.set()


class Extractor:
    """safe_extract of a QueueReader's stream on a thread of its own: the HTTP side feeds the
    reader, then result() gives the entry count or raises what extraction met."""

    def __init__(self, dest: Path) -> None:
        self.reader = QueueReader()
        self._out: List[Any] = []
        self._t = threading.Thread(target=self._run, args=(dest,), name="sandboxd-untar",
                                   daemon=True)
        self._t.start()

    def _run(self, dest: Path) -> None:
        try:
            self._out.append(safe_extract(self.reader, dest))  # type: ignore[arg-type]
        except BaseException as e:
            self._out.append(e)
            self.reader.close()

    def join(self, timeout: float) -> None:
        self._t.join(timeout)

    def result(self) -> int:
        if not self._out:
            raise errors.TimeoutError("unpacking took too long")
        if isinstance(self._out[0], BaseException):
            raise self._out[0]
        return int(self._out[0])


def _inside(root: str, p: str) -> bool:
    return p == root or p.startswith(root.rstrip(os.sep) + os.sep)


def safe_extract(fileobj: IO[bytes], dest: Path) -> int:
    """Extracts a tar stream into dest, refusing any entry that would land outside it (absolute
    names, "..", links pointing out, writes through links that point out) and device files.
    Returns the number of entries."""
    dest.mkdir(parents=True, exist_ok=True)
    root = os.path.realpath(dest)
    n = 0
    with tarfile.open(fileobj=fileobj, mode="r|") as tar:  # type: ignore[call-overload]
        for m in tar:
            _check_member(root, m)
            kw: Dict[str, Any] = {}
            if hasattr(tarfile, "data_filter"):
                kw["filter"] = "tar"
            tar.extract(m, root, set_attrs=True, **kw)
            n += 1
    return n


def _check_member(root: str, m: "tarfile.TarInfo") -> None:
    name = m.name
    parts = Path(name).parts
    if os.path.isabs(name) or ".." in parts or not parts:
        raise errors.PermissionDeniedError(f"tar entry {name!r} leaves the directory")
    if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
        raise errors.InvalidArgumentError(f"tar entry {name!r} is not a file, directory or link")
    target = os.path.join(root, name)
    parent = os.path.realpath(os.path.dirname(target))
    if not _inside(root, parent):
        raise errors.PermissionDeniedError(f"tar entry {name!r} is written through a link that "
                                           "leaves the directory")
    if m.issym():
        if os.path.isabs(m.linkname):
            raise errors.PermissionDeniedError(f"tar symlink {name!r} points to an absolute path")
        if not _inside(root, os.path.realpath(os.path.join(parent, m.linkname))):
            raise errors.PermissionDeniedError(f"tar symlink {name!r} points outside")
    if m.islnk():
        lp = Path(m.linkname).parts
        if os.path.isabs(m.linkname) or ".." in lp or not _inside(
                root, os.path.realpath(os.path.join(root, m.linkname))):
            raise errors.PermissionDeniedError(f"tar hard link {name!r} points outside")


def file_chunks(f: IO[bytes], meter: Meter) -> Iterator[bytes]:
    """A file's bytes, CHUNK at a time, counted by meter."""
    meter.begin()
    while True:
        b = f.read(CHUNK)
        if not b:
            break
        yield meter.add(b)


def source_size(f: IO[bytes]) -> Optional[int]:
    """The bytes left to read in f when it is a seekable regular file, else None."""
    try:
        fd = f.fileno()
        st = os.fstat(fd)
        import stat as _st
        if _st.S_ISREG(st.st_mode):
            return st.st_size - f.tell()
    except (AttributeError, OSError, ValueError):
        pass
    try:
        if f.seekable():
            pos = f.tell()
            end = f.seek(0, os.SEEK_END)
            f.seek(pos)
            return end - pos
    except (AttributeError, OSError, ValueError):
        pass
    return None
