#!/usr/bin/env python3
"""Writes the CRDs of controller/config/crd from their sources in controller/config/crd-source
and the OpenAPI of a real kube-apiserver.

A source is a CRD written by hand, except where it embeds a Kubernetes type (a pod spec, a
PersistentVolumeClaim spec, NetworkPolicy rules): there a schema node says

    x-sandboxd-openapi: api/v1#io.k8s.api.core.v1.PodSpec

(the API server's /openapi/v3 document, then the schema's name in it), and keys beside it
override or add to what the generator makes of that type ("properties" merged field by field).
The generator resolves the type's $refs into one structural schema as a CRD needs it: the API
server's own list types and keys, map types and scalar defaults kept; int-or-string for
IntOrString and Quantity (with the Quantity serialization grammar as a pattern);
x-kubernetes-preserve-unknown-fields where the API server's schema declares an object with no
fields (RawExtension, FieldsV1); descriptions, enums, patch strategies and unions dropped (the
Pod's own validation checks the values when the controller makes the Pod; the CRD refuses unknown
fields and wrong types at apply). YAML anchors of a source (v1alpha1 sharing the schema of
v1beta1) stay anchors in the output.

The output is checked in (kubectl apply -k and the Helm chart read it; building the C code needs
no control plane), and test/controller/test_crd.py fails when it differs from a fresh
generation against the suite's API server. Run this after editing a source or moving to another
Kubernetes version (scripts/k8s-tools.sh pins it):

    scripts/crdgen.py          # starts etcd and kube-apiserver from $SANDBOXD_TOOLS, writes
                               # controller/config/crd/*.yaml, runs deploy/helm/sync.sh
"""

import copy
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SOURCES = REPO / "controller" / "config" / "crd-source"
OUTPUT = REPO / "controller" / "config" / "crd"
MARKER = "x-sandboxd-openapi"
# What a CRD schema takes from the API server's (structural schema: no $ref, allOf, oneOf).
KEPT = ("type", "format", "required", "additionalProperties", "items", "properties",
        "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type")
# The Quantity serialization grammar of its OpenAPI description (<signedNumber><suffix>, the
# suffix a binary SI, decimal SI or decimal exponent one), as one regular expression.
NUMBER = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
QUANTITY = (rf"^(\+|-)?{NUMBER}"
            rf"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?{NUMBER}))?$")
INT_OR_STRING = {"anyOf": [{"type": "integer"}, {"type": "string"}],
                 "x-kubernetes-int-or-string": True}
SPECIAL = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": INT_OR_STRING,
    "io.k8s.apimachinery.pkg.api.resource.Quantity": dict(INT_OR_STRING, pattern=QUANTITY),
}
ANCHORS = {"schema": "schema", "subresources": "subresources",
           "additionalPrinterColumns": "columns"}
# Bounds of the standalone control plane.
START_TIMEOUT = 120.0
HTTP_TIMEOUT = 60.0


class Error(Exception):
    pass


class Resolver:
    """Turns schemas of one OpenAPI v3 document set into structural CRD schemas."""

    def __init__(self, documents):
        self.documents = documents  # {"api/v1": document, ...}

    def schema(self, ref):
        doc, _, name = ref.partition("#")
        if doc not in self.documents:
            raise Error(f"no OpenAPI document '{doc}'")
        return self.convert_named(doc, name, ())

    def convert_named(self, doc, name, stack):
        if name in SPECIAL:
            return copy.deepcopy(SPECIAL[name])
        if name in stack:
            raise Error(f"'{name}' refers to itself ({' > '.join(stack)}): not structural")
        schemas = self.documents[doc].get("components", {}).get("schemas", {})
        if name not in schemas:
            raise Error(f"no schema '{name}' in OpenAPI document '{doc}'")
        return self.convert(doc, schemas[name], stack + (name,))

    def convert(self, doc, s, stack, required=False, element=False):
        ref = s.get("$ref")
        if ref is None and len(s.get("allOf", ())) == 1:
            ref = s["allOf"][0].get("$ref")
        if ref is not None:
            out = self.convert_named(doc, ref.rpartition("/")[2], stack)
            if not element and scalar_default(s, required):
                out["default"] = s["default"]
            return dict(sorted(out.items()))
        if "oneOf" in s or "anyOf" in s or "allOf" in s:
            raise Error(f"'{stack[-1]}' has a union the generator does not know: not structural")
        out = {}
        for key in KEPT:
            if key not in s:
                continue
            if key == "properties":
                out[key] = {k: self.convert(doc, v, stack, required=k in s.get("required", ()))
                            for k, v in sorted(s[key].items())}
            elif key == "required":
                out[key] = sorted(s[key])
            elif key in ("items", "additionalProperties") and isinstance(s[key], dict):
                out[key] = self.convert(doc, s[key], stack, element=True)
            else:
                out[key] = copy.deepcopy(s[key])
        if not element and scalar_default(s, required):  # an element's is never used
            out["default"] = s["default"]
        if out.get("type") == "object" and not s.get("properties") and \
                "additionalProperties" not in s:
            out["x-kubernetes-preserve-unknown-fields"] = True  # free-form in the API server
        return dict(sorted(out.items()))


def scalar_default(s, required):
    """Whether to keep the default of schema s, a required field or not. Only scalar ones: a
    "{}" default is the Go zero value of a struct field, which the API server does not write into
    objects either. Nor the zero value of a required field, which OpenAPI gives every field
    whose JSON is never omitted: as a CRD default it would fill in what the user left out and
    the field's "required" would never refuse anything."""
    d = s.get("default")
    if isinstance(d, bool) or not isinstance(d, (str, int, float)):
        return isinstance(d, bool) and not (required and d is False)
    return not (required and not d)


def merge(generated, overrides):
    for key, value in overrides.items():
        if key == "properties" and isinstance(generated.get(key), dict):
            for name, sub in value.items():
                if name in generated[key] and isinstance(sub, dict):
                    merge(generated[key][name], sub)
                else:
                    generated[key][name] = sub
        else:
            generated[key] = value
    return generated


def expand(node, resolver, seen):
    """Replaces every marked node under node, in place; a node shared through a YAML anchor is
    expanded once."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, list):
        for item in node:
            expand(item, resolver, seen)
        return
    if not isinstance(node, dict):
        return
    if MARKER in node:
        overrides = {k: v for k, v in node.items() if k != MARKER}
        generated = resolver.schema(node[MARKER])
        for v in overrides.values():
            expand(v, resolver, seen)
        node.clear()
        node.update(merge(generated, overrides))
        return
    for v in node.values():
        expand(v, resolver, seen)


class Dumper(yaml.SafeDumper):
    """Names the anchors the source named (schema, subresources, columns) and never makes up
    others: the generator's nodes are never shared."""

    def __init__(self, *a, anchor_names=None, **kw):
        super().__init__(*a, **kw)
        self.anchor_names = anchor_names or {}
        self.node_names = {}

    def represent_data(self, data):
        node = super().represent_data(data)
        if id(data) in self.anchor_names:
            self.node_names[id(node)] = self.anchor_names[id(data)]
        return node

    def generate_anchor(self, node):
        return self.node_names.get(id(node)) or super().generate_anchor(node)


def anchor_names(crd):
    names = {}
    versions = crd["spec"]["versions"]
    for key, name in ANCHORS.items():
        for v in versions[1:]:
            if key in v and v[key] is versions[0].get(key):
                names[id(v[key])] = name
    return names


def header(source_text, source_name, version):
    lines = []
    for line in source_text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    lines.append(f"# Generated by scripts/crdgen.py from crd-source/{source_name} and the OpenAPI "
                 f"of kube-apiserver {version}: edit the source, not this file.")
    return "\n".join(lines) + "\n"


def generate(fetch):
    """{file name: text} of every source, with fetch(path) -> the API server's JSON answer."""
    index = fetch("/openapi/v3")["paths"]
    version = fetch("/version")["gitVersion"]
    documents = {}
    out = {}
    for src in sorted(SOURCES.glob("*.yaml")):
        text = src.read_text()
        crd = yaml.safe_load(text)
        for doc in sorted(set(refs(crd))):
            if doc not in documents:
                if doc not in index:
                    raise Error(f"{src.name}: the API server has no OpenAPI document '{doc}'")
                documents[doc] = fetch(index[doc]["serverRelativeURL"])
        names = anchor_names(crd)
        expand(crd, Resolver(documents), set())
        body = yaml.dump(crd, Dumper=lambda *a, **kw: Dumper(*a, anchor_names=names, **kw),
                         sort_keys=False, width=1 << 16, default_flow_style=False)
        out[src.name] = header(text, src.name, version) + body
    return out


def refs(node):
    if isinstance(node, dict):
        if MARKER in node:
            yield node[MARKER].partition("#")[0]
        for v in node.values():
            yield from refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ControlPlane:
    """etcd and kube-apiserver on loopback, in a temporary directory, for one generation."""

    def __init__(self, tools):
        self.tools = Path(tools)
        for b in ("etcd", "kube-apiserver"):
            if not os.access(self.tools / b, os.X_OK):
                raise Error(f"{self.tools / b} not found: run scripts/k8s-tools.sh")
        self.dir = Path(tempfile.mkdtemp(prefix="crdgen-"))
        self.procs = []
        self.token = os.urandom(16).hex()

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def spawn(self, name, argv):
        with open(self.dir / f"{name}.log", "wb") as log:
            self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, start_new_session=True))

    def start(self):
        d = self.dir
        subprocess.run(["openssl", "ecparam", "-genkey", "-name", "prime256v1", "-noout",
                        "-out", d / "sa.key"], check=True, capture_output=True, timeout=60)
        subprocess.run(["openssl", "ec", "-in", d / "sa.key", "-pubout", "-out", d / "sa.pub"],
                       check=True, capture_output=True, timeout=60)
        (d / "tokens.csv").write_text(f"{self.token},crdgen,crdgen,system:masters\n")
        etcd, peer, self.port = free_port(), free_port(), free_port()
        self.spawn("etcd", [
            str(self.tools / "etcd"), "--name=crdgen", f"--data-dir={d / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{etcd}",
            f"--advertise-client-urls=http://127.0.0.1:{etcd}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=crdgen=http://127.0.0.1:{peer}", "--unsafe-no-fsync",
            "--log-level=warn"])
        self.spawn("kube-apiserver", [
            str(self.tools / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}", f"--cert-dir={d / 'certs'}",
            f"--token-auth-file={d / 'tokens.csv'}", "--authorization-mode=RBAC",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16", "--v=0"])
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                self.fetch("/openapi/v3")
                return
            except OSError as e:
                if any(p.poll() is not None for p in self.procs) or time.monotonic() > deadline:
                    log = (d / "kube-apiserver.log").read_text(errors="replace")[-2000:]
                    raise Error(f"kube-apiserver did not answer /openapi/v3 ({e}):\n{log}") from e
                time.sleep(0.2)

    def fetch(self, path):
        # The serving certificate is the one kube-apiserver made itself in --cert-dir, on
        # loopback, for this run only.
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        req = urllib.request.Request(f"https://127.0.0.1:{self.port}{path}",
                                     headers={"Authorization": f"Bearer {self.token}",
                                              "Accept": "application/json"})
        with urllib.request.urlopen(req, context=ctx, timeout=HTTP_TIMEOUT) as r:
            return json.load(r)

    def __exit__(self, *exc):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


def main():
    tools = os.environ.get("SANDBOXD_TOOLS",
                           Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                           / "sandboxd" / "bin")
    try:
        with ControlPlane(tools) as cp:
            files = generate(cp.fetch)
    except (Error, OSError, subprocess.SubprocessError) as e:
        print(f"crdgen: {e}", file=sys.stderr)
        return 1
    for name, text in files.items():
        (OUTPUT / name).write_text(text)
        print(f"crdgen: wrote {(OUTPUT / name).relative_to(REPO)}")
    subprocess.run([REPO / "deploy" / "helm" / "sync.sh"], check=True, timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
