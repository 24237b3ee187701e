"""An MCP server (Model Context Protocol, stdio) that gives an agent a sandbox's processes and
files as tools, over the asyncio SDK. Needs the `mcp` extra (pip install 'sandboxd[mcp]').

    sandboxd-mcp --host 127.0.0.1 --grpc-port 9090 --rest-port 8080 [--token T]

Tools: run, start, read_output, write_stdin, signal, upload, download, list_files, stat.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, List, Optional, TypeVar, Union

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from . import errors
from .aio import AsyncProcess, AsyncSandbox

MAX_PROCESSES = 64  # started processes tracked at once
MAX_BUFFERED = 1 << 20  # unread output kept per process and stream; older bytes are dropped
MAX_INLINE = 4 << 20  # largest file content passed inline (upload content, download result)


F = TypeVar("F", bound=Callable[..., Awaitable[Dict[str, Any]]])


def guard(fn: F) -> F:
    """Errors an agent can act on (the daemon's, bad arguments, local files) become tool
    errors whose text is the message, e.g. "NOT_FOUND: path does not exist ..."."""

    @functools.wraps(fn)
    async def wrapper(*a: Any, **kw: Any) -> Dict[str, Any]:
        try:
            return await fn(*a, **kw)
        except (errors.SandboxError, ValueError, OSError) as e:
            raise ToolError(str(e)) from None

    return wrapper  # type: ignore[return-value]


def _text(data: bytes) -> Dict[str, Any]:
    try:
        return {"text": data.decode("utf-8"), "encoding": "utf-8"}
    except UnicodeDecodeError:
        return {"text": base64.b64encode(data).decode(), "encoding": "base64"}


@dataclass
class Tracked:
    """A started process whose output a task collects until an agent reads it."""

    proc: AsyncProcess
    out: Dict[str, bytearray] = field(default_factory=lambda: {"stdout": bytearray(),
                                                                "stderr": bytearray()})
    dropped: Dict[str, int] = field(default_factory=lambda: {"stdout": 0, "stderr": 0})
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    exit_code: Optional[int] = None
    error: Optional[str] = None
    task: Optional["asyncio.Task[None]"] = None

    async def collect(self) -> None:
        try:
            async for ev in self.proc:
                buf = self.out[ev.stream]
                buf += ev.data
                if len(buf) > MAX_BUFFERED:
                    cut = len(buf) - MAX_BUFFERED
                    del buf[:cut]
                    self.dropped[ev.stream] += cut
                self.changed.set()
            st = self.proc.exit_status
            self.exit_code = st.exit_code if st else None
        except errors.SandboxError as e:
            self.error = str(e)
        finally:
            self.changed.set()

    def take(self) -> Dict[str, Any]:
        res: Dict[str, Any] = {}
        for s in ("stdout", "stderr"):
            res[s] = _text(bytes(self.out[s]))["text"] if self.out[s] else ""
            res[s + "_dropped_bytes"] = self.dropped[s]
            self.out[s].clear()
            self.dropped[s] = 0
        res["exited"] = self.exit_code is not None or self.error is not None
        res["exit_code"] = self.exit_code
        if self.error:
            res["error"] = self.error
        self.changed.clear()
        return res


class Tools:
    """The sandbox the tools act on, connected on first use (inside the server's loop)."""

    def __init__(self, kw: Dict[str, Any]) -> None:
        self._kw = kw
        self._sb: Optional[AsyncSandbox] = None
        self.procs: Dict[int, Tracked] = {}

    def sb(self) -> AsyncSandbox:
        if self._sb is None:
            self._sb = AsyncSandbox(**self._kw)
        return self._sb

    def tracked(self, process_id: int) -> Tracked:
        t = self.procs.get(process_id)
        if t is None:
            raise errors.NotFoundError(f"no started process {process_id}")
        return t


def build(kw: Dict[str, Any]) -> MCPServer:
    """The MCP server over the sandbox that Sandbox(**kw) reaches."""
    server = MCPServer("sandboxd", instructions=(
        "Tools to run commands and move files in a sandbox. Paths are relative to the "
        "sandbox root. run() is for commands that finish; start() + read_output() for long "
        "or interactive ones."))
    tools = Tools(kw)

    @server.tool()
    @guard
    async def run(command: Union[str, List[str]], cwd: Optional[str] = None,
                  env: Optional[Dict[str, str]] = None, timeout_seconds: float = 60.0,
                  max_output_bytes: int = 1 << 20, stdin: Optional[str] = None) -> Dict[str, Any]:
        """Runs a command to completion (a string runs through /bin/sh -c) and returns its
        exit code and output (capped at max_output_bytes per stream; killed after
        timeout_seconds)."""
        r = await tools.sb().run(command, cwd=cwd, env=env, timeout=timeout_seconds,
                                 max_output=max_output_bytes,
                                 stdin=stdin.encode() if stdin is not None else None)
        return {"exit_code": r.exit_code, "stdout": _text(r.stdout)["text"],
                "stderr": _text(r.stderr)["text"], "stdout_truncated": r.stdout_truncated,
                "stderr_truncated": r.stderr_truncated, "timed_out": r.timed_out}

    @server.tool()
    @guard
    async def start(command: Union[str, List[str]], cwd: Optional[str] = None,
                    env: Optional[Dict[str, str]] = None, pty: bool = False) -> Dict[str, Any]:
        """Starts a command in the background; read its output with read_output, feed it with
        write_stdin, stop it with signal."""
        live = [pid for pid, t in tools.procs.items() if t.exit_code is None and not t.error]
        if len(live) >= MAX_PROCESSES:
            raise errors.ResourceExhaustedError(f"{MAX_PROCESSES} processes are running already")
        p = await tools.sb().start(command, cwd=cwd, env=env, pty=(24, 80) if pty else None)
        t = Tracked(p)
        t.task = asyncio.ensure_future(t.collect())
        tools.procs[p.pid] = t
        return {"process_id": p.pid}

    @server.tool()
    @guard
    async def read_output(process_id: int, wait_seconds: float = 0.0) -> Dict[str, Any]:
        """Returns the output of a started process since the last read, and whether it has
        exited (with its exit code). wait_seconds > 0 waits that long at most for something
        new."""
        t = tools.tracked(process_id)
        if wait_seconds > 0 and not t.changed.is_set():
            try:
                await asyncio.wait_for(t.changed.wait(), min(wait_seconds, 300.0))
            except asyncio.TimeoutError:
                pass
        res = t.take()
        if res["exited"]:
            tools.procs.pop(process_id, None)
            await t.proc.close()
        return res

    @server.tool()
    @guard
    async def write_stdin(process_id: int, data: str = "", close: bool = False) -> Dict[str, Any]:
        """Writes text to a started process's stdin; close=True then sends end of file."""
        t = tools.tracked(process_id)
        if data:
            await t.proc.write(data)
        if close:
            await t.proc.close_stdin()
        return {"ok": True}

    @server.tool()
    @guard
    async def signal(process_id: int, signal: str = "SIGTERM") -> Dict[str, Any]:
        """Sends SIGTERM, SIGINT or SIGKILL to a started process's group."""
        await tools.tracked(process_id).proc.signal(signal)
        return {"ok": True}

    @server.tool()
    @guard
    async def upload(path: str, content: Optional[str] = None, local_path: Optional[str] = None,
                     encoding: str = "utf-8", mode: Optional[str] = None) -> Dict[str, Any]:
        """Writes a file in the sandbox, from content (utf-8 text, or base64 with
        encoding="base64") or from a file on this machine (local_path), streamed."""
        m = int(mode, 8) if mode else None
        if (content is None) == (local_path is None):
            raise errors.InvalidArgumentError("give exactly one of content and local_path")
        if local_path is not None:
            r = await tools.sb().files.upload(local_path, path, mode=m)
        else:
            assert content is not None
            if len(content) > MAX_INLINE * 2:
                raise errors.PayloadTooLargeError("content too large; use local_path")
            data = base64.b64decode(content) if encoding == "base64" else content.encode()
            r = await tools.sb().files.write_bytes(path, data, mode=m)
        return {"size": r.size, "sha256": r.sha256}

    @server.tool()
    @guard
    async def download(path: str, local_path: Optional[str] = None,
                       max_bytes: int = 1 << 20) -> Dict[str, Any]:
        """Reads a file from the sandbox: into a file on this machine (local_path, streamed,
        any size), or returned as text (utf-8, else base64) up to max_bytes."""
        if local_path is not None:
            n = await tools.sb().files.download(path, local_path)
            return {"size": n, "local_path": os.path.abspath(local_path)}
        data = await tools.sb().files.read_bytes(path, max_bytes=min(max_bytes, MAX_INLINE))
        return {"size": len(data), **_text(data)}

    @server.tool()
    @guard
    async def list_files(path: str = "") -> Dict[str, Any]:
        """Lists a directory of the sandbox."""
        ents = await tools.sb().files.list(path)
        return {"path": path, "entries": [
            {"name": e.name, "type": e.type, "size": e.size, "mode": "%04o" % e.mode,
             "modified_at": e.modified_at.isoformat() if e.modified_at else None}
            for e in ents]}

    @server.tool()
    @guard
    async def stat(path: str) -> Dict[str, Any]:
        """Describes a path of the sandbox (type, size, mode, owner, mtime, link target)."""
        s = await tools.sb().files.stat(path)
        return {"path": s.path, "name": s.name, "type": s.type, "size": s.size,
                "mode": "%04o" % s.mode, "uid": s.uid, "gid": s.gid,
                "modified_at": s.modified_at.isoformat() if s.modified_at else None,
                "symlink_target": s.symlink_target}

    return server


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="sandboxd-mcp", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default=os.environ.get("SBX_HOST", "127.0.0.1"))
    ap.add_argument("--grpc-port", type=int, default=int(os.environ.get("SBX_GRPC_PORT", "9090")))
    ap.add_argument("--rest-port", type=int, default=int(os.environ.get("SBX_REST_PORT", "8080")))
    ap.add_argument("--socket", default=os.environ.get("SBX_SOCKET"),
                    help="gRPC through this unix socket")
    ap.add_argument("--token", default=None, help="bearer token (default $SANDBOXD_TOKEN)")
    a = ap.parse_args(argv)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    build({"host": a.host, "grpc_port": a.grpc_port, "rest_port": a.rest_port,
           "unix_socket": a.socket, "token": a.token}).run("stdio")


if __name__ == "__main__":
    main()
