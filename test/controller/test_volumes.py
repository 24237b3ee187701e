"""Volume claim templates against a real control plane with kube-controller-manager: a Sandbox's
claims are made as the reference makes them (name, labels, owner), its Pod mounts them, they bind
to PersistentVolumes, survive suspension and come back with the Pod, go with the Sandbox through
the garbage collector (and only through it), and a warm-pool sandbox has its claim before a claim
adopts it. Under kwok no container runs and nothing is mounted: what survives a suspension is
shown at the storage level, a hostPath volume's directory bound to the same claim throughout."""

import pytest

from conftest import wait_until
from kube import ApiError, Kube
from test_pool import CLAIM, EXT, claim, owned_by, pool, wait_claim_ready, wait_pool_ready
from test_sandbox import SB, WAIT, condition, sandbox, wait_gone, wait_ready

PVC = ("v1", "PersistentVolumeClaim")
PV = ("v1", "PersistentVolume")


def name_hash(name):
    """The reference's NameHash: FNV-1a, 32 bits, 8 hex digits."""
    h = 2166136261
    for b in name.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return f"{h:08x}"


def vct(name="workspace", size="1Gi", cls=None, labels=None):
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if cls is not None:
        spec["storageClassName"] = cls
    md = {"name": name, **({"labels": labels} if labels else {})}
    return {"metadata": md, "spec": spec}


def pod_spec(mount="workspace"):
    return {"containers": [{"name": "main", "image": "debian:12", "command": ["sleep", "inf"],
                            "volumeMounts": [{"name": mount, "mountPath": "/workspace"}]}]}


@pytest.fixture
def volumes(cluster, tmp_path):
    """Makes hostPath PersistentVolumes (a directory under tmp_path each), deleted at the end."""
    made = []

    def make(name, cls="", claim_ref=None, size="10Gi"):
        d = tmp_path / name
        d.mkdir()
        spec = {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain", "storageClassName": cls,
                "hostPath": {"path": str(d), "type": "Directory"}}
        if claim_ref:
            spec["claimRef"] = {"namespace": claim_ref[0], "name": claim_ref[1]}
        cluster.admin.create({"apiVersion": "v1", "kind": "PersistentVolume",
                              "metadata": {"name": name}, "spec": spec})
        made.append(name)
        return d

    yield make
    for n in made:
        cluster.admin.delete(*PV, None, n)


def wait_bound(k, ns, name, timeout=WAIT):
    def bound():
        pvc = k.find(*PVC, ns, name)
        return pvc if pvc and pvc.get("status", {}).get("phase") == "Bound" else None
    return wait_until(bound, timeout, what=f"claim {name} Bound")


def controller_of(obj):
    return next((r for r in obj["metadata"].get("ownerReferences", []) if r.get("controller")), None)


def test_claim_made_as_the_reference_mounted_and_bound(cluster, namespace, controller, volumes):
    k = cluster.admin
    volumes(f"{namespace}-ws", claim_ref=(namespace, "workspace-sb"))
    k.create(sandbox("sb", namespace, pod_spec=pod_spec(),
                     volumeClaimTemplates=[vct(labels={"team": "a"})]))
    pvc = wait_bound(k, namespace, "workspace-sb")
    sb = k.get(*SB, namespace, "sb")
    assert pvc["metadata"]["labels"] == {"team": "a",
                                         "agents.x-k8s.io/sandbox-name-hash": name_hash("sb")}
    ref = controller_of(pvc)
    assert (ref["kind"], ref["name"], ref["uid"]) == ("Sandbox", "sb", sb["metadata"]["uid"])
    assert pvc["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert pvc["spec"]["volumeName"] == f"{namespace}-ws"
    wait_ready(k, namespace, "sb", "True")
    pod = k.get("v1", "Pod", namespace, "sb")
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert vols["workspace"]["persistentVolumeClaim"] == {"claimName": "workspace-sb"}
    assert pod["spec"]["nodeName"]  # scheduled only once its claim was bound


def test_suspend_resume_keeps_the_claim_and_its_data(cluster, namespace, controller, volumes):
    """The same claim (same uid), bound to the same volume, before suspension and after resume;
    a file written into the volume's directory before suspension is there after. No container
    runs under kwok: the file is written on the host, where the hostPath volume lives."""
    k = cluster.admin
    d = volumes(f"{namespace}-ws", claim_ref=(namespace, "workspace-sus"))
    k.create(sandbox("sus", namespace, pod_spec=pod_spec(), volumeClaimTemplates=[vct()]))
    wait_ready(k, namespace, "sus", "True")
    before = wait_bound(k, namespace, "workspace-sus")
    (d / "notes.txt").write_text("written before suspension\n")
    k.patch(*SB, namespace, "sus", {"spec": {"operatingMode": "Suspended"}})
    wait_ready(k, namespace, "sus", "False", "SandboxSuspended")
    wait_gone(k, "v1", "Pod", namespace, "sus")
    during = k.get(*PVC, namespace, "workspace-sus")
    assert during["metadata"]["uid"] == before["metadata"]["uid"]
    assert "deletionTimestamp" not in during["metadata"]
    k.patch(*SB, namespace, "sus", {"spec": {"operatingMode": "Running"}})
    wait_ready(k, namespace, "sus", "True")
    after = wait_bound(k, namespace, "workspace-sus")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["spec"]["volumeName"] == f"{namespace}-ws"
    pod = k.get("v1", "Pod", namespace, "sus")
    assert {"name": "workspace", "persistentVolumeClaim": {"claimName": "workspace-sus"}} in \
        pod["spec"]["volumes"]
    pv = k.get(*PV, None, f"{namespace}-ws")
    assert pv["spec"]["hostPath"]["path"] == str(d)
    assert (d / "notes.txt").read_text() == "written before suspension\n"


def test_deleting_the_sandbox_garbage_collects_its_claim(cluster, namespace, controller):
    k = cluster.admin
    k.create(sandbox("gc", namespace, pod_spec=pod_spec(), volumeClaimTemplates=[vct()]))
    wait_until(lambda: k.find(*PVC, namespace, "workspace-gc"), WAIT, what="claim made")
    k.delete(*SB, namespace, "gc")
    wait_gone(k, *PVC, namespace, "workspace-gc", timeout=60)


def test_without_the_garbage_collector_the_claim_stays(cluster, namespace, controller):
    """The controller never deletes a claim: with kube-controller-manager stopped, the Sandbox's
    Pod goes (the controller removes it) and the claim stays; once the garbage collector runs
    again, it goes."""
    k = cluster.admin
    k.create(sandbox("nogc", namespace, pod_spec=pod_spec(), volumeClaimTemplates=[vct()]))
    wait_until(lambda: k.find("v1", "Pod", namespace, "nogc"), WAIT, what="pod made")
    uid = wait_until(lambda: k.find(*PVC, namespace, "workspace-nogc"), WAIT,
                     what="claim made")["metadata"]["uid"]
    cluster.stop_controller_manager()
    try:
        k.delete(*SB, namespace, "nogc")
        wait_gone(k, "v1", "Pod", namespace, "nogc")  # the controller has seen the Sandbox go
        pvc = k.get(*PVC, namespace, "workspace-nogc")
        assert pvc["metadata"]["uid"] == uid and "deletionTimestamp" not in pvc["metadata"]
    finally:
        cluster.restart_controller_manager()
    wait_gone(k, *PVC, namespace, "workspace-nogc", timeout=90)


def test_waiting_on_an_unbound_volume_is_said(cluster, namespace, controller, volumes):
    k = cluster.admin
    k.create(sandbox("wait", namespace, pod_spec=pod_spec(),
                     volumeClaimTemplates=[vct(cls=f"{namespace}-none")]))
    c = wait_ready(k, namespace, "wait", "False", "VolumeClaimNotBound")
    assert "workspace-wait" in c["message"] and "Pending" in c["message"]
    volumes(f"{namespace}-late", cls=f"{namespace}-none")
    wait_ready(k, namespace, "wait", "True", "DependenciesReady", timeout=60)


def template_with_volume(k, ns, cls, **spec):
    k.create({"apiVersion": EXT, "kind": "SandboxTemplate", "metadata": {"name": "tpl", "namespace": ns},
              "spec": {"podTemplate": {"spec": pod_spec()},
                       "volumeClaimTemplates": [vct(cls=cls)], **spec}})


def test_warm_sandbox_has_its_claim_and_keeps_it_when_adopted(cluster, namespace, controller,
                                                              volumes):
    k = cluster.admin
    cls = f"{namespace}-warm"
    for i in range(2):
        volumes(f"{namespace}-w{i}", cls=cls)
    template_with_volume(k, namespace, cls)
    pool(k, namespace, "wp", 1)
    wait_pool_ready(k, namespace, "wp", 1)
    warm = owned_by(k, namespace, "SandboxWarmPool", "wp")[0]
    name = warm["metadata"]["name"]
    before = wait_bound(k, namespace, f"workspace-{name}")
    assert controller_of(before)["uid"] == warm["metadata"]["uid"]
    claim(k, namespace, "c1", "wp")
    c = wait_claim_ready(k, namespace, "c1")
    assert c["status"]["sandbox"]["name"] == name  # adopted warm, not started cold
    after = k.get(*PVC, namespace, f"workspace-{name}")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["spec"]["volumeName"] == before["spec"]["volumeName"]
    assert controller_of(after)["uid"] == warm["metadata"]["uid"]
    pod = k.get("v1", "Pod", namespace, name)
    assert {"name": "workspace", "persistentVolumeClaim": {"claimName": f"workspace-{name}"}} in \
        pod["spec"]["volumes"]


def test_claim_waiting_on_an_unbound_volume_says_so(cluster, namespace, controller, volumes):
    k = cluster.admin
    cls = f"{namespace}-cold"
    template_with_volume(k, namespace, cls)
    pool(k, namespace, "wp", 0)
    claim(k, namespace, "c2", "wp")

    def waiting():
        cond = condition(k.get(*CLAIM, namespace, "c2"))
        return cond if cond and cond["reason"] == "VolumeClaimNotBound" else None
    cond = wait_until(waiting, WAIT, what="claim c2 VolumeClaimNotBound")
    assert cond["status"] == "False" and "workspace-c2" in cond["message"]
    volumes(f"{namespace}-c", cls=cls)
    wait_claim_ready(k, namespace, "c2", timeout=60)
    assert controller_of(k.get(*PVC, namespace, "workspace-c2"))["name"] == "c2"


def test_claim_volume_templates_follow_the_policy(cluster, namespace, controller):
    k = cluster.admin
    template_with_volume(k, namespace, "t")  # volumeClaimTemplatesPolicy: Disallowed (default)
    pool(k, namespace, "wp", 0)
    claim(k, namespace, "c3", "wp", volumeClaimTemplates=[vct("scratch")])

    def refused():
        cond = condition(k.get(*CLAIM, namespace, "c3"))
        return cond if cond and cond["reason"] == "VolumeClaimTemplatesError" else None
    cond = wait_until(refused, WAIT, what="claim c3 VolumeClaimTemplatesError")
    assert "Disallowed" in cond["message"]
    assert not owned_by(k, namespace, "SandboxClaim", "c3")


def test_existing_claim_adopted_only_with_the_reference_labels(cluster, namespace, controller):
    """A claim of the sandbox's name made beforehand, without a controller, is adopted when it
    carries the sandbox's label or agents.x-k8s.io/adoptable=true (the same object, now owned by
    the Sandbox); one without either label is left alone, the sandbox gets no Pod and says why
    (VolumeClaimConflict)."""
    k = cluster.admin
    pre = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "workspace-adopt", "namespace": namespace,
                        "labels": {"agents.x-k8s.io/sandbox-name-hash": name_hash("adopt")}},
           "spec": vct()["spec"]}
    uid = k.create(pre)["metadata"]["uid"]
    k.create(sandbox("adopt", namespace, pod_spec=pod_spec(), volumeClaimTemplates=[vct()]))
    sb_uid = k.get(*SB, namespace, "adopt")["metadata"]["uid"]
    pvc = wait_until(lambda: (lambda p: p if controller_of(p) else None)(
        k.get(*PVC, namespace, "workspace-adopt")), WAIT, what="claim adopted")
    assert pvc["metadata"]["uid"] == uid and controller_of(pvc)["uid"] == sb_uid
    wait_until(lambda: k.find("v1", "Pod", namespace, "adopt"), WAIT, what="pod made")

    # Only the pool authorization label: not in the controller's cache (which selects by the
    # sandbox label), found when its create is refused as existing, adopted and labelled.
    k.create(dict(pre, metadata={"name": "workspace-optin", "namespace": namespace,
                                 "labels": {"agents.x-k8s.io/adoptable": "true"}}))
    k.create(sandbox("optin", namespace, pod_spec=pod_spec(), volumeClaimTemplates=[vct()]))
    pvc = wait_until(lambda: (lambda p: p if controller_of(p) else None)(
        k.get(*PVC, namespace, "workspace-optin")), WAIT, what="opted-in claim adopted")
    assert controller_of(pvc)["name"] == "optin"
    assert pvc["metadata"]["labels"]["agents.x-k8s.io/sandbox-name-hash"] == name_hash("optin")

    k.create(dict(pre, metadata={"name": "workspace-foreign", "namespace": namespace}))
    k.create(sandbox("foreign", namespace, pod_spec=pod_spec(), volumeClaimTemplates=[vct()]))
    c = wait_ready(k, namespace, "foreign", "False", "VolumeClaimConflict")
    assert "workspace-foreign" in c["message"] and "agents.x-k8s.io/adoptable" in c["message"]
    assert controller_of(k.get(*PVC, namespace, "workspace-foreign")) is None
    assert k.find("v1", "Pod", namespace, "foreign") is None


def test_controller_may_make_claims_and_not_delete_them(cluster, namespace):
    """The controller's rights (the manifests' role, which it runs with): claims are listed,
    watched and made; deleting them is the garbage collector's."""
    ctrl = Kube("127.0.0.1", cluster.port, str(cluster.ca), cluster.tokens["controller"])
    ctrl.list(*PVC, namespace)
    made = ctrl.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                        "metadata": {"name": "rbac", "namespace": namespace}, "spec": vct()["spec"]})
    assert made["metadata"]["name"] == "rbac"
    with pytest.raises(ApiError) as e:
        ctrl.request("DELETE", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/rbac")
    assert e.value.status == 403
