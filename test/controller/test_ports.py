"""sandboxd's ports never collide with the app's: a pod whose containers declare 9090 or 8080
(ports apps use most) gets sandboxd on the first free pair of 19090/18080 upward, told with
--grpc-port/--rest-port, named sandboxd-grpc/sandboxd-http on the main container, probed by name
(HTTP) or by the chosen number (gRPC), and carried by the Service; a pod declaring neither keeps
9090/8080. The names stay sandboxd's."""

from conftest import wait_until
from test_pool import claim, network_policy, pool, template, wait_claim_ready
from test_sandbox import sandbox, wait_ready

WAIT = 30


def app(*ports):
    """A container serving HTTP on the first of ports, all of which it declares; a port is a
    number or (number, name)."""
    ports = [(p, None) if isinstance(p, int) else p for p in ports]
    listen = str(ports[0][0]) if ports else "8000"
    return {"name": "app", "image": "python:3.12", "command": ["python3", "-m", "http.server", listen],
            "ports": [dict(containerPort=p, **({"name": n} if n else {})) for p, n in ports]}


def flag(cmd, name):
    """The value of --name=V before "--" in cmd, or None."""
    for a in cmd[:cmd.index("--")] if "--" in cmd else cmd:
        if a.startswith(f"--{name}="):
            return int(a.split("=", 1)[1])
    return None


def named(main):
    return {p["name"]: p["containerPort"] for p in main.get("ports", []) if p.get("name")}


def ready_pod(k, ns, name):
    wait_ready(k, ns, name, "True", "DependenciesReady")
    return k.get("v1", "Pod", ns, name)


def check_sandboxd(pod, grpc, rest, probe="http"):
    main = pod["spec"]["containers"][0]
    cmd = main["command"]
    assert cmd[0] == "/.sandboxd/sandboxd"
    if (grpc, rest) == (9090, 8080):
        assert flag(cmd, "grpc-port") is None and flag(cmd, "rest-port") is None, cmd
    else:
        assert (flag(cmd, "grpc-port"), flag(cmd, "rest-port")) == (grpc, rest), cmd
    ports = named(main)
    assert (ports["sandboxd-grpc"], ports["sandboxd-http"]) == (grpc, rest)
    for p in ("readinessProbe", "livenessProbe"):
        if probe == "http":
            assert main[p]["httpGet"]["port"] == "sandboxd-http", main[p]
        else:
            assert main[p]["grpc"]["port"] == grpc, main[p]
    return main


def test_no_ports_declared_keeps_the_defaults(cluster, namespace, controller):
    k = cluster.admin
    k.create(sandbox("plain", namespace, pod_spec={"containers": [app()]}, service=True))
    pod = ready_pod(k, namespace, "plain")
    check_sandboxd(pod, 9090, 8080)
    svc = k.get("v1", "Service", namespace, "plain")
    assert sorted(p["port"] for p in svc["spec"]["ports"]) == [8080, 9090]


def test_app_declaring_8080(cluster, namespace, controller):
    """Refused as InvalidSpec before: now Ready, sandboxd aside, the app's 8080 untouched."""
    k = cluster.admin
    k.create(sandbox("web", namespace, pod_spec={"containers": [app(8080)]}, service=True))
    pod = ready_pod(k, namespace, "web")
    main = check_sandboxd(pod, 19090, 18080)
    assert main["command"][-5:] == ["--", "python3", "-m", "http.server", "8080"]
    assert {"containerPort": 8080, "protocol": "TCP"}.items() <= main["ports"][0].items()
    svc = k.get("v1", "Service", namespace, "web")
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"grpc": 19090, "http": 18080}


def test_app_declaring_8080_and_9090(cluster, namespace, controller):
    k = cluster.admin
    k.create(sandbox("both", namespace, pod_spec={"containers": [app(8080, (9090, "metrics"))]}))
    check_sandboxd(ready_pod(k, namespace, "both"), 19090, 18080)


def test_ports_declared_by_another_container(cluster, namespace, controller):
    """Every container shares the pod's network: a second one's 9090 moves sandboxd too, and past
    an alternative that is taken as well."""
    k = cluster.admin
    side = {"name": "side", "image": "debian:12", "command": ["sleep", "inf"],
            "ports": [{"containerPort": 9090}, {"containerPort": 18080}]}
    k.create(sandbox("two", namespace, pod_spec={"containers": [app(8000), side]}))
    check_sandboxd(ready_pod(k, namespace, "two"), 19091, 18081)


def test_grpc_probes_take_the_chosen_number(cluster, namespace, start_controller):
    start_controller("--sandboxd-probe=grpc")
    k = cluster.admin
    k.create(sandbox("grpcp", namespace, pod_spec={"containers": [app(9090)]}))
    check_sandboxd(ready_pod(k, namespace, "grpcp"), 19090, 18080, probe="grpc")


def test_our_port_names_are_refused(cluster, namespace, controller):
    k = cluster.admin
    k.create(sandbox("thief", namespace, pod_spec={"containers": [app((7000, "sandboxd-http"))]}))
    c = wait_ready(k, namespace, "thief", "False", "InvalidSpec")
    assert "sandboxd-http" in c["message"]
    assert k.find("v1", "Pod", namespace, "thief") is None


def test_claimed_from_a_template_declaring_8080(cluster, namespace, controller):
    """The reference's usual workload: a template whose app serves 8080, a warm pool, a claim.
    The template's default NetworkPolicy admits sandboxd's ports by name."""
    k = cluster.admin
    template(k, namespace, "web", container={"command": ["python3", "-m", "http.server", "8080"],
                                             "ports": [{"containerPort": 8080}]})
    pool(k, namespace, "p", 1, tpl="web")
    claim(k, namespace, "c", "p")
    name = wait_claim_ready(k, namespace, "c")["status"]["sandbox"]["name"]
    check_sandboxd(ready_pod(k, namespace, name), 19090, 18080)
    np = wait_until(lambda: network_policy(k, namespace, "web"), WAIT, what="the default policy")
    rule, = np["spec"]["ingress"]
    assert sorted(p["port"] for p in rule["ports"]) == ["sandboxd-e2b", "sandboxd-grpc",
                                                        "sandboxd-http"]
