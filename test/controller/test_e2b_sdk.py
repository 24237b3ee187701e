"""The E2B SDK's conformance tests (test/e2b) through the router and E2B's control plane: the
unmodified `e2b` SDK works with a sandbox of a template (a SandboxClaim on its warm pool, made by
the router's --e2b-api) and runs test/e2b's SDK tests against it — commands, PTY, files, watches,
100 MiB uploads, the SDK's exceptions — with every envd call going through the router to a real
sandboxd's E2B port at the pod's address (kwok's), checked against the sandbox's token. Then
set_timeout, get_info and kill with the real sandboxd behind.

The same test files, not copies: test/e2b/conftest.py's `sandbox` fixture works with the session's
sandbox through the control plane when SANDBOXD_E2B_TEMPLATE is set and skips the tests that
need a sandboxd of their own (raw HTTP, curl, tokens, SIGTERM).

Both forms of the sandbox side: the shared host (E2B_SANDBOX_URL → the router's plaintext port;
the SDK sends E2b-Sandbox-Id / E2b-Sandbox-Port) and the per-host one (no E2B_SANDBOX_URL: the
SDK goes to https://<port>-<id>.<E2B_DOMAIN>, here the router's TLS port at 443 of a loopback
address of its own, the name mapped in /etc/hosts of a mount namespace of the SDK's, the test
CA trusted through SSL_CERT_FILE, which the SDK's transport reads). Needs what test_e2b_router
needs; the per-host form needs root and unshare.

The JavaScript SDK's files (test/e2b-js) run the same way: its run-tests.sh makes the run's
sandbox with Sandbox.create(template) (or connects to the per-host form's), the files connect to
it, and it is killed at the end."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, openssl
from test_e2b_router import DOMAIN, KEY, api, e2b_python, e2b_routers, real_envd  # noqa: F401
from test_router import new_ip, router_rbac, routers  # noqa: F401 - fixtures
from test_sdk_lifecycle import site  # noqa: F401 - fixture

SANITIZED = os.environ.get("SANDBOXD_SANITIZED", "OFF").upper() in ("ON", "1", "TRUE")


def with_hosts(path, names):
    """A prefix that runs a command in a mount namespace of its own whose /etc/hosts maps each
    name to its address (test/router's trick): nothing outside it changes."""
    Path(path).write_text("".join(f"{ip} {name}\n" for name, ip in names.items()))
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" /etc/hosts && exec "$@"', str(path)]


def wildcard_pki(d):
    """A CA and a certificate for *.<DOMAIN>, as E2B's sandbox hosts are served."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=e2b-test-ca", cwd=d)
    openssl("req", *ec, "-keyout", "host.key", "-out", "host.csr", "-subj", f"/CN=*.{DOMAIN}",
            cwd=d)
    (Path(d) / "san.ext").write_text(f"subjectAltName=DNS:*.{DOMAIN}\n")
    openssl("x509", "-req", "-in", "host.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "host.crt", "-days", "2", "-extfile", "san.ext", cwd=d)


def run_suite(site, e2b_routers, tmp_path, form, script, envd_port=None, ca_var="SSL_CERT_FILE"):
    """Runs a conformance suite (script: its run-tests.sh) through the router and the control
    plane with a real sandboxd behind (at envd_port, or a free one the suite is told of), in
    the given form; returns the suite's stdout. The per-host form makes the sandbox first (its
    ID is in the host name) and hands the suite its ID and the test CA (ca_var names the
    variable the SDK's TLS reads)."""
    d, port = real_envd(site, tmp_path, port=envd_port)
    try:
        env = site.env(E2B_API_KEY=KEY, E2B_DOMAIN=DOMAIN, SANDBOXD_E2B_TEMPLATE="real",
                       SANDBOXD_E2B_ENVD_PORT=str(port))
        env.pop("SANDBOXD_BIN", None)
        prefix = []
        if form == "shared-host":
            r = e2b_routers(f"--e2b-envd-port={port}")
            env["E2B_SANDBOX_URL"] = f"http://127.0.0.1:{r.port}"
        else:
            if os.geteuid() != 0 or not shutil.which("unshare"):
                pytest.skip("the per-host form needs root for a mount namespace")
            wildcard_pki(tmp_path)
            rip = new_ip()
            r = e2b_routers(f"--e2b-envd-port={port}", f"--https-bind-address={rip}:443",
                            f"--tls-cert-file={tmp_path / 'host.crt'}",
                            f"--tls-key-file={tmp_path / 'host.key'}")
            # The host names the sandbox ID, so the sandbox is made first and its name mapped.
            s, _, b = api(r, "POST", "/v2/sandboxes", {"templateID": "real", "timeout": 600})
            assert s == 201, b
            prefix = with_hosts(tmp_path / "hosts", {f"{port}-{b['sandboxID']}.{DOMAIN}": rip})
            env.update({"SANDBOXD_E2B_SANDBOX_ID": b["sandboxID"],
                        ca_var: str(tmp_path / "ca.crt")})
        env["E2B_API_URL"] = f"http://127.0.0.1:{r.port}"
        p = subprocess.run([*prefix, *script], env=env, capture_output=True, text=True,
                           timeout=1200 if SANITIZED else 600)
        tail = p.stdout[-20000:] + p.stderr[-3000:]
        if p.returncode == 77:
            pytest.skip(p.stderr.strip()[-500:])
        assert p.returncode == 0, tail + d.tail()
        print(p.stdout[-6000:])
        # The run's sandbox was killed at its end (the suite checked that kill answered true).
        assert site.claims() == [], tail
        return p.stdout
    finally:
        assert d.stop() == 0, d.tail()


@pytest.mark.parametrize("form", ["shared-host", "per-host"])
def test_e2b_sdk_suite_through_the_router(site, e2b_routers, tmp_path, form):  # noqa: F811
    out = run_suite(site, e2b_routers, tmp_path, form,
                    [str(REPO / "test" / "e2b" / "run-tests.sh"), "-rfEs", "--tb=short"])
    assert " passed" in out and " failed" not in out, out[-6000:]


@pytest.mark.parametrize("form", ["shared-host", "per-host"])
def test_e2b_js_sdk_suite_through_the_router(site, e2b_routers, tmp_path, form):  # noqa: F811
    """test/e2b-js's files, the JavaScript SDK 2.51.0's, the same way. That SDK names envd's
    port 49983 and lets no caller change it (a Sandbox sets its own), so the sandboxd behind
    listens there, on the pod's own address; the per-host form's CA is trusted through
    NODE_EXTRA_CA_CERTS, which node's TLS (undici's too) adds to its roots."""
    out = run_suite(site, e2b_routers, tmp_path, form,
                    [str(REPO / "test" / "e2b-js" / "run-tests.sh")], envd_port=49983,
                    ca_var="NODE_EXTRA_CA_CERTS")
    summary = dict(re.findall(r"^# (pass|fail|skipped|cancelled) (\d+)$", out, re.M))
    assert int(summary.get("pass", 0)) > 40 and summary.get("fail") == "0", out[-6000:]
    assert summary.get("cancelled") == "0", out[-6000:]
    assert re.search(r"routed sandbox \w+: killed, and gone", out), out[-3000:]


LIFECYCLE = r"""
import json, os, sys
from datetime import datetime, timezone
from e2b import Sandbox
from e2b.connection_config import ConnectionConfig
from e2b.exceptions import AuthenticationException, NotFoundException

ConnectionConfig.envd_port = int(os.environ["SANDBOXD_E2B_ENVD_PORT"])
sb = Sandbox.create(template=os.environ["SANDBOXD_E2B_TEMPLATE"], timeout=60)
out = {"echo": sb.commands.run("echo alive").stdout}
# envd's token is sandboxd's to check, behind the router: a wrong one (the SDK's own way to
# build a handle, as connect does) is the SDK's AuthenticationException.
wrong = Sandbox(sandbox_id=sb.sandbox_id, sandbox_domain=sb.sandbox_domain,
                envd_version=sb._envd_version, envd_access_token="wrong",
                traffic_access_token=None, connection_config=ConnectionConfig(
                    extra_sandbox_headers={"X-Access-Token": "wrong",
                                           "E2b-Sandbox-Id": sb.sandbox_id,
                                           "E2b-Sandbox-Port": str(ConnectionConfig.envd_port)}))
try:
    wrong.commands.run("true")
except AuthenticationException as e:
    out["wrong_token"] = type(e).__name__
try:
    wrong.files.read("/etc/hostname")
except AuthenticationException as e:
    out["wrong_token_files"] = type(e).__name__
sb.set_timeout(900)
out["left"] = (sb.get_info().end_at - datetime.now(timezone.utc)).total_seconds()
out["killed"] = sb.kill()
out["running"] = sb.is_running()
try:
    sb.commands.run("true")
except Exception as e:
    out["after_kill"] = type(e).__name__
try:
    Sandbox.connect(sb.sandbox_id)
except NotFoundException as e:
    out["connect_after_kill"] = type(e).__name__
print(json.dumps(out))
"""


def test_set_timeout_and_kill_with_sandboxd_behind(site, e2b_routers, e2b_python,  # noqa: F811
                                                   tmp_path):
    d, port = real_envd(site, tmp_path)
    try:
        r = e2b_routers(f"--e2b-envd-port={port}")
        env = site.env(E2B_API_URL=f"http://127.0.0.1:{r.port}", E2B_API_KEY=KEY,
                       E2B_DOMAIN=DOMAIN, E2B_SANDBOX_URL=f"http://127.0.0.1:{r.port}",
                       SANDBOXD_E2B_TEMPLATE="real", SANDBOXD_E2B_ENVD_PORT=str(port))
        p = subprocess.run([str(e2b_python), "-c", LIFECYCLE], env=env, capture_output=True,
                           text=True, timeout=180)
        assert p.returncode == 0, p.stderr[-3000:] + d.tail()
        out = json.loads(p.stdout)
        assert out["echo"] == "alive\n" and 880 < out["left"] <= 901, out
        assert out["wrong_token"] == out["wrong_token_files"] == "AuthenticationException", out
        assert out["killed"] is True and out["running"] is False, out
        assert out["after_kill"] == "SandboxNotRunningException", out
        assert out["connect_after_kill"] == "SandboxNotFoundException", out
    finally:
        assert d.stop() == 0, d.tail()


QUIET = r"""
import json, os, sys
import e2b.sandbox_sync.commands.command as command
from e2b import Sandbox
from e2b.connection_config import ConnectionConfig

ConnectionConfig.envd_port = int(os.environ["SANDBOXD_E2B_ENVD_PORT"])
sb = Sandbox.create(template=os.environ["SANDBOXD_E2B_TEMPLATE"], timeout=60)
out = {}
for ping in (1, 50):  # Keepalive-Ping-Interval: 1 s, then the SDK's own 50 s
    command.KEEPALIVE_PING_INTERVAL_SEC = ping
    try:
        out[str(ping)] = sb.commands.run("sleep 6; echo late").stdout
    except Exception as e:
        out[str(ping)] = type(e).__name__
out["killed"] = sb.kill()
print(json.dumps(out))
"""


def test_keepalives_carry_a_quiet_command_through_the_router(site, e2b_routers,  # noqa: F811
                                                             e2b_python, tmp_path):
    """A command quiet for longer than the router's --proxy-timeout lives on the keepalive
    events sandboxd sends at the SDK's Keepalive-Ping-Interval; without them (the SDK's 50 s
    here) the router ends the silent stream, which the SDK reports as its error."""
    d, port = real_envd(site, tmp_path)
    try:
        r = e2b_routers(f"--e2b-envd-port={port}", "--proxy-timeout=3s")
        env = site.env(E2B_API_URL=f"http://127.0.0.1:{r.port}", E2B_API_KEY=KEY,
                       E2B_DOMAIN=DOMAIN, E2B_SANDBOX_URL=f"http://127.0.0.1:{r.port}",
                       SANDBOXD_E2B_TEMPLATE="real", SANDBOXD_E2B_ENVD_PORT=str(port))
        p = subprocess.run([str(e2b_python), "-c", QUIET], env=env, capture_output=True,
                           text=True, timeout=180)
        assert p.returncode == 0, p.stderr[-3000:] + d.tail()
        out = json.loads(p.stdout)
        assert out["1"] == "late\n", out
        assert out["50"] == "SandboxUnreachableException" and out["killed"] is True, out
    finally:
        assert d.stop() == 0, d.tail()
