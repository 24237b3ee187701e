"""gRPC through sandboxd-router: real sandboxd daemons behind it (routed by x-sandbox-pod-ip, the
mode that needs no cluster), reached with grpcurl and grpcio. Every kind of call (unary, server
streaming, the bidirectional reflection stream), half-close, cancellation and deadlines both ways,
status and trailers untouched, the reference's refusals, and one upstream connection per sandbox
however many clients call it."""

import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

import grpc
import pytest

from conftest import Client, Meta, Procs, pid_gone, routed_client, wait_until

RPC = 15.0


def keys(d, **extra):
    md = {"x-sandbox-id": "sb", "x-sandbox-pod-ip": "127.0.0.1",
          "x-sandbox-port": str(d.port)}
    md.update(extra)
    return tuple(md.items())


def routed(router, d, protos, **extra):
    """A Client of process.v1 whose calls go through the router to d."""
    return routed_client(router.target, protos, keys(d, **extra))


@pytest.fixture(scope="module")
def grpcurl(tools):
    return tools["grpcurl"]


def test_grpcurl_lists_and_describes_through_reflection(router, sandboxd, grpcurl):
    h = [a for k, v in keys(sandboxd) for a in ("-H", f"{k}: {v}")]
    out = subprocess.run([grpcurl, "-plaintext", *h, router.target, "list"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "process.v1.ProcessService" in out.stdout and "sandboxd.v1.Processes" in out.stdout
    out = subprocess.run([grpcurl, "-plaintext", *h, router.target, "describe",
                          "process.v1.ProcessService"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0 and "rpc Execute" in out.stdout, out.stderr


def test_execute_through_the_router_is_execute(router, sandboxd, protos):
    c = routed(router, sandboxd, protos)
    direct = sandboxd.client()
    for cmd in (["sh", "-c", "echo out; echo err >&2; exit 3"], ["pwd"]):
        a, b = c.execute(cmd), direct.execute(cmd)
        assert (a.exit_code, a.stdout, a.stderr) == (b.exit_code, b.stdout, b.stderr)
    # An error status passes with its code and message untouched.
    codes = []
    for client in (c, direct):
        try:
            client.execute(["/no/such/program"])
        except grpc.RpcError as e:
            codes.append((e.code(), e.details()))
    assert len(codes) == 2 and codes[0] == codes[1], codes
    c.close()


def test_trailing_metadata_passes(router, sandboxd_factory, protos):
    d = sandboxd_factory(["--max-output-bytes", "1000"])
    c = routed(router, d, protos)
    resp, call = c._execute.with_call(
        c.pb.ExecuteRequest(config=c.config(["head", "-c", "5000", "/dev/zero"])), timeout=RPC)
    trailers = dict(call.trailing_metadata())
    assert len(resp.stdout) == 1000
    assert trailers.get("sandboxd-stdout-truncated") == "4000", trailers
    c.close()


def test_start_streams_100_mib_whole(router, sandboxd, protos):
    c = routed(router, sandboxd, protos)
    n = 100 << 20
    h, got = hashlib.sha256(), 0
    for resp in c.start_call(["head", "-c", str(n), "/dev/urandom"], timeout=120):
        if resp.WhichOneof("event") == "stdout":
            h.update(resp.stdout)
            got += len(resp.stdout)
    assert got == n
    c.close()


def test_stdin_through_the_router(router, sandboxd, protos):
    c = routed(router, sandboxd, protos)
    s = c.start(["sh", "-c", "read line; echo got-$line"])
    pid = s.wait_init()
    c.write_stdin(pid, b"hello\n")
    s.wait_done()
    assert b"got-hello" in s.stdout()
    c.close()


def test_sandboxd_v1_attach_and_wait(router, sandboxd, protos):
    ch = grpc.intercept_channel(grpc.insecure_channel(router.target), Meta(keys(sandboxd)))
    p = Procs(ch, protos)
    info = p.spawn(["sh", "-c", "echo one; sleep 0.2; echo two"])
    out, _, _, ex, _ = p.attach(info.id)
    assert out == b"one\ntwo\n" and ex.exit_code == 0
    assert p.wait(info.id).exit.exit_code == 0
    ch.close()


def test_client_cancel_reaches_the_sandbox(router, sandboxd, protos):
    c = routed(router, sandboxd, protos)
    s = c.start(["sh", "-c", "echo $$; exec sleep 300"])
    s.wait_init()
    pid = int(s.wait_stdout(lambda o: o.endswith(b"\n") and o, what="the pid"))
    s.cancel()
    s.wait_done()
    assert s.error is not None and s.error.code() == grpc.StatusCode.CANCELLED
    wait_until(lambda: pid_gone(pid), 15, what="the process ended with the cancelled call")
    c.close()


def test_deadline_reaches_the_sandbox(router, sandboxd, protos):
    c = routed(router, sandboxd, protos)
    marker = sandboxd.root / "deadline-marker"
    t0 = time.monotonic()
    with pytest.raises(grpc.RpcError) as e:
        c.execute(["sh", "-c", f"echo $$ > {marker}; exec sleep 30"], timeout=1.0)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - t0 < 20
    pid = int(marker.read_text())
    wait_until(lambda: pid_gone(pid), 15, what="sandboxd ended the process at the deadline")
    c.close()


def test_refusals_are_the_references(router, sandboxd, protos):
    cases = [
        ({"x-sandbox-id": ""}, "X-Sandbox-ID header is required."),
        ({"x-sandbox-id": "Not_A_Label"}, "Invalid sandbox ID format."),
        ({"x-sandbox-namespace": "a.b"}, "Invalid namespace format."),
        ({"x-sandbox-port": "70000"}, "Invalid port format."),
        ({"x-sandbox-pod-ip": "169.254.169.254"}, "Invalid target IP address."),
        ({"x-sandbox-pod-ip": "not-an-ip"}, "Invalid target IP address."),
    ]
    for extra, detail in cases:
        c = routed(router, sandboxd, protos, **extra)
        with pytest.raises(grpc.RpcError) as e:
            c.execute(["true"])
        assert (e.value.code(), e.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, detail)
        c.close()
    # Nothing listening where the keys point: UNAVAILABLE, and the router carries on.
    c = routed(router, sandboxd, protos, **{"x-sandbox-port": "1"})
    with pytest.raises(grpc.RpcError) as e:
        c.execute(["true"])
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    c.close()
    c = routed(router, sandboxd, protos)
    assert c.execute(["true"]).exit_code == 0
    c.close()


def upstream_connections(router_pid, port):
    """The router's established TCP connections to port on loopback."""
    inodes = set()
    for fd in Path(f"/proc/{router_pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "01" and int(f[2].split(":")[1], 16) == port and f[9] in inodes:
                n += 1
    return n


def test_one_upstream_connection_per_sandbox_for_every_client(router_factory, sandboxd_factory,
                                                               protos):
    r = router_factory()
    a, b = sandboxd_factory(), sandboxd_factory()
    clients = [routed(r, d, protos) for d in (a, b) for _ in range(8)]
    for _ in range(5):
        for c in clients:
            assert c.execute(["true"]).exit_code == 0
    assert upstream_connections(r.proc.pid, a.port) == 1
    assert upstream_connections(r.proc.pid, b.port) == 1
    # Two sandboxes from one client connection, call by call.
    ch = grpc.insecure_channel(r.target)
    f = ch.unary_unary("/process.v1.ProcessService/Execute",
                       request_serializer=protos.pb.ExecuteRequest.SerializeToString,
                       response_deserializer=protos.pb.ExecuteResponse.FromString)
    req = protos.pb.ExecuteRequest(config=protos.pb.ProcessConfig(command=["pwd"]))
    for d in (a, b, a, b):
        out = f(req, metadata=keys(d), timeout=RPC).stdout.decode().strip()
        assert Path(out).resolve() == Path(d.root).resolve()
    ch.close()
    for c in clients:
        c.close()


def test_sigterm_drains_calls_in_flight(router_factory, sandboxd, protos):
    r = router_factory()
    c = routed(r, sandboxd, protos)
    done = []

    def slow():
        done.append(c.execute(["sh", "-c", "sleep 1; echo late"], timeout=30))

    import threading
    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.3)
    r.signal(signal.SIGTERM)
    t.join(30)
    assert done and done[0].stdout == b"late\n"
    assert r.wait_exit(30) == 0
    c.close()


def test_a_server_that_speaks_first_hears_of_the_call(router):
    """The relay may hold a call's headers for the client's first message, to send them to the
    sandbox in one write; a client that sends nothing until the server speaks must still reach
    it. A grpcio server on loopback (any port of a sandbox is reachable) answers each call of a
    bidirectional method before it reads anything; the client reads that answer, then sends."""
    import queue
    from concurrent import futures

    def speak_first(requests, context):
        context.send_initial_metadata((("spoke", "first"),))
        yield b"hello"
        for r in requests:
            yield b"echo:" + r

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "test.Talk", {"Speak": grpc.stream_stream_rpc_method_handler(speak_first)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    ch = grpc.insecure_channel(router.target)
    try:
        for _ in range(3):  # the first call also opens the pooled upstream connection
            out = queue.Queue()
            md = (("x-sandbox-id", "talk"), ("x-sandbox-pod-ip", "127.0.0.1"),
                  ("x-sandbox-port", str(port)))
            call = ch.stream_stream("/test.Talk/Speak")(iter(out.get, None), metadata=md,
                                                        timeout=RPC)
            assert next(call) == b"hello"  # nothing sent yet: the server spoke first
            assert dict(call.initial_metadata()).get("spoke") == "first"
            out.put(b"x")
            assert next(call) == b"echo:x"
            out.put(None)
            assert list(call) == []
            assert call.code() == grpc.StatusCode.OK
    finally:
        ch.close()
        server.stop(None)


def test_grpc_threads_is_bounded(router_bin, router_factory, sandboxd, protos):
    """--grpc-threads takes 0 (the default: half the CPUs, 1 to 4) to 16; past that the router
    refuses to start, naming the flag, rather than quietly running with some other count."""
    for bad in ("17", "-1", "many"):
        out = subprocess.run([router_bin, "--grpc-threads", bad], capture_output=True, text=True,
                             timeout=10)
        assert out.returncode == 2 and "--grpc-threads" in out.stderr, (bad, out.stderr)
    for good in ("0", "16"):
        c = routed(router_factory(["--grpc-threads", good]), sandboxd, protos)
        assert c.execute(["echo", good]).stdout == f"{good}\n".encode()
        c.close()
