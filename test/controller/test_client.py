"""The controller as an API client: in-cluster configuration with a rotated token, a watch that
survives an API server restart and a 410 Gone, leader election between two replicas."""

import shutil

from conftest import wait_until
from test_sandbox import SB, WAIT, sandbox, wait_ready


def test_in_cluster_token_is_reread(cluster, namespace, start_controller, tmp_path):
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    shutil.copy(cluster.ca, sa / "ca.crt")
    (sa / "namespace").write_text("sandboxd-system")  # where the controller's account lives
    (sa / "token").write_text("not-a-valid-token\n")
    ctrl = start_controller(in_cluster=sa)
    wait_until(lambda: "HTTP 401" in ctrl.log.read_text(errors="replace"), WAIT,
               what="the controller refused with the stale token")
    # The kubelet rotates the projected token: the file is replaced under the controller.
    (sa / "token.new").write_text(cluster.tokens["controller"] + "\n")
    (sa / "token.new").rename(sa / "token")
    cluster.admin.create(sandbox("rotated", namespace))
    wait_ready(cluster.admin, namespace, "rotated", "True", timeout=60)


def test_watch_resumes_after_apiserver_restart(cluster, namespace, start_controller):
    # A leader that cannot renew its lease while the API server is down exits (as
    # kube-controller-manager does); this case is about the watches.
    controller = start_controller("--leader-elect=false")
    k = cluster.admin
    k.create(sandbox("before", namespace))
    wait_ready(k, namespace, "before", "True")
    cluster.restart_apiserver()
    k.create(sandbox("after", namespace))
    wait_ready(k, namespace, "after", "True", timeout=90)
    k.patch(*SB, namespace, "before", {"spec": {"operatingMode": "Suspended"}})
    wait_ready(k, namespace, "before", "False", "SandboxSuspended")
    assert controller.alive()


def test_health_ready_and_metrics(cluster, namespace, controller):
    assert controller.http("/healthz") == (200, "ok\n")
    wait_until(lambda: controller.http("/readyz")[0] == 200, WAIT, what="/readyz")
    cluster.admin.create(sandbox("m1", namespace))
    wait_ready(cluster.admin, namespace, "m1", "True")
    m = controller.metrics()
    assert m["sandboxd_controller_api_writes_total"] >= 3  # secret, pod, status
    assert m["sandboxd_controller_api_throttled_total"] == 0
    assert m['sandboxd_controller_informer_lists_total{resource="sandboxes"}'] >= 1
    assert m['sandboxd_controller_informer_events_total{resource="pods"}'] >= 1
    assert controller.http("/nope")[0] == 404


def test_410_gone_forces_a_relist(cluster, namespace, start_controller):
    """A restarted API server's watch cache starts at the current revision: a watch resumed from
    an older resourceVersion is answered 410 Gone, and the informers list again."""
    controller = start_controller("--leader-elect=false")
    k = cluster.admin
    k.create(sandbox("g1", namespace))
    wait_ready(k, namespace, "g1", "True")
    lists = controller.metrics()['sandboxd_controller_informer_lists_total{resource="sandboxes"}']
    # Move the cluster's revision past what the controller has seen (elsewhere: it does not see it).
    other = f"{namespace}-other"
    k.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    cluster.restart_apiserver()
    m = wait_until(lambda: (lambda m: m if m['sandboxd_controller_informer_lists_total{resource="sandboxes"}'] > lists
                            else None)(controller.metrics()), 90, interval=0.2, what="a relist")
    assert m['sandboxd_controller_informer_gone_total{resource="sandboxes"}'] >= 1
    k.create(sandbox("g2", namespace))
    wait_ready(k, namespace, "g2", "True", timeout=60)


def test_two_replicas_one_leader(cluster, namespace, start_controller):
    k = cluster.admin
    a = start_controller(name="a")
    b = start_controller(name="b")

    def leaders():
        got = [c for c in (a, b) if c.metrics()["sandboxd_controller_leader"] == 1]
        return got if len(got) == 1 else None
    leader = wait_until(leaders, WAIT, interval=0.2, what="exactly one leader")[0]
    standby = b if leader is a else a
    wait_until(lambda: leader.http("/readyz")[0] == 200, WAIT, what="the leader ready")
    assert standby.http("/readyz") == (503, "not the leader\n")
    k.create(sandbox("l1", namespace))
    wait_ready(k, namespace, "l1", "True")
    assert "created" not in standby.log.read_text(errors="replace")
    lease = k.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/sandboxd-system/leases/lease-{namespace}")
    assert lease["spec"]["holderIdentity"]

    assert leader.stop() == 0  # hands the lease back on its way out
    wait_until(lambda: standby.metrics()["sandboxd_controller_leader"] == 1, WAIT, interval=0.2,
               what="the standby taking over")
    k.create(sandbox("l2", namespace))
    wait_ready(k, namespace, "l2", "True")


def test_bad_start_up_says_why(tmp_path):
    import subprocess
    from conftest import controller_bin
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\ncurrent-context: missing\n")
    for args, rc, words in (([f"--kubeconfig={tmp_path / 'absent'}"], 1, "No such file"),
                            ([f"--kubeconfig={bad}"], 1, 'no context "missing"'),
                            (["--kube-api-qps=fast"], 2, 'invalid value "fast" for --kube-api-qps'),
                            (["--sandboxd-probe=tcp"], 2, "--sandboxd-probe")):
        p = subprocess.run([controller_bin(), "--metrics-bind-address=127.0.0.1:0", *args],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == rc, (args, p.stderr)
        assert words in p.stderr, (args, p.stderr)
        if rc == 1:  # a log line (flag errors are plain usage text): it names the controller
            assert " sandboxd-controller error: " in p.stderr, p.stderr
