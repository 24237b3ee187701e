"""sandboxd.k8s without a cluster: what a client is told when the API server cannot be reached
or the kubeconfig is unusable. Against a real control plane it is tested in
test/controller/test_sdk_lifecycle.py."""

from __future__ import annotations

import socket

import pytest

pytest.importorskip("kubernetes", reason="the kubernetes package is not installed "
                    "(pip install 'sandboxd[k8s]')")

from sandboxd import errors  # noqa: E402
from sandboxd.k8s import SandboxClient, token_secret_name  # noqa: E402


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unreachable_kubeconfig(tmp_path) -> str:
    """A kubeconfig of an API server that is not there, namespace team-a."""
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(f"""apiVersion: v1
kind: Config
current-context: t
clusters: [{{name: t, cluster: {{server: "http://127.0.0.1:{closed_port()}"}}}}]
users: [{{name: t, user: {{token: x}}}}]
contexts: [{{name: t, context: {{cluster: t, user: t, namespace: team-a}}}}]
""")
    return str(cfg)


def test_unreachable_api_server_is_unavailable(tmp_path):
    cfg = unreachable_kubeconfig(tmp_path)
    with SandboxClient(kubeconfig=str(cfg), timeout=5) as client:
        assert client.namespace == "team-a", "the context's namespace"
        with pytest.raises(errors.UnavailableError) as ei:
            client.claim("pool")
        assert "sandboxwarmpools/pool" in ei.value.message


def test_a_kubeconfig_that_is_not_one(tmp_path):
    cfg = tmp_path / "kubeconfig"
    cfg.write_text("apiVersion: v1\nkind: Config\n")
    with pytest.raises(errors.InvalidArgumentError) as ei:
        SandboxClient(kubeconfig=str(cfg))
    assert "kubernetes config" in ei.value.message


def test_token_secret_names_fit():
    assert token_secret_name("sb") == "sb-sandboxd-token"
    long = token_secret_name("a" * 250)
    assert len(long) <= 253 and long.endswith("-sandboxd-token")
    assert token_secret_name("a" * 250) != token_secret_name("a" * 249 + "b")


def test_unknown_connect_mode_is_refused():
    with pytest.raises(errors.InvalidArgumentError, match="connect must be one of"):
        SandboxClient(connect="ssh")


def test_router_mode(tmp_path, monkeypatch):
    monkeypatch.delenv("SANDBOXD_ROUTER", raising=False)
    with pytest.raises(errors.InvalidArgumentError, match="needs router="):
        SandboxClient(connect="router")
    cfg = unreachable_kubeconfig(tmp_path)
    with SandboxClient(kubeconfig=str(cfg), router="http://127.0.0.1:1") as client:
        assert client.connect_mode == "router", "a router given: auto goes through it"
        assert client.router() is client.router(), "one connection for every lease"
    monkeypatch.setenv("SANDBOXD_ROUTER", "http://127.0.0.1:1")
    with SandboxClient(kubeconfig=str(cfg), connect="pod-ip") as client:
        assert client.connect_mode == "pod-ip", "an explicit mode stands"
