"""The injector image as images/build.sh makes it: its config (OCI labels, non-root user,
entrypoint) in podman's storage, and its content in the OCI layout: two files, nothing else."""

import gzip
import io
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
from conftest import REPO, build_images, need_tool


def blob(layout, digest):
    algo, hexdigest = digest.split(":")
    return (layout / "blobs" / algo / hexdigest).read_bytes()


def test_config_labels_and_user(podman, injector_image):
    out = podman("image", "inspect", injector_image).stdout
    cfg = json.loads(out)[0]["Config"]
    labels = cfg["Labels"]
    cmake = (REPO / "CMakeLists.txt").read_text()
    version = re.search(r"project\(sandboxd VERSION ([0-9.]+)", cmake)
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True)
    assert labels["org.opencontainers.image.title"] == "sandboxd"
    assert labels["org.opencontainers.image.version"] == version.group(1)
    assert labels["org.opencontainers.image.revision"].startswith(head.stdout.strip())
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT.*", labels["org.opencontainers.image.created"])
    assert cfg["User"] == "65532:65532"
    assert cfg["Entrypoint"] == ["/sandboxd-install"]
    assert cfg["Cmd"] == ["/sandboxd-bin"]


def test_oci_layout_holds_two_files(injector_image, oci_layout, static_bin):
    index = json.loads((oci_layout / "index.json").read_text())
    tag = injector_image.rpartition(":")[2]
    refs = {m["annotations"]["org.opencontainers.image.ref.name"]: m for m in index["manifests"]}
    manifest = json.loads(blob(oci_layout, refs[f"sandboxd-{tag}"]["digest"]))
    files = {}
    for layer in manifest["layers"]:
        data = blob(oci_layout, layer["digest"])
        if layer["mediaType"].endswith("gzip"):
            data = gzip.decompress(data)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for m in tar.getmembers():
                if m.isfile():
                    files[m.name.lstrip("./")] = (m.mode, tar.extractfile(m).read())
    assert sorted(files) == ["sandboxd", "sandboxd-install"]
    assert files["sandboxd"][1] == static_bin.read_bytes()
    assert all(mode & 0o755 == 0o755 for mode, _ in files.values())


def controller_static_bin():
    b = os.environ.get("SANDBOXD_CONTROLLER_STATIC_BIN")
    if not b:
        pytest.skip("SANDBOXD_CONTROLLER_STATIC_BIN is not set (CTest sets it to "
                    "sandboxd-controller-static where scripts/static-deps.sh's libraries are)")
    return Path(b)


def alone(tmp_path, b, prog, *args):
    """b, static (no loader, no library, no shell needed), run chrooted into a directory that
    holds it alone as /prog, as 65532: --help, then args with an empty environment, which must
    fail saying it is not in a cluster (no kubeconfig nor service account) rather than crash."""
    headers = subprocess.run(["readelf", "-lW", str(b)], capture_output=True, text=True,
                             check=True).stdout
    assert not re.search(r"\n +(INTERP|DYNAMIC) ", headers), headers
    chroot = need_tool("chroot")
    root = tmp_path / "root"
    root.mkdir()
    (root / prog).write_bytes(b.read_bytes())
    (root / prog).chmod(0o755)
    run = subprocess.run([chroot, "--userspec=65532:65532", str(root), f"/{prog}", "--help"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 0 and run.stdout.startswith(f"usage: {prog}"), run
    run = subprocess.run([chroot, "--userspec=65532:65532", str(root), f"/{prog}", *args],
                         capture_output=True, text=True, timeout=30, env={})
    assert run.returncode != 0 and "not in a cluster" in run.stderr, run


def test_controller_static_binary(tmp_path):
    """sandboxd-controller-static needs nothing of its tree."""
    alone(tmp_path, controller_static_bin(), "sandboxd-controller")


def app_image(podman, static_bin, name, binary):
    """NAME.Containerfile around binary, built by build.sh (--NAME-bin): its files are the
    binary and the CA bundle, nothing else (no shell, no library), user 65532:65532; it runs."""
    tag = f"test-{name}-{os.getpid()}"
    build_images(static_bin, tag, f"--{name}-bin", str(binary))
    prog = f"sandboxd-{name}"
    images = [f"localhost/{prog}:{tag}", f"localhost/sandboxd:{tag}"]
    try:
        cfg = json.loads(podman("image", "inspect", images[0]).stdout)[0]["Config"]
        assert cfg["Labels"]["org.opencontainers.image.title"] == prog
        assert cfg["User"] == "65532:65532"
        assert cfg["Entrypoint"] == [f"/{prog}"]
        run = podman("run", "--rm", "--read-only", "--cap-drop=all", images[0], "--help")
        assert run.stdout.startswith(f"usage: {prog}"), run.stdout
        root = Path(podman("image", "mount", images[0]).stdout.strip())
        try:
            files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())
            assert files == ["etc/ssl/certs/ca-certificates.crt", prog], files
            assert (root / prog).read_bytes() == binary.read_bytes()
        finally:
            podman("image", "unmount", images[0], check=False)
    finally:
        podman("rmi", *images, check=False)


def test_controller_image(podman, static_bin):
    """controller.Containerfile around the static controller of this build."""
    app_image(podman, static_bin, "controller", controller_static_bin())


def router_static_bin():
    b = os.environ.get("SANDBOXD_ROUTER_STATIC_BIN")
    if not b:
        pytest.skip("SANDBOXD_ROUTER_STATIC_BIN is not set (CTest sets it to "
                    "sandboxd-router-static where scripts/static-deps.sh's libraries are)")
    return Path(b)


def test_router_static_binary(tmp_path):
    """sandboxd-router-static needs nothing of its tree either; its cache on, it needs a
    cluster."""
    alone(tmp_path, router_static_bin(), "sandboxd-router", "--cache-enabled",
          "--http-bind-address=127.0.0.1:0", "--health-probe-bind-address=",
          "--metrics-bind-address=")


def test_router_image(podman, static_bin):
    """router.Containerfile around the static router of this build."""
    app_image(podman, static_bin, "router", router_static_bin())
