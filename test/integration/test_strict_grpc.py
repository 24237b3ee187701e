"""Nothing is cut short silently over gRPC.

Execute keeps at most --max-output-bytes of each stream (and less when --max-output-memory runs
out); its answer, the reference's message, has no field to say so, so what it dropped comes in
trailing metadata ("sandboxd-stdout-truncated: <bytes dropped>"), and in /metrics.

A string of a request that holds a NUL byte (an argument, a variable's name or value, a working
directory) would reach the process cut at that byte: protobuf-c hands strings over as C strings.
Such a request is refused with INVALID_ARGUMENT naming the field, and nothing runs."""

import re

import grpc
import pytest

from conftest import Procs, http_request, status_of

SC = grpc.StatusCode
MIB = 1 << 20
CAP = 16 * MIB  # --max-output-bytes by default
BIG = 20_000_000
SLOW = 120.0  # 20 MB through a sanitized daemon


def execute_with_call(client, command, env=None, cwd=None, timeout=SLOW):
    req = client.pb.ExecuteRequest(config=client.config(command, env, cwd))
    resp, call = client._execute.with_call(req, timeout=timeout)
    return resp, dict(call.trailing_metadata() or ())


def metric(d, name, labels=""):
    body = http_request(d.rest_port, "GET", "/metrics").body.decode()
    m = re.search(rf"^{re.escape(name + labels)} (\d+)$", body, re.M)
    assert m, f"{name}{labels} not in /metrics:\n{body}"
    return int(m.group(1))


def truncation_metrics(d):
    return (metric(d, "sandboxd_execute_truncated_total"),
            metric(d, "sandboxd_execute_dropped_bytes_total", '{stream="stdout"}'),
            metric(d, "sandboxd_execute_dropped_bytes_total", '{stream="stderr"}'))


# ---------------------------------------------------------------------------------------------
# Output past the cap


def test_stdout_past_the_cap_says_how_much_was_dropped(sandboxd, client):
    before = truncation_metrics(sandboxd)
    resp, md = execute_with_call(client, ["head", "-c", str(BIG), "/dev/zero"])
    assert resp.exit_code == 0
    assert len(resp.stdout) == CAP
    assert md.get("sandboxd-stdout-truncated") == str(BIG - CAP), md
    assert "sandboxd-stderr-truncated" not in md, md
    after = truncation_metrics(sandboxd)
    assert after[0] == before[0] + 1
    assert after[1] == before[1] + BIG - CAP
    assert after[2] == before[2]
    assert any("output truncated" in ln and str(BIG - CAP) in ln for ln in sandboxd.lines)


def test_stderr_past_the_cap_says_how_much_was_dropped(sandboxd, client):
    before = truncation_metrics(sandboxd)
    resp, md = execute_with_call(
        client, ["sh", "-c", f"head -c {BIG} /dev/zero >&2; head -c {CAP + 5} /dev/zero"])
    assert resp.exit_code == 0
    assert (len(resp.stdout), len(resp.stderr)) == (CAP, CAP)
    assert md.get("sandboxd-stderr-truncated") == str(BIG - CAP), md
    assert md.get("sandboxd-stdout-truncated") == "5", md
    after = truncation_metrics(sandboxd)
    assert after[0] == before[0] + 1
    assert (after[1] - before[1], after[2] - before[2]) == (5, BIG - CAP)


def test_output_under_the_cap_has_no_truncation_metadata(sandboxd, client):
    before = truncation_metrics(sandboxd)
    resp, md = execute_with_call(
        client, ["sh", "-c", f"head -c {CAP} /dev/zero; head -c {CAP} /dev/zero >&2"])
    assert (len(resp.stdout), len(resp.stderr)) == (CAP, CAP)
    assert not [k for k in md if k.startswith("sandboxd-")], md
    assert truncation_metrics(sandboxd) == before


def test_output_past_the_memory_budget_says_how_much_was_dropped(sandboxd_factory):
    d = sandboxd_factory(["--max-output-memory", str(MIB)])
    c = d.client()
    resp, md = execute_with_call(c, ["head", "-c", str(3 * MIB), "/dev/zero"])
    assert resp.exit_code == 0
    assert 0 < len(resp.stdout) <= MIB
    assert md.get("sandboxd-stdout-truncated") == str(3 * MIB - len(resp.stdout)), md
    assert truncation_metrics(d)[:2] == (1, 3 * MIB - len(resp.stdout))
    assert any("output truncated" in ln and "--max-output-memory" in ln for ln in d.lines)


# ---------------------------------------------------------------------------------------------
# NUL bytes in strings


def assert_refused(fn, field):
    code, details, resp = status_of(fn)
    assert code == SC.INVALID_ARGUMENT, (code, details, resp)
    assert field in details and "NUL" in details, details


# (what, command, env, cwd, the field named): each would create ran-<what> in the root (or in
# sub/) when it ran cut at the NUL.
CASES = [
    ("argv", ["sh", "-c", "touch ran-argv\0; ignored"], None, None, "command[2]"),
    ("argv0", ["sh\0x", "-c", "touch ran-argv0"], None, None, "command[0]"),
    ("env-name", ["sh", "-c", "touch ran-env-name"], {"A\0B": "1"}, None, "env"),
    ("env-value", ["sh", "-c", "touch ran-env-value"], {"A": "x\0y"}, None, '["A"]'),
    ("cwd", ["sh", "-c", "touch ran-cwd"], None, "sub\0/elsewhere", "cwd"),
]


@pytest.fixture
def root(sandboxd):
    (sandboxd.root / "sub").mkdir(exist_ok=True)
    return sandboxd.root


def never_ran(root, what):
    return not (root / f"ran-{what}").exists() and not (root / "sub" / f"ran-{what}").exists()


@pytest.mark.parametrize("what,command,env,cwd,field", CASES, ids=[c[0] for c in CASES])
def test_nul_in_execute_is_refused(client, root, what, command, env, cwd, field):
    assert_refused(lambda: client.execute(command, env=env, cwd=cwd), field)
    assert never_ran(root, what)
    # Without the NUL the same request runs (the test would see it).
    r = client.execute(["sh", "-c", f"touch ran-{what}-ok"])
    assert r.exit_code == 0 and (root / f"ran-{what}-ok").exists()


@pytest.mark.parametrize("what,command,env,cwd,field", CASES, ids=[c[0] for c in CASES])
def test_nul_in_start_is_refused(client, root, what, command, env, cwd, field):
    assert_refused(lambda: list(client.start_call(command, env=env, cwd=cwd, timeout=10)), field)
    assert never_ran(root, what)


def test_nul_field_names_the_path(client, root):
    _, details, _ = status_of(lambda: client.execute(["sh", "-c", "touch ran-x\0"]))
    assert details == "config.command[2] contains a NUL byte", details
    _, details, _ = status_of(lambda: client.execute(["true"], cwd="sub\0"))
    assert details == "config.cwd contains a NUL byte", details
    _, details, _ = status_of(lambda: client.execute(["true"], env={"HOME": "/x\0"}))
    assert details == 'config.env_vars["HOME"] contains a NUL byte', details


@pytest.mark.parametrize("method", ["spawn", "run"])
@pytest.mark.parametrize("what,command,env,cwd,field", CASES, ids=[c[0] for c in CASES])
def test_nul_in_processes_is_refused(sandboxd, root, method, what, command, env, cwd, field):
    p = Procs(sandboxd.client().channel, sandboxd.protos)
    kw = {}
    if env:
        kw["env"] = env
    if cwd is not None:
        kw["cwd"] = cwd
    named = {"env-name": "spec.env", "env-value": 'spec.env["A"]'}.get(what, "spec." + field)
    assert_refused(lambda: getattr(p, method)(command, **kw), named)
    assert never_ran(root, what)
    assert not [i for i in p.list() if "ran-" + what in " ".join(i.command)]


def test_nul_in_a_tag_is_refused(sandboxd, root):
    p = Procs(sandboxd.client().channel, sandboxd.protos)
    assert_refused(lambda: p.spawn(["sh", "-c", "touch ran-tag"], tag="web\0x"), "spec.tag")
    assert never_ran(root, "tag")
