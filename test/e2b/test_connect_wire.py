"""The Connect transport and the plain routes of the E2B port, by raw HTTP: what the SDK never
sends (bad input, other codecs, headers) is answered with Connect's errors, and the daemon stays
up."""

import base64
import json
import os
import socket
import struct
import time

import pytest

from conftest import envelope, read_envelopes, sdk_sandbox


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, payload):
    """A length-delimited protobuf field."""
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def start_request(cmd, *args):
    """process.StartRequest{process: {cmd, args}} in binary protobuf."""
    cfg = field(1, cmd.encode()) + b"".join(field(2, a.encode()) for a in args)
    return field(1, cfg)


def stream_call(d, method, payload, codec="json", headers=None, timeout=30):
    h = {"Content-Type": f"application/connect+{codec}", **(headers or {})}
    status, hdrs, body = d.request("POST", f"/process.Process/{method}", envelope(payload), h,
                                   timeout=timeout)
    return status, hdrs, read_envelopes(body)


def end_of(msgs):
    flags, payload = msgs[-1]
    assert flags == 2, "the stream does not end with its end-of-stream message"
    return json.loads(payload)


def events(msgs):
    return [json.loads(p)["event"] for f, p in msgs[:-1]]


def test_health_and_envs(daemon):
    status, _, body = daemon.request("GET", "/health")
    assert (status, body) == (204, b"")
    status, hdrs, body = daemon.request("GET", "/envs")
    assert status == 200 and hdrs["content-type"] == "application/json"
    assert isinstance(json.loads(body), dict)


def test_unary_json(daemon):
    status, body = daemon.unary("List", {})
    assert status == 200 and isinstance(body, dict)


def test_unary_proto(daemon):
    status, hdrs, body = daemon.request("POST", "/process.Process/List", b"",
                                        {"Content-Type": "application/proto"})
    assert status == 200 and hdrs["content-type"] == "application/proto"


def test_bad_json_is_invalid_argument(daemon):
    status, _, body = daemon.request("POST", "/process.Process/List", b"{not json",
                                     {"Content-Type": "application/json"})
    assert status == 400
    assert json.loads(body)["code"] == "invalid_argument"


def test_bad_proto_is_invalid_argument(daemon):
    status, _, body = daemon.request("POST", "/process.Process/SendSignal", b"\xff\xff\xff",
                                     {"Content-Type": "application/proto"})
    assert status == 400 and json.loads(body)["code"] == "invalid_argument"


def test_wrong_content_type_is_415(daemon):
    status, hdrs, _ = daemon.request("POST", "/process.Process/List", b"{}",
                                     {"Content-Type": "text/plain"})
    assert status == 415
    assert "application/connect+json" in hdrs["accept-post"]


def test_unknown_method_is_unimplemented(daemon):
    status, _, body = daemon.request("POST", "/process.Process/Nope", b"{}",
                                     {"Content-Type": "application/json"})
    assert status == 501 and json.loads(body)["code"] == "unimplemented"
    # A stream's errors come in its end-of-stream message.
    status, _, msgs = stream_call(daemon, "Nope", b"{}")
    assert status == 200 and end_of(msgs)["error"]["code"] == "unimplemented"


def test_unary_method_called_as_stream_is_unimplemented(daemon):
    status, _, msgs = stream_call(daemon, "List", b"{}")
    assert status == 200 and end_of(msgs)["error"]["code"] == "unimplemented"


# --e2b-max-message-bytes: 32 MiB by default.
def test_oversized_message_is_resource_exhausted(daemon):
    big = json.dumps({"process": {"pid": 1}, "input": {"stdin": "A" * (33 << 20)}}).encode()
    status, _, body = daemon.request("POST", "/process.Process/SendInput", big,
                                     {"Content-Type": "application/json"}, timeout=30)
    assert status == 429 and json.loads(body)["code"] == "resource_exhausted"


def test_oversized_envelope_is_resource_exhausted(daemon):
    status, _, msgs = stream_call(daemon, "Start", b"x" * (33 << 20))
    assert status == 200 and end_of(msgs)["error"]["code"] == "resource_exhausted"


def test_truncated_envelope_is_invalid_argument(daemon):
    h = {"Content-Type": "application/connect+json"}
    status, _, body = daemon.request("POST", "/process.Process/Start",
                                     struct.pack(">BI", 0, 100) + b"{}", h)
    assert status == 200 and end_of(read_envelopes(body))["error"]["code"] == "invalid_argument"


def test_compressed_envelope_is_refused(daemon):
    h = {"Content-Type": "application/connect+json"}
    status, _, body = daemon.request("POST", "/process.Process/Start", envelope(b"{}", 1), h)
    assert status == 200 and "compressed" in end_of(read_envelopes(body))["error"]["message"]


@pytest.mark.parametrize("name,value", [("Connect-Protocol-Version", "2"),
                                        ("Connect-Timeout-Ms", "12345678901"),
                                        ("Connect-Timeout-Ms", "-1")])
def test_bad_protocol_headers_are_invalid_argument(daemon, name, value):
    status, body = daemon.unary("List", {}, {name: value})
    assert status == 400 and body["code"] == "invalid_argument"


def test_start_stream_json(daemon):
    msg = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", "echo hi; exit 2"]}})
    status, hdrs, msgs = stream_call(daemon, "Start", msg.encode())
    assert status == 200 and hdrs["content-type"] == "application/connect+json"
    ev = events(msgs)
    assert "pid" in ev[0]["start"]
    assert {"data": {"stdout": "aGkK"}} in ev  # base64 of "hi\n"
    assert ev[-1]["end"]["exitCode"] == 2 and ev[-1]["end"]["status"] == "exit status 2"
    assert end_of(msgs) == {}


def test_start_stream_proto(daemon):
    status, hdrs, msgs = stream_call(daemon, "Start", start_request("/bin/echo", "proto-hi"),
                                     codec="proto")
    assert status == 200 and hdrs["content-type"] == "application/connect+proto"
    assert any(b"proto-hi\n" in p for f, p in msgs[:-1])
    assert end_of(msgs) == {}


def test_start_of_a_missing_program_is_invalid_argument(daemon):
    msg = json.dumps({"process": {"cmd": "/no/such/program"}})
    status, _, msgs = stream_call(daemon, "Start", msg.encode())
    assert end_of(msgs)["error"]["code"] == "invalid_argument"


def test_keepalive_on_a_quiet_stream(daemon):
    msg = json.dumps({"process": {"cmd": "/bin/sleep", "args": ["2.5"]}})
    status, _, msgs = stream_call(daemon, "Start", msg.encode(),
                                  headers={"Keepalive-Ping-Interval": "1"})
    ev = events(msgs)
    assert sum(1 for e in ev if "keepalive" in e) >= 1
    assert "end" in ev[-1]


def test_bad_keepalive_header_is_invalid_argument(daemon):
    status, _, msgs = stream_call(daemon, "Start", b"{}",
                                  headers={"Keepalive-Ping-Interval": "soon"})
    assert end_of(msgs)["error"]["code"] == "invalid_argument"


def test_start_timeout_kills_the_process(daemon):
    msg = json.dumps({"process": {"cmd": "/bin/sleep", "args": ["30"]}})
    status, _, msgs = stream_call(daemon, "Start", msg.encode(),
                                  headers={"Connect-Timeout-Ms": "500"})
    # Start's timeout is the process's, as envd treats it: killed (SIGTERM, SIGKILL after the
    # grace period: envd sends SIGKILL at once), and the stream ends well.
    end = events(msgs)[-1]["end"]
    assert end["status"] in ("signal: terminated", "signal: killed") and end["exitCode"] == -1
    assert "timeout" in end["error"]
    assert end_of(msgs) == {}


def test_connect_deadline_and_a_start_client_that_leaves(daemon):
    msg = json.dumps({"process": {"cmd": "/bin/sleep", "args": ["30"]}, "tag": "kept"})
    body = envelope(msg.encode())
    c = socket.create_connection(("127.0.0.1", daemon.port))
    c.sendall(b"POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nContent-Type: "
              b"application/connect+json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    c.settimeout(10)
    assert c.recv(65536).startswith(b"HTTP/1.1 200")
    # Connect's timeout is the stream's.
    status, _, msgs = stream_call(daemon, "Connect",
                                  json.dumps({"process": {"tag": "kept"}}).encode(),
                                  headers={"Connect-Timeout-Ms": "300"})
    assert "start" in events(msgs)[0]
    assert end_of(msgs)["error"]["code"] == "deadline_exceeded"
    # The client of Start went away: the process stays, as envd's does.
    c.close()
    time.sleep(0.2)
    status, body = daemon.unary("List", {})
    assert [p["tag"] for p in body.get("processes", [])].count("kept") == 1
    status, body = daemon.unary("SendSignal", {"process": {"tag": "kept"},
                                               "signal": "SIGNAL_SIGKILL"})
    assert status == 200


def test_errors_of_unary_calls(daemon):
    status, body = daemon.unary("SendSignal", {"process": {"pid": 2**31 - 7},
                                               "signal": "SIGNAL_SIGKILL"})
    assert status == 404 and body["code"] == "not_found"
    status, body = daemon.unary("SendInput", {"input": {"stdin": "eA=="}})
    assert status == 400 and body["code"] == "invalid_argument"


def test_unknown_route(daemon):
    status, _, body = daemon.request("GET", "/nope")
    assert status == 404 and json.loads(body)["code"] == 404
    status, _, body = daemon.request("GET", "/process.Process/List")
    assert status == 415


def test_daemon_stays_up(daemon):
    assert daemon.alive()
    assert daemon.request("GET", "/health")[0] == 204


# --------------------------------------------------------------------------------------------
# Access token, /init


def test_token_is_required_when_set(make_daemon):
    d = make_daemon(token="s3cret-token")
    assert d.request("GET", "/health")[0] == 204
    status, body = d.unary("List", {})
    assert status == 401 and body["code"] == 401
    status, body = d.unary("List", {}, {"X-Access-Token": "wrong"})
    assert status == 401
    status, body = d.unary("List", {}, {"X-Access-Token": "s3cret-token"})
    assert status == 200
    assert d.request("GET", "/envs")[0] == 401
    assert d.request("GET", "/envs", headers={"X-Access-Token": "s3cret-token"})[0] == 200


def test_the_sdk_without_the_token_gets_its_authentication_error(make_daemon, monkeypatch):
    from e2b.exceptions import AuthenticationException
    d = make_daemon(token="s3cret-token")
    sbx = sdk_sandbox(d, monkeypatch)
    with pytest.raises(AuthenticationException):
        sbx.commands.run("true")


def test_init_envs_workdir_and_token(make_daemon):
    d = make_daemon()
    body = json.dumps({"envVars": {"FROM_INIT": "yes", "SHADOWED": "init"},
                       "accessToken": "t0ken", "defaultWorkdir": "/tmp"}).encode()
    assert d.request("POST", "/init", body, {"Content-Type": "application/json"})[0] == 204
    # From now on the token is needed, /init included.
    assert d.request("GET", "/envs")[0] == 401
    status, _, envs = d.request("GET", "/envs", headers={"X-Access-Token": "t0ken"})
    assert json.loads(envs) == {"FROM_INIT": "yes", "SHADOWED": "init"}
    assert d.request("POST", "/init", b"{}", {"Content-Type": "application/json"})[0] == 401
    msg = json.dumps({"process": {"cmd": "/bin/sh", "args": [
        "-c", "echo $FROM_INIT $SHADOWED; pwd"], "envs": {"SHADOWED": "request"}}})
    status, _, msgs = stream_call(d, "Start", msg.encode(), headers={"X-Access-Token": "t0ken"})
    out = b"".join(base64.b64decode(e["data"]["stdout"]) for e in events(msgs) if "data" in e)
    assert out == b"yes request\n/tmp\n"


@pytest.mark.parametrize("body", [b"{bad", b"[]", b'{"envVars": {"A": 1}}',
                                  b'{"envVars": {"A=B": "x"}}', b'{"accessToken": 5}'])
def test_bad_init_is_400(daemon, body):
    status, _, resp = daemon.request("POST", "/init", body, {"Content-Type": "application/json"})
    assert status == 400 and json.loads(resp)["code"] == 400
    assert daemon.alive()


def open_stream(d, msg, headers=b""):
    """A Start stream on a socket of our own: (socket, bytes read so far)."""
    body = envelope(json.dumps(msg).encode())
    c = socket.create_connection(("127.0.0.1", d.port))
    c.sendall(b"POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nContent-Type: "
              b"application/connect+json\r\n" + headers +
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    c.settimeout(20)
    return c, c.recv(65536)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))


def test_clients_that_leave_or_never_read(make_daemon):
    d = make_daemon()
    # Leaves at once; its process is silent: the stream is let go without waiting for output.
    c, first = open_stream(d, {"process": {"cmd": "/bin/sleep", "args": ["30"]}})
    assert first.startswith(b"HTTP/1.1 200")
    c.close()
    # Never reads a flood of 300 MB: the process waits for its Start client, as under envd,
    # and the daemon holds the job's bounded ring and the stream's bounded queue meanwhile, not
    # the flood, and answers others.
    before = rss_kib(d.proc.pid)
    c2, _ = open_stream(d, {"process": {"cmd": "/bin/sh", "args": [
        "-c", "head -c 300000000 /dev/zero"]}, "tag": "flood"})
    time.sleep(2)
    status, body = d.unary("List", {})
    assert status == 200 and "flood" in [p.get("tag") for p in body.get("processes", [])], \
        "300 MB went by a client that never read them"
    grown = rss_kib(d.proc.pid) - before
    assert grown < 100 * 1024, f"the daemon grew by {grown} KiB for a client that never reads"
    # Once that client is gone, nothing holds the process back: the flood ends.
    c2.close()
    deadline = time.monotonic() + 120
    while True:
        status, body = d.unary("List", {})
        assert status == 200
        if "flood" not in [p.get("tag") for p in body.get("processes", [])]:
            break
        assert time.monotonic() < deadline, "the flood did not end after its client left"
        time.sleep(0.1)
    assert d.request("GET", "/health")[0] == 204


def test_a_slow_start_client_gets_every_byte(daemon):
    """16 MB written while the client reads nothing (the ring holds 1 MiB): the process waits for
    the client instead of the ring dropping output, so every byte arrives, in order."""
    size = 16 * 1000 * 1000
    c, got = open_stream(daemon, {"process": {"cmd": "/bin/sh", "args": [
        "-c", f"head -c {size} /dev/zero | tr '\\0' x; echo; echo done"]}},
        b"Connection: close\r\n")
    time.sleep(2)  # the process would be long done if nothing held it
    c.settimeout(60)
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        got += b
    c.close()
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    if b"chunked" in head.lower():
        body = dechunk(body)
    msgs = read_envelopes(body)
    out = b"".join(base64.b64decode(e["data"]["stdout"]) for e in events(msgs) if "data" in e)
    assert len(out) == size + len(b"\ndone\n") and out == b"x" * size + b"\ndone\n"
    end = events(msgs)[-1]["end"]
    assert end["exited"] and end.get("exitCode", 0) == 0


def dechunk(b):
    out, i = b"", 0
    while True:
        j = b.index(b"\r\n", i)
        n = int(b[i:j].split(b";")[0], 16)
        if n == 0:
            return out
        out += b[j + 2:j + 2 + n]
        i = j + 2 + n + 2


def test_sigterm_with_open_streams(make_daemon):
    d = make_daemon()
    c, first = open_stream(d, {"process": {"cmd": "/bin/sleep", "args": ["30"]}},
                           b"Keepalive-Ping-Interval: 1\r\n")
    assert first.startswith(b"HTTP/1.1 200")
    d.stop()  # exits 0 within its shutdown timeout
    rest = b""
    while True:
        b = c.recv(65536)
        if not b:
            break
        rest += b
    c.close()
    # The process was stopped with the daemon, and the stream said so before it closed.
    assert b'"end"' in first + rest


def test_stream_input_wire(daemon):
    h = {"Content-Type": "application/connect+json"}
    # No start event, a data event first, a truncated envelope: Connect errors in the stream.
    for body in (b"", envelope(b'{"data": {"input": {"stdin": "eA=="}}}'),
                 envelope(b'{"keepalive": {}}') + struct.pack(">BI", 0, 9) + b"{"):
        status, _, resp = daemon.request("POST", "/process.Process/StreamInput", body, h)
        assert status == 200
        assert end_of(read_envelopes(resp))["error"]["code"] == "invalid_argument"
    status, _, resp = daemon.request("POST", "/process.Process/StreamInput",
                                     b"{}", {"Content-Type": "application/json"})
    assert status == 501 and json.loads(resp)["code"] == "unimplemented"
    assert daemon.alive()


def test_stream_input_backlog_is_bounded(daemon):
    """A client streaming stdin to a process that does not read: the daemon holds at most
    64 MiB for the process (SBX_PROC_STDIN_MAX), then the call fails resource_exhausted, and the
    daemon and the process are unharmed (envd's write would block the stream instead)."""
    c, first = open_stream(daemon, {"process": {"cmd": "/bin/sleep", "args": ["60"]}})
    while b'"start"' not in first:
        first += c.recv(65536)
    pid = int(first.split(b'"pid":')[1].split(b"}")[0].split(b",")[0])
    chunk = base64.b64encode(b"y" * (8 << 20)).decode()  # 8 MiB of stdin a message
    body = envelope(json.dumps({"start": {"process": {"pid": pid}}}).encode()) + b"".join(
        envelope(json.dumps({"data": {"input": {"stdin": chunk}}}).encode()) for _ in range(10))
    status, _, resp = daemon.request("POST", "/process.Process/StreamInput", body,
                                     {"Content-Type": "application/connect+json"}, timeout=60)
    assert status == 200
    err = end_of(read_envelopes(resp))["error"]
    assert err["code"] == "resource_exhausted" and "has not read" in err["message"], err
    assert daemon.alive() and os.path.exists(f"/proc/{pid}")
    c.close()
