"""Bad input gets a clear status, quickly, and the daemon stays up."""

import os
import time

import grpc
import pytest

from conftest import status_of

SC = grpc.StatusCode
SVC = "/process.v1.ProcessService/"
METHODS = ["Start", "Execute", "WriteStdin", "SendSignal", "ResizeTTY"]

GARBAGE = {
    "bad-varint": b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
    "truncated-length": b"\x0a\x7f" + b"ab",  # field 1, 127 bytes announced, 2 present
    "bad-wire-type": b"\x0f\x01",  # field 1 with wire type 7 (invalid)
    "end-group": b"\x0c",  # an end-group tag with no group
    "nested-garbage": b"\x0a\x03\x0a\xff\xff",  # config { command: <truncated> }
}


def _raw(client, method, payload):
    if method == "Start":
        f = client.channel.unary_stream(SVC + method, request_serializer=None,
                                        response_deserializer=None)
        return lambda: list(f(payload, timeout=5))
    return lambda: client.raw_unary(SVC + method, payload)


def assert_still_serving(client):
    assert client.health().status == 1
    r = client.execute(["echo", "alive"])
    assert (r.exit_code, r.stdout) == (0, b"alive\n")


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_malformed_protobuf_is_invalid_argument(client, method, kind):
    code, details, resp = status_of(_raw(client, method, GARBAGE[kind]))
    assert code == SC.INVALID_ARGUMENT, f"{method} {kind}: {code} {details!r} {resp!r}"
    assert details, "a clear message"
    assert_still_serving(client)


def test_malformed_health_and_reflection_requests(client):
    code, details, _ = status_of(lambda: client.raw_unary("/grpc.health.v1.Health/Check",
                                                          GARBAGE["bad-varint"]))
    assert code == SC.INVALID_ARGUMENT, (code, details)
    f = client.channel.stream_stream("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                                     request_serializer=None, response_deserializer=None)
    code, details, _ = status_of(lambda: list(f(iter([GARBAGE["bad-varint"]]), timeout=5)))
    assert code == SC.INVALID_ARGUMENT, (code, details)
    assert_still_serving(client)


@pytest.mark.parametrize("method", [
    "/process.v1.ProcessService/NoSuchMethod",
    "/no.such.Service/Method",
    "/grpc.health.v1.Health/Nope",
    "/nonsense",
])
@pytest.mark.parametrize("shape", ["unary", "server-stream", "client-stream", "bidi"])
def test_unknown_method_is_unimplemented_at_once(client, method, shape):
    ch = client.channel
    kw = dict(request_serializer=None, response_deserializer=None)
    calls = {
        "unary": lambda: ch.unary_unary(method, **kw)(b"", timeout=5),
        "server-stream": lambda: list(ch.unary_stream(method, **kw)(b"", timeout=5)),
        "client-stream": lambda: ch.stream_unary(method, **kw)(iter([b"", b"x"]), timeout=5),
        "bidi": lambda: list(ch.stream_stream(method, **kw)(iter([b"a"]), timeout=5)),
    }
    t0 = time.monotonic()
    code, details, _ = status_of(calls[shape])
    elapsed = time.monotonic() - t0
    assert code == SC.UNIMPLEMENTED, f"{code} {details!r} after {elapsed:.2f}s"
    assert elapsed < 2, f"UNIMPLEMENTED took {elapsed:.2f}s"


def test_unknown_method_does_not_leak_calls(client):
    """Rounds of 200 unknown calls at once (each must be answered and re-armed) leave the daemon
    fine. (The request armed behind an answered call could be taken, answered and freed by
    another completion-queue thread before its arming returned: AddressSanitizer caught the read
    of the freed request in each of four runs of this test.)"""
    f = client.channel.unary_unary("/x.Y/Z", request_serializer=None, response_deserializer=None)
    for _ in range(60):
        futs = [f.future(b"", timeout=5) for _ in range(200)]
        codes = {fu.exception().code() for fu in futs}
        assert codes == {SC.UNIMPLEMENTED}
    assert_still_serving(client)


def _rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(l for l in f if l.startswith("VmRSS:")).split()[1])


@pytest.mark.skipif(os.environ.get("SANDBOXD_SANITIZED") == "ON",
                    reason="the sanitizers' quarantine makes RSS grow with every allocation")
def test_unknown_methods_do_not_grow_memory(sandboxd, client):
    """Each unknown call must leave exactly one request armed behind it (a leak of ~300 bytes a
    call once doubled the armed requests). Sequential calls: bursts only measure malloc."""
    f = client.channel.unary_unary("/x.Y/Z", request_serializer=None, response_deserializer=None)

    def calls(n):
        for _ in range(n):
            assert status_of(lambda: f(b"", timeout=10))[0] == SC.UNIMPLEMENTED

    calls(500)
    before = _rss_kib(sandboxd.proc.pid)
    calls(8000)
    grown = _rss_kib(sandboxd.proc.pid) - before
    print(f"RSS grew by {grown} KiB over 8000 unknown calls")
    assert grown < 1024, f"RSS grew by {grown} KiB over 8000 unknown calls"
    assert_still_serving(client)


@pytest.mark.parametrize("method", ["Execute", "WriteStdin", "SendSignal", "ResizeTTY"])
def test_unary_method_with_no_request_message(client, method):
    """A unary method sent no request message at all must end with an error at once, not hang,
    crash, or run anything."""
    t0 = time.monotonic()
    code, details, _ = status_of(lambda: client.raw_stream_unary(SVC + method, []))
    assert code not in (SC.OK, SC.DEADLINE_EXCEEDED), f"{code} {details!r}"
    assert time.monotonic() - t0 < 2
    assert_still_serving(client)


def test_unary_method_with_two_request_messages(client, sandboxd):
    """Two request messages on a unary method: answered at once (as the reference does, OK or an
    error), and the command runs at most once."""
    pb = client.pb
    counter = sandboxd.root / "two-messages.count"
    one = pb.ExecuteRequest(config=pb.ProcessConfig(
        command=["sh", "-c", f"echo run >> {counter}"])).SerializeToString()
    t0 = time.monotonic()
    code, details, _ = status_of(lambda: client.raw_stream_unary(SVC + "Execute", [one, one]))
    assert code != SC.DEADLINE_EXCEEDED and time.monotonic() - t0 < 2, (code, details)
    runs = counter.read_text().count("run") if counter.exists() else 0
    assert runs <= 1, f"the command ran {runs} times"
    assert_still_serving(client)


def test_oversized_message_is_resource_exhausted(sandboxd_factory):
    d = sandboxd_factory(["--max-message-bytes", "65536"])
    c = d.client()
    big = "x" * 70000
    code, details, _ = status_of(lambda: c.execute(["echo", big]))
    assert code == SC.RESOURCE_EXHAUSTED, (code, details)
    s = c.start(["echo", big]).wait_done()
    assert s.error is not None and s.error.code() == SC.RESOURCE_EXHAUSTED, s.summary()
    code, details, _ = status_of(lambda: c.write_stdin(1, b"y" * 70000))
    assert code == SC.RESOURCE_EXHAUSTED, (code, details)
    # Just under the limit still works.
    r = c.execute(["sh", "-c", 'printf %s "$1" | wc -c', "sh", "x" * 60000])
    assert (r.exit_code, r.stdout.strip()) == (0, b"60000")
    assert_still_serving(c)


def test_oversized_message_default_limit(client):
    """The default --max-message-bytes is 4 MiB."""
    code, details, _ = status_of(lambda: client.write_stdin(424242, b"z" * ((4 << 20) + 1)))
    assert code == SC.RESOURCE_EXHAUSTED, (code, details)
    code, details, _ = status_of(lambda: client.write_stdin(424242, b"z" * ((4 << 20) - 100)))
    assert code == SC.NOT_FOUND, (code, details)
    assert_still_serving(client)


def test_unknown_fields_are_ignored(client):
    """Unknown fields (a newer client) are skipped, as protobuf requires."""
    pb = client.pb
    req = pb.ExecuteRequest(config=pb.ProcessConfig(command=["echo", "ok"])).SerializeToString()
    req += b"\xa0\x06\x01" + b"\xaa\x06\x03abc"  # fields 100 (varint) and 101 (bytes)
    resp = client.raw_unary(SVC + "Execute", req)
    r = pb.ExecuteResponse.FromString(resp)
    assert (r.exit_code, r.stdout) == (0, b"ok\n")


@pytest.mark.parametrize("where,payload", [
    pytest.param("command", b"\x0a\x03\x0a\x01\xff", id="command"),  # config { command: "\xff" }
    pytest.param("cwd", b"\x0a\x0a\x0a\x04true\x1a\x02\xc3\x28", id="cwd"),  # config { command: "true" cwd: "\xc3\x28" }
    pytest.param("env key", b"\x0a\x0d\x0a\x04true\x12\x05\x0a\x01\xff\x12\x00", id="env-key"),  # env_vars { "\xff": "" }
])
def test_invalid_utf8_in_string_field_is_invalid_argument(client, where, payload):
    """proto3 string fields must hold UTF-8; a request with invalid UTF-8 is malformed (the
    reference's parser refuses it too) and must get INVALID_ARGUMENT without running anything."""
    code, details, _ = status_of(lambda: client.raw_unary(SVC + "Execute", payload))
    assert code == SC.INVALID_ARGUMENT, (where, code, details)
    assert_still_serving(client)


def test_everything_still_works_afterwards(client):
    assert_still_serving(client)
    s = client.start(["sh", "-c", "echo done"]).wait_done()
    assert (s.stdout(), s.exit_code()) == (b"done\n", 0)
