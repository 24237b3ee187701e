"""The CRDs of controller/config against the real API server, as the reference's v0.5.6 defines
them: v1alpha1 served beside v1beta1 (deprecated, the same schema, stored as v1beta1), its
defaults (a pool's replicas, so /scale answers and kubectl scale works; a Sandbox's
shutdownPolicy), containers as a list keyed by name, volumeClaimTemplates immutable, and its
printer columns; the whole PodSpec, PersistentVolumeClaimSpec and NetworkPolicy rules typed (a
misspelt pod field refused at apply), as scripts/crdgen.py generates them from this API server's
OpenAPI. No controller runs: these are the API server's answers alone."""

import copy
import importlib.util
import os
import subprocess

import pytest
import yaml

from conftest import CONFIG, REPO, TOOLS, load_manifests
from kube import ApiError

SB = ("agents.x-k8s.io/v1beta1", "Sandbox")
TMPL = ("extensions.agents.x-k8s.io/v1beta1", "SandboxTemplate")
CLAIM = ("extensions.agents.x-k8s.io/v1beta1", "SandboxClaim")
POOL = ("extensions.agents.x-k8s.io/v1beta1", "SandboxWarmPool")
KINDS = {"Sandbox": "sandboxes", "SandboxTemplate": "sandboxtemplates",
         "SandboxClaim": "sandboxclaims", "SandboxWarmPool": "sandboxwarmpools"}
GROUPS = {"Sandbox": "agents.x-k8s.io"}


def alpha(api_version):
    return api_version.replace("v1beta1", "v1alpha1")


def pod_template(name, *containers):
    return {"metadata": {"labels": {"app": name}},
            "spec": {"containers": list(containers) or [{"name": "main", "image": "debian:12"}]}}


def obj(kind, name, ns, spec):
    return {"apiVersion": kind[0], "kind": kind[1], "metadata": {"name": name, "namespace": ns},
            "spec": spec}


def kubectl(cluster, *args, ok=True, input=None):
    k = TOOLS / "kubectl"
    if not os.access(k, os.X_OK):
        pytest.skip(f"kubectl not found at {k}: run scripts/k8s-tools.sh")
    p = subprocess.run([str(k), f"--kubeconfig={cluster.kubeconfigs['admin']}", *args],
                       capture_output=True, text=True, timeout=60, input=input)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


def crd(cluster, kind):
    name = f"{KINDS[kind]}.{GROUPS.get(kind, 'extensions.agents.x-k8s.io')}"
    return cluster.admin.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, name)


def test_v1alpha1_served_deprecated_stored_as_v1beta1(cluster, namespace):
    """An object of each kind written as v1alpha1 (the template and pool shaped as the reference's
    late-bind example) is accepted with a deprecation warning and read back as v1beta1."""
    k = cluster.admin
    objs = [
        obj(SB, "a-sb", namespace, {"podTemplate": pod_template("a-sb")}),
        obj(TMPL, "a-tmpl", namespace, {
            "networkPolicyManagement": "Managed",
            "networkPolicy": {"egress": [{"ports": [{"protocol": "UDP", "port": 53}]}]},
            "podTemplate": pod_template("a-tmpl")}),
        obj(POOL, "a-pool", namespace, {"replicas": 2, "sandboxTemplateRef": {"name": "a-tmpl"}}),
        obj(CLAIM, "a-claim", namespace, {"warmPoolRef": {"name": "a-pool"}}),
    ]
    for o in objs:
        kind = o["kind"]
        created = k.create(dict(o, apiVersion=alpha(o["apiVersion"])))
        assert created["apiVersion"] == alpha(o["apiVersion"])
        assert any(f"{alpha(o['apiVersion'])} {kind} is deprecated" in w for w in k.warnings), \
            (kind, k.warnings)
        beta = k.get(o["apiVersion"], kind, namespace, o["metadata"]["name"])
        assert beta["apiVersion"] == o["apiVersion"]
        for field, value in o["spec"].items():
            assert beta["spec"][field] == value, (kind, field)
        back = k.get(alpha(o["apiVersion"]), kind, namespace, o["metadata"]["name"])
        assert back["spec"] == beta["spec"]
        c = crd(cluster, kind)
        versions = {v["name"]: v for v in c["spec"]["versions"]}
        assert versions["v1beta1"]["storage"] and not versions["v1beta1"].get("deprecated")
        old = versions["v1alpha1"]
        assert old["served"] and not old["storage"] and old["deprecated"]
        assert old["schema"] == versions["v1beta1"]["schema"], kind
        assert c["status"]["storedVersions"] == ["v1beta1"]
    # The defaults of v1beta1 apply to v1alpha1 writes too.
    assert k.get(*SB, namespace, "a-sb")["spec"]["shutdownPolicy"] == "Retain"


def test_pool_replicas_default_scale_subresource(cluster, namespace):
    """A pool written without replicas has the reference's default, 1: GET /scale answers it and
    kubectl scale changes it."""
    k = cluster.admin
    k.create(obj(POOL, "p", namespace, {"sandboxTemplateRef": {"name": "t"}}))
    scale = k.request("GET", f"/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{namespace}"
                             "/sandboxwarmpools/p/scale")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 1
    assert k.get(*POOL, namespace, "p")["spec"]["replicas"] == 1
    out = kubectl(cluster, "-n", namespace, "scale", "sandboxwarmpool/p", "--replicas=3")
    assert "scaled" in out.stdout
    assert k.get(*POOL, namespace, "p")["spec"]["replicas"] == 3
    out = kubectl(cluster, "-n", namespace, "get", "sandboxwarmpool", "p",
                  "-o", "custom-columns=DESIRED:.spec.replicas", "--no-headers")
    assert out.stdout.split() == ["3"]


def test_printer_columns(cluster, namespace):
    """kubectl get shows the reference's columns for every kind."""
    k = cluster.admin
    k.create(obj(SB, "sb", namespace, {"podTemplate": pod_template("sb")}))
    k.create(obj(TMPL, "tmpl", namespace, {"podTemplate": pod_template("tmpl")}))
    k.create(obj(POOL, "pool", namespace, {"replicas": 2, "sandboxTemplateRef": {"name": "tmpl"}}))
    k.create(obj(CLAIM, "claim", namespace, {"warmPoolRef": {"name": "pool"}}))
    want = {"sandboxes": ["NAME", "READY", "REASON", "AGE"],
            "sandboxtemplates": ["NAME", "AGE"],
            "sandboxclaims": ["NAME", "READY", "SANDBOX", "REASON", "AGE"],
            "sandboxwarmpools": ["NAME", "READY", "DESIRED", "AGE"]}
    for plural, columns in want.items():
        out = kubectl(cluster, "-n", namespace, "get", plural)
        header = out.stdout.splitlines()[0]
        assert header.split() == columns, (plural, out.stdout)
    # The cells come from where the reference's do: a pool's desired and ready replicas, a
    # claim's sandbox and the reason of its Ready condition.
    k.patch(*POOL, namespace, "pool", {"status": {"replicas": 2, "readyReplicas": 1}}, sub="status")
    ready = {"type": "Ready", "status": "False", "reason": "SandboxNotReady", "message": "waiting",
             "lastTransitionTime": "2025-01-01T00:00:00Z"}
    k.patch(*CLAIM, namespace, "claim", {"status": {"conditions": [ready],
                                                    "sandbox": {"name": "sb"}}}, sub="status")
    row = kubectl(cluster, "-n", namespace, "get", "sandboxwarmpools", "--no-headers").stdout
    assert row.split()[:3] == ["pool", "1", "2"], row
    row = kubectl(cluster, "-n", namespace, "get", "sandboxclaims", "--no-headers").stdout
    assert row.split()[:4] == ["claim", "False", "sb", "SandboxNotReady"], row


def test_volume_claim_templates_immutable(cluster, namespace):
    """An update that changes, adds or removes a Sandbox's volumeClaimTemplates is refused with the
    reference's message; other fields still change."""
    k = cluster.admin
    vct = [{"metadata": {"name": "work"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]
    k.create(obj(SB, "with", namespace, {"podTemplate": pod_template("with"),
                                         "volumeClaimTemplates": vct}))
    k.create(obj(SB, "without", namespace, {"podTemplate": pod_template("without")}))
    bigger = [dict(vct[0], spec=dict(vct[0]["spec"], resources={"requests": {"storage": "2Gi"}}))]
    for name, patch in (("with", {"spec": {"volumeClaimTemplates": bigger}}),
                        ("with", {"spec": {"volumeClaimTemplates": None}}),
                        ("without", {"spec": {"volumeClaimTemplates": vct}})):
        with pytest.raises(ApiError) as e:
            k.patch(*SB, namespace, name, patch)
        assert e.value.status == 422, (name, patch)
        assert "volumeClaimTemplates is immutable" in str(e.value.body), e.value.body
    k.patch(*SB, namespace, "with", {"spec": {"shutdownPolicy": "Delete"}})
    got = k.get(*SB, namespace, "with")["spec"]
    assert got["shutdownPolicy"] == "Delete" and got["volumeClaimTemplates"] == vct


def test_reference_defaults_and_container_keys(cluster, namespace):
    """A Sandbox's shutdownPolicy defaults to Retain; containers are a list keyed by name in a
    Sandbox's and a template's pod spec: a container needs a name, two cannot share one."""
    k = cluster.admin
    got = k.create(obj(SB, "d", namespace, {"podTemplate": pod_template("d")}))
    assert got["spec"]["shutdownPolicy"] == "Retain"
    assert got["spec"]["operatingMode"] == "Running"
    two = ({"name": "main", "image": "debian:12"}, {"name": "main", "image": "alpine:3"})
    nameless = ({"image": "debian:12"},)
    for kind in (SB, TMPL):
        for i, containers in enumerate((two, nameless)):
            with pytest.raises(ApiError) as e:
                k.create(obj(kind, f"bad{i}", namespace, {"podTemplate": pod_template("x", *containers)}))
            assert e.value.status == 422, (kind, containers)
            assert "containers" in str(e.value.body), e.value.body
    c = crd(cluster, "SandboxTemplate")
    schema = c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    containers = schema["properties"]["spec"]["properties"]["podTemplate"]["properties"]["spec"][
        "properties"]["containers"]
    assert containers["x-kubernetes-list-type"] == "map"
    assert containers["x-kubernetes-list-map-keys"] == ["name"]


def test_kustomize_renders_one_schema_for_both_versions(cluster):
    """`kubectl apply -k controller/config` gets what the tests apply: kustomize expands the YAML
    anchors that give v1alpha1 the schema, columns and subresources of v1beta1; and the API
    server accepts it as kubectl sends it (client-side apply, server dry run)."""
    out = kubectl(cluster, "kustomize", str(CONFIG))
    rendered = {o["metadata"]["name"]: o for o in yaml.safe_load_all(out.stdout)
                if o and o["kind"] == "CustomResourceDefinition"}
    ours = {o["metadata"]["name"]: o for o in load_manifests()
            if o["kind"] == "CustomResourceDefinition"}
    assert rendered.keys() == ours.keys() and len(ours) == 4
    for name, o in rendered.items():
        assert o == ours[name], name
        alpha_, beta = sorted(o["spec"]["versions"], key=lambda v: v["name"])
        assert (alpha_["name"], beta["name"]) == ("v1alpha1", "v1beta1"), name
        for field in ("schema", "subresources", "additionalPrinterColumns"):
            assert alpha_.get(field) == beta.get(field), (name, field)
    # kubectl's client-side apply keeps the whole object in an annotation, which the API server
    # bounds (256 KiB of annotations): the generated CRDs, typed pod spec and all, must fit.
    out = kubectl(cluster, "apply", "-k", str(CONFIG), "--dry-run=server")
    for name in ours:
        assert f"customresourcedefinition.apiextensions.k8s.io/{name}" in out.stdout, out.stdout


def crdgen():
    spec = importlib.util.spec_from_file_location("crdgen", REPO / "scripts" / "crdgen.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_crds_current(cluster):
    """controller/config/crd is what scripts/crdgen.py makes of its sources and this API server's
    OpenAPI now (regenerate after editing a source or moving Kubernetes), and the Helm chart's
    crds/ are byte copies (deploy/helm/sync.sh)."""
    gen = crdgen()
    files = gen.generate(lambda path: cluster.admin.request("GET", path))
    assert sorted(files) == sorted(p.name for p in gen.OUTPUT.glob("*.yaml"))
    stale = [n for n, text in files.items() if (gen.OUTPUT / n).read_text() != text]
    assert not stale, f"run scripts/crdgen.py: {stale} differ from a fresh generation"
    chart = REPO / "deploy" / "helm" / "sandboxd" / "crds"
    for n in files:
        assert (chart / n).read_bytes() == (gen.OUTPUT / n).read_bytes(), \
            f"run deploy/helm/sync.sh: {n}"


def test_generated_schema_is_the_api_servers(cluster):
    """The pod spec of a Sandbox and a template is the API server's PodSpec field for field (the
    generator's resolution checked against the API server's own document, not against itself),
    with its list types and keys; the claim templates' spec is PersistentVolumeClaimSpec and a
    template's network policy rules NetworkPolicy's."""
    v3 = cluster.admin.request("GET", "/openapi/v3")["paths"]
    core = cluster.admin.request("GET", v3["api/v1"]["serverRelativeURL"])["components"]["schemas"]
    net = cluster.admin.request("GET", v3["apis/networking.k8s.io/v1"]["serverRelativeURL"])[
        "components"]["schemas"]
    spec = crd(cluster, "SandboxTemplate")["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
        "properties"]["spec"]["properties"]
    pod = spec["podTemplate"]["properties"]["spec"]
    want = core["io.k8s.api.core.v1.PodSpec"]
    assert sorted(pod["properties"]) == sorted(want["properties"])
    assert pod["required"] == ["containers"]
    container = pod["properties"]["containers"]["items"]
    assert sorted(container["properties"]) == sorted(
        core["io.k8s.api.core.v1.Container"]["properties"])
    for field in ("containers", "initContainers", "volumes"):
        assert pod["properties"][field]["x-kubernetes-list-type"] == "map"
        assert pod["properties"][field]["x-kubernetes-list-map-keys"] == ["name"]
    ports = container["properties"]["ports"]
    assert ports["x-kubernetes-list-map-keys"] == ["containerPort", "protocol"]
    assert ports["items"]["properties"]["protocol"]["default"] == "TCP"
    limits = container["properties"]["resources"]["properties"]["limits"]["additionalProperties"]
    assert limits["x-kubernetes-int-or-string"] is True
    probe = container["properties"]["livenessProbe"]["properties"]
    probe_port = probe["httpGet"]["properties"]["port"]
    assert probe_port["x-kubernetes-int-or-string"] is True
    assert "x-kubernetes-preserve-unknown-fields" not in pod and \
        "x-kubernetes-preserve-unknown-fields" not in container
    pvc = spec["volumeClaimTemplates"]["items"]["properties"]["spec"]
    assert sorted(pvc["properties"]) == sorted(
        core["io.k8s.api.core.v1.PersistentVolumeClaimSpec"]["properties"])
    for rule in ("Ingress", "Egress"):
        got = spec["networkPolicy"]["properties"][rule.lower()]["items"]
        want = net[f"io.k8s.api.networking.v1.NetworkPolicy{rule}Rule"]
        assert sorted(got["properties"]) == sorted(want["properties"])


def typo(cluster, namespace, kind, name, spec):
    """kubectl apply of the object as a user runs it: refused, the message returned."""
    o = obj(kind, name, namespace, spec)
    p = kubectl(cluster, "apply", "-f", "-", input=yaml.safe_dump(o), ok=False)
    assert p.returncode != 0, (name, p.stdout)
    assert cluster.admin.find(*kind, namespace, name) is None
    return p.stderr


def test_pod_field_typo_refused_at_apply(cluster, namespace):
    """A misspelt or mistyped field anywhere in a pod template, a claim template or a network
    policy rule is refused by kubectl apply, naming the field; before, the pod spec kept unknown
    fields and a typo surfaced later, as InvalidSpec or not at all."""
    good = {"name": "main", "image": "debian:12",
            "resources": {"limits": {"memory": "1Gi", "cpu": 1}}}
    cases = [
        (SB, {"containers": [dict(good, imagee="debian:12")]},
         'unknown field "spec.podTemplate.spec.containers[0].imagee"'),
        (SB, {"containers": [dict(good, resources={"limts": {"memory": "1Gi"}})]},
         'unknown field "spec.podTemplate.spec.containers[0].resources.limts"'),
        (TMPL, {"containers": [good], "securityContext": {"runAsUsr": 1000}},
         'unknown field "spec.podTemplate.spec.securityContext.runAsUsr"'),
        (TMPL, {"containers": [dict(good, ports=[{"containerPort": "http"}])]},
         "spec.podTemplate.spec.containers[0].ports[0].containerPort: Invalid value"),
        (SB, {"containers": [dict(good, resources={"limits": {"memory": "1 GB"}})]},
         "spec.podTemplate.spec.containers[0].resources.limits.memory: Invalid value"),
    ]
    for i, (kind, pod_spec, message) in enumerate(cases):
        err = typo(cluster, namespace, kind, f"typo{i}", {"podTemplate": {"spec": pod_spec}})
        assert message in err, (message, err)
    storage = {"requests": {"storage": "1Gi"}}
    vct = [{"metadata": {"name": "work"},
            "spec": {"accesModes": ["ReadWriteOnce"], "resources": storage}}]
    err = typo(cluster, namespace, SB, "typo-vct",
               {"podTemplate": pod_template("v"), "volumeClaimTemplates": vct})
    assert 'unknown field "spec.volumeClaimTemplates[0].spec.accesModes"' in err, err
    err = typo(cluster, namespace, TMPL, "typo-np",
               {"podTemplate": pod_template("n"),
                "networkPolicy": {"egress": [{"to": [{"podSelectr": {}}]}]}})
    assert 'unknown field "spec.networkPolicy.egress[0].to[0].podSelectr"' in err, err
    # The same objects spelt right are accepted, their values kept and the API server's defaults
    # (a port's protocol) filled in.
    ok = obj(SB, "ok", namespace, {"podTemplate": {"spec": {"containers": [
        dict(good, ports=[{"containerPort": 8000}])]}}, "volumeClaimTemplates": [
        dict(vct[0], spec={"accessModes": ["ReadWriteOnce"], "resources": storage})]})
    kubectl(cluster, "apply", "-f", "-", input=yaml.safe_dump(ok))
    got = cluster.admin.get(*SB, namespace, "ok")["spec"]
    main = got["podTemplate"]["spec"]["containers"][0]
    assert main["resources"] == good["resources"]
    assert main["ports"] == [{"containerPort": 8000, "protocol": "TCP"}]
    assert got["volumeClaimTemplates"][0]["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_v1alpha1_pod_spec_typed_too(cluster, namespace):
    """v1alpha1 shares the typed schema: a typo written against it is refused as well."""
    o = obj(SB, "alpha-typo", namespace,
            {"podTemplate": {"spec": {"containers": [{"name": "main", "imagee": "debian:12"}]}}})
    o["apiVersion"] = alpha(o["apiVersion"])
    with pytest.raises(ApiError) as e:
        cluster.admin.request("POST", f"/apis/agents.x-k8s.io/v1alpha1/namespaces/{namespace}"
                                      "/sandboxes?fieldValidation=Strict", o)
    assert e.value.status == 400
    assert 'unknown field "spec.podTemplate.spec.containers[0].imagee"' in str(e.value.body)
    fixed = copy.deepcopy(o)
    fixed["spec"]["podTemplate"]["spec"]["containers"][0] = {"name": "main", "image": "debian:12"}
    cluster.admin.create(fixed)
    assert cluster.admin.get(*SB, namespace, "alpha-typo")["spec"]["podTemplate"]["spec"][
        "containers"] == [{"name": "main", "image": "debian:12"}]


def test_v1alpha1_fields_of_the_conversion_webhook_refused(cluster, namespace):
    """What the reference's v1alpha1 has and v1beta1 does not needs its conversion webhook (a
    Sandbox's replicas, 0 to suspend, and its /scale; a claim's sandboxTemplateRef and warmpool
    policy), which we do not run: kubectl apply refuses such a manifest naming the field, rather
    than a Sandbox meant to be suspended starting."""
    sb = obj(SB, "alpha-replicas", namespace, {"replicas": 0, "podTemplate": pod_template("r")})
    claim = obj(CLAIM, "alpha-claim", namespace,
                {"sandboxTemplateRef": {"name": "t"}, "warmpool": "default"})
    for o, field in ((sb, "spec.replicas"), (claim, "spec.sandboxTemplateRef")):
        o["apiVersion"] = alpha(o["apiVersion"])
        p = kubectl(cluster, "apply", "-f", "-", input=yaml.safe_dump(o), ok=False)
        assert p.returncode != 0 and f'unknown field "{field}"' in p.stderr, (field, p.stderr)
        assert cluster.admin.find(o["apiVersion"], o["kind"], namespace,
                                  o["metadata"]["name"]) is None
