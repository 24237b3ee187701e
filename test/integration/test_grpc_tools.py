"""Real gRPC tools against the daemon: grpcurl (reflection and -proto), grpc-health-probe, and
the health and reflection services driven with grpcio."""

import base64
import difflib
import json
import subprocess

import grpc
import pytest
from google.protobuf import descriptor_pb2

from conftest import PROTO_DIR, status_of

SC = grpc.StatusCode
SERVICES = [
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
    "process.v1.ProcessService",
    "sandboxd.v1.Files",
    "sandboxd.v1.Processes",
]
PROTO_ARGS = ["-import-path", str(PROTO_DIR), "-import-path", "/usr/include",
              "-proto", "process/v1/process.proto"]


def run_tool(argv, timeout=15, input=None):
    p = subprocess.run([str(a) for a in argv], capture_output=True, timeout=timeout, input=input)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def grpcurl(tools, target, *rest, flags=(), timeout=15):
    """grpcurl [flags] target [rest...]"""
    return run_tool([tools["grpcurl"], "-plaintext", "-max-time", "10", *flags, target, *rest],
                    timeout=timeout)


def json_stream(text):
    """grpcurl prints one JSON object per message, pretty-printed; split them."""
    dec, objs, i = json.JSONDecoder(), [], 0
    text = text.strip()
    while i < len(text):
        obj, j = dec.raw_decode(text, i)
        objs.append(obj)
        i = j
        while i < len(text) and text[i].isspace():
            i += 1
    return objs


# ---------------------------------------------------------------------------------------------
# grpcurl with reflection


def test_grpcurl_list(tools, sandboxd):
    rc, out, err = grpcurl(tools, sandboxd.target, "list")
    assert rc == 0, err
    assert sorted(out.split()) == SERVICES


def test_grpcurl_list_methods(tools, sandboxd):
    rc, out, err = grpcurl(tools, sandboxd.target, "list", "process.v1.ProcessService")
    assert rc == 0, err
    assert sorted(out.split()) == [f"process.v1.ProcessService.{m}" for m in
                                   ("Execute", "ResizeTTY", "SendSignal", "Start", "WriteStdin")]


def test_grpcurl_describe_service(tools, sandboxd):
    rc, out, err = grpcurl(tools, sandboxd.target, "describe", "process.v1.ProcessService")
    assert rc == 0, err
    for line in [
        "rpc Start ( .process.v1.StartRequest ) returns ( stream .process.v1.StartResponse );",
        "rpc Execute ( .process.v1.ExecuteRequest ) returns ( .process.v1.ExecuteResponse );",
        "rpc WriteStdin ( .process.v1.WriteStdinRequest ) returns ( .process.v1.WriteStdinResponse );",
        "rpc SendSignal ( .process.v1.SendSignalRequest ) returns ( .process.v1.SendSignalResponse );",
        "rpc ResizeTTY ( .process.v1.ResizeTTYRequest ) returns ( .process.v1.ResizeTTYResponse );",
    ]:
        assert line in out, out


def test_grpcurl_describes_every_method(tools, sandboxd):
    """Each method by its full name, as `grpcurl describe Service.Method` asks reflection for it
    (a service's second method was once filed under its first: "Svc.Start.Execute")."""
    rc, out, err = grpcurl(tools, sandboxd.target, "list")
    assert rc == 0, err
    services = [s for s in out.split() if not s.startswith("grpc.reflection")]
    seen = 0
    for svc in services:
        rc, methods, err = grpcurl(tools, sandboxd.target, "list", svc)
        assert rc == 0, err
        for m in methods.split():
            rc, out, err = grpcurl(tools, sandboxd.target, "describe", m)
            assert rc == 0 and f"{m} is a method" in out, (m, err)
            seen += 1
    assert seen >= 15, seen


def test_grpcurl_describe_messages(tools, sandboxd):
    rc, out, err = grpcurl(tools, sandboxd.target, "describe", ".process.v1.StartRequest")
    assert rc == 0, err
    assert ".process.v1.ProcessConfig config = 1;" in out
    assert "optional .process.v1.PTY pty = 2;" in out, "proto3 optional must be served faithfully"
    rc, out, err = grpcurl(tools, sandboxd.target, "describe", ".process.v1.ProcessConfig")
    assert rc == 0, err
    for line in ["repeated string command = 1;", "map<string, string> env_vars = 2;",
                 "optional string cwd = 3;"]:
        assert line in out, out
    rc, out, err = grpcurl(tools, sandboxd.target, "describe", ".process.v1.WriteStdinRequest")
    assert rc == 0, err
    assert ".google.protobuf.Empty eof = 3;" in out and "oneof payload" in out, out
    rc, out, err = grpcurl(tools, sandboxd.target, "describe", ".process.v1.Signal")
    assert rc == 0, err
    for v in ["SIGNAL_UNSPECIFIED = 0;", "SIGNAL_SIGINT = 2;", "SIGNAL_SIGKILL = 9;",
              "SIGNAL_SIGTERM = 15;"]:
        assert v in out, out


def test_grpcurl_execute_with_reflection(tools, sandboxd):
    req = json.dumps({"config": {"command": ["sh", "-c", "echo hi; echo oops >&2; exit 4"],
                                 "envVars": {"X": "y"}}})
    rc, out, err = grpcurl(tools, sandboxd.target, "process.v1.ProcessService/Execute", flags=["-d", req])
    assert rc == 0, err
    resp = json.loads(out)
    assert resp["exitCode"] == 4
    assert base64.b64decode(resp["stdout"]) == b"hi\n"
    assert base64.b64decode(resp["stderr"]) == b"oops\n"


def test_grpcurl_start_with_reflection(tools, sandboxd):
    req = json.dumps({"config": {"command": ["sh", "-c", "echo a; exit 2"]}})
    rc, out, err = grpcurl(tools, sandboxd.target, "process.v1.ProcessService/Start", flags=["-d", req])
    assert rc == 0, err
    msgs = json_stream(out)
    assert "init" in msgs[0] and msgs[0]["init"]["processId"] >= 1
    assert msgs[-1] == {"exit": {"exitCode": 2}}
    assert b"".join(base64.b64decode(m["stdout"]) for m in msgs if "stdout" in m) == b"a\n"


def test_grpcurl_error_status(tools, sandboxd):
    rc, out, err = grpcurl(tools, sandboxd.target, "process.v1.ProcessService/Execute",
                           flags=["-d", '{"config":{"command":["nope-xyz"]}}'])
    assert rc != 0
    assert "Code: NotFound" in err, err


def test_grpcurl_with_proto_files(tools, sandboxd):
    req = json.dumps({"config": {"command": ["printf", "%s", "via-proto"]}})
    rc, out, err = grpcurl(tools, sandboxd.target, "process.v1.ProcessService/Execute",
                           flags=[*PROTO_ARGS, "-d", req])
    assert rc == 0, err
    assert base64.b64decode(json.loads(out)["stdout"]) == b"via-proto"
    rc, out, err = grpcurl(
        tools, sandboxd.target, "process.v1.ProcessService/Start",
        flags=[*PROTO_ARGS, "-d", json.dumps({"config": {"command": ["stty", "size"]},
                                              "pty": {"rows": 5, "cols": 7}})])
    assert rc == 0, err
    msgs = json_stream(out)
    assert msgs[-1] == {"exit": {}}  # exit code 0 is the default, printed as {}
    assert b"".join(base64.b64decode(m["stdout"]) for m in msgs if "stdout" in m).strip() == b"5 7"


def test_grpcurl_health(tools, sandboxd):
    rc, out, err = grpcurl(tools, sandboxd.target, "grpc.health.v1.Health/Check", flags=["-d", "{}"])
    assert rc == 0, err
    assert json.loads(out) == {"status": "SERVING"}


# ---------------------------------------------------------------------------------------------
# grpc-health-probe and the health service


def test_health_probe(tools, sandboxd):
    rc, out, err = run_tool([tools["grpc-health-probe"], "-addr", sandboxd.target])
    assert rc == 0 and "SERVING" in out + err, (rc, out, err)
    rc, out, err = run_tool([tools["grpc-health-probe"], "-addr", sandboxd.target,
                             "-service", "process.v1.ProcessService"])
    assert rc == 0 and "SERVING" in out + err, (rc, out, err)
    rc, out, err = run_tool([tools["grpc-health-probe"], "-addr", sandboxd.target,
                             "-service", "no.such.Service"])
    assert rc != 0, (rc, out, err)


def test_health_check_grpcio(client):
    assert client.health().status == 1  # SERVING
    assert client.health("process.v1.ProcessService").status == 1
    code, details, _ = status_of(lambda: client.health("no.such.Service"))
    assert code == SC.NOT_FOUND, details


def test_health_watch_unknown_service(client):
    call = client.watch("no.such.Service", timeout=3)
    first = next(call)
    assert first.status == 3  # SERVICE_UNKNOWN
    call.cancel()


def test_health_watch_sees_not_serving_on_sigterm(sandboxd_factory, tools):
    d = sandboxd_factory(["--termination-grace", "1500ms"], shutdown_timeout=5.0)
    c = d.client()
    # A child that ignores SIGTERM keeps the daemon draining for the grace period.
    s = c.start(["sh", "-c", "trap '' TERM; echo ready; exec sleep 1000"])
    s.wait_init()
    s.wait_stdout(lambda o: o == b"ready\n", what="the child to set its trap")
    watches = {svc: c.watch(svc, timeout=15) for svc in ("", "process.v1.ProcessService")}
    for svc, w in watches.items():
        assert next(w).status == 1, f"watch {svc!r} starts SERVING"
    d.sigterm()
    for svc, w in watches.items():
        assert next(w).status == 2, f"watch {svc!r} must see NOT_SERVING"  # NOT_SERVING
    # While it drains, a probe on a new connection does not report SERVING.
    rc, out, err = run_tool([tools["grpc-health-probe"], "-addr", d.target, "-connect-timeout",
                             "1s", "-rpc-timeout", "1s"])
    assert rc != 0, (out, err)
    # The watches end once the daemon is done; nothing more than NOT_SERVING comes.
    for svc, w in watches.items():
        rest = []
        try:
            for m in w:
                rest.append(m.status)
        except grpc.RpcError as e:
            assert e.code() != SC.DEADLINE_EXCEEDED, "the watch must end with the daemon"
        assert all(st == 2 for st in rest), rest
    s.wait_done(10)
    assert s.exit_code() == -1
    assert d.wait_exit(10) == 0


# ---------------------------------------------------------------------------------------------
# Reflection with grpcio


def _reflect(channel, version, requests, timeout=5):
    f = channel.stream_stream(f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
                              request_serializer=None, response_deserializer=None)
    return list(f(iter(requests), timeout=timeout))


def test_reflection_v1alpha_list_services_hand_built(client, protos):
    # field 7 (list_services), wire type 2, empty string
    raw = _reflect(client.channel, "v1alpha", [b"\x3a\x00"])
    assert len(raw) == 1
    resp = protos.refl_v1alpha.ServerReflectionResponse.FromString(raw[0])
    assert resp.WhichOneof("message_response") == "list_services_response"
    assert sorted(s.name for s in resp.list_services_response.service) == SERVICES
    assert resp.original_request.list_services == ""


def _strip_json_names(fd):
    def msg(m):
        for f in m.field:
            f.ClearField("json_name")
        for n in m.nested_type:
            msg(n)
    for m in fd.message_type:
        msg(m)


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_reflection_file_containing_symbol(client, protos, version):
    m = protos.refl_v1 if version == "v1" else protos.refl_v1alpha
    reqs = [
        m.ServerReflectionRequest(file_containing_symbol="process.v1.ProcessService"),
        m.ServerReflectionRequest(file_containing_symbol="process.v1.ExitEvent"),
        m.ServerReflectionRequest(file_by_filename="google/protobuf/empty.proto"),
        m.ServerReflectionRequest(file_containing_symbol="no.such.Symbol"),
        m.ServerReflectionRequest(list_services=""),
    ]
    raw = _reflect(client.channel, version, [r.SerializeToString() for r in reqs])
    resps = [m.ServerReflectionResponse.FromString(b) for b in raw]
    assert len(resps) == len(reqs), "one response per request, in order"

    def files(resp):
        assert resp.WhichOneof("message_response") == "file_descriptor_response", resp
        return {f.name: f for f in (descriptor_pb2.FileDescriptorProto.FromString(b)
                                    for b in resp.file_descriptor_response.file_descriptor_proto)}

    fs = files(resps[0])
    proc = fs["process/v1/process.proto"]
    assert "google/protobuf/empty.proto" in proc.dependency
    # The served descriptor is the faithful one: the same as protoc makes from proto/.
    want = descriptor_pb2.FileDescriptorProto.FromString(protos.pb.DESCRIPTOR.serialized_pb)
    proc.ClearField("source_code_info")
    _strip_json_names(proc)  # protoc's descriptor sets carry json_name; the Python copy does not
    _strip_json_names(want)
    if proc != want:
        diff = difflib.unified_diff(str(want).splitlines(), str(proc).splitlines(), "protoc",
                                    "served", lineterm="", n=2)
        pytest.fail("served descriptor differs from protoc's:\n" + "\n".join(diff))
    cfg = next(x for x in proc.message_type if x.name == "ProcessConfig")
    cwd = next(f for f in cfg.field if f.name == "cwd")
    assert cwd.proto3_optional
    assert "process/v1/process.proto" in files(resps[1])
    assert "google/protobuf/empty.proto" in files(resps[2])
    assert resps[3].WhichOneof("message_response") == "error_response"
    assert resps[3].error_response.error_code == SC.NOT_FOUND.value[0]
    assert sorted(s.name for s in resps[4].list_services_response.service) == SERVICES


def test_every_advertised_unary_method_is_implemented(client, protos):
    """A method reflection advertises must not answer UNIMPLEMENTED."""
    m = protos.refl_v1
    raw = _reflect(client.channel, "v1",
                   [m.ServerReflectionRequest(file_containing_symbol=s).SerializeToString()
                    for s in SERVICES])
    seen = []
    for b in raw:
        for fb in m.ServerReflectionResponse.FromString(b).file_descriptor_response.file_descriptor_proto:
            fd = descriptor_pb2.FileDescriptorProto.FromString(fb)
            for svc in fd.service:
                for meth in svc.method:
                    if meth.client_streaming or meth.server_streaming:
                        continue
                    path = f"/{fd.package}.{svc.name}/{meth.name}"
                    code, details, _ = status_of(lambda: client.raw_unary(path, b"", timeout=5))
                    seen.append(path)
                    assert code != SC.UNIMPLEMENTED, f"{path}: {details}"
                    assert code != SC.DEADLINE_EXCEEDED, f"{path} hung"
    assert "/process.v1.ProcessService/Execute" in seen
    assert "/grpc.health.v1.Health/Check" in seen
