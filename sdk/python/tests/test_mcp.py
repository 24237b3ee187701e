"""The MCP server (stdio) driven by the `mcp` package's own client: its tools listed, and each
called against the real daemon."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys

import pytest

mcp = pytest.importorskip("mcp", reason="the mcp package is not installed (pip install 'sandboxd[mcp]')")
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

TOOLS = {"run", "start", "read_output", "list_processes", "write_stdin", "signal", "upload",
         "download", "list_files", "stat"}


def server(daemon):
    """The server's command line; each test opens its own client session (a session must
    start and end in one task, which an async fixture does not guarantee)."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "sandboxd.mcp_server", "--grpc-port", str(daemon.grpc_port),
              "--rest-port", str(daemon.rest_port)],
        env={k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "HOME")})


async def call(c, name, **args):
    r = await c.call_tool(name, args)
    assert not r.is_error, f"{name}{args}: {r.content}"
    return r.structured_content["result"]


async def call_error(c, name, **args):
    r = await c.call_tool(name, args)
    assert r.is_error, f"{name}{args} did not fail: {r}"
    return r.content[0].text


async def test_lists_its_tools(daemon):
    async with Client(server(daemon), read_timeout_seconds=60) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        assert all(t.description for t in tools.values())
        assert "command" in tools["run"].input_schema["properties"]


async def test_run(daemon):
    async with Client(server(daemon), read_timeout_seconds=60) as client:
        r = await call(client, "run", command="echo out; echo err >&2; exit 3")
        assert (r["exit_code"], r["stdout"], r["stderr"]) == (3, "out\n", "err\n")
        r = await call(client, "run", command=["cat"], stdin="piped")
        assert r["stdout"] == "piped"
        r = await call(client, "run", command="sleep 30", timeout_seconds=0.5)
        assert r["timed_out"] and r["exit_code"] == -1
        r = await call(client, "run", command="head -c 5000 /dev/zero | tr '\\0' x",
                       max_output_bytes=10)
        assert r["stdout"] == "x" * 10 and r["stdout_truncated"]
        assert "NOT_FOUND" in await call_error(client, "run", command=["/no/such/binary"])


async def test_start_read_write_signal(daemon):
    async with Client(server(daemon), read_timeout_seconds=60) as client:
        p = await call(client, "start", command="echo ready; read l; echo got $l; exec sleep 60",
                       tag="mcp-test")
        pid = p["process_id"]
        out = ""
        while "ready" not in out:
            r = await call(client, "read_output", process_id=pid, wait_seconds=10)
            assert not r["exited"], r
            out += r["stdout"]
        assert out == "ready\n"  # read once, never twice
        await call(client, "write_stdin", process_id=pid, data="hello\n")
        out = ""
        while "got hello" not in out:
            r = await call(client, "read_output", process_id=pid, wait_seconds=10)
            out += r["stdout"]
        assert out == "got hello\n"
        listed = await call(client, "list_processes", tag="mcp-test")
        assert [(q["process_id"], q["state"]) for q in listed["processes"]] == [(pid, "running")]
        r = await call(client, "signal", process_id=pid, signal="SIGTERM", scope="tree")
        assert r["signalled"] >= 1
        r = await call(client, "read_output", process_id=pid, wait_seconds=10)
        while not r["exited"]:
            r = await call(client, "read_output", process_id=pid, wait_seconds=10)
        assert (r["exit_code"], r["exit_reason"]) == (-1, "killed")
        assert "NOT_FOUND" in await call_error(client, "read_output", process_id=999999)
        p = await call(client, "start", command=["cat"], pty=False)
        await call(client, "write_stdin", process_id=p["process_id"], data="x", close=True)
        out = ""
        r = {"exited": False}
        while not r["exited"]:
            r = await call(client, "read_output", process_id=p["process_id"], wait_seconds=10)
            out += r["stdout"]
        assert out == "x" and r["exit_code"] == 0
    # The processes outlive the server: a new session finds the first one.
    async with Client(server(daemon), read_timeout_seconds=60) as client:
        listed = await call(client, "list_processes", tag="mcp-test")
        assert [q["exit_reason"] for q in listed["processes"]] == ["killed"]
        r = await call(client, "read_output", process_id=pid)
        assert r["stdout"] == "ready\ngot hello\n" and r["exited"]


async def test_files(daemon, tmp_path):
    async with Client(server(daemon), read_timeout_seconds=60) as client:
        r = await call(client, "upload", path="mcp/a.txt", content="hello mcp", mode="0600")
        assert r["size"] == 9 and r["sha256"] == hashlib.sha256(b"hello mcp").hexdigest()
        assert (daemon.root / "mcp/a.txt").read_bytes() == b"hello mcp"
        blob = os.urandom(3000)
        await call(client, "upload", path="mcp/b.bin", content=base64.b64encode(blob).decode(),
                   encoding="base64")
        local = tmp_path / "local.bin"
        local.write_bytes(blob * 100)
        await call(client, "upload", path="mcp/c.bin", local_path=str(local))
        assert (daemon.root / "mcp/c.bin").read_bytes() == blob * 100
        r = await call(client, "download", path="mcp/a.txt")
        assert (r["text"], r["encoding"]) == ("hello mcp", "utf-8")
        r = await call(client, "download", path="mcp/b.bin")
        assert r["encoding"] == "base64" and base64.b64decode(r["text"]) == blob
        dst = tmp_path / "out.bin"
        r = await call(client, "download", path="mcp/c.bin", local_path=str(dst))
        assert r["size"] == 300000 and dst.read_bytes() == blob * 100
        r = await call(client, "list_files", path="mcp")
        assert [(e["name"], e["size"]) for e in r["entries"]] == [
            ("a.txt", 9), ("b.bin", 3000), ("c.bin", 300000)]
        r = await call(client, "stat", path="mcp/a.txt")
        assert (r["type"], r["size"], r["mode"]) == ("file", 9, "0600")
        assert "NOT_FOUND" in await call_error(client, "stat", path="mcp/none")
        assert "PERMISSION_DENIED" in await call_error(client, "download", path="../x")
        assert "exactly one" in await call_error(client, "upload", path="x")
        text = await call_error(client, "download", path="mcp/c.bin", max_bytes=10)
        assert "max_bytes" in text
        json.dumps(r)  # results are plain JSON
