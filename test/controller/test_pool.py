"""Warm pools and claims against the real API server: a pool fills to N at its paced rate, a
claim adopts a ready sandbox in two writes and mirrors its Ready, the pool refills, claims
beyond the pool start cold, and deleting claims and pools cleans up."""

import re

from conftest import wait_until
from kube import ApiError
from test_sandbox import SB, WAIT, condition

EXT = "extensions.agents.x-k8s.io/v1beta1"
POOL = (EXT, "SandboxWarmPool")
CLAIM = (EXT, "SandboxClaim")
TEMPLATE = (EXT, "SandboxTemplate")


def template(k, ns, name="tpl", container=None, **spec):
    main = {"name": "main", "image": "python:3.12", "command": ["python3", "-m", "http.server"],
            **(container or {})}
    k.create({"apiVersion": EXT, "kind": "SandboxTemplate", "metadata": {"name": name, "namespace": ns},
              "spec": {"podTemplate": {"metadata": {"labels": {"tier": "agent"}}, "spec": {
                  "containers": [main]}}, **spec}})


def pool(k, ns, name, replicas, tpl="tpl"):
    k.create({"apiVersion": EXT, "kind": "SandboxWarmPool", "metadata": {"name": name, "namespace": ns},
              "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": tpl}}})


def claim(k, ns, name, pool_name, **spec):
    k.create({"apiVersion": EXT, "kind": "SandboxClaim", "metadata": {"name": name, "namespace": ns},
              "spec": {"warmPoolRef": {"name": pool_name}, **spec}})


def owned_by(k, ns, kind, name):
    out = []
    for sb in k.list(*SB, ns):
        ref = next((r for r in sb["metadata"].get("ownerReferences", []) if r.get("controller")), None)
        if ref and ref["kind"] == kind and ref["name"] == name and "deletionTimestamp" not in sb["metadata"]:
            out.append(sb)
    return out


def network_policy(k, ns, tpl):
    """The NetworkPolicy of template tpl, or None."""
    try:
        return k.request("GET", f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{tpl}-network-policy")
    except ApiError as e:
        if e.status == 404:
            return None
        raise


def ready_count(sbs):
    return sum(1 for sb in sbs if (condition(sb) or {}).get("status") == "True")


def wait_pool_ready(k, ns, name, n, timeout=60):
    def check():
        st = k.get(*POOL, ns, name).get("status", {})
        sbs = owned_by(k, ns, "SandboxWarmPool", name)
        return st.get("readyReplicas") == n and len(sbs) == n and ready_count(sbs) == n
    wait_until(check, timeout, interval=0.1, what=f"pool {name} with {n} ready sandboxes")


def wait_claim_ready(k, ns, name, timeout=WAIT):
    def check():
        c = k.get(*CLAIM, ns, name)
        cond = condition(c)
        return c if cond and cond["status"] == "True" else None
    return wait_until(check, timeout, interval=0.1, what=f"claim {name} Ready")


def test_pool_fills_and_claim_adopts_warm(cluster, namespace, controller):
    k = cluster.admin
    template(k, namespace)
    pool(k, namespace, "p", 3)
    wait_pool_ready(k, namespace, "p", 3)
    st = k.get(*POOL, namespace, "p")["status"]
    assert st["replicas"] == 3
    # The scale subresource reads the pool's replicas and selector.
    scale = k.request("GET", f"/apis/{EXT}/namespaces/{namespace}/sandboxwarmpools/p/scale")
    assert scale["spec"]["replicas"] == 3 and scale["status"]["selector"] == st["selector"]
    warm = {sb["metadata"]["name"] for sb in owned_by(k, namespace, "SandboxWarmPool", "p")}
    pod = k.get("v1", "Pod", namespace, sorted(warm)[0])
    assert pod["metadata"]["labels"]["tier"] == "agent"
    assert pod["spec"]["containers"][0]["command"][-3:] == ["python3", "-m", "http.server"]

    before = controller.metrics()
    claim(k, namespace, "c1", "p")
    c = wait_claim_ready(k, namespace, "c1")
    name = c["status"]["sandbox"]["name"]
    assert name in warm, "a warm sandbox was adopted"
    assert c["status"]["sandbox"]["podIPs"]
    sb = k.get(*SB, namespace, name)
    ref = next(r for r in sb["metadata"]["ownerReferences"] if r.get("controller"))
    assert ref["kind"] == "SandboxClaim" and ref["uid"] == c["metadata"]["uid"]
    assert sb["metadata"]["labels"]["agents.x-k8s.io/claim-uid"] == c["metadata"]["uid"]
    assert "agents.x-k8s.io/warm-pool-sandbox" not in sb["metadata"]["labels"]
    after = controller.metrics()
    assert after['sandboxd_controller_claims_total{start="warm"}'] - before['sandboxd_controller_claims_total{start="warm"}'] == 1
    assert after["sandboxd_controller_claim_writes_total"] - before["sandboxd_controller_claim_writes_total"] <= 3

    # The pool refills to three ready ones besides the claimed sandbox.
    wait_pool_ready(k, namespace, "p", 3)
    assert name not in {s["metadata"]["name"] for s in owned_by(k, namespace, "SandboxWarmPool", "p")}

    # The claim's Ready follows its sandbox.
    k.patch(*SB, namespace, name, {"spec": {"operatingMode": "Suspended"}})
    wait_until(lambda: (condition(k.get(*CLAIM, namespace, "c1")) or {}).get("reason") == "SandboxSuspended",
               WAIT, what="claim Ready mirrors the suspended sandbox")


def test_claims_beyond_the_pool_start_cold(cluster, namespace, start_controller):
    # One new warm sandbox every 20 s: the claims below cannot all find a warm one.
    ctrl = start_controller("--sandbox-warm-pool-max-refill-rate=0.05", "--sandbox-warm-pool-max-batch-size=1")
    k = cluster.admin
    template(k, namespace)
    pool(k, namespace, "small", 1)
    wait_pool_ready(k, namespace, "small", 1)
    for i in range(3):
        claim(k, namespace, f"c{i}", "small")
    names = {wait_claim_ready(k, namespace, f"c{i}")["status"]["sandbox"]["name"] for i in range(3)}
    assert len(names) == 3
    m = ctrl.metrics()
    assert m['sandboxd_controller_claims_total{start="warm"}'] == 1
    assert m['sandboxd_controller_claims_total{start="cold"}'] == 2
    assert {f"c{i}" for i in range(3)} & names, "cold sandboxes are named after their claims"


def test_claim_env_and_metadata_start_cold(cluster, namespace, controller):
    k = cluster.admin
    template(k, namespace, envVarsInjectionPolicy="Allowed")
    pool(k, namespace, "p", 1)
    wait_pool_ready(k, namespace, "p", 1)
    claim(k, namespace, "withenv", "p", env=[{"name": "TASK", "value": "42"}],
          additionalPodMetadata={"labels": {"team": "a"}})
    c = wait_claim_ready(k, namespace, "withenv")
    assert c["status"]["sandbox"]["name"] == "withenv"
    pod = k.get("v1", "Pod", namespace, "withenv")
    assert {"name": "TASK", "value": "42"} in pod["spec"]["containers"][0]["env"]
    assert pod["metadata"]["labels"]["team"] == "a"


def test_claim_env_follows_the_templates_policy(cluster, namespace, controller):
    """envVarsInjectionPolicy: Disallowed (the default) refuses a claim's env, Allowed adds new
    variables only (and none to a container with envFrom), Overrides also replaces values."""
    k = cluster.admin
    x = {"env": [{"name": "X", "value": "1"}]}
    template(k, namespace, "closed", container=x)
    template(k, namespace, "allowed", container=x, envVarsInjectionPolicy="Allowed")
    template(k, namespace, "overrides", container=x, envVarsInjectionPolicy="Overrides")
    template(k, namespace, "envfrom", container={"envFrom": [{"configMapRef": {"name": "cm"}}]},
             envVarsInjectionPolicy="Allowed")
    for t in ("closed", "allowed", "overrides", "envfrom"):
        pool(k, namespace, t, 0, tpl=t)

    def rejected(name, pool_name, env, why):
        claim(k, namespace, name, pool_name, env=env)
        c = wait_until(lambda: (lambda cond: cond if cond and cond["reason"] == "EnvVarsInjectionRejected"
                                else None)(condition(k.get(*CLAIM, namespace, name))),
                       WAIT, what=f"claim {name} rejected")
        assert c["status"] == "False" and why in c["message"], c
        assert k.find(*SB, namespace, name) is None

    rejected("c-closed", "closed", [{"name": "NEW", "value": "1"}], "Disallowed")
    rejected("c-override", "allowed", [{"name": "X", "value": "2"}], "overridden")
    rejected("c-envfrom", "envfrom", [{"name": "NEW", "value": "1"}], "envFrom")
    rejected("c-nocontainer", "allowed", [{"name": "NEW", "value": "1", "containerName": "nope"}],
             "nope")
    claim(k, namespace, "c-allowed", "allowed", env=[{"name": "NEW", "value": "1"}])
    claim(k, namespace, "c-overrides", "overrides", env=[{"name": "X", "value": "2"}])
    wait_claim_ready(k, namespace, "c-allowed")
    wait_claim_ready(k, namespace, "c-overrides")
    env = k.get("v1", "Pod", namespace, "c-allowed")["spec"]["containers"][0]["env"]
    assert {"name": "X", "value": "1"} in env and {"name": "NEW", "value": "1"} in env
    env = k.get("v1", "Pod", namespace, "c-overrides")["spec"]["containers"][0]["env"]
    assert [e for e in env if e["name"] == "X"] == [{"name": "X", "value": "2"}]


def test_pool_fills_at_the_paced_rate(cluster, namespace, start_controller):
    start_controller("--sandbox-warm-pool-max-refill-rate=4", "--sandbox-warm-pool-max-batch-size=1")
    k = cluster.admin
    template(k, namespace)
    pool(k, namespace, "paced", 8)
    wait_pool_ready(k, namespace, "paced", 8)
    times = sorted(sb["metadata"]["creationTimestamp"] for sb in owned_by(k, namespace, "SandboxWarmPool", "paced"))
    secs = [int(t[11:13]) * 3600 + int(t[14:16]) * 60 + int(t[17:19]) for t in times]
    # One token at once, then four a second: seven more need at least 1.75 s.
    assert (secs[-1] - secs[0]) % 86400 >= 1


def test_stop_while_workers_wait_for_the_api(cluster, namespace, start_controller):
    """SIGTERM while a pool grows, its worker throttled by the client-side QPS limit between
    creates and still to look at the Pods of its sandboxes that are not ready: the throttled
    requests are cancelled (the pool stops short of its replicas) and the controller exits 0.
    (Workers once outlived the informers whose caches they read after their requests: a
    use-after-free that AddressSanitizer reports and that aborted a gcc build at exit.)"""
    c = start_controller("--kube-api-qps=2", "--kube-api-burst=8", "--leader-elect=false")
    k = cluster.admin
    # Pods that no node takes: the pool's sandboxes stay not ready.
    k.create({"apiVersion": EXT, "kind": "SandboxTemplate", "metadata": {"name": "tpl", "namespace": namespace},
              "spec": {"podTemplate": {"spec": {"nodeSelector": {"sandboxd.test/none": "x"}, "containers": [
                  {"name": "main", "image": "python:3.12"}]}}}})
    pool(k, namespace, "slow", 2)
    wait_until(lambda: len(owned_by(k, namespace, "SandboxWarmPool", "slow")) == 2, WAIT, what="two sandboxes")
    k.patch(*POOL, namespace, "slow", {"spec": {"replicas": 16}})
    wait_until(lambda: len(owned_by(k, namespace, "SandboxWarmPool", "slow")) > 3, WAIT, what="the pool growing")
    assert c.stop() == 0, c.tail()
    # At two requests a second the twelve creates left need six more seconds.
    assert len(owned_by(k, namespace, "SandboxWarmPool", "slow")) < 16, c.tail()


def test_scale_down_and_cleanup(cluster, namespace, controller):
    k = cluster.admin
    template(k, namespace)
    pool(k, namespace, "p", 3)
    wait_pool_ready(k, namespace, "p", 3)
    k.patch(*POOL, namespace, "p", {"spec": {"replicas": 1}})
    wait_pool_ready(k, namespace, "p", 1)

    claim(k, namespace, "c", "p")
    name = wait_claim_ready(k, namespace, "c")["status"]["sandbox"]["name"]
    k.delete(*CLAIM, namespace, "c")
    wait_until(lambda: k.find(*SB, namespace, name) is None, WAIT, what="the claim's sandbox deleted")
    wait_until(lambda: k.find("v1", "Pod", namespace, name) is None, WAIT, what="its pod deleted")

    wait_pool_ready(k, namespace, "p", 1)
    left = [sb["metadata"]["name"] for sb in owned_by(k, namespace, "SandboxWarmPool", "p")]
    k.delete(*POOL, namespace, "p")
    for n in left:
        wait_until(lambda: k.find(*SB, namespace, n) is None, WAIT, what=f"pool sandbox {n} deleted")
    assert not [p for p in k.list("v1", "Pod", namespace) if re.match(r"p-", p["metadata"]["name"])
                and "deletionTimestamp" not in p["metadata"]] or wait_until(
        lambda: not k.list("v1", "Pod", namespace), WAIT, what="pods gone")


def test_claim_of_missing_pool(cluster, namespace, controller):
    k = cluster.admin
    claim(k, namespace, "lost", "nope")
    wait_until(lambda: (condition(k.get(*CLAIM, namespace, "lost")) or {}).get("reason") == "WarmPoolNotFound",
               WAIT, what="claim reports the missing pool")
    assert controller.alive()


def test_claim_lifecycle_expires_its_sandbox(cluster, namespace, controller):
    from test_sandbox import soon
    k = cluster.admin
    template(k, namespace)
    pool(k, namespace, "p", 1)
    wait_pool_ready(k, namespace, "p", 1)
    claim(k, namespace, "short", "p", lifecycle={"shutdownTime": soon(4), "shutdownPolicy": "Retain"})
    name = wait_claim_ready(k, namespace, "short")["status"]["sandbox"]["name"]
    assert k.get(*SB, namespace, name)["spec"]["shutdownPolicy"] == "Retain"
    wait_until(lambda: (condition(k.get(*CLAIM, namespace, "short")) or {}).get("reason") == "SandboxExpired",
               WAIT, what="the claim's sandbox expired")
    wait_until(lambda: k.find("v1", "Pod", namespace, name) is None, WAIT, what="its pod removed")
    assert k.find(*SB, namespace, name), "Retain keeps the Sandbox"


def test_claim_ttl_after_finished(cluster, namespace, controller):
    """lifecycle.ttlSecondsAfterFinished, as the reference: a sandbox whose Pod reached a terminal
    phase says Finished; that long after, a Delete claim goes with its sandbox, a Retain claim
    stays and its sandbox expires; a claim without a TTL keeps its finished sandbox."""
    k = cluster.admin
    template(k, namespace)
    pool(k, namespace, "p", 3)
    wait_pool_ready(k, namespace, "p", 3)
    claim(k, namespace, "del", "p", lifecycle={"ttlSecondsAfterFinished": 2, "shutdownPolicy": "Delete"})
    claim(k, namespace, "ret", "p", lifecycle={"ttlSecondsAfterFinished": 2})
    claim(k, namespace, "keep", "p")
    sb = {c: wait_claim_ready(k, namespace, c)["status"]["sandbox"]["name"] for c in ("del", "ret", "keep")}
    for c, phase in (("del", "Succeeded"), ("ret", "Failed"), ("keep", "Succeeded")):
        k.patch("v1", "Pod", namespace, sb[c], {"status": {
            "phase": phase, "conditions": [{"type": "Ready", "status": "False"}]}}, sub="status")
    for c, reason in (("ret", "PodFailed"), ("keep", "PodSucceeded")):
        fin = wait_until(lambda c=c: condition(k.get(*SB, namespace, sb[c]), "Finished"), WAIT,
                         what=f"the sandbox of {c} Finished")
        assert (fin["status"], fin["reason"]) == ("True", reason)
        mirrored = wait_until(lambda c=c: condition(k.get(*CLAIM, namespace, c), "Finished"), WAIT,
                              what=f"claim {c} mirroring Finished")
        assert mirrored["lastTransitionTime"] == fin["lastTransitionTime"]

    wait_until(lambda: k.find(*CLAIM, namespace, "del") is None, WAIT, what="the Delete claim deleted")
    wait_until(lambda: k.find(*SB, namespace, sb["del"]) is None, WAIT, what="its sandbox deleted")
    wait_until(lambda: (condition(k.get(*SB, namespace, sb["ret"])) or {}).get("reason") == "SandboxExpired",
               WAIT, what="the Retain claim's sandbox expired")
    wait_until(lambda: k.find("v1", "Pod", namespace, sb["ret"]) is None, WAIT, what="its pod removed")
    assert k.get(*SB, namespace, sb["ret"])["spec"]["shutdownPolicy"] == "Retain"
    wait_until(lambda: (condition(k.get(*CLAIM, namespace, "ret")) or {}).get("reason") == "SandboxExpired",
               WAIT, what="the Retain claim says so")
    # No TTL: the finished sandbox and its claim stay, well past the others' TTL.
    assert k.find(*CLAIM, namespace, "keep") and k.find("v1", "Pod", namespace, sb["keep"])
    assert "shutdownTime" not in k.get(*SB, namespace, sb["keep"])["spec"]


def test_pool_update_strategy(cluster, namespace, controller):
    """updateStrategy, as the reference: when the template's pod template changes, a Recreate
    pool replaces its warm sandboxes with fresh ones, an OnReplenish (default) pool keeps them;
    a claimed sandbox is never touched."""
    k = cluster.admin
    template(k, namespace)
    k.create({"apiVersion": EXT, "kind": "SandboxWarmPool", "metadata": {"name": "rec", "namespace": namespace},
              "spec": {"replicas": 2, "sandboxTemplateRef": {"name": "tpl"},
                       "updateStrategy": {"type": "Recreate"}}})
    pool(k, namespace, "onr", 2)
    wait_pool_ready(k, namespace, "rec", 2)
    wait_pool_ready(k, namespace, "onr", 2)
    claim(k, namespace, "c", "rec")
    claimed = wait_claim_ready(k, namespace, "c")["status"]["sandbox"]["name"]
    wait_pool_ready(k, namespace, "rec", 2)
    names = lambda p: {s["metadata"]["name"] for s in owned_by(k, namespace, "SandboxWarmPool", p)}  # noqa: E731
    old_rec, old_onr = names("rec"), names("onr")

    k.patch(*TEMPLATE, namespace, "tpl", {"spec": {"podTemplate": {"metadata": {"labels": {"v": "2"}}, "spec": {
        "containers": [{"name": "main", "image": "python:3.12", "command": ["python3", "-m", "http.server", "81"]}]}}}})
    wait_until(lambda: not names("rec") & old_rec, WAIT, what="the Recreate pool's stale sandboxes replaced")
    wait_pool_ready(k, namespace, "rec", 2)
    for s in owned_by(k, namespace, "SandboxWarmPool", "rec"):
        assert s["spec"]["podTemplate"]["spec"]["containers"][0]["command"][-1] == "81"
        assert s["spec"]["podTemplate"]["metadata"]["labels"]["v"] == "2"
    assert names("onr") == old_onr, "OnReplenish keeps its warm sandboxes"
    sb = k.get(*SB, namespace, claimed)
    assert sb["spec"]["podTemplate"]["spec"]["containers"][0]["command"][-1] == "http.server", "claimed: untouched"
    assert "deletionTimestamp" not in sb["metadata"]


def test_never_ready_replaced_unschedulable_held(cluster, namespace, start_controller):
    ctrl = start_controller("--sandbox-warm-pool-readiness-grace-period=2s",
                            "--sandbox-warm-pool-unschedulable-recheck-interval=1s")
    k = cluster.admin
    spec = {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "inf"]}]}
    for name, pod_meta, pod_spec in (
            ("stuck", {"labels": {"sandboxd.test/never-ready": "true"}}, spec),
            ("nowhere", {}, dict(spec, nodeSelector={"sandboxd.test/no-such-node": "x"}))):
        k.create({"apiVersion": EXT, "kind": "SandboxTemplate", "metadata": {"name": name, "namespace": namespace},
                  "spec": {"podTemplate": {"metadata": pod_meta, "spec": pod_spec}}})
        pool(k, namespace, name, 1, tpl=name)
    first = {n: wait_until(lambda n=n: owned_by(k, namespace, "SandboxWarmPool", n), WAIT,
                           what=f"pool {n} sandbox")[0]["metadata"]["name"] for n in ("stuck", "nowhere")}

    # Never ready, though scheduled: replaced by a new one.
    wait_until(lambda: [s for s in owned_by(k, namespace, "SandboxWarmPool", "stuck")
                        if s["metadata"]["name"] != first["stuck"]], WAIT, what="a replacement")
    wait_until(lambda: k.find(*SB, namespace, first["stuck"]) is None, WAIT, what="the stuck one deleted")
    assert f'replacing "{first["stuck"]}"' in ctrl.log.read_text()

    # Unschedulable: held past the grace period, not churned.
    wait_until(lambda: f'holding "{first["nowhere"]}"' in ctrl.log.read_text(), WAIT,
               what="the unschedulable one held")
    assert [s["metadata"]["name"] for s in owned_by(k, namespace, "SandboxWarmPool", "nowhere")] == [first["nowhere"]]


def test_template_network_policy(cluster, namespace, controller):
    k = cluster.admin
    rules = {"ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                          "ports": [{"port": 8080}]}],
             "egress": []}
    k.create({"apiVersion": EXT, "kind": "SandboxTemplate", "metadata": {"name": "fenced", "namespace": namespace},
              "spec": {"networkPolicy": rules, "podTemplate": {"spec": {
                  "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "inf"]}]}}}})
    policy = lambda: network_policy(k, namespace, "fenced")  # noqa: E731
    np = wait_until(policy, WAIT, what="the template's NetworkPolicy")
    assert np["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert np["spec"]["ingress"][0]["ports"][0]["port"] == 8080
    assert np["spec"].get("egress", []) == []
    assert np["metadata"]["ownerReferences"][0]["kind"] == "SandboxTemplate"
    (label, value), = np["spec"]["podSelector"]["matchLabels"].items()

    pool(k, namespace, "fp", 1, tpl="fenced")
    sb = wait_until(lambda: owned_by(k, namespace, "SandboxWarmPool", "fp"), WAIT, what="pool sandbox")[0]
    pod = wait_until(lambda: k.find("v1", "Pod", namespace, sb["metadata"]["name"]), WAIT, what="its pod")
    assert pod["metadata"]["labels"][label] == value, "the policy selects the pool's pods"
    assert pod["spec"].get("dnsPolicy") != "None", "its own rules: cluster DNS left alone"

    k.patch(*TEMPLATE, namespace, "fenced", {"spec": {"networkPolicyManagement": "Unmanaged"}})
    wait_until(lambda: policy() is None, WAIT, what="the policy removed when Unmanaged")


def test_template_default_network_policy(cluster, namespace, controller):
    """A template without networkPolicy gets the secure default, as the reference: ingress only to
    sandboxd's two ports, egress only to public addresses; Unmanaged opts out, Managed brings it
    back, and it goes with the template."""
    k = cluster.admin
    template(k, namespace, "open")
    policy = lambda: network_policy(k, namespace, "open")  # noqa: E731
    np = wait_until(policy, WAIT, what="the template's default NetworkPolicy")
    owner, = np["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("SandboxTemplate", "open", True)
    assert owner["uid"] == k.get(*TEMPLATE, namespace, "open")["metadata"]["uid"]
    spec = np["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    rule, = spec["ingress"]
    assert "from" not in rule, "any peer, but only to sandboxd's ports"
    # By name: the numbers depend on the ports a pod's containers declare.
    assert sorted((p["protocol"], p["port"]) for p in rule["ports"]) == [
        ("TCP", "sandboxd-e2b"), ("TCP", "sandboxd-grpc"), ("TCP", "sandboxd-http")]
    rule, = spec["egress"]
    assert "ports" not in rule
    blocks = {p["ipBlock"]["cidr"]: sorted(p["ipBlock"]["except"]) for p in rule["to"]}
    assert blocks == {"0.0.0.0/0": ["10.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16"],
                      "::/0": ["fc00::/7", "fe80::/10"]}
    (label, value), = spec["podSelector"]["matchLabels"].items()

    pool(k, namespace, "op", 1, tpl="open")
    sb = wait_until(lambda: owned_by(k, namespace, "SandboxWarmPool", "op"), WAIT, what="pool sandbox")[0]
    pod = wait_until(lambda: k.find("v1", "Pod", namespace, sb["metadata"]["name"]), WAIT, what="its pod")
    assert pod["metadata"]["labels"][label] == value, "the policy selects the template's pods"
    # Cluster DNS is out of reach: public resolvers instead, as the reference.
    assert pod["spec"]["dnsPolicy"] == "None"
    assert pod["spec"]["dnsConfig"]["nameservers"] == ["8.8.8.8", "1.1.1.1"]

    k.patch(*TEMPLATE, namespace, "open", {"spec": {"networkPolicyManagement": "Unmanaged"}})
    wait_until(lambda: policy() is None, WAIT, what="the default policy removed when Unmanaged")
    k.patch(*TEMPLATE, namespace, "open", {"spec": {"networkPolicyManagement": "Managed"}})
    wait_until(policy, WAIT, what="the default policy back when Managed")

    k.delete(*POOL, namespace, "op")
    k.delete(*TEMPLATE, namespace, "open")
    wait_until(lambda: policy() is None, WAIT, what="the policy gone with its template")


def test_replenish_delay_defers_the_refill(cluster, namespace, start_controller):
    """--sandbox-warm-pool-replenish-delay: after a claim takes a warm sandbox the pool waits
    before refilling (a burst of claims gets the API server first), then refills."""
    ctrl = start_controller("--sandbox-warm-pool-replenish-delay=10s")
    k = cluster.admin
    template(k, namespace)
    pool(k, namespace, "p", 3)
    wait_pool_ready(k, namespace, "p", 3)
    claim(k, namespace, "c1", "p")
    wait_claim_ready(k, namespace, "c1")
    wait_until(lambda: ctrl.metrics()["sandboxd_controller_pool_refills_deferred_total"] >= 1,
               WAIT, interval=0.1, what="a deferred refill")
    assert len(owned_by(k, namespace, "SandboxWarmPool", "p")) == 2, "refilled despite the delay"
    wait_pool_ready(k, namespace, "p", 3, timeout=60)


def test_claim_cannot_move_its_pod_out_of_the_templates_policy(cluster, namespace, controller):
    """The template's label (its NetworkPolicy selects its sandboxes' pods by it) is not a claim's
    to change through additionalPodMetadata; the claim's other labels are applied."""
    label = "agents.x-k8s.io/sandbox-template-ref-hash"
    k = cluster.admin
    template(k, namespace, "fenced2")
    pool(k, namespace, "fp2", 1, tpl="fenced2")
    wait_pool_ready(k, namespace, "fp2", 1)
    claim(k, namespace, "mover", "fp2",
          additionalPodMetadata={"labels": {"team": "b", label: "elsewhere"}})
    wait_claim_ready(k, namespace, "mover")
    warm = owned_by(k, namespace, "SandboxWarmPool", "fp2")
    warm_pod = wait_until(lambda: warm and k.find("v1", "Pod", namespace, warm[0]["metadata"]["name"]),
                          WAIT, what="a warm pod of the template")
    pod = k.get("v1", "Pod", namespace, "mover")
    assert pod["metadata"]["labels"]["team"] == "b"
    assert pod["metadata"]["labels"][label] == warm_pod["metadata"]["labels"][label] != "elsewhere"
