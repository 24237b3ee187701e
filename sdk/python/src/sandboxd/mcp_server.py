"""An MCP server (Model Context Protocol, stdio) that gives an agent a sandbox's processes and
files as tools, over the asyncio SDK. Needs the `mcp` extra (pip install 'sandboxd[mcp]').

    sandboxd-mcp --host 127.0.0.1 --grpc-port 9090 --rest-port 8080 [--token T]
    sandboxd-mcp --pool POOL [--namespace NS] [--kubeconfig PATH] [--context NAME]
                 [--connect auto|pod-ip|port-forward]

Tools: run, start, read_output, list_processes, write_stdin, signal, upload, download,
list_files, stat. Started processes are sandboxd.v1 spawned processes: they outlive this
server, and their output is read from the daemon's rings by offset.

With a cluster (--pool, --namespace, --kubeconfig or --context; the `k8s` extra), the tools
act on a sandbox claimed from a warm pool instead: --pool claims one at start-up, and the
tools claim_sandbox and release_sandbox let the agent claim (and give back) one itself. The
server releases what it claimed when it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import logging
import os
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple, TypeVar, Union

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from . import errors
from .aio import AsyncSandbox
from .aio_processes import AsyncSpawnedProcess
from .types import Truncated

MAX_BUFFERED = 1 << 20  # output returned per read_output and stream; the rest comes next time
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


class Tools:
    """The sandbox the tools act on, connected on first use (inside the server's loop), and
    how far the agent has read each started process's output."""

    def __init__(self, kw: Optional[Dict[str, Any]], cluster: Any = None) -> None:
        self._kw = kw  # None: no sandbox until one is claimed
        self._sb: Optional[AsyncSandbox] = None
        self.read_to: Dict[int, Dict[str, int]] = {}  # process id → stream → next offset
        self.cluster = cluster  # a sandboxd.k8s.SandboxClient, or None
        self.lease: Any = None  # the sandbox claimed, a sandboxd.k8s.SandboxLease

    def sb(self) -> AsyncSandbox:
        if self._kw is None:
            raise errors.FailedPreconditionError("no sandbox yet: claim one with claim_sandbox")
        if self._sb is None:
            self._sb = AsyncSandbox(**self._kw)
        return self._sb

    def point_at(self, lease: Any) -> None:
        """The tools act on the claimed sandbox from now on (the first connection is made
        in the server's loop)."""
        self.lease = lease
        host, grpc_port, rest_port = lease.endpoint
        self._kw = {"host": host, "grpc_port": grpc_port, "rest_port": rest_port,
                    "token": lease.token or ""}
        self.read_to = {}

    async def claim(self, pool: str, timeout: float) -> Dict[str, Any]:
        if self.cluster is None:
            raise errors.FailedPreconditionError("this server was started without a cluster "
                                                 "(--pool, --namespace or --kubeconfig)")
        if self.lease is not None:
            raise errors.FailedPreconditionError(
                f"sandbox {self.lease.sandbox_name} is claimed already: release_sandbox first")
        lease = await asyncio.to_thread(claim_ready, self.cluster, pool, timeout)
        self.point_at(lease)
        return lease.info()  # type: ignore[no-any-return]

    async def release(self) -> Dict[str, Any]:
        if self.lease is None:
            raise errors.FailedPreconditionError("no sandbox claimed")
        lease, self.lease, self._kw = self.lease, None, None
        if self._sb is not None:
            await self._sb.close()
            self._sb = None
        await asyncio.to_thread(lease.delete)
        return {"released": lease.name, "sandbox": lease.sandbox_name}

    async def take(self, process_id: int, follow: bool) -> Dict[str, Any]:
        """The output after the agent's offsets (with follow: until the first new output or
        the exit), and the offsets moved past it."""
        off = self.read_to.setdefault(process_id, {"stdout": 0, "stderr": 0})
        p = AsyncSpawnedProcess(self.sb().processes, process_id, None)  # type: ignore[arg-type]
        out = {"stdout": bytearray(), "stderr": bytearray()}
        dropped = {"stdout": 0, "stderr": 0}
        async with p.attach(stdout_offset=off["stdout"], stderr_offset=off["stderr"],
                            follow=follow) as att:
            async for ev in att:
                if isinstance(ev, Truncated):
                    dropped[ev.stream] += ev.end - ev.start
                    off[ev.stream] = max(off[ev.stream], ev.end)
                else:
                    room = MAX_BUFFERED - len(out[ev.stream])
                    out[ev.stream] += ev.data[:max(room, 0)]
                    off[ev.stream] = ev.offset + min(len(ev.data), max(room, 0))
                    if follow:
                        break
        res: Dict[str, Any] = {}
        for st in ("stdout", "stderr"):
            res[st] = _text(bytes(out[st]))["text"]
            res[st + "_dropped_bytes"] = dropped[st]
        return res


def claim_ready(cluster: Any, pool: str, timeout: float) -> Any:
    """A claim on the pool, Ready, with its address and token read and its endpoint open
    (the pod IP, or a port-forward as the cluster client's connect says); deleted if not."""
    lease = cluster.claim(pool, timeout=timeout)
    try:
        lease.wait_ready()
        lease.address()
        return lease
    except BaseException:
        lease.delete()
        raise


def build(kw: Optional[Dict[str, Any]], cluster: Any = None,
          lease: Any = None) -> Tuple[MCPServer, Tools]:
    """The MCP server over the sandbox that Sandbox(**kw) reaches; with a cluster (a
    sandboxd.k8s.SandboxClient), over the sandbox of lease and those the agent claims. The
    Tools say which sandbox is claimed (main releases it at exit)."""
    server = MCPServer("sandboxd", instructions=(
        "Tools to run commands and move files in a sandbox. Paths are relative to the "
        "sandbox root. run() is for commands that finish; start() + read_output() for long "
        "or interactive ones."))
    tools = Tools(kw, cluster)
    if lease is not None:
        tools.point_at(lease)

    if cluster is not None:
        @server.tool()
        @guard
        async def claim_sandbox(pool: str, timeout_seconds: float = 120.0) -> Dict[str, Any]:
            """Claims a sandbox from a warm pool of the cluster and waits until it is Ready;
            the other tools act on it from then on. One at a time: release_sandbox first."""
            return await tools.claim(pool, timeout_seconds)

        @server.tool()
        @guard
        async def release_sandbox() -> Dict[str, Any]:
            """Gives the claimed sandbox back (it is deleted, with everything in it)."""
            return await tools.release()

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
                    env: Optional[Dict[str, str]] = None, pty: bool = False,
                    tag: str = "mcp") -> Dict[str, Any]:
        """Starts a command in the background (it keeps running until it exits, even if
        this server goes away); read its output with read_output, feed it with write_stdin,
        stop it with signal, find it again with list_processes."""
        p = await tools.sb().processes.spawn(command, cwd=cwd, env=env, tag=tag, stdin=True,
                                             pty=(24, 80) if pty else None)
        return {"process_id": p.id}

    @server.tool()
    @guard
    async def read_output(process_id: int, wait_seconds: float = 0.0) -> Dict[str, Any]:
        """Returns a started process's output since the last read (up to 1 MiB per stream;
        output the daemon no longer held is counted in *_dropped_bytes), and whether it has
        exited, with its exit code and reason. wait_seconds > 0 waits that long at most for
        something new."""
        res = await tools.take(process_id, follow=False)
        info = await tools.sb().processes.get(process_id)
        if wait_seconds > 0 and info.running and not (res["stdout"] or res["stderr"]):
            before = dict(tools.read_to[process_id])
            try:
                await asyncio.wait_for(tools.take(process_id, follow=True),
                                       min(wait_seconds, 300.0))
            except asyncio.TimeoutError:
                pass
            # Whatever the wait saw is read again from the same offsets, with what followed.
            tools.read_to[process_id] = before
            res = await tools.take(process_id, follow=False)
            info = await tools.sb().processes.get(process_id)
        res["exited"] = not info.running
        res["exit_code"] = info.exit.exit_code if info.exit else None
        res["exit_reason"] = info.exit.reason if info.exit else None
        return res

    @server.tool()
    @guard
    async def list_processes(tag: str = "") -> Dict[str, Any]:
        """The processes started in the sandbox (by anyone; with tag: only those), running
        or recently exited."""
        return {"processes": [
            {"process_id": i.id, "tag": i.tag, "command": i.command, "state": i.state,
             "exit_code": i.exit.exit_code if i.exit else None,
             "exit_reason": i.exit.reason if i.exit else None,
             "stdout_bytes": i.stdout.end, "stderr_bytes": i.stderr.end}
            for i in await tools.sb().processes.list(tag=tag)]}

    @server.tool()
    @guard
    async def write_stdin(process_id: int, data: str = "", close: bool = False) -> Dict[str, Any]:
        """Writes text to a started process's stdin; close=True then sends end of file."""
        p = AsyncSpawnedProcess(tools.sb().processes, process_id, None)  # type: ignore[arg-type]
        await p.write(data, eof=close)
        return {"ok": True}

    @server.tool()
    @guard
    async def signal(process_id: int, signal: str = "SIGTERM", scope: str = "group") -> Dict[str, Any]:
        """Sends any signal (name or number) to a started process's group, the process alone
        (scope "process") or its whole tree (scope "tree")."""
        p = AsyncSpawnedProcess(tools.sb().processes, process_id, None)  # type: ignore[arg-type]
        return {"signalled": await p.signal(signal, scope)}

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

    return server, tools


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="sandboxd-mcp", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default=os.environ.get("SBX_HOST", "127.0.0.1"))
    ap.add_argument("--grpc-port", type=int, default=int(os.environ.get("SBX_GRPC_PORT", "9090")))
    ap.add_argument("--rest-port", type=int, default=int(os.environ.get("SBX_REST_PORT", "8080")))
    ap.add_argument("--socket", default=os.environ.get("SBX_SOCKET"),
                    help="gRPC through this unix socket")
    ap.add_argument("--token", default=None, help="bearer token (default $SANDBOXD_TOKEN)")
    ap.add_argument("--pool", help="claim a sandbox from this warm pool (released at exit)")
    ap.add_argument("--namespace", help="the cluster's namespace (default: the kubeconfig's)")
    ap.add_argument("--kubeconfig", help="kubeconfig file (default $KUBECONFIG, in-cluster)")
    ap.add_argument("--context", help="kubeconfig context")
    ap.add_argument("--connect", default=os.environ.get("SBX_CONNECT", "auto"),
                    choices=("auto", "pod-ip", "port-forward"),
                    help="how to reach a claimed sandbox: its pod IP, a port-forward through "
                         "the API server (from outside the cluster), or auto (default)")
    ap.add_argument("--claim-timeout", type=float, default=120.0,
                    help="seconds --pool waits for the sandbox to be Ready")
    a = ap.parse_args(argv)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if not (a.pool or a.namespace or a.kubeconfig or a.context):
        build({"host": a.host, "grpc_port": a.grpc_port, "rest_port": a.rest_port,
               "unix_socket": a.socket, "token": a.token})[0].run("stdio")
        return
    from .k8s import SandboxClient

    with SandboxClient(a.namespace, kubeconfig=a.kubeconfig, context=a.context,
                       connect=a.connect) as cluster:
        lease = claim_ready(cluster, a.pool, a.claim_timeout) if a.pool else None
        server, tools = build(None, cluster, lease)
        try:
            server.run("stdio")
        finally:
            if tools.lease is not None:
                tools.lease.delete()


if __name__ == "__main__":
    main()
