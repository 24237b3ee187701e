"""The Helm chart (deploy/helm/sandboxd) with a real helm against the real control plane: lint,
the rendered objects validated by the API server (server-side dry run, strict fields), the
values schema refusing typos, an install into a namespace that enforces the restricted Pod
Security Standard (a Deployment whose pod kube-controller-manager creates and kwok runs), our
controller run with the token of the chart's service account (so the chart's RBAC is all it
has) reconciling a Sandbox, a warm pool and a claim, an upgrade that rolls the Deployment and
leaves user objects untouched, a rollback, and an uninstall that keeps the CRDs and user
objects. The chart's CRDs and roles are controller/config's (deploy/helm/sync.sh copies them).

Needs helm in SANDBOXD_TOOLS (scripts/k8s-tools.sh builds it).
"""

import base64
import http.client
import json
import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from conftest import (CONFIG, REPO, RUNTIME_CLASS, TOOLS, Proc, controller_bin, established,
                      free_port, load_manifests, wait_until, write_kubeconfig)
from kube import ApiError

CHART = REPO / "deploy" / "helm" / "sandboxd"
SB = ("agents.x-k8s.io/v1beta1", "Sandbox")
EXT = "extensions.agents.x-k8s.io/v1beta1"
DEPLOY = ("apps/v1", "Deployment")
WAIT = 60
SA = "sandboxd-controller"
ROUTER_CONFIG = REPO / "router" / "config"
# Metric names the PrometheusRule's alerts read; the running controller must expose each.
ALERT_METRICS = ("sandboxd_controller_leader", "sandboxd_controller_claim_ready_seconds_bucket",
                 "sandboxd_controller_api_throttled_total",
                 "sandboxd_controller_watch_lag_seconds_bucket")


def helm_bin():
    h = TOOLS / "helm"
    if not os.access(h, os.X_OK):
        pytest.skip(f"helm not found in {TOOLS}: run scripts/k8s-tools.sh")
    return h


@pytest.fixture(scope="module")
def helm(cluster, tmp_path_factory):
    """helm(*args, check=True) against the test cluster as its admin; helm's own files in a
    directory of the module's."""
    h = helm_bin()
    home = tmp_path_factory.mktemp("helm")
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfigs["admin"]),
               HELM_CACHE_HOME=str(home / "cache"), HELM_CONFIG_HOME=str(home / "config"),
               HELM_DATA_HOME=str(home / "data"))

    def run(*args, check=True):
        p = subprocess.run([str(h), *args], env=env, capture_output=True, text=True, timeout=180)
        if check:
            assert p.returncode == 0, f"helm {' '.join(args)}:\n{p.stdout}\n{p.stderr}"
        return p
    return run


def template(*sets, values=None):
    """The chart rendered by helm template (no cluster), as a list of objects."""
    args = [str(helm_bin()), "template", "rel", str(CHART)]
    for s in sets:
        args += ["--set", s]
    if values:
        args += ["--values", str(values)]
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [o for o in yaml.safe_load_all(p.stdout) if o]


def refused(*sets):
    p = subprocess.run([str(helm_bin()), "template", "rel", str(CHART),
                        *[a for s in sets for a in ("--set", s)]],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0, f"{sets} rendered:\n{p.stdout[:400]}"
    return p.stderr


def find(objs, kind, name=None):
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def config_rules(kind):
    docs = [o for o in yaml.safe_load_all((CONFIG / "rbac" / "role.yaml").read_text()) if o]
    return [o for o in docs if o["kind"] == kind][0]["rules"]


def test_chart_copies_are_controller_configs():
    """One source: crds/ and files/rbac/role.yaml are byte for byte controller/config's."""
    ours = {p.name: p.read_bytes() for p in (CONFIG / "crd").glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    hint = "run deploy/helm/sync.sh"
    assert sorted(chart) == sorted(ours), hint
    for name, data in ours.items():
        assert chart[name] == data, f"crds/{name} differs from controller/config: {hint}"
    assert (CHART / "files/rbac/role.yaml").read_bytes() == \
        (CONFIG / "rbac/role.yaml").read_bytes(), hint
    assert (CHART / "files/rbac/router-role.yaml").read_bytes() == \
        (ROUTER_CONFIG / "rbac/role.yaml").read_bytes(), hint
    assert (CHART / "files/rbac/router-sandbox-token.yaml").read_bytes() == \
        (ROUTER_CONFIG / "rbac/authz-sandbox-token.yaml").read_bytes(), hint
    assert (CHART / "files/rbac/router-e2b.yaml").read_bytes() == \
        (ROUTER_CONFIG / "rbac/e2b.yaml").read_bytes(), hint


def test_chart_grants_what_the_manifests_grant():
    objs = template()
    assert find(objs, "ClusterRole")["rules"] == config_rules("ClusterRole")
    assert find(objs, "Role")["rules"] == config_rules("Role")
    binding = find(objs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == find(objs, "ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SA,
                                    "namespace": "sandboxd-system"}]


def test_packaged_chart_renders_the_same(tmp_path):
    """helm package keeps what the chart is made of (crds/, files/, the schema): the archive
    renders as the directory does and still refuses a typo."""
    p = subprocess.run([str(helm_bin()), "package", str(CHART), "--destination", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    tgz = next(tmp_path.glob("sandboxd-*.tgz"))
    run = [str(helm_bin()), "template", "rel", "--include-crds"]
    a = subprocess.run(run + [str(CHART)], capture_output=True, text=True, timeout=60)
    b = subprocess.run(run + [str(tgz)], capture_output=True, text=True, timeout=60)
    assert a.returncode == b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout
    assert a.stdout.count("kind: CustomResourceDefinition") == 4
    bad = subprocess.run(run + [str(tgz), "--set", "controller.kubeApiQPS=5"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0 and "kubeApiQPS" in bad.stderr


def test_default_namespace_enforces_restricted():
    """By default the chart makes its namespace, labelled to enforce the restricted standard,
    and puts every namespaced object there; the Lease's Role follows leaderElectionNamespace."""
    objs = template()
    ns = find(objs, "Namespace")
    assert ns["metadata"]["name"] == "sandboxd-system"
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert {o["metadata"].get("namespace") for o in objs if o["kind"] not in
            ("Namespace", "ClusterRole", "ClusterRoleBinding")} == {"sandboxd-system"}
    objs = template("controller.leaderElectionNamespace=leases")
    assert find(objs, "Role")["metadata"]["namespace"] == "leases"
    assert find(objs, "RoleBinding")["metadata"]["namespace"] == "leases"
    assert find(objs, "RoleBinding")["subjects"][0]["namespace"] == "sandboxd-system"
    args = find(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--leader-election-namespace")] == \
        ["--leader-election-namespace=leases"]


def test_lint_is_clean():
    p = subprocess.run([str(helm_bin()), "lint", "--strict", str(CHART)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[WARNING]" not in p.stdout and "[ERROR]" not in p.stdout, p.stdout
    assert p.stderr == "", p.stderr


def test_values_typos_refused():
    """values.schema.json: an unknown key anywhere, a wrong type or value is refused."""
    assert "kubeApiQPS" in refused("controller.kubeApiQPS=5")
    assert "replicas" in refused("replicas=2")
    assert "kubeApiBurst" in refused("controller.kubeApiBurst=many")
    assert "logFormat" in refused("controller.logFormat=xml")
    assert "sandboxWarmPoolReadinessGracePeriod" in refused(
        "controller.sandboxWarmPoolReadinessGracePeriod=5 minutes")
    assert "podDisruptionBudget" in refused("podDisruptionBudget.maxUnavailble=1")
    # The reference's flags that ours lack are refused, not silently dropped.
    assert "enableWarmPoolEviction" in refused("controller.enableWarmPoolEviction=true")
    assert "replicas" in refused("router.replicas=3")
    assert "wakeTimeout" in refused("router.wakeTimeout=a minute")
    # A mirror is host[:port][/path-prefix]: no scheme, nothing that would split the flag.
    assert "registryMirrors" in refused("controller.registryMirrors.docker\\.io[0]=https://m.example")
    assert "registryMirrors" in refused("controller.registryMirrors.docker\\.io[0]=m.example=x")
    assert "registryMirrors" in refused("controller.registryMirrors.docker\\.io=m.example")
    assert "insecureRegistries" in refused("controller.insecureRegistries[0]=a.example\\,b.example")


def test_values_become_flags_the_controller_takes(tmp_path):
    """Every flag value the chart maps, set, renders as the flag; the controller parses them
    all (--help after them, so it exits at once)."""
    sets = {"kubeApiQps": 20.5, "kubeApiBurst": 40, "kubeApiTimeout": "10s",
            "apiConnections": 4, "sandboxConcurrentWorkers": 16,
            "sandboxClaimConcurrentWorkers": 12, "sandboxWarmPoolMaxBatchSize": 50,
            "sandboxWarmPoolReadinessGracePeriod": "2m",
            "sandboxWarmPoolUnschedulableRecheckInterval": "30s",
            "sandboxWarmPoolMaxRefillRate": 5, "sandboxWarmPoolReplenishDelay": "250ms",
            "sandboxWriteBehindWindow": "100ms", "watchNamespace": "team-a",
            "defaultRuntimeClass": "gvisor", "sandboxdImage": "registry.example/injector:1",
            "sandboxdProbe": "grpc", "sandboxdGrpcPort": 19090, "sandboxdRestPort": 18080,
            "leaderElect": False, "leaderElectionId": "other", "clusterDomain": "corp.local",
            "logLevel": "debug", "logFormat": "text",
            "registryMirrors": {"docker.io": ["mirror.example/hub", "m2.example:5000"],
                                "ghcr.io": ["mirror.example/ghcr/"]},
            "insecureRegistries": ["m2.example:5000"],
            "extraArgs": ["--sandbox-write-behind-window=200ms"]}
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"controller": sets}))
    objs = template(values=values)
    args = find(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    for flag in ("--kube-api-qps=20.5", "--kube-api-burst=40", "--namespace=team-a",
                 "--sandbox-warm-pool-readiness-grace-period=2m", "--sandboxd-probe=grpc",
                 "--leader-elect=false", "--sandboxd-image=registry.example/injector:1",
                 "--default-runtime-class=gvisor", "--sandbox-write-behind-window=200ms",
                 "--registry-mirror=docker.io=mirror.example/hub,docker.io=m2.example:5000,"
                 "ghcr.io=mirror.example/ghcr/",
                 "--insecure-registries=m2.example:5000"):
        assert flag in args, args
    assert len(args) == len(sets) + 2, args  # + the Lease's namespace, the metrics address
    run = subprocess.run([controller_bin(), *args, "--help"], capture_output=True, text=True,
                         timeout=30)
    assert run.returncode == 0 and run.stdout.startswith("usage: sandboxd-controller"), \
        run.stdout + run.stderr
    # Left out, a flag is not passed and the controller's default holds.
    args = find(template(), "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith(("--kube-api-qps", "--namespace", "--default-runtime",
                                                 "--registry-mirror", "--insecure-registries"))]


def test_monitoring_rendered_only_when_enabled():
    assert not [o for o in template() if o["kind"] in ("ServiceMonitor", "PrometheusRule")]
    objs = template("metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true",
                    "metrics.serviceMonitor.additionalLabels.release=prom",
                    "metrics.prometheusRule.claimReadyP90Seconds=3")
    svc, sm = find(objs, "Service"), find(objs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["metadata"]["namespace"] == svc["metadata"]["namespace"]
    sel = sm["spec"]["selector"]["matchLabels"]
    assert sel.items() <= svc["metadata"]["labels"].items()
    assert [e["port"] for e in sm["spec"]["endpoints"]] == [p["name"] for p in svc["spec"]["ports"]]
    rule = find(objs, "PrometheusRule")
    rules = rule["spec"]["groups"][0]["rules"]
    assert [r["alert"] for r in rules] == ["SandboxdControllerNotLeading", "SandboxdControllerClaimSlow",
                                           "SandboxdControllerThrottled", "SandboxdControllerWatchLag"]
    for r, metric in zip(rules, ALERT_METRICS):
        assert metric + "{" in r["expr"], r["expr"]
        assert 'service="sandboxd-controller"' in r["expr"]
    assert "> 3" in rules[1]["expr"]


def test_monitoring_objects_pass_server_side_validation(cluster, namespace):
    """The ServiceMonitor and PrometheusRule against prometheus-operator's CRDs (generated from
    its Go types by scripts/k8s-tools.sh), applied to this API server for the check."""
    crds = sorted((TOOLS / "crds").glob("monitoring.coreos.com_*.yaml"))
    if len(crds) != 2:
        pytest.skip(f"no prometheus-operator CRDs in {TOOLS / 'crds'}: run scripts/k8s-tools.sh")
    for f in crds:
        cluster.admin.apply(yaml.safe_load(f.read_text()))
    for crd in ("servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com"):
        wait_until(lambda: established(cluster, crd), 30, what=f"CRD {crd} established")
    objs = [o for o in template("namespace.create=false", f"namespace.name={namespace}",
                                "metrics.serviceMonitor.enabled=true",
                                "metrics.serviceMonitor.scrapeTimeout=10s",
                                "metrics.prometheusRule.enabled=true")
            if o["kind"] in ("ServiceMonitor", "PrometheusRule")]
    assert len(objs) == 2
    p = subprocess.run([str(TOOLS / "kubectl"), f"--kubeconfig={cluster.kubeconfigs['admin']}",
                        "apply", "--dry-run=server", "--validate=strict", "-f", "-"],
                       input=yaml.safe_dump_all(objs), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("(server dry run)") == 2, p.stdout
    # The schema holds: a misspelt field of ours would be refused.
    bad = json.loads(json.dumps(find(objs, "ServiceMonitor")))
    bad["spec"]["endpoints"][0]["intervall"] = "5s"
    p = subprocess.run([str(TOOLS / "kubectl"), f"--kubeconfig={cluster.kubeconfigs['admin']}",
                        "apply", "--dry-run=server", "--validate=strict", "-f", "-"],
                       input=yaml.safe_dump(bad), capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "intervall" in p.stderr, p.stdout + p.stderr


def test_rendered_objects_pass_server_side_validation(cluster, namespace):
    """Every object the chart renders, optional ones on (not the monitoring ones: their CRDs
    are not on this API server), through kubectl apply --dry-run=server --validate=strict."""
    objs = template("namespace.create=false", f"namespace.name={namespace}",
                    "exampleTemplate.enabled=true", f"exampleTemplate.namespace={namespace}",
                    "podDisruptionBudget.minAvailable=1", "podAnnotations.a=b", "podLabels.team=x",
                    "imagePullSecrets[0].name=regcred", "nodeSelector.type=kwok",
                    "tolerations[0].operator=Exists", "router.enabled=true",
                    "router.authzMode=sandbox-token", "router.e2b.enabled=true",
                    f"router.e2b.apiKeys.e2b_k={namespace}")
    assert {o["kind"] for o in objs} >= {"Deployment", "Service", "ServiceAccount", "ClusterRole",
                                         "ClusterRoleBinding", "Role", "RoleBinding",
                                         "PodDisruptionBudget", "SandboxTemplate", "Secret"}
    p = subprocess.run([str(TOOLS / "kubectl"), f"--kubeconfig={cluster.kubeconfigs['admin']}",
                        "apply", "--dry-run=server", "--validate=strict", "-f", "-"],
                       input=yaml.safe_dump_all(objs), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("(server dry run)") == len(objs), p.stdout


def restricted_namespace(cluster):
    ns = f"h-{uuid.uuid4().hex[:8]}"
    cluster.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": ns, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    return ns


def pod_of(template_spec, ns, name):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": template_spec}


def test_restricted_namespace_refuses_pod_without_the_security_context(cluster):
    """The chart's pod template is admitted where the restricted standard is enforced; the same
    template without its security contexts is refused, so the install test below proves
    something."""
    ns = restricted_namespace(cluster)
    spec = find(template(), "Deployment")["spec"]["template"]["spec"]
    k = cluster.admin
    k.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA, "namespace": ns}})
    k.request("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", pod_of(spec, ns, "ok"))
    for drop in ("pod", "container"):
        bad = json.loads(json.dumps(spec))
        if drop == "pod":
            del bad["securityContext"]
            del bad["containers"][0]["securityContext"]["runAsNonRoot"]
            del bad["containers"][0]["securityContext"]["seccompProfile"]
        else:
            del bad["containers"][0]["securityContext"]
        with pytest.raises(ApiError) as e:
            k.request("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", pod_of(bad, ns, "bad"))
        assert e.value.status == 403 and 'violates PodSecurity "restricted' in str(e.value), e.value


# The workload controllers a Deployment needs, which the cluster's kube-controller-manager
# (conftest.KCM_CONTROLLERS: garbage collection and volumes) does not run.
WORKLOAD_CONTROLLERS = ("deployment-controller", "replicaset-controller", "disruption-controller")


def test_kustomize_deployment_admitted_under_restricted(cluster):
    """The other way to install (kubectl apply -k controller/config): its namespace enforces
    the restricted standard too, and its Deployment's pod template is admitted there."""
    objs = load_manifests()
    ns = [o for o in objs if o["kind"] == "Namespace"][0]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    spec = [o for o in objs if o["kind"] == "Deployment"][0]["spec"]["template"]["spec"]
    cluster.admin.request("POST", f"/api/v1/namespaces/{ns['metadata']['name']}/pods?dryRun=All",
                          pod_of(spec, ns["metadata"]["name"], "kustomize"))


@pytest.fixture(scope="module")
def workload_controllers(cluster):
    """A second kube-controller-manager for this module, running only the controllers that make
    a Deployment's ReplicaSets and pods and a PodDisruptionBudget's status; the cluster's own
    collects the garbage (an uninstalled Deployment's ReplicaSets and pods)."""
    p = Proc("kube-controller-manager-workloads", [
        str(TOOLS / "kube-controller-manager"), f"--kubeconfig={cluster.kubeconfigs['kcm']}",
        f"--controllers={','.join(WORKLOAD_CONTROLLERS)}", "--leader-elect=false",
        "--secure-port=0", "--use-service-account-credentials=false", "--v=0"], cluster.dir)
    yield p
    p.stop()


def image_controller():
    """The image's controller (sandboxd-controller-static) where the build has one, else the
    controller of the build (a sanitizer build has no static one)."""
    return os.environ.get("SANDBOXD_CONTROLLER_STATIC_BIN") or controller_bin()


def sa_kubeconfig(cluster, ns, path, sa=SA):
    """A kubeconfig with a token of the chart's service account (TokenRequest API). The server
    is named `localhost`: the static controller resolves it without NSS (c-ares, /etc/hosts)."""
    tr = cluster.admin.request(
        "POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 3600}})
    return write_kubeconfig(path, f"https://localhost:{cluster.port}", cluster.ca,
                            tr["status"]["token"])


def controller_args(cluster, ns):
    d = cluster.admin.get(*DEPLOY, ns, "sandboxd-controller")
    return d["spec"]["template"]["spec"]["containers"][0]["args"]


def run_as_chart(cluster, ns, kubeconfig, name):
    """The image's controller with the Deployment's own arguments, as its service account (what
    the pod would run: kwok runs no container)."""
    argv = [image_controller(), *controller_args(cluster, ns), f"--kubeconfig={kubeconfig}",
            "--metrics-bind-address=127.0.0.1:0",
            # The template's image (python:3.12) has no registry here to look its entrypoint up.
            "--image-entrypoint-lookup=false"]
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    return Proc(name, argv, cluster.dir, env=env)


def condition(obj, type_="Ready"):
    for c in (obj or {}).get("status", {}).get("conditions", []):
        if c["type"] == type_:
            return c
    return None


def ready(obj):
    c = condition(obj)
    return c is not None and c["status"] == "True"


def metrics(proc):
    """The controller's /metrics, as text."""
    m = wait_until(lambda: re.search(r"metrics on port (\d+)", proc.log.read_text(errors="replace")),
                   10, what="controller start-up line")
    conn = http.client.HTTPConnection("127.0.0.1", int(m.group(1)), timeout=10)
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def rollout(cluster, ns, replicas):
    """The Deployment's pods once rolled out: `replicas` Running pods of its newest ReplicaSet,
    none of another. Returns that ReplicaSet's pod-template-hash."""
    k = cluster.admin

    def done():
        d = k.get(*DEPLOY, ns, "sandboxd-controller")
        st = d.get("status", {})
        if st.get("observedGeneration") != d["metadata"]["generation"] or \
                st.get("updatedReplicas") != replicas or st.get("readyReplicas") != replicas or \
                st.get("replicas") != replicas:
            return None
        pods = [p for p in k.list("v1", "Pod", ns, "app.kubernetes.io/name=sandboxd-controller")
                if not p["metadata"].get("deletionTimestamp")]
        hashes = {p["metadata"]["labels"]["pod-template-hash"] for p in pods}
        if len(pods) != replicas or len(hashes) != 1 or \
                any(p.get("status", {}).get("phase") != "Running" for p in pods):
            return None
        return hashes.pop()
    return wait_until(done, WAIT, interval=0.2, what=f"a rollout to {replicas} pods")


def snapshot(cluster, ns):
    """uid, resourceVersion and generation of every user object of the namespace."""
    out = {}
    for api, kind in (SB, (EXT, "SandboxClaim"), (EXT, "SandboxWarmPool"), (EXT, "SandboxTemplate")):
        for o in cluster.admin.list(api, kind, ns):
            md = o["metadata"]
            out[(kind, md["name"])] = (md["uid"], md["resourceVersion"], md.get("generation"))
    return out


def test_install_upgrade_rollback_uninstall(cluster, namespace, helm, workload_controllers, tmp_path):
    k = cluster.admin
    ns = restricted_namespace(cluster)
    base = ["--namespace", ns, "--set", "namespace.create=false", "--set", "namespace.name=",
            "--set", "image.repository=localhost/sandboxd-controller",
            "--set", f"controller.watchNamespace={namespace}",
            "--set", f"controller.defaultRuntimeClass={RUNTIME_CLASS}",
            "--set", "controller.sandboxdImage=sandboxd-injector:test",
            "--wait", "--timeout", f"{WAIT}s"]
    helm("install", "rel", str(CHART), *base)

    # The pod kube-controller-manager made passed the restricted standard.
    first_hash = rollout(cluster, ns, 1)
    pod = k.list("v1", "Pod", ns, "app.kubernetes.io/name=sandboxd-controller")[0]
    assert pod["spec"]["serviceAccountName"] == SA
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    sc = pod["spec"]["containers"][0]["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"]["drop"] == ["ALL"]
    assert sc["allowPrivilegeEscalation"] is False
    for crd in ("sandboxes.agents.x-k8s.io", "sandboxclaims.extensions.agents.x-k8s.io"):
        assert k.find("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, crd)

    # Our controller with the chart's RBAC alone: a Sandbox, a warm pool, a claim from it.
    kubeconfig = sa_kubeconfig(cluster, ns, tmp_path / "sa.kubeconfig")
    ctl = run_as_chart(cluster, ns, kubeconfig, f"helm-controller-{ns}")
    try:
        k.create({"apiVersion": SB[0], "kind": SB[1], "metadata": {"name": "sb", "namespace": namespace},
                  "spec": {"podTemplate": {"spec": {"containers": [
                      {"name": "main", "image": "debian:12", "command": ["sleep", "inf"]}]}}}})
        k.create({"apiVersion": EXT, "kind": "SandboxTemplate",
                  "metadata": {"name": "tpl", "namespace": namespace},
                  "spec": {"podTemplate": {"spec": {"containers": [
                      {"name": "main", "image": "python:3.12"}]}}}})
        k.create({"apiVersion": EXT, "kind": "SandboxWarmPool", "metadata": {"name": "pool", "namespace": namespace},
                  "spec": {"replicas": 2, "sandboxTemplateRef": {"name": "tpl"}}})
        wait_until(lambda: ready(k.get(*SB, namespace, "sb")), WAIT, what="the Sandbox Ready")
        pod = k.get("v1", "Pod", namespace, "sb")
        assert pod["spec"]["runtimeClassName"] == RUNTIME_CLASS
        assert pod["spec"]["initContainers"][0]["image"] == "sandboxd-injector:test"
        wait_until(lambda: k.get(EXT, "SandboxWarmPool", namespace, "pool").get("status", {})
                   .get("readyReplicas") == 2, WAIT, what="the pool's two sandboxes Ready")
        k.create({"apiVersion": EXT, "kind": "SandboxClaim", "metadata": {"name": "c", "namespace": namespace},
                  "spec": {"warmPoolRef": {"name": "pool"}}})
        wait_until(lambda: ready(k.get(EXT, "SandboxClaim", namespace, "c")), WAIT, what="the claim Ready")
        body = metrics(ctl)
        for m in ALERT_METRICS:
            assert m in body, f"{m} (read by the PrometheusRule) not in /metrics"
        assert "sandboxd_controller_leader 1" in body
        assert k.find("coordination.k8s.io/v1", "Lease", ns, "sandboxd-controller")
        # The pool refills what the claim took: then nothing is left to do.
        wait_until(lambda: len(k.list(*SB, namespace)) == 4 and
                   k.get(EXT, "SandboxWarmPool", namespace, "pool")["status"].get("readyReplicas") == 2,
                   WAIT, what="the pool's refill")
    finally:
        rc = ctl.stop()
        print(f"--- {ctl.name} log tail ---\n{ctl.tail()}")
    assert rc == 0, ctl.tail()
    before = snapshot(cluster, namespace)
    assert len(before) == 7, before  # 4 Sandboxes, the claim, the pool, the template

    # Upgrade: two replicas and a flag; a new ReplicaSet rolls out; user objects untouched.
    helm("upgrade", "rel", str(CHART), *base, "--set", "replicaCount=2",
         "--set", "controller.kubeApiQps=20")
    second_hash = rollout(cluster, ns, 2)
    assert second_hash != first_hash
    assert "--kube-api-qps=20" in controller_args(cluster, ns)
    assert len(k.list("apps/v1", "ReplicaSet", ns)) == 2
    assert snapshot(cluster, namespace) == before

    # The upgraded arguments run too, as the service account, and the claim stays as it was.
    ctl = run_as_chart(cluster, ns, kubeconfig, f"helm-controller2-{ns}")
    try:
        wait_until(lambda: "sandboxd_controller_leader 1" in metrics(ctl), WAIT,
                   what="the upgraded controller leading")
        assert ready(k.get(EXT, "SandboxClaim", namespace, "c"))
    finally:
        assert ctl.stop() == 0, ctl.tail()

    # Rollback to the first revision: one replica, the first pod template again.
    helm("rollback", "rel", "1", "--namespace", ns, "--wait", "--timeout", f"{WAIT}s")
    assert rollout(cluster, ns, 1) == first_hash
    assert "--kube-api-qps=20" not in controller_args(cluster, ns)
    history = json.loads(helm("history", "rel", "--namespace", ns, "--output", "json").stdout)
    assert [h["revision"] for h in history] == [1, 2, 3]
    assert history[-1]["description"] == "Rollback to 1"

    # Uninstall: the chart's objects go, the CRDs and the user objects stay.
    cluster_role = f"sandboxd-controller-{ns}-rel"
    helm("uninstall", "rel", "--namespace", ns, "--wait", "--timeout", f"{WAIT}s")
    gone = [DEPLOY + (ns, "sandboxd-controller"), ("v1", "Service", ns, "sandboxd-controller"),
            ("v1", "ServiceAccount", ns, SA),
            ("rbac.authorization.k8s.io/v1", "Role", ns, "sandboxd-controller-leader-election"),
            ("rbac.authorization.k8s.io/v1", "RoleBinding", ns, "sandboxd-controller-leader-election"),
            ("rbac.authorization.k8s.io/v1", "ClusterRole", None, cluster_role),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", None, cluster_role),
            ("policy/v1", "PodDisruptionBudget", ns, "sandboxd-controller")]
    for obj in gone:
        assert k.find(*obj) is None, obj
    wait_until(lambda: not k.list("v1", "Pod", ns, "app.kubernetes.io/name=sandboxd-controller"),
               WAIT, what="the controller's pods garbage-collected")
    for crd in ("sandboxes.agents.x-k8s.io", "sandboxtemplates.extensions.agents.x-k8s.io",
                "sandboxclaims.extensions.agents.x-k8s.io", "sandboxwarmpools.extensions.agents.x-k8s.io"):
        assert k.find("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, crd)
    after = snapshot(cluster, namespace)
    assert {key: v[0] for key, v in after.items()} == {key: v[0] for key, v in before.items()}


def test_values_typo_refused_by_install(cluster, helm):
    """A typo fails helm install itself, before anything reaches the cluster."""
    ns = restricted_namespace(cluster)
    p = helm("install", "typo", str(CHART), "--namespace", ns, "--set", "namespace.create=false",
             "--set", "controller.sandboxConcurentWorkers=4", check=False)
    assert p.returncode != 0 and "sandboxConcurentWorkers" in p.stderr, p.stderr
    assert helm("status", "typo", "--namespace", ns, check=False).returncode != 0
    assert not cluster.admin.list(*DEPLOY, ns)


def router_bin(static=False):
    b = (static and os.environ.get("SANDBOXD_ROUTER_STATIC_BIN")) or \
        os.environ.get("SANDBOXD_ROUTER_BIN")
    if not b or not os.access(b, os.X_OK):
        pytest.skip("SANDBOXD_ROUTER_BIN is not set to the built sandboxd-router")
    return b


def test_router_rendered_when_enabled_as_router_config():
    """router.enabled: router/config's objects (its role's rules byte for byte), one Service
    port, the values as the router's flags, which it parses; off by default."""
    assert not [o for o in template() if "sandboxd-router" in o["metadata"]["name"]]
    objs = template("router.enabled=true", "router.cacheNamespace=team-a",
                    "router.wakeTimeout=90s", "router.clusterDomain=corp.local",
                    "router.extraArgs[0]=--grpc-threads=8")
    dep = find(objs, "Deployment", "sandboxd-router")
    spec = dep["spec"]["template"]["spec"]
    args = spec["containers"][0]["args"]
    for flag in ("--cache-enabled", "--cache-namespace=team-a", "--wake-timeout=90s",
                 "--cluster-domain=corp.local", "--grpc-threads=8", "--http-bind-address=:8080",
                 "--health-probe-bind-address=:8081", "--metrics-bind-address=:9090"):
        assert flag in args, args
    run = subprocess.run([router_bin(), *args, "--help"], capture_output=True, text=True,
                         timeout=30)
    assert run.returncode == 0 and run.stdout.startswith("usage: sandboxd-router"), \
        run.stdout + run.stderr
    assert spec["serviceAccountName"] == "sandboxd-router"
    assert spec["securityContext"] == find(template(), "Deployment")["spec"]["template"]["spec"][
        "securityContext"]
    name = "sandboxd-router-sandboxd-system-rel"
    rules = [o for o in yaml.safe_load_all((ROUTER_CONFIG / "rbac/role.yaml").read_text())
             if o][0]["rules"]
    assert find(objs, "ClusterRole", name)["rules"] == rules
    assert find(objs, "ClusterRoleBinding", name)["subjects"] == [
        {"kind": "ServiceAccount", "name": "sandboxd-router", "namespace": "sandboxd-system"}]
    svc = find(objs, "Service", "sandboxd-router")
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(8080, "http")]
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    pdb = find(objs, "PodDisruptionBudget", "sandboxd-router")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    # The controller's objects select none of the router's pods.
    ctl = find(objs, "Service", "sandboxd-controller")["spec"]["selector"]
    assert not ctl.items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    # Cache off: no flag, no token mounted.
    spec = find(template("router.enabled=true", "router.cacheEnabled=false"), "Deployment",
                "sandboxd-router")["spec"]["template"]["spec"]
    assert "--cache-enabled" not in spec["containers"][0]["args"]
    assert spec["automountServiceAccountToken"] is False


def router_rbac_of(objs):
    return {(o["kind"], o["metadata"]["name"]): o for o in objs
            if o["kind"].startswith("ClusterRole") and "sandboxd-router" in o["metadata"]["name"]}


def test_router_authz_modes_bring_their_rights():
    """router.authzMode: the flag, and the rights the mode needs as router/config/rbac's
    authz-*.yaml grant them: tokenreview binds system:auth-delegator, sandbox-token may get
    Secrets; scoped-token mounts its key's Secret, and without one is refused."""
    name = "sandboxd-router-sandboxd-system-rel"
    base = router_rbac_of(template("router.enabled=true"))
    assert set(base) == {("ClusterRole", name), ("ClusterRoleBinding", name)}
    objs = template("router.enabled=true", "router.authzMode=tokenreview")
    rbac = router_rbac_of(objs)
    assert rbac[("ClusterRoleBinding", f"{name}-auth-delegator")]["roleRef"]["name"] == \
        "system:auth-delegator"
    args = find(objs, "Deployment", "sandboxd-router")["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert "--authz-mode=tokenreview" in args
    rbac = router_rbac_of(template("router.enabled=true", "router.authzMode=sandbox-token"))
    want = [o for o in yaml.safe_load_all(
        (ROUTER_CONFIG / "rbac/authz-sandbox-token.yaml").read_text()) if o][0]["rules"]
    assert rbac[("ClusterRole", f"{name}-sandbox-token")]["rules"] == want
    assert rbac[("ClusterRoleBinding", f"{name}-sandbox-token")]["subjects"][0]["name"] == \
        "sandboxd-router"
    assert "scopedTokenSecret" in refused("router.enabled=true", "router.authzMode=scoped-token")
    spec = find(template("router.enabled=true", "router.authzMode=scoped-token",
                         "router.scopedTokenSecret.name=router-key"), "Deployment",
                "sandboxd-router")["spec"]["template"]["spec"]
    assert spec["volumes"] == [{"name": "scoped-token", "secret": {"secretName": "router-key"}}]
    mount = spec["containers"][0]["volumeMounts"][0]
    assert "--authz-scoped-token-secret-file=" + mount["mountPath"] + "/secret" in \
        spec["containers"][0]["args"]
    run = subprocess.run([router_bin(), *spec["containers"][0]["args"], "--help"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    assert "authzMode" in refused("router.enabled=true", "router.authzMode=open")


def test_router_e2b_brings_its_flags_rights_and_keys(tmp_path):
    """router.e2b: off by default; on, the router's E2B flags (which it parses), the rights of
    router/config/rbac/e2b.yaml, and the API keys' Secret made from apiKeys (key -> namespace),
    or none when existingSecret names one; a namespace that is not a DNS label refused."""
    name = "sandboxd-router-sandboxd-system-rel"
    objs = template("router.enabled=true")
    assert not [o for o in objs if o["kind"] == "Secret" or name + "-e2b" in o["metadata"]["name"]]
    values = tmp_path / "v.yaml"
    values.write_text(yaml.safe_dump({"router": {"enabled": True, "e2b": {
        "enabled": True, "domain": "e2b.example.com", "createTimeout": "90s",
        "apiKeys": {"e2b_team.a-key": "team-a", "e2b_other": "team-b"}}}}))
    objs = template(values=values)
    args = find(objs, "Deployment", "sandboxd-router")["spec"]["template"]["spec"][
        "containers"][0]["args"]
    for flag in ("--e2b-api", "--e2b-domain=e2b.example.com", "--e2b-create-timeout=90s",
                 "--e2b-api-keys-secret=sandboxd-system/rel-e2b-api-keys"):
        assert flag in args, args
    run = subprocess.run([router_bin(), *args, "--help"], capture_output=True, text=True,
                         timeout=30)
    assert run.returncode == 0, run.stderr
    rbac = router_rbac_of(objs)
    want = [o for o in yaml.safe_load_all((ROUTER_CONFIG / "rbac/e2b.yaml").read_text())
            if o][0]["rules"]
    assert rbac[("ClusterRole", f"{name}-e2b")]["rules"] == want
    assert rbac[("ClusterRoleBinding", f"{name}-e2b")]["subjects"][0]["name"] == "sandboxd-router"
    sec = find(objs, "Secret", "rel-e2b-api-keys")
    assert {k: base64.b64decode(v).decode() for k, v in sec["data"].items()} == {
        "e2b_team.a-key": "team-a", "e2b_other": "team-b"}
    objs = template("router.enabled=true", "router.e2b.enabled=true",
                    "router.e2b.existingSecret=my-keys")
    assert not [o for o in objs if o["kind"] == "Secret"]
    assert "--e2b-api-keys-secret=sandboxd-system/my-keys" in find(
        objs, "Deployment", "sandboxd-router")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "apiKeys" in refused("router.enabled=true", "router.e2b.enabled=true",
                                "router.e2b.apiKeys.k=Not_A_Namespace")
    assert "e2b" in refused("router.enabled=true", "router.e2b.enable=true")


def test_router_runs_with_the_charts_rights(cluster, namespace, tmp_path):
    """The image's router (the static one where the build has it) with the Deployment's
    arguments and a token of the chart's router service account: its cache lists Pods and
    Sandboxes of every namespace with exactly the chart's RBAC, so it turns ready."""
    objs = template("namespace.create=false", f"namespace.name={namespace}",
                    "router.enabled=true")
    for o in objs:
        if "sandboxd-router" in o["metadata"]["name"] and o["kind"] in (
                "ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
            cluster.admin.apply(o)
    kubeconfig = sa_kubeconfig(cluster, namespace, tmp_path / "router.kubeconfig",
                               sa="sandboxd-router")
    args = find(objs, "Deployment", "sandboxd-router")["spec"]["template"]["spec"][
        "containers"][0]["args"]
    probe = free_port()
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    p = Proc(f"router-chart-{namespace}", [
        router_bin(static=True), *args, "--http-bind-address=127.0.0.1:0",
        f"--health-probe-bind-address=127.0.0.1:{probe}", "--metrics-bind-address=",
        f"--kubeconfig={kubeconfig}"], cluster.dir, env=env)
    try:
        def ready():
            assert p.alive(), p.tail()
            conn = http.client.HTTPConnection("127.0.0.1", probe, timeout=5)
            try:
                conn.request("GET", "/readyz")
                return conn.getresponse().status == 200
            finally:
                conn.close()
        wait_until(ready, 60, what="the chart's router ready")
    finally:
        assert p.stop() == 0, p.tail()
