"""The SDKs' lifecycle helpers through sandboxd-router instead of a port-forward, against the
real control plane: a sandbox claimed through the API server, then reached by its name through a
router with its cache on (as router/config's service account), which finds the pod and
sandboxd's ports by their names; the token is the sandbox's Secret's, handed on by the router to
sandboxd's own ports. Python's SandboxClient(router=), and sbx --router --sandbox.

The site is test_sdk_lifecycle's (a real sandboxd on 127.0.0.1 behind the pool's warm sandbox);
the router test_router's. Needs SANDBOXD_BIN, SANDBOXD_ROUTER_BIN, the Python SDK's virtualenv
and Go."""

import json

from conftest import wait_until
from test_router import router_rbac, routers  # noqa: F401 - fixtures
from test_sdk_lifecycle import go_bins, run, sdk_python, site  # noqa: F401 - fixtures

PY = r"""
import os, sys
from sandboxd.k8s import SandboxClient

with SandboxClient(namespace=os.environ["SANDBOX_NAMESPACE"], router=sys.argv[1]) as client:
    with client.claim("p", timeout=120) as sb:
        print(client.connect_mode, sb.sandbox.endpoint.grpc_target, sb.sandbox_name)
        print(sb.run(["echo", "via", "the", "router"], timeout=30).stdout_text.strip())
        sb.files.write_bytes("routed.txt", b"through the router")
        print(sb.files.read_bytes("routed.txt").decode())
"""


def router_for(routers, site):  # noqa: F811
    r = routers()
    wait_until(r.ready, 30, what="router ready (its first lists)")
    return r, f"http://127.0.0.1:{r.port}"


def test_python_lease_through_the_router(site, sdk_python, routers):  # noqa: F811
    warm = site.serve_warm()
    r, url = router_for(routers, site)
    p = run([str(sdk_python), "-c", PY, url], site.env())
    assert p.stdout.splitlines() == [f"router 127.0.0.1:{r.port} {warm}", "via the router",
                                     "through the router"], p.stdout + p.stderr
    assert (site.dir / "root" / "routed.txt").read_text() == "through the router"
    assert r.metric("sandbox_router_grpc_calls_total") >= 1
    assert site.claims() == []


def test_sbx_through_the_router(site, go_bins, routers):  # noqa: F811
    warm = site.serve_warm()
    r, url = router_for(routers, site)
    sbx, env, flags = str(go_bins / "sbx"), site.env(), ["--namespace", site.ns]
    name = json.loads(run([sbx, "claim", "--pool", "p", "--wait", "--output", "json", *flags],
                          env).stdout)["name"]
    # The claim's sandbox and token through the cluster, the calls through the router.
    p = run([sbx, "--router", url, "--sandbox", name, *flags, "exec", "--", "sh", "-c",
             "echo routed; exit 3"], env, ok=False)
    assert (p.returncode, p.stdout) == (3, "routed\n"), p.stderr
    run([sbx, "--router", url, "--sandbox", name, *flags, "mkdir", "-p", "by-sbx"], env)
    assert (site.dir / "root" / "by-sbx").is_dir()
    # The sandbox's own name, no cluster: the router resolves it; the token as given.
    p = run([sbx, "--router", url, "--sandbox-id", warm, *flags, "--token",
             site.token_of(warm), "exec", "--", "echo", "by-id"], env)
    assert p.stdout == "by-id\n", p.stderr
    p = run([sbx, "--router", url, "--sandbox", name, *flags, "--connect", "pod-ip", "ls"], env,
            ok=False)
    assert p.returncode == 1 and "--connect router" in p.stderr, p.stderr
    assert r.metric("sandbox_router_grpc_calls_total") >= 2
    run([sbx, "release", name, *flags], env)
