"""Without its cache the router needs no Kubernetes access at all: no kubeconfig, no service
account, $KUBECONFIG naming nothing; it is ready at once and routes by the pod-IP key (and the
DNS form). With --cache-enabled and no API server to reach, it refuses to start, saying why.
(The cache itself runs against the real control plane: test/controller/test_router.py.)"""

import os
import subprocess

from conftest import Router, http_request
from test_grpc_relay import routed
from test_ports import metric


def test_no_kubernetes_without_the_cache(router_bin, sandboxd, protos, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    r = Router(router_bin)
    try:
        assert http_request(r.probe_port, "GET", "/readyz", timeout=5).status == 200
        assert metric(r, "sandbox_router_cache_synced").split()[-1] == "-1"
        c = routed(r, sandboxd, protos)
        assert c.execute(["echo", "hi"]).stdout == b"hi\n"
        c.close()
        assert int(metric(r, 'sandbox_router_resolutions_total{source="pod-ip"}').split()[-1]) >= 1
        assert "kubeconfig" not in r.log()
    finally:
        r.stop_and_check()


def test_the_cache_without_an_api_server_is_refused(router_bin):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = "/nonexistent/kubeconfig"
    p = subprocess.run([router_bin, "--cache-enabled", "--http-bind-address", "127.0.0.1:0",
                        "--health-probe-bind-address=", "--metrics-bind-address="],
                       capture_output=True, text=True, timeout=30, env=env)
    assert p.returncode == 1, p
    assert "--cache-enabled" in p.stderr and "/nonexistent/kubeconfig" in p.stderr, p.stderr
