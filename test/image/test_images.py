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
from conftest import REPO, build_images


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


def test_controller_image(podman, static_bin, tmp_path):
    """controller.Containerfile around the controller of this build (sandboxd-controller), built
    by build.sh; the controller is dynamically linked, so its shared libraries and loader are
    bundled; it runs."""
    controller = os.environ.get("SANDBOXD_CONTROLLER_BIN")
    if not controller:
        pytest.skip("SANDBOXD_CONTROLLER_BIN is not set (CTest sets it to sandboxd-controller)")
    tag = f"test-controller-{os.getpid()}"
    build_images(static_bin, tag, "--controller-bin", controller)
    images = [f"localhost/sandboxd-controller:{tag}", f"localhost/sandboxd:{tag}"]
    try:
        cfg = json.loads(podman("image", "inspect", images[0]).stdout)[0]["Config"]
        assert cfg["Labels"]["org.opencontainers.image.title"] == "sandboxd-controller"
        assert cfg["User"] == "65532:65532"
        run = podman("run", "--rm", images[0], "--help")
        assert run.stdout.startswith("usage: sandboxd-controller"), run.stdout
        root = Path(podman("image", "mount", images[0]).stdout.strip())
        try:
            assert (root / "etc/ssl/certs/ca-certificates.crt").stat().st_size > 0
            assert list(root.glob("lib*/**/libcurl*")), "the shared libraries are bundled"
        finally:
            podman("image", "unmount", images[0], check=False)
    finally:
        podman("rmi", *images, check=False)
