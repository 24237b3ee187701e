"""The reference's own examples, applied as a user would: every object of the four kinds in the
`examples/` of the pinned reference module (taken from the Go module cache, `go mod download`;
nothing is copied into this repository), rendered with kustomize where the example is a
kustomization and with its ${VARIABLES} filled in where it is a template, each example in a
namespace of its own with the ServiceAccounts, RuntimeClasses, node labels and hostPath
PersistentVolumes it needs. Each Sandbox and SandboxClaim must become Ready, each pool must have
its replicas Ready, and every claim of theirs must be Bound; the few that cannot are listed below
with the reason, and the test fails if one of those starts to work (so the list stays true).

The CRDs come from the fixture `example_crds` (here: the ones `controller/config` installs, which
the session's control plane applied). A suite that installs them another way (the Helm chart)
reuses this test with its own install step: its module imports `test_reference_examples` and
defines a fixture `example_crds` that installs the CRDs and returns the names installed.

A summary table (one line per object: kind, name, outcome, and whether the main container keeps
the image's entrypoint) is printed; run with `-s` to see it."""

import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from conftest import REPO, TOOLS, Controller, wait_until
from kube import ApiError

KINDS = ("SandboxTemplate", "SandboxWarmPool", "Sandbox", "SandboxClaim")  # order of creation
# Objects of other kinds an example's pods need to be scheduled, created before ours (Secrets
# and ConfigMaps are not: kwok runs no container, so nothing reads them).
NEEDED = ("PersistentVolumeClaim",)
CORE, EXT = "agents.x-k8s.io", "extensions.agents.x-k8s.io"
WAIT = 90

# What does not become Ready here, by (example path, kind, name): the outcome it must show
# instead, and why. The test fails when one of them does become Ready (or shows something else):
# then it belongs out of this list.
CANNOT = {
    ("hermes-agents-as-a-service", "SandboxClaim", "hermes-mallory"):
        ("EnvVarsInjectionRejected", "refused by design: the example shows a claim whose env "
         "its template's envVarsInjectionPolicy rejects"),
}


def reference_version():
    text = (REPO / "scripts" / "reference.sh").read_text()
    mod = re.search(r"^REFERENCE_MODULE=(\S+)", text, re.M).group(1)
    ver = re.search(r"^REFERENCE_VERSION=(\S+)", text, re.M).group(1)
    return mod, ver


@pytest.fixture(scope="module")
def examples_dir():
    """The reference module's examples/, from the Go module cache."""
    if not shutil.which("go"):
        pytest.skip("go not found: the reference's examples come from the Go module cache")
    mod, ver = reference_version()
    r = subprocess.run(["go", "mod", "download", "-json", f"{mod}@{ver}"], capture_output=True,
                       text=True, timeout=300)
    if r.returncode != 0:
        pytest.skip(f"go mod download {mod}@{ver} failed: {r.stderr.strip()[:300]}")
    d = Path(json.loads(r.stdout)["Dir"]) / "examples"
    if not d.is_dir():
        pytest.skip(f"{d} not found")
    return d


@pytest.fixture(scope="module")
def example_crds(cluster):
    """The CRDs of the four kinds, installed: here the session's control plane applied
    controller/config already. Returns the names of the installed CRDs."""
    crds = cluster.admin.list("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    return {c["metadata"]["name"] for c in crds}


def kubectl():
    k = TOOLS / "kubectl"
    if not os.access(k, os.X_OK):
        pytest.skip(f"kubectl not found at {k}: run scripts/k8s-tools.sh")
    return str(k)


def envsubst(text):
    """${NAME} as a user would fill it in: a lower-case name of the variable."""
    return re.sub(r"\$\{([A-Z_][A-Z0-9_]*)\}", lambda m: m.group(1).lower().replace("_", "-"), text)


def ours(objs):
    """The objects of the four kinds, and those of NEEDED."""
    return [o for o in objs if isinstance(o, dict) and (
        (o.get("kind") in KINDS and str(o.get("apiVersion", "")).split("/")[0] in (CORE, EXT)) or
        (o.get("kind") in NEEDED and o.get("apiVersion") == "v1"))]


def units(root):
    """[(label, [objects])]: each kustomization that no other includes, rendered by kubectl
    kustomize; each other YAML file, its directory's files grouped so that no two objects of a
    group share kind and name (a file that repeats a name, as a variant of another, goes to the
    next group)."""
    out, consumed = [], set()
    kusts = sorted(p.parent for p in root.rglob("kustomization.yaml"))
    included = set()
    for k in kusts:
        spec = yaml.safe_load((k / "kustomization.yaml").read_text()) or {}
        for res in spec.get("resources") or []:
            p = (k / res).resolve()
            if p.is_dir():
                included.add(p)
    for k in kusts:
        consumed.update(p.resolve() for p in k.rglob("*.yaml"))
        if k.resolve() in included:
            continue
        r = subprocess.run([kubectl(), "kustomize", str(k)], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, f"kustomize {k}: {r.stderr}"
        out.append((str(k.relative_to(root)), ours(yaml.safe_load_all(r.stdout))))
    by_dir = {}
    for f in sorted(root.rglob("*.y*ml")):
        if f.resolve() in consumed:
            continue
        objs = ours(yaml.safe_load_all(envsubst(f.read_text())))
        if any(o["kind"] in KINDS for o in objs):
            by_dir.setdefault(f.parent, []).append(objs)
    for d, files in by_dir.items():
        groups = []
        for objs in files:
            keys = {(o["kind"], o["metadata"]["name"]) for o in objs}
            g = next((g for g in groups if not keys & g[0]), None)
            if g is None:
                g = (set(), [])
                groups.append(g)
            g[0].update(keys)
            g[1].extend(objs)
        for i, (_, objs) in enumerate(groups):
            out.append((str(d.relative_to(root)) + (f"#{i + 1}" if i else ""), objs))
    return out


def pod_spec_of(obj):
    spec = obj.get("spec") or {}
    return ((spec.get("podTemplate") or {}).get("spec")) or {}


def claim_templates(obj):
    return (obj.get("spec") or {}).get("volumeClaimTemplates") or []


class Example:
    """One unit in a namespace of its own: what it needs, applied; its objects, checked."""

    def __init__(self, cluster, label, objs, tmp):
        self.k, self.label, self.objs, self.tmp = cluster.admin, label, objs, tmp
        self.ns = f"ex-{uuid.uuid4().hex[:8]}"
        self.pvs, self.nodes, self.rcs = [], [], []

    def prepare(self):
        k, ns = self.k, self.ns
        k.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        sas = {"default"} | {pod_spec_of(o).get("serviceAccountName") for o in self.objs} - {None}
        for sa in sas:
            k.create({"apiVersion": "v1", "kind": "ServiceAccount",
                      "metadata": {"name": sa, "namespace": ns}})
        for o in self.objs:
            o["metadata"]["namespace"] = ns
            ps = pod_spec_of(o)
            for c in ps.get("containers") or []:
                # An image left to the user ("image: # REPLACE_WITH_YOUR_IMAGE"), as they would
                # fill it in; no image is pulled here.
                c["image"] = c.get("image") or "registry.example/your-image:latest"
            rc = ps.get("runtimeClassName")
            if rc and not k.find("node.k8s.io/v1", "RuntimeClass", None, rc):
                k.create({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                          "metadata": {"name": rc}, "handler": rc})
                self.rcs.append(rc)
            if ps.get("nodeSelector"):
                self.node(ps["nodeSelector"])
        self.volumes()

    def node(self, labels):
        name = f"{self.ns}-n{len(self.nodes)}"
        self.k.create({"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": name, "labels": {"type": "kwok", **labels},
                                    "annotations": {"kwok.x-k8s.io/node": "fake"}}})
        self.nodes.append(name)

    def volumes(self):
        """hostPath volumes for every claim the unit may make: of each template of a Sandbox or
        template, as many as it has sandboxes (a pool's replicas and refills, and claims), in the
        class and access modes it asks for."""
        pools = [o for o in self.objs if o["kind"] == "SandboxWarmPool"]
        claims = [o for o in self.objs if o["kind"] == "SandboxClaim"]
        per = 2 + sum(int((p.get("spec") or {}).get("replicas", 1)) for p in pools) + 2 * len(claims)
        wants = [t for o in self.objs for t in claim_templates(o)] + \
            [o for o in self.objs if o["kind"] == "PersistentVolumeClaim"]
        for i, t in enumerate(wants):
            spec = t.get("spec") or {}
            modes = spec.get("accessModes") or ["ReadWriteOnce"]
            modes = ["ReadWriteOncePod"] if "ReadWriteOncePod" in modes else \
                ["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"]
            for j in range(per):
                name = f"{self.ns}-v{i}-{j}"
                d = self.tmp / name
                d.mkdir(parents=True)
                self.k.create({"apiVersion": "v1", "kind": "PersistentVolume",
                               "metadata": {"name": name},
                               "spec": {"capacity": {"storage": "4Ti"}, "accessModes": modes,
                                        "storageClassName": spec.get("storageClassName") or "",
                                        "persistentVolumeReclaimPolicy": "Retain",
                                        "hostPath": {"path": str(d), "type": "Directory"}}})
                self.pvs.append(name)
        for t in (t for c in claims for t in claim_templates(c)):
            spec = t.get("spec") or {}
            for j in range(2):
                name = f"{self.ns}-c{len(self.pvs)}-{j}"
                d = self.tmp / name
                d.mkdir(parents=True)
                self.k.create({"apiVersion": "v1", "kind": "PersistentVolume",
                               "metadata": {"name": name},
                               "spec": {"capacity": {"storage": "4Ti"},
                                        "accessModes": ["ReadWriteOnce", "ReadOnlyMany",
                                                        "ReadWriteMany"],
                                        "storageClassName": spec.get("storageClassName") or "",
                                        "persistentVolumeReclaimPolicy": "Retain",
                                        "hostPath": {"path": str(d), "type": "Directory"}}})
                self.pvs.append(name)

    def apply(self):
        """Creates the objects, templates first; returns {(kind, name): error} of the refused."""
        refused = {}
        for kind in NEEDED + KINDS:
            for o in (o for o in self.objs if o["kind"] == kind):
                try:
                    self.k.create(o)
                except ApiError as e:
                    refused[(kind, o["metadata"]["name"])] = f"HTTP {e.status}: {str(e.body)[:200]}"
        return refused

    def cleanup(self):
        for n in self.nodes:
            self.k.delete("v1", "Node", None, n)
        for pv in self.pvs:
            self.k.delete("v1", "PersistentVolume", None, pv)


def api_of(kind):
    return f"{CORE}/v1beta1" if kind == "Sandbox" else f"{EXT}/v1beta1"


def ready_cond(obj):
    return next((c for c in (obj or {}).get("status", {}).get("conditions", [])
                 if c["type"] == "Ready"), None)


def claims_bound(k, ns, sandbox):
    """(all bound, [names]) of the claims of a Sandbox's templates."""
    names = [f'{t["metadata"]["name"]}-{sandbox["metadata"]["name"]}'
             for t in claim_templates(sandbox)]
    phases = [(k.find("v1", "PersistentVolumeClaim", ns, n) or {}).get("status", {}).get("phase")
              for n in names]
    return all(p == "Bound" for p in phases), names


def outcome(ex, kind, name):
    """None when the object is where it should be (Ready, volumes bound), else why not."""
    k, ns = ex.k, ex.ns
    obj = k.find(api_of(kind), kind, ns, name)
    if obj is None:
        return "gone"
    if kind == "SandboxTemplate":
        return None
    if kind == "SandboxWarmPool":
        want = int(obj["spec"].get("replicas", 1))
        st = obj.get("status") or {}
        if st.get("readyReplicas", 0) != want:
            return f"{st.get('readyReplicas', 0)}/{want} ready"
        sbs = [s for s in k.list(f"{CORE}/v1beta1", "Sandbox", ns)
               if any(r.get("kind") == "SandboxWarmPool" and r.get("name") == name
                      for r in s["metadata"].get("ownerReferences", []))]
        unbound = [n for s in sbs for ok, names in [claims_bound(k, ns, s)] if not ok for n in names]
        return f"unbound {unbound}" if unbound else None
    cond = ready_cond(obj)
    if not cond or cond["status"] != "True":
        return f"{(cond or {}).get('reason')}: {(cond or {}).get('message')}"
    sb = obj if kind == "Sandbox" else k.find(f"{CORE}/v1beta1", "Sandbox", ns,
                                              obj["status"]["sandbox"]["name"])
    ok, names = claims_bound(k, ns, sb)
    return None if ok else f"claims not bound: {names}"


def workload(k, ns, kind, obj):
    """How the main container's program reaches the Pod: "command" when the injected command
    runs the template's command and args after "--", "image ENTRYPOINT" when the template names
    none (sandboxd then serves alone: the image's entrypoint is not resolved yet, issue 14 item
    2), "-" when there is no Pod to look at; anything else is a fault."""
    if kind in ("SandboxClaim", "SandboxWarmPool"):
        return "-"  # the pod template is their template's
    c0 = (pod_spec_of(obj).get("containers") or [{}])[0]
    if not c0.get("command"):
        return "image ENTRYPOINT"
    pod = k.find("v1", "Pod", ns, obj["metadata"]["name"]) if kind == "Sandbox" else None
    if pod is None:
        return "command"
    cmd = pod["spec"]["containers"][0]["command"]
    want = c0["command"] + (c0.get("args") or [])
    return "command" if "--" in cmd and cmd[cmd.index("--") + 1:] == want else f"wrong: {cmd}"


def test_reference_examples(cluster, example_crds, examples_dir, tmp_path):
    want = {f"sandboxes.{CORE}", f"sandboxtemplates.{EXT}", f"sandboxclaims.{EXT}",
            f"sandboxwarmpools.{EXT}"}
    assert want <= example_crds
    rows, failures = [], []
    for label, objs in units(examples_dir):
        ex = Example(cluster, label, objs, tmp_path / re.sub(r"[^a-z0-9]+", "-", label))
        ex.prepare()
        ctrl = Controller(cluster, ex.ns, name="examples")
        try:
            ctrl.port()  # up, its signals handled: a unit done at once stops it cleanly
            refused = ex.apply()
            for o in (o for o in objs if o["kind"] in KINDS):
                key = (o["kind"], o["metadata"]["name"])
                expected, _ = CANNOT.get((label.split("#")[0], *key), (None, None))
                why = refused.get(key)
                if why is None:
                    def settled():
                        got = outcome(ex, *key)
                        return got is None or (expected is not None and expected in got)
                    try:
                        wait_until(settled, WAIT, interval=0.2, what=f"{label} {key}")
                    except pytest.fail.Exception:
                        pass  # told below, with the others
                    why = outcome(ex, *key)
                how = workload(ex.k, ex.ns, o["kind"], o)
                rows.append((label, *key, why or "Ready", how))
                if why and not (expected and expected in why) or not why and expected:
                    failures.append(f"{label} {key}: {why or 'Ready'} (listed: {expected})")
                if how.startswith("wrong"):
                    failures.append(f"{label} {key}: injected command {how}")
        finally:
            rc = ctrl.stop()
            ex.cleanup()
        assert rc == 0, f"{label}: the controller exited {rc}:\n{ctrl.tail()}"
    width = max(len(r[0]) for r in rows)
    print(f"\n{len(rows)} objects of the four kinds in the reference's examples")
    for r in rows:
        print(f"{r[0]:<{width}}  {r[1]:<16} {r[2]:<36} {r[4]:<16} {r[3]}")
    print("main container without a command (the image's entrypoint, not resolved yet): "
          f"{sum(r[4] == 'image ENTRYPOINT' for r in rows)}")
    assert not failures, "\n".join(failures)
