"""The reference's own examples, applied as a user would: every object of the four kinds in the
`examples/` of the pinned reference module (taken from the Go module cache, `go mod download`;
nothing is copied into this repository), rendered with kustomize where the example is a
kustomization and with its ${VARIABLES} filled in where it is a template, each example in a
namespace of its own with the ServiceAccounts, RuntimeClasses, node labels and hostPath
PersistentVolumes it needs. Each Sandbox and SandboxClaim must become Ready, each pool must have
its replicas Ready, and every claim of theirs must be Bound; the few that cannot are listed below
with the reason, and the test fails if one of those starts to work (so the list stays true).

The controller looks up the entrypoint of a main container that gives no command, as it does in a
cluster. The examples' images (docker.io, ghcr.io, ...) are out of reach from here, so it runs
with a registry mirror (--registry-mirror) for every registry host the examples name, all
pointing at one `distribution` registry on loopback under a path prefix per host (oci.py), and
the test pushes there a stand-in for each image those containers name: an image of the same
name with an entrypoint and cmd of its own. What is shown is the mechanism (each such Pod runs
sandboxd, then "--", then its image's entrypoint and the container's args or else the image's
cmd, looked up by the reference's name through the mirror), not what the real images run.

The CRDs come from the fixture `example_crds` (here: the ones `controller/config` installs, which
the session's control plane applied). A suite that installs them another way (the Helm chart)
reuses this test with its own install step: its module imports `test_reference_examples` and
`examples_mirror` and defines a fixture `example_crds` that installs the CRDs and returns the
names installed.

A summary table (one line per object: kind, name, outcome, and how the main container's program
reaches the Pod) is printed; run with `-s` to see it."""

import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

import oci
from conftest import REPO, TOOLS, Controller, wait_until
from kube import ApiError

KINDS = ("SandboxTemplate", "SandboxWarmPool", "Sandbox", "SandboxClaim")  # order of creation
# Objects of other kinds an example's pods need to be scheduled, created before ours (Secrets
# and ConfigMaps are not: kwok runs no container, so nothing reads them).
NEEDED = ("PersistentVolumeClaim",)
CORE, EXT = "agents.x-k8s.io", "extensions.agents.x-k8s.io"
WAIT = 90
SANDBOXD = "/.sandboxd/sandboxd"  # where the injected init container puts sandboxd

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


def image_ref(image):
    """(registry, repository, tag, digest) of an image reference as the runtimes (and the
    controller's imageref.c) read it: docker.io without a host, library/ for a one-part name
    there, latest without tag or digest."""
    name, _, digest = image.partition("@")
    tag = ""
    if name.rfind(":") > name.rfind("/"):
        name, _, tag = name.rpartition(":")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        host, path = first, rest
    else:
        host, path = "docker.io", name
    if host in ("index.docker.io", "registry-1.docker.io"):
        host = "docker.io"
    if host == "docker.io" and "/" not in path:
        path = f"library/{path}"
    return host, path, tag or ("" if digest else "latest"), digest


class Mirror:
    """One registry on loopback standing in for every registry host the examples name: host h's
    repository r is <h's prefix>/r there (a prefix per host: repositories of different hosts
    never meet). Holds a stand-in image for each reference given to seed()."""

    def __init__(self, d):
        self.reg = oci.Registry(d, "examples-mirror").start()
        self.crane = oci.Crane(d)
        self.hosts, self.images = set(), {}

    @staticmethod
    def prefix(host):
        return re.sub(r"[^a-z0-9.-]+", "-", host.lower()).strip(".-")

    def at_mirror(self, image):
        host, path, tag, digest = image_ref(image)
        assert not digest, f"{image}: a stand-in cannot have the digest of the real image"
        return f"{self.reg.host}/{self.prefix(host)}/{path}:{tag}"

    def seed(self, image):
        """Pushes a stand-in for image (once) with an entrypoint and cmd of its own; returns
        them."""
        if image not in self.images:
            n = len(self.images)
            want = ([f"/stand-in/{n}/entrypoint", "--for", image], [f"cmd-{n}"])
            self.crane.image(self.at_mirror(image), entrypoint=want[0], cmd=want[1])
            self.images[image] = want
        return self.images[image]

    def flags(self):
        mirrors = ",".join(f"{h}={self.reg.host}/{self.prefix(h)}" for h in sorted(self.hosts))
        return ["--image-entrypoint-lookup=true", f"--insecure-registries={self.reg.host}",
                f"--registry-mirror={mirrors}"]

    def stop(self):
        self.reg.stop()


@pytest.fixture(scope="module")
def examples_mirror(tmp_path_factory):
    missing = oci.missing_tools()
    if missing:
        pytest.skip(f"{', '.join(missing)} not found in {oci.TOOLS}: run scripts/k8s-tools.sh")
    m = Mirror(tmp_path_factory.mktemp("examples-mirror"))
    try:
        yield m
    finally:
        m.stop()


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


def main_container(obj):
    return (pod_spec_of(obj).get("containers") or [{}])[0]


def fill_image(image):
    """An image left to the user, as they would fill it in: none ("image: #
    REPLACE_WITH_YOUR_IMAGE") is registry.example/your-image:latest; a $VARIABLE or
    __VARIABLE__ in it, a lower-case name of the variable (as envsubst does for ${VARIABLE})."""
    if not image:
        return "registry.example/your-image:latest"
    name = lambda m: m.group(1).lower().replace("_", "-")  # noqa: E731
    image = re.sub(r"\$([A-Z_][A-Z0-9_]*)", name, image)
    return re.sub(r"__([A-Z][A-Z0-9_]*?)__", name, image)


def fill_images(objs):
    for o in objs:
        for c in pod_spec_of(o).get("containers") or []:
            c["image"] = fill_image(c.get("image"))


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

    def pool_unused_templates(self):
        """A pool of the test's own (check-<template>, one replica) for each template without a
        command that no pool of the unit uses, so a Pod made from it shows its image's
        entrypoint; returns their names."""
        used = {((o.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name")
                for o in self.objs if o["kind"] == "SandboxWarmPool"}
        names = []
        for o in self.objs:
            name = o["metadata"]["name"]
            if o["kind"] != "SandboxTemplate" or name in used or main_container(o).get("command"):
                continue
            self.k.create({"apiVersion": f"{EXT}/v1beta1", "kind": "SandboxWarmPool",
                           "metadata": {"name": f"check-{name}", "namespace": self.ns},
                           "spec": {"replicas": 1, "sandboxTemplateRef": {"name": name}}})
            names.append(f"check-{name}")
        return names

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


def template_pods(k, ns, name):
    """The Pods of the sandboxes made from template name: its pools', and their claims'."""
    def ref(o, field):
        return ((o.get("spec") or {}).get(field) or {}).get("name")
    pools = {o["metadata"]["name"] for o in k.list(api_of("SandboxWarmPool"), "SandboxWarmPool", ns)
             if ref(o, "sandboxTemplateRef") == name}
    users = {("SandboxWarmPool", p) for p in pools} | \
        {("SandboxClaim", o["metadata"]["name"])
         for o in k.list(api_of("SandboxClaim"), "SandboxClaim", ns) if ref(o, "warmPoolRef") in pools}
    sbs = [s["metadata"]["name"] for s in k.list(f"{CORE}/v1beta1", "Sandbox", ns)
           if any((r.get("kind"), r.get("name")) in users
                  for r in s["metadata"].get("ownerReferences", []))]
    return [p for p in (k.find("v1", "Pod", ns, n) for n in sbs) if p]


def workload(k, ns, kind, obj, images):
    """How the main container's program reaches the Pod: "command" when the injected command
    runs the template's command and args after "--"; "image ENTRYPOINT" when the template names
    no command and the Pod (a Sandbox's own, or every one made from a template) runs sandboxd,
    then "--", then the entrypoint of the image and the container's args or else the image's cmd,
    as the controller looked them up (images: the stand-ins' (entrypoint, cmd) by reference);
    "-" for a claim or pool, or a command without a Pod to look at; anything else is a fault
    (a main container without a command with no Pod to show it too)."""
    if kind in ("SandboxClaim", "SandboxWarmPool"):
        return "-"  # the pod template is their template's
    c0 = main_container(obj)
    if c0.get("command"):
        pod = k.find("v1", "Pod", ns, obj["metadata"]["name"]) if kind == "Sandbox" else None
        if pod is None:
            return "command"
        cmd = pod["spec"]["containers"][0]["command"]
        want = c0["command"] + (c0.get("args") or [])
        return "command" if "--" in cmd and cmd[cmd.index("--") + 1:] == want else f"wrong: {cmd}"
    entrypoint, image_cmd = images[c0["image"]]
    want = entrypoint + (c0.get("args") or image_cmd)
    if kind == "Sandbox":
        pod = k.find("v1", "Pod", ns, obj["metadata"]["name"])
        pods = [pod] if pod else []
    else:
        pods = template_pods(k, ns, obj["metadata"]["name"])
    if not pods:
        return "wrong: no Pod to show the image's entrypoint"
    for pod in pods:
        cmd = pod["spec"]["containers"][0].get("command") or []
        if not (cmd[:1] == [SANDBOXD] and "--" in cmd and cmd[cmd.index("--") + 1:] == want):
            return f"wrong: {pod['metadata']['name']}: {cmd}, not {SANDBOXD} ... -- {want}"
    return "image ENTRYPOINT"


def test_reference_examples(cluster, example_crds, examples_dir, examples_mirror, tmp_path):
    want = {f"sandboxes.{CORE}", f"sandboxtemplates.{EXT}", f"sandboxclaims.{EXT}",
            f"sandboxwarmpools.{EXT}"}
    assert want <= example_crds
    rows, failures = [], []
    all_units = units(examples_dir)
    for _, objs in all_units:
        fill_images(objs)
        for o in objs:
            for c in pod_spec_of(o).get("containers") or []:
                examples_mirror.hosts.add(image_ref(c["image"])[0])
            if o["kind"] in KINDS and not main_container(o).get("command") and \
                    pod_spec_of(o).get("containers"):
                examples_mirror.seed(main_container(o)["image"])
    for label, objs in all_units:
        ex = Example(cluster, label, objs, tmp_path / re.sub(r"[^a-z0-9]+", "-", label))
        ex.prepare()
        ctrl = Controller(cluster, ex.ns, *examples_mirror.flags(), name="examples")
        try:
            ctrl.port()  # up, its signals handled: a unit done at once stops it cleanly
            refused = ex.apply()
            checks = ex.pool_unused_templates()
            settled_rows = []
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
                settled_rows.append((o, key, why))
                if why and not (expected and expected in why) or not why and expected:
                    failures.append(f"{label} {key}: {why or 'Ready'} (listed: {expected})")
            for name in checks:
                try:
                    wait_until(lambda: outcome(ex, "SandboxWarmPool", name) is None, WAIT,
                               interval=0.2, what=f"{label} pool {name}")
                except pytest.fail.Exception:
                    failures.append(f"{label} pool {name}: {outcome(ex, 'SandboxWarmPool', name)}")
            # Once all have settled: a template's Pods are those its pools and claims made.
            for o, key, why in settled_rows:
                how = workload(ex.k, ex.ns, o["kind"], o, examples_mirror.images)
                rows.append((label, *key, why or "Ready", how))
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
    print("main container without a command, running its (stand-in) image's entrypoint looked up "
          f"through the mirror: {sum(r[4] == 'image ENTRYPOINT' for r in rows)}")
    assert not failures, "\n".join(failures)
