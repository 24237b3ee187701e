"""The image's own entrypoint: a Sandbox whose main container gives no command runs what its
image would, looked up by the controller in real registries on loopback (oci.py): anonymous
and Bearer-token pulls, Basic auth, pull secrets of the pod and of its service account, an
index narrowed to the pod's architecture, configs cached by digest; a lookup that fails (the
registry down, no credentials) says so in the Ready condition and is retried; registry mirrors
(--registry-mirror) asked before the image's registry."""

import pytest

import oci
from conftest import wait_until
from test_sandbox import SB, WAIT, sandbox, wait_ready


@pytest.fixture(scope="module")
def registries(tmp_path_factory):
    missing = oci.missing_tools()
    if missing:
        pytest.skip(f"{', '.join(missing)} not found in {oci.TOOLS}: run scripts/k8s-tools.sh")
    d = tmp_path_factory.mktemp("registries")
    tokens = oci.TokenServer(d)
    bearer = oci.Registry(d, "bearer", auth=tokens).start()
    basic = oci.Registry(d, "basic", auth="basic").start()
    mirror = oci.Registry(d, "mirror").start()
    crane = oci.Crane(d)
    try:
        yield {"bearer": bearer, "basic": basic, "mirror": mirror, "tokens": tokens,
               "crane": crane, "dir": d}
    finally:
        bearer.stop()
        basic.stop()
        mirror.stop()
        tokens.stop()


def push(reg, crane, path, **image):
    """Pushes an image to reg's storage as path; returns its reference at reg."""
    crane.image(f"{reg.push_host}/{path}", **image)
    return f"{reg.host}/{path}"


def start(start_controller, *hosts):
    return start_controller("--image-entrypoint-lookup=true",
                            f"--insecure-registries={','.join(hosts)}")


def run_sandbox(k, ns, name, image, args=None, **pod):
    main = {"name": "main", "image": image}
    if args is not None:
        main["args"] = args
    k.create(sandbox(name, ns, pod_spec={"containers": [main], **pod}))


def after_dashdash(k, ns, name):
    cmd = k.get("v1", "Pod", ns, name)["spec"]["containers"][0]["command"]
    return cmd[cmd.index("--") + 1:] if "--" in cmd else []


def test_entrypoint_resolved_and_cached(cluster, namespace, start_controller, registries):
    """The injected command is the image's entrypoint and cmd (args replace the cmd); several
    sandboxes of one image and a second tag of the same manifest cost one config fetch, and the
    tag's manifest one fetch."""
    reg, crane = registries["bearer"], registries["crane"]
    ref = push(reg, crane, f"pub/app-{namespace}:v1", entrypoint=["/bin/app", "--serve"],
               cmd=["--port", "80"])
    crane.tag(f"{reg.push_host}/pub/app-{namespace}:v1", "same")
    config = crane.config_digest(f"{reg.push_host}/pub/app-{namespace}:v1")
    ctl = start(start_controller, reg.host)
    k = cluster.admin
    for i in range(3):
        run_sandbox(k, namespace, f"sb{i}", ref)
    run_sandbox(k, namespace, "args", ref, args=["--port", "9000", "-v"])
    run_sandbox(k, namespace, "same", f"{reg.host}/pub/app-{namespace}:same")
    for name in ("sb0", "sb1", "sb2", "args", "same"):
        wait_ready(k, namespace, name, "True")
    for i in range(3):
        assert after_dashdash(k, namespace, f"sb{i}") == ["/bin/app", "--serve", "--port", "80"]
    assert after_dashdash(k, namespace, "args") == ["/bin/app", "--serve", "--port", "9000", "-v"]
    assert after_dashdash(k, namespace, "same") == ["/bin/app", "--serve", "--port", "80"]
    repo = f"/v2/pub/app-{namespace}"
    assert len(reg.gets(f"^{repo}/blobs/{config}$")) == 1, reg.gets(repo)
    assert len(reg.gets(f"^{repo}/manifests/v1$")) == 1, reg.gets(repo)
    assert len(reg.gets(f"^{repo}/manifests/same$")) == 1, reg.gets(repo)
    # Anonymous pulls through the token service: each asked for a pull scope of the repository.
    assert (None, f"repository:pub/app-{namespace}:pull") in registries["tokens"].requests
    m = ctl.metrics()
    assert m['sandboxd_controller_registry_requests_total{kind="config"}'] == 1
    assert m['sandboxd_controller_registry_requests_total{kind="manifest"}'] == 2
    assert m['sandboxd_controller_image_lookups_total{result="resolved"}'] == 2
    assert m['sandboxd_controller_image_cache_hits_total'] >= 3


def test_index_narrowed_to_the_pod_architecture(cluster, namespace, start_controller, registries):
    """An index of two platforms with different entrypoints: linux/amd64 by default, the one
    the pod's nodeSelector kubernetes.io/arch names otherwise."""
    reg, crane = registries["bearer"], registries["crane"]
    pbase = f"{reg.push_host}/pub/multi-{namespace}"
    amd = crane.image(f"{pbase}:amd64", entrypoint=["/bin/app-amd64"], cmd=["x"])
    arm = crane.image(f"{pbase}:arm64", entrypoint=["/bin/app-arm64"], cmd=["y"],
                      platform="linux/arm64")
    crane.index(f"{pbase}:multi", f"{pbase}@{amd}", f"{pbase}@{arm}")
    base = f"{reg.host}/pub/multi-{namespace}"
    start(start_controller, reg.host)
    k = cluster.admin
    run_sandbox(k, namespace, "amd", f"{base}:multi")
    run_sandbox(k, namespace, "arm", f"{base}:multi",
                nodeSelector={"kubernetes.io/arch": "arm64"})
    run_sandbox(k, namespace, "s390", f"{base}:multi",
                nodeSelector={"kubernetes.io/arch": "s390x"})
    wait_ready(k, namespace, "amd", "True")
    assert after_dashdash(k, namespace, "amd") == ["/bin/app-amd64", "x"]
    # No Node here is arm64: the Pod is made and waits to be scheduled.
    wait_until(lambda: k.find("v1", "Pod", namespace, "arm"), WAIT, what="the arm64 sandbox's Pod")
    assert after_dashdash(k, namespace, "arm") == ["/bin/app-arm64", "y"]
    c = wait_ready(k, namespace, "s390", "False", "EntrypointUnresolved")
    assert "no linux/s390x image in the index" in c["message"]
    assert k.find("v1", "Pod", namespace, "s390") is None


def test_private_needs_a_pull_secret(cluster, namespace, start_controller, registries):
    """A private repository (the token service grants anonymous callers nothing there): without
    a pull secret the Sandbox says why and has no Pod; a pod's imagePullSecrets, or a Secret the
    service account names later (the lookup retried with backoff), let it through."""
    reg, crane = registries["bearer"], registries["crane"]
    ref = push(reg, crane, f"private/app-{namespace}:v1", entrypoint=["/bin/secret"],
               cmd=["--quiet"])
    start(start_controller, reg.host)
    k = cluster.admin
    run_sandbox(k, namespace, "nosecret", ref)
    c = wait_ready(k, namespace, "nosecret", "False", "EntrypointUnresolved")
    assert "unauthorized" in c["message"] and "no pull secret" in c["message"], c
    assert k.find("v1", "Pod", namespace, "nosecret") is None
    assert condition_ready(k, namespace, "nosecret")["status"] == "False"

    k.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull", "namespace": namespace},
              "type": "kubernetes.io/dockerconfigjson",
              "data": oci.dockerconfigjson(reg.host, oci.READER)})
    k.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "wrong", "namespace": namespace},
              "type": "kubernetes.io/dockerconfigjson",
              "data": oci.dockerconfigjson(reg.host, ("reader", "not-the-password"))})
    run_sandbox(k, namespace, "wrong", ref, imagePullSecrets=[{"name": "wrong"}])
    c = wait_ready(k, namespace, "wrong", "False", "EntrypointUnresolved")
    assert "refused" in c["message"], c
    run_sandbox(k, namespace, "withsecret", ref, imagePullSecrets=[{"name": "pull"}])
    wait_ready(k, namespace, "withsecret", "True")
    assert after_dashdash(k, namespace, "withsecret") == ["/bin/secret", "--quiet"]
    # The service account's pull secrets count too: the first sandbox's retry finds it.
    k.patch("v1", "ServiceAccount", namespace, "default", {"imagePullSecrets": [{"name": "pull"}]})
    wait_ready(k, namespace, "nosecret", "True", timeout=60)
    assert after_dashdash(k, namespace, "nosecret") == ["/bin/secret", "--quiet"]


def test_basic_auth_registry(cluster, namespace, start_controller, registries):
    """A registry behind htpasswd answers with a Basic challenge: the pull secret's credentials
    are sent; without them the lookup fails and says so."""
    reg, crane = registries["basic"], registries["crane"]
    ref = push(reg, crane, f"basic-{namespace}:v1", entrypoint=["/bin/basic"])
    start(start_controller, reg.host)
    k = cluster.admin
    k.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull", "namespace": namespace},
              "type": "kubernetes.io/dockerconfigjson",
              "data": oci.dockerconfigjson(reg.host, oci.READER)})
    run_sandbox(k, namespace, "nosecret", ref)
    run_sandbox(k, namespace, "withsecret", ref, args=["--flag"],
                imagePullSecrets=[{"name": "pull"}])
    wait_ready(k, namespace, "withsecret", "True")
    assert after_dashdash(k, namespace, "withsecret") == ["/bin/basic", "--flag"]
    c = wait_ready(k, namespace, "nosecret", "False", "EntrypointUnresolved")
    assert "unauthorized" in c["message"], c


def test_registry_down(cluster, namespace, start_controller, registries):
    """A registry that does not answer: the Sandbox is not Ready, its condition names the
    registry, no Pod is made, and the controller keeps serving others; once the registry is up
    the retry (backed off) resolves it. The annotation still skips the lookup."""
    d = registries["dir"]
    down = oci.Registry(d, f"down-{namespace}")
    ref = f"{down.host}/app:v1"
    ctl = start(start_controller, down.host, registries["bearer"].host)
    k = cluster.admin
    run_sandbox(k, namespace, "down", ref)
    c = wait_ready(k, namespace, "down", "False", "EntrypointUnresolved")
    assert down.host in c["message"], c
    assert k.find("v1", "Pod", namespace, "down") is None
    obj = sandbox("annotated", namespace, pod_spec={"containers": [{"name": "main", "image": ref}]})
    obj["spec"]["podTemplate"]["metadata"]["annotations"] = {"sandboxd.dev/entrypoint": '["/bin/given"]'}
    k.create(obj)
    wait_ready(k, namespace, "annotated", "True")
    assert after_dashdash(k, namespace, "annotated") == ["/bin/given"]
    # A bad reference is the spec's fault, not the registry's.
    run_sandbox(k, namespace, "badref", "Not/A/Valid:Ref:")
    c = wait_ready(k, namespace, "badref", "False", "InvalidSpec")
    assert "containers[0].image" in c["message"], c
    try:
        down.start()
        registries["crane"].image(ref, entrypoint=["/bin/up"])
        wait_ready(k, namespace, "down", "True", timeout=60)
        assert after_dashdash(k, namespace, "down") == ["/bin/up"]
    finally:
        down.stop()
    assert ctl.alive()


def test_registry_mirrors(cluster, namespace, start_controller, registries):
    """--registry-mirror: a registry's mirror is asked first, under its path prefix; an origin
    that cannot be reached is not needed while the mirror has the image; a mirror that lacks it
    passes the lookup to the origin; the config cached by digest from the mirror serves a tag
    found at the origin; a mirror without a prefix, behind Basic auth, is let in with a pull
    secret for the mirror's host (none for the origin's), and without it the condition names the
    mirror's failure and then the origin's."""
    d, crane, ns = registries["dir"], registries["crane"], namespace
    origin, mirror, basic = registries["bearer"], registries["mirror"], registries["basic"]
    down = oci.Registry(d, f"down-{ns}")  # never started: nothing answers there
    down2 = oci.Registry(d, f"down2-{ns}")
    # Only at the mirror, under the prefix that stands for the unreachable origin.
    crane.image(f"{mirror.host}/cache/down/team/app-{ns}:v1", entrypoint=["/bin/from-mirror"],
                cmd=["m"])
    # At the origin and, the same manifest, at its mirror.
    both = push(origin, crane, f"pub/both-{ns}:v1", entrypoint=["/bin/both"], cmd=["b"])
    crane("copy", "--insecure", f"{origin.push_host}/pub/both-{ns}:v1",
          f"{mirror.host}/cache/origin/pub/both-{ns}:v1")
    crane.tag(f"{origin.push_host}/pub/both-{ns}:v1", "v2")  # the same image, at the origin only
    # At the origin only.
    only = push(origin, crane, f"pub/origin-only-{ns}:v1", entrypoint=["/bin/origin"], cmd=["o"])
    # At a mirror that asks for credentials, without a prefix.
    crane.image(f"{basic.push_host}/private/app-{ns}:v1", entrypoint=["/bin/private-mirror"])
    mirrors = [f"{down.host}={mirror.host}/cache/down", f"{origin.host}={mirror.host}/cache/origin/",
               f"{down2.host}={basic.host}"]
    ctl = start_controller("--image-entrypoint-lookup=true",
                           f"--insecure-registries={mirror.host},{origin.host},{basic.host}",
                           f"--registry-mirror={','.join(mirrors)}")
    k = cluster.admin
    k.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull", "namespace": ns},
              "type": "kubernetes.io/dockerconfigjson",
              "data": oci.dockerconfigjson(basic.host, oci.READER)})
    run_sandbox(k, ns, "mirrored", f"{down.host}/team/app-{ns}:v1")
    run_sandbox(k, ns, "both", both)
    run_sandbox(k, ns, "fallback", only, args=["--given"])
    private = f"{down2.host}/private/app-{ns}:v1"
    run_sandbox(k, ns, "private", private, imagePullSecrets=[{"name": "pull"}])
    run_sandbox(k, ns, "nosecret", private)
    for name in ("mirrored", "both", "fallback", "private"):
        wait_ready(k, ns, name, "True")
    assert after_dashdash(k, ns, "mirrored") == ["/bin/from-mirror", "m"]
    assert after_dashdash(k, ns, "both") == ["/bin/both", "b"]
    assert after_dashdash(k, ns, "fallback") == ["/bin/origin", "--given"]
    assert after_dashdash(k, ns, "private") == ["/bin/private-mirror"]
    # The origin was asked for the image its mirror lacks, never for the one its mirror has.
    assert origin.gets(f"^/v2/pub/both-{ns}/") == [], origin.gets(f"/v2/pub/both-{ns}/")
    # Its other tag, which the mirror lacks: the origin's manifest names the config the mirror
    # gave, which is not fetched again.
    run_sandbox(k, ns, "both-v2", f"{origin.host}/pub/both-{ns}:v2")
    wait_ready(k, ns, "both-v2", "True")
    assert after_dashdash(k, ns, "both-v2") == ["/bin/both", "b"]
    assert len(origin.gets(f"^/v2/pub/both-{ns}/manifests/v2$")) == 1
    assert origin.gets(f"^/v2/pub/both-{ns}/blobs/") == [], origin.gets(f"/v2/pub/both-{ns}/")
    assert len(origin.gets(f"^/v2/pub/origin-only-{ns}/manifests/v1$")) == 1
    c = wait_ready(k, ns, "nosecret", "False", "EntrypointUnresolved")
    msg = c["message"]
    assert f'mirror "{basic.host}/private/app-{ns}"' in msg and "unauthorized" in msg, msg
    assert f'registry "{down2.host}"' in msg, msg
    assert msg.index("mirror") < msg.index(f'registry "{down2.host}"'), msg
    assert k.find("v1", "Pod", ns, "nosecret") is None
    m = ctl.metrics()
    assert m['sandboxd_controller_registry_mirror_lookups_total{result="hit"}'] == 3, m
    assert m['sandboxd_controller_registry_mirror_lookups_total{result="miss"}'] >= 3, m


def condition_ready(k, ns, name):
    for c in k.get(*SB, ns, name).get("status", {}).get("conditions", []):
        if c["type"] == "Ready":
            return c
    return None
