"""The bearer token on the wire: what the clients send, seen by real servers (grpcio and
http.server) on loopback, and, when the daemon supports --token-file, enforced by it."""

from __future__ import annotations

import asyncio
import http.server
import subprocess
import threading
from concurrent import futures

import grpc
import pytest

import sandboxd
from sandboxd import errors
from sandboxd._gen.process.v1 import process_pb2 as pb
from sandboxd._gen.process.v1 import process_pb2_grpc as pb_grpc
from sandboxd.aio import AsyncSandbox


class Recorder(pb_grpc.ProcessServiceServicer):
    def __init__(self):
        self.auth = []

    def Start(self, request, context):
        self.auth.append(dict(context.invocation_metadata()).get("authorization"))
        yield pb.StartResponse(init=pb.InitEvent(process_id=1))
        yield pb.StartResponse(exit=pb.ExitEvent(exit_code=0))


class Handler(http.server.BaseHTTPRequestHandler):
    seen = []

    def do_GET(self):
        Handler.seen.append(self.headers.get("Authorization"))
        body = b'{"status":"ok","uptime_seconds":1}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def servers():
    rec = Recorder()
    gs = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_ProcessServiceServicer_to_server(rec, gs)
    gport = gs.add_insecure_port("127.0.0.1:0")
    gs.start()
    hs = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=hs.serve_forever, daemon=True)
    t.start()
    Handler.seen = []
    yield rec, gport, hs.server_address[1]
    hs.shutdown()
    gs.stop(0)


def test_token_sent_on_grpc_and_rest(servers):
    rec, gport, hport = servers
    with sandboxd.Sandbox(grpc_port=gport, rest_port=hport, token="tok-1") as s:
        assert s.run("x").exit_code == 0
        s.files.health()
    with sandboxd.Sandbox(grpc_port=gport, rest_port=hport, token=None) as s:
        s.run("x")
        s.files.health()

    async def aio():
        async with AsyncSandbox(grpc_port=gport, rest_port=hport, token="tok-2") as s:
            await s.run("x")
            await s.files.health()

    asyncio.run(aio())
    assert rec.auth == ["Bearer tok-1", None, "Bearer tok-2"]
    assert Handler.seen == ["Bearer tok-1", None, "Bearer tok-2"]


def test_token_from_environment(servers, monkeypatch):
    rec, gport, hport = servers
    monkeypatch.setenv("SANDBOXD_TOKEN", "from-env")
    with sandboxd.Sandbox(grpc_port=gport, rest_port=hport) as s:
        s.run("x")
    assert rec.auth == ["Bearer from-env"]


def _daemon_has_token_flag(binary: str) -> bool:
    out = subprocess.run([binary, "--help"], capture_output=True, timeout=10)
    return b"--token-file" in out.stdout + out.stderr


def test_daemon_enforces_token(daemon_factory, tmp_path):
    import os

    binary = os.environ["SANDBOXD_BIN"]
    if not _daemon_has_token_flag(binary):
        pytest.skip("this sandboxd has no --token-file yet (bearer-token auth not built)")
    tf = tmp_path / "token"
    tf.write_text("right-token\n")
    d = daemon_factory(["--token-file", str(tf)])
    with d.sandbox(token="right-token") as s:
        assert s.run("echo ok").stdout == b"ok\n"
        s.files.write_bytes("t.txt", b"x")
    for tok in ("wrong-token", None):
        with d.sandbox(token=tok) as s:
            with pytest.raises(errors.UnauthenticatedError):
                s.run("true")
            with pytest.raises(errors.UnauthenticatedError):
                s.files.stat("t.txt")
            assert s.files.health().status == "ok"  # health stays open for kubelet
