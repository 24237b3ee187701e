"""A Sandbox against the real API server: it becomes a Pod with sandboxd injected, its Ready
follows the Pod, it suspends, resumes, expires, and cleans up after itself."""

import datetime

import pytest

from conftest import NODES, RUNTIME_CLASS, wait_until
from kube import ApiError, Kube

SB = ("agents.x-k8s.io/v1beta1", "Sandbox")
WAIT = 30


def sandbox(name, ns, **spec):
    pod_spec = spec.pop("pod_spec", None) or {
        "containers": [{"name": "main", "image": "debian:12", "command": ["sleep"], "args": ["inf"]}]}
    return {"apiVersion": SB[0], "kind": SB[1], "metadata": {"name": name, "namespace": ns},
            "spec": {"podTemplate": {"metadata": {"labels": {"app": name}}, "spec": pod_spec}, **spec}}


def condition(obj, type_="Ready"):
    for c in (obj or {}).get("status", {}).get("conditions", []):
        if c["type"] == type_:
            return c
    return None


def wait_ready(kube, ns, name, status="True", reason=None, timeout=WAIT):
    def check():
        c = condition(kube.find(*SB, ns, name))
        return c if c and c["status"] == status and (reason is None or c["reason"] == reason) else None
    return wait_until(check, timeout, what=f"sandbox {name} Ready={status} {reason or ''}")


def wait_gone(kube, api_version, kind, ns, name, timeout=WAIT):
    wait_until(lambda: kube.find(api_version, kind, ns, name) is None, timeout,
               what=f"{kind} {name} deleted")


def test_manifests_applied(cluster):
    crds = cluster.admin.list("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    names = {c["metadata"]["name"] for c in crds}
    assert {"sandboxes.agents.x-k8s.io", "sandboxclaims.extensions.agents.x-k8s.io",
            "sandboxtemplates.extensions.agents.x-k8s.io",
            "sandboxwarmpools.extensions.agents.x-k8s.io"} <= names
    pool = next(c for c in crds if c["metadata"]["name"].startswith("sandboxwarmpools."))
    assert pool["spec"]["versions"][0]["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    assert cluster.admin.find("apps/v1", "Deployment", "sandboxd-system", "sandboxd-controller")


def test_crd_rejects_bad_spec(cluster, namespace):
    bad = sandbox("bad", namespace, operatingMode="Sleeping")
    with pytest.raises(ApiError) as e:
        cluster.admin.create(bad)
    assert e.value.status == 422
    empty = sandbox("empty", namespace, pod_spec={"containers": []})
    with pytest.raises(ApiError) as e:
        cluster.admin.create(empty)
    assert e.value.status == 422


def test_controller_has_only_its_rights(cluster):
    ctrl = Kube("127.0.0.1", cluster.port, str(cluster.ca), cluster.tokens["controller"])
    ctrl.list(*SB)  # granted
    with pytest.raises(ApiError) as e:
        ctrl.list("v1", "Secret", "default")  # create and delete only
    assert e.value.status == 403
    with pytest.raises(ApiError) as e:
        ctrl.list("v1", "Node")
    assert e.value.status == 403


def test_null_fields_keep_our_defaults(cluster, namespace, controller):
    """A pod template's nulls (the API server keeps them in the schema-less pod spec) do not undo
    the injection: no service account token, our runtime class, sandboxd's probes."""
    k = cluster.admin
    main = {"name": "main", "image": "debian:12", "command": ["sleep", "inf"], "readinessProbe": None}
    k.create(sandbox("sbnull", namespace, pod_spec={"containers": [main], "runtimeClassName": None,
                                                    "automountServiceAccountToken": None}))
    pod = wait_until(lambda: k.find("v1", "Pod", namespace, "sbnull"), WAIT, what="pod sbnull")
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["runtimeClassName"] == RUNTIME_CLASS
    assert pod["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_sandbox_becomes_injected_pod(cluster, namespace, controller):
    k = cluster.admin
    k.create(sandbox("sb1", namespace))
    pod = wait_until(lambda: k.find("v1", "Pod", namespace, "sb1"), WAIT, what="pod sb1")
    spec = pod["spec"]
    assert spec["runtimeClassName"] == RUNTIME_CLASS
    assert spec["automountServiceAccountToken"] is False
    init = spec["initContainers"][0]
    assert init["image"] == "sandboxd-injector:test"
    # The injector image's entrypoint (sandboxd-install DIR) copies sandboxd into DIR.
    assert init["args"] == ["/.sandboxd"]
    main = spec["containers"][0]
    assert main["command"][0] == "/.sandboxd/sandboxd"
    assert main["command"][-3:] == ["--", "sleep", "inf"]
    assert "--token-file=/var/run/sandboxd/token" in main["command"]
    assert not main.get("args")
    assert {p["containerPort"] for p in main["ports"]} == {9090, 8080}
    assert main["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert main["livenessProbe"]["httpGet"]["path"] == "/healthz"
    mounts = {m["name"]: m["mountPath"] for m in main["volumeMounts"]}
    assert mounts["sandboxd-bin"] == "/.sandboxd" and mounts["sandboxd-token"] == "/var/run/sandboxd"
    # No service account token was mounted, though the pod runs as "default".
    assert not any(v.get("projected") for v in spec["volumes"])
    secret_name = next(v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v)
    secret = k.get("v1", "Secret", namespace, secret_name)
    assert len(secret["data"]["token"]) > 40
    owner = pod["metadata"]["ownerReferences"][0]
    sb = k.get(*SB, namespace, "sb1")
    assert owner["kind"] == "Sandbox" and owner["uid"] == sb["metadata"]["uid"] and owner["controller"]
    assert secret["metadata"]["ownerReferences"][0]["uid"] == sb["metadata"]["uid"]
    assert pod["metadata"]["labels"]["app"] == "sb1"

    wait_ready(k, namespace, "sb1", "True", "DependenciesReady")
    st = k.get(*SB, namespace, "sb1")["status"]
    pod = k.get("v1", "Pod", namespace, "sb1")
    assert st["podIPs"] == [pod["status"]["podIP"]]
    assert st["nodeName"] in NODES
    assert st["selector"].startswith("agents.x-k8s.io/sandbox-name-hash=")
    assert k.list("v1", "Pod", namespace, selector=st["selector"])[0]["metadata"]["name"] == "sb1"


def test_ready_follows_pod(cluster, namespace, controller):
    k = cluster.admin
    k.create(sandbox("sb2", namespace))
    wait_ready(k, namespace, "sb2", "True")
    pod = k.get("v1", "Pod", namespace, "sb2")
    conds = [dict(c, status="False") if c["type"] in ("Ready", "ContainersReady") else c
             for c in pod["status"]["conditions"]]
    # As a kubelet would report a failing readiness probe.
    k.patch("v1", "Pod", namespace, "sb2", {"status": {"conditions": conds}}, sub="status")
    wait_ready(k, namespace, "sb2", "False", "DependenciesNotReady")
    conds = [dict(c, status="True") for c in conds]
    k.patch("v1", "Pod", namespace, "sb2", {"status": {"conditions": conds}}, sub="status")
    wait_ready(k, namespace, "sb2", "True", "DependenciesReady")


def test_pod_never_ready(cluster, namespace, controller):
    k = cluster.admin
    sb = sandbox("slow", namespace)
    sb["spec"]["podTemplate"]["metadata"]["labels"]["sandboxd.test/never-ready"] = "true"
    k.create(sb)
    wait_until(lambda: k.find("v1", "Pod", namespace, "slow"), WAIT, what="pod")
    wait_until(lambda: "Pod is not Ready (phase Pending)" in
               (condition(k.get(*SB, namespace, "slow")) or {}).get("message", ""),
               WAIT, what="Ready=False with the pod's phase")
    c = condition(k.get(*SB, namespace, "slow"))
    assert c["status"] == "False" and c["reason"] == "DependenciesNotReady"


def test_service_when_asked(cluster, namespace, controller):
    k = cluster.admin
    k.create(sandbox("svc1", namespace, service=True))
    svc = wait_until(lambda: k.find("v1", "Service", namespace, "svc1"), WAIT, what="service")
    assert svc["spec"]["clusterIP"] == "None"
    pod = wait_until(lambda: k.find("v1", "Pod", namespace, "svc1"), WAIT, what="pod")
    for key, value in svc["spec"]["selector"].items():
        assert pod["metadata"]["labels"][key] == value
    wait_ready(k, namespace, "svc1", "True")
    st = k.get(*SB, namespace, "svc1")["status"]
    assert st["service"] == "svc1"
    assert st["serviceFQDN"] == f"svc1.{namespace}.svc.cluster.local"


def test_template_choices_win(cluster, namespace, controller):
    k = cluster.admin
    k.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
             "metadata": {"name": "kata"}, "handler": "kata"})
    k.create(sandbox("own", namespace, pod_spec={
        "runtimeClassName": "kata", "automountServiceAccountToken": True,
        "containers": [{"name": "main", "image": "busybox"}]}))
    pod = wait_until(lambda: k.find("v1", "Pod", namespace, "own"), WAIT, what="pod")
    assert pod["spec"]["runtimeClassName"] == "kata"
    assert pod["spec"]["automountServiceAccountToken"] is True
    # No command to wrap: sandboxd serves alone.
    assert pod["spec"]["containers"][0]["command"] == [
        "/.sandboxd/sandboxd", "--token-file=/var/run/sandboxd/token"]


def test_entrypoint_from_the_annotation(cluster, namespace, controller):
    """A main container without a command runs the entrypoint the pod template's annotation
    sandboxd.dev/entrypoint gives (registry lookups are off in this suite: test_entrypoint.py),
    with its args; a malformed one is refused as InvalidSpec."""
    k = cluster.admin
    main = {"name": "main", "image": "python:3.12", "args": ["-m", "http.server"]}
    obj = sandbox("entry", namespace, pod_spec={"containers": [main]})
    obj["spec"]["podTemplate"]["metadata"]["annotations"] = {
        "sandboxd.dev/entrypoint": '["python3"]'}
    k.create(obj)
    wait_ready(k, namespace, "entry", "True")
    cmd = k.get("v1", "Pod", namespace, "entry")["spec"]["containers"][0]["command"]
    assert cmd[cmd.index("--") + 1:] == ["python3", "-m", "http.server"]
    obj = sandbox("entrybad", namespace, pod_spec={"containers": [main]})
    obj["spec"]["podTemplate"]["metadata"]["annotations"] = {"sandboxd.dev/entrypoint": "python3"}
    k.create(obj)
    c = wait_ready(k, namespace, "entrybad", "False", "InvalidSpec")
    assert "sandboxd.dev/entrypoint" in c["message"]


def test_invalid_template_reported(cluster, namespace, controller):
    k = cluster.admin
    k.create(sandbox("clash", namespace, pod_spec={
        "containers": [{"name": "main", "image": "busybox", "command": ["sh"]}],
        "volumes": [{"name": "sandboxd-bin", "emptyDir": {}}]}))
    c = wait_ready(k, namespace, "clash", "False", "InvalidSpec")
    assert "sandboxd-bin" in c["message"]
    assert k.find("v1", "Pod", namespace, "clash") is None
    # The controller is still serving others.
    k.create(sandbox("fine", namespace))
    wait_ready(k, namespace, "fine", "True")
    assert controller.alive()


def test_suspend_and_resume(cluster, namespace, controller):
    k = cluster.admin
    k.create(sandbox("sus", namespace, service=True))
    wait_ready(k, namespace, "sus", "True")
    k.patch(*SB, namespace, "sus", {"spec": {"operatingMode": "Suspended"}})
    wait_ready(k, namespace, "sus", "False", "SandboxSuspended")
    wait_gone(k, "v1", "Pod", namespace, "sus")
    wait_gone(k, "v1", "Service", namespace, "sus")
    assert "podIPs" not in k.get(*SB, namespace, "sus")["status"]
    k.patch(*SB, namespace, "sus", {"spec": {"operatingMode": "Running"}})
    wait_ready(k, namespace, "sus", "True", "DependenciesReady")
    assert k.find("v1", "Pod", namespace, "sus")
    assert k.find("v1", "Service", namespace, "sus")


def soon(seconds):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_expiry_retain(cluster, namespace, controller):
    k = cluster.admin
    k.create(sandbox("exp", namespace, shutdownTime=soon(3), shutdownPolicy="Retain"))
    wait_until(lambda: k.find("v1", "Pod", namespace, "exp"), WAIT, what="pod before expiry")
    wait_ready(k, namespace, "exp", "False", "SandboxExpired")
    wait_gone(k, "v1", "Pod", namespace, "exp")
    assert k.find(*SB, namespace, "exp")


def test_expiry_delete(cluster, namespace, controller):
    k = cluster.admin
    k.create(sandbox("expd", namespace, shutdownTime=soon(3), shutdownPolicy="Delete"))
    wait_until(lambda: k.find("v1", "Pod", namespace, "expd"), WAIT, what="pod before expiry")
    wait_gone(k, *SB, namespace, "expd")
    wait_gone(k, "v1", "Pod", namespace, "expd")


def test_delete_cleans_up(cluster, namespace, controller):
    k = cluster.admin
    k.create(sandbox("gone", namespace, service=True))
    wait_ready(k, namespace, "gone", "True")
    pod = k.get("v1", "Pod", namespace, "gone")
    secret = next(v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v)
    k.delete(*SB, namespace, "gone")
    wait_gone(k, "v1", "Pod", namespace, "gone")
    wait_gone(k, "v1", "Service", namespace, "gone")
    wait_gone(k, "v1", "Secret", namespace, secret)
