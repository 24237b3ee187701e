"""The injection flow of images/pod-example.yaml under `podman kube play`: the injector image's
init container copies sandboxd into an emptyDir, the main container (another image, here a
busybox-only one made for the test) runs `/sandboxd-bin/sandboxd -- <original command>`.

The documented example is played with the changes a laptop needs: test image tags, host
networking with ports picked by the daemon (so the test reaches it on loopback), and no
runtimeClassName (a pod does not start under runsc here; see DESIGN §7). podman runs with runc
(crun fails on these hybrid cgroups) and raised default ulimits (the VM's hard limits are below
podman's defaults), through a containers.conf of the test's own.
"""

import os
import re

import yaml
from conftest import REPO, Clients, ContainerLog, busybox_tree, wait_until

def played_pod(example, tag, name):
    """The example as the test plays it (see the module docstring)."""
    pod = yaml.safe_load(example)
    spec = pod["spec"]
    pod["metadata"]["name"] = name
    spec.pop("runtimeClassName")
    spec["hostNetwork"] = True
    init, main = spec["initContainers"][0], spec["containers"][0]
    assert init["image"].startswith("localhost/sandboxd:")
    init["image"] = f"localhost/sandboxd:{tag}"
    main["image"] = f"localhost/sandbox-user:{tag}"
    cmd = main["command"]
    assert cmd[0] == "/sandboxd-bin/sandboxd" and cmd[-1] == "--", cmd
    main["command"] = [cmd[0], "--listen-host", "127.0.0.1", "--grpc-port", "0"]
    main["command"] += ["--rest-port", "0", "--"]
    for probe in ("readinessProbe", "livenessProbe"):
        main.pop(probe)  # their fixed ports do not apply to ports picked at start
    main.pop("ports")
    return pod


def test_pod_example(podman, injector_image, tmp_path, tools):
    tag = injector_image.rpartition(":")[2]
    user_image = f"localhost/sandbox-user:{tag}"
    # The user's image: busybox and nothing else.
    ctx = tmp_path / "user"
    busybox_tree(ctx / "rootfs")
    (ctx / "Containerfile").write_text('FROM scratch\nCOPY rootfs/ /\nCMD ["/bin/sh"]\n')
    podman("bud", "--isolation", "chroot", "-q", "-t", user_image, str(ctx), tool="buildah")

    name = f"sbx-example-{os.getpid()}"
    pod_file = tmp_path / "pod.yaml"
    example = (REPO / "images/pod-example.yaml").read_text()
    pod_file.write_text(yaml.safe_dump(played_pod(example, tag, name)))
    try:
        podman("kube", "play", str(pod_file))
        check_pod(podman, name, tools, tmp_path)
    finally:
        podman("kube", "down", str(pod_file), check=False)
        podman("rmi", user_image, check=False)


def check_pod(podman, name, tools, tmp_path):
    main = f"{name}-main"
    ep = ContainerLog(podman, main, tmp_path / "main.log")
    ep.wait_ready(ep.running)
    c = Clients(tools, ep)
    # The original command runs as sandboxd's main process, with sandboxd's stdio.
    wait_until(lambda: "started\n" in ep.log(), 10, "the main process's output")
    assert c.health() == "status: SERVING"
    c.probes()
    # Exec in the main container: the busybox image, sandboxd as PID 1, the binary from the
    # init container on the read-only volume.
    code, out, _ = c.execute(["/bin/sh", "-c", "cat /proc/1/cmdline | tr '\\0' ' '; ls /"])
    assert code == 0, out
    first, _, rest = out.partition("\n")
    assert first.startswith("/sandboxd-bin/sandboxd "), first
    assert "/bin/sh -c echo started; exec sleep infinity" in first
    assert "sandboxd-bin" in rest.split()
    code, out, err = c.execute(["/bin/sh", "-c", "touch /sandboxd-bin/x"])
    assert code != 0 and re.search("Read-only", err), (code, err)
    c.round_trip(tmp_path)
    st = podman("inspect", "--format", "{{.State.Status}}", main).stdout.strip()
    assert st == "running"
    # Stopping the pod: SIGTERM to sandboxd, passed on to the main process (sleep), whose
    # status (143: killed by SIGTERM) sandboxd exits with once the rest has drained.
    podman("pod", "stop", "--time", "30", name)
    fmt = "{{.State.Status}} {{.State.ExitCode}}"
    st = podman("inspect", "--format", fmt, main).stdout.split()
    assert st == ["exited", "143"], (st, ep.log())
    assert "sandboxd stopped" in ep.log()
