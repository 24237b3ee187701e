"""What the fuzz targets found (sandboxd/fuzz/README.md), end to end through the daemon: each
fails if its fix regresses in the handler's wiring, which the corpus replay does not see."""

import grpc
import pytest

from conftest import http_request, status_of

SC = grpc.StatusCode
REFLECTION = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"


def varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([b])
        out += bytes([b | 0x80])


def lf(field, data):
    data = data.encode() if isinstance(data, str) else data
    return varint(field << 3 | 2) + varint(len(data)) + data


def assert_still_serving(client):
    r = client.execute(["echo", "alive"])
    assert (r.exit_code, r.stdout) == (0, b"alive\n")


def test_range_with_a_sign_or_blank_is_ignored(sandboxd):
    data = bytes(range(256)) * 4
    (sandboxd.root / "fuzz-range").write_bytes(data)
    for rng in ("bytes=--5", "bytes=+1-2", "bytes= 1-2", "bytes=1--2", "bytes=1-+2"):
        r = http_request(sandboxd.rest_port, "GET", "/v1/files/fuzz-range",
                         headers={"Range": rng})
        assert r.status == 200 and r.body == data, (rng, r)
    r = http_request(sandboxd.rest_port, "GET", "/v1/files/fuzz-range",
                     headers={"Range": "bytes=1-2"})
    assert r.status == 206 and r.body == data[1:3], r


@pytest.mark.parametrize("method", ["/process.v1.ProcessService/Execute",
                                    "/sandboxd.v1.Processes/Get"])
def test_field_number_zero_is_malformed(client, method):
    # field 0, wire type 1 (8 bytes), as protobuf-c would otherwise keep
    code, details, _ = status_of(lambda: client.raw_unary(method, b"\x01" + bytes(8)))
    assert code == SC.INVALID_ARGUMENT and "malformed" in details, (code, details)
    assert_still_serving(client)


@pytest.mark.parametrize("key", ["PWD=", "A=B", ""])
def test_environment_name_empty_or_with_equals_is_refused(client, key):
    env = lf(2, lf(1, key) + lf(2, "x"))
    calls = {
        "Execute": ("/process.v1.ProcessService/Execute", lf(1, lf(1, "true") + env)),
        "Run": ("/sandboxd.v1.Processes/Run", lf(1, lf(1, "true") + env)),
    }
    for name, (method, payload) in calls.items():
        code, details, _ = status_of(lambda: client.raw_unary(method, payload))
        assert code == SC.INVALID_ARGUMENT, (name, key, code, details)
        assert "environment variable name" in details, (name, details)
    assert_still_serving(client)


def test_reflection_answers_stay_utf8(client, protos):
    f = client.channel.stream_stream(REFLECTION, request_serializer=None,
                                     response_deserializer=None)
    # A long name of two-byte characters: the "not found" message used to be cut inside one.
    [raw] = list(f(iter([lf(4, "\u00e9" * 200)]), timeout=5))
    resp = protos.refl_v1.ServerReflectionResponse.FromString(raw)  # refuses bad UTF-8
    assert resp.error_response.error_message.startswith("symbol not found: \u00e9"), resp
    # A request string that is not UTF-8 was echoed back; now it is refused.
    code, details, _ = status_of(lambda: list(f(iter([lf(1, b"\xe2\x82") + lf(7, "")]),
                                                timeout=5)))
    assert code == SC.INVALID_ARGUMENT and "UTF-8" in details, (code, details)
    assert_still_serving(client)
