"""Sandbox lifecycle on Kubernetes (the `k8s` extra: pip install 'sandboxd[k8s]').

    from sandboxd.k8s import SandboxClient

    client = SandboxClient(namespace="agents")             # kubeconfig, or in-cluster
    with client.claim("python-pool", timeout=120) as sb:   # a SandboxClaim on a warm pool
        print(sb.run("python3 -c 'print(6 * 7)'").stdout)  # sb delegates to sandboxd.Sandbox
    # leaving the block deleted the claim (and the controller its sandbox)

    with client.create_sandbox(template="python") as sb:   # a pool of that template, else a
        ...                                                # Sandbox made from the template

AsyncSandboxClient is the same for asyncio (`async with await client.claim(pool) as sb`).

A handle (SandboxLease) is created at once; entering it waits until the sandbox is Ready,
reads its address (the pod IP from the Sandbox status, the ports from the pod's
sandboxd-grpc/sandboxd-http container ports) and its token (the per-sandbox Secret the
controller made), and connects; leaving it closes the connection and deletes what it created.
Every API call is bounded by `timeout`, every wait by its own timeout.

How it connects (`connect=`): "pod-ip" dials the pod IP (in the cluster, or wherever pod IPs
are routed); "port-forward" opens local listeners on 127.0.0.1 that reach the pod's ports
through the API server (pods/portforward, as `kubectl port-forward`), for a laptop outside
the cluster; "router" goes through the sandboxd-router at `router=` (default
$SANDBOXD_ROUTER), by the sandbox's name and namespace, every lease of the client over one
connection; "auto" (the default) is "router" when a router is given, else the pod IP inside a
pod or when it answers within a second, else the port-forward.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import os
import socket
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, TypeVar

from . import errors
from .aio import AsyncSandbox
from .client import Sandbox
from .portforward import Forwarder
from .router import Router

try:
    import kubernetes  # type: ignore[import-untyped]
    import urllib3
    from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]

    _TRANSPORT_ERRORS: tuple = (OSError, urllib3.exceptions.HTTPError)
except ImportError:  # pragma: no cover - the extra is not installed
    kubernetes = None
    ApiException = None
    _TRANSPORT_ERRORS = (OSError,)

GROUP, EXT_GROUP, VERSION = "agents.x-k8s.io", "extensions.agents.x-k8s.io", "v1beta1"
TEMPLATE_LABEL = "agents.x-k8s.io/sandbox-template-ref-hash"
SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
CONNECT_MODES = ("auto", "pod-ip", "port-forward", "router")
PROBE_TIMEOUT = 1.0  # "auto": how long the pod IP has to answer
T = TypeVar("T")


def name_hash(name: str) -> str:
    """The controller's hash of a name (32-bit FNV-1a, 8 hex digits)."""
    h = 2166136261
    for b in name.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return "%08x" % h


def token_secret_name(sandbox: str) -> str:
    """The name of the Secret that holds a sandbox's sandboxd token (as the controller names
    it: '<sandbox>-sandboxd-token', or a prefix and a hash when that is too long)."""
    n = f"{sandbox}-sandboxd-token"
    return n if len(n) <= 253 else f"{sandbox[:200]}-{name_hash(sandbox)}-sandboxd-token"


def _condition(obj: Mapping[str, Any], kind: str = "Ready") -> Dict[str, Any]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return {}


_API_ERRORS = {400: errors.InvalidArgumentError, 401: errors.UnauthenticatedError,
               403: errors.PermissionDeniedError, 404: errors.NotFoundError,
               409: errors.ConflictError, 422: errors.InvalidArgumentError}


def _api(what: str, fn: Callable[..., T], *a: Any, **kw: Any) -> T:
    """Calls the Kubernetes API; its errors become SandboxErrors naming what was asked."""
    try:
        return fn(*a, **kw)
    except ApiException as e:
        cls = _API_ERRORS.get(e.status, errors.UnavailableError)
        raise cls(f"{what}: {e.reason}", http_status=e.status) from None
    except _TRANSPORT_ERRORS as e:  # connection refused, timed out
        raise errors.UnavailableError(f"{what}: {e}") from None


def _api_client(kubeconfig: Optional[str], context: Optional[str]) -> Any:
    if kubernetes is None:
        raise ImportError("sandboxd.k8s needs the kubernetes package: pip install 'sandboxd[k8s]'")
    try:
        if kubeconfig is None and not os.environ.get("KUBECONFIG") and os.environ.get(
                "KUBERNETES_SERVICE_HOST"):
            cfg = kubernetes.client.Configuration()
            kubernetes.config.load_incluster_config(client_configuration=cfg)
            return kubernetes.client.ApiClient(cfg)
        return kubernetes.config.new_client_from_config(config_file=kubeconfig, context=context)
    except kubernetes.config.ConfigException as e:
        raise errors.InvalidArgumentError(f"kubernetes config: {e}") from None


def _default_namespace(kubeconfig: Optional[str], context: Optional[str]) -> str:
    try:
        _, active = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
        if context:
            ctxs, _ = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
            active = next((c for c in ctxs if c["name"] == context), active)
        ns = (active or {}).get("context", {}).get("namespace")
        if ns:
            return str(ns)
    except Exception:  # no kubeconfig: in a pod, the service account's namespace
        try:
            with open(SA_NAMESPACE) as f:
                return f.read().strip() or "default"
        except OSError:
            pass
    return "default"


class SandboxClient:
    """Claims and creates sandboxes through the Kubernetes API (the official client).

    namespace: where claims and sandboxes live (default: the kubeconfig context's, in a pod
    the service account's, else "default"). kubeconfig/context: as kubectl's (default
    $KUBECONFIG or ~/.kube/config; in a pod without either, the in-cluster config).
    grpc_port/rest_port: used when the pod's ports cannot be read. timeout bounds each API
    call and is passed on to the sandboxd connection. connect: "auto", "pod-ip",
    "port-forward" or "router" (see the module's doc; port-forward needs the pods/portforward
    right); router: the URL of a sandboxd-router (default $SANDBOXD_ROUTER), router_ca_file
    the CA (PEM) of an https:// one with a private certificate.
    """

    def __init__(self, namespace: Optional[str] = None, *, kubeconfig: Optional[str] = None,
                 context: Optional[str] = None, api_client: Any = None, grpc_port: int = 9090,
                 rest_port: int = 8080, timeout: float = 30.0, connect: str = "auto",
                 router: Optional[str] = None, router_ca_file: Optional[str] = None) -> None:
        if connect not in CONNECT_MODES:
            raise errors.InvalidArgumentError(
                f"connect must be one of {', '.join(CONNECT_MODES)}, not {connect!r}")
        self.router_url = router or os.environ.get("SANDBOXD_ROUTER") or None
        self.router_ca_file = router_ca_file
        if connect == "auto" and self.router_url:
            connect = "router"
        if connect == "router" and not self.router_url:
            raise errors.InvalidArgumentError("connect='router' needs router= (or $SANDBOXD_ROUTER)")
        self.connect_mode = connect
        self._router: Optional[Router] = None
        self.api_client = api_client or _api_client(kubeconfig, context)
        self.namespace = namespace or _default_namespace(kubeconfig, context)
        self.custom = kubernetes.client.CustomObjectsApi(self.api_client)
        self.core = kubernetes.client.CoreV1Api(self.api_client)
        self.grpc_port, self.rest_port, self.timeout = grpc_port, rest_port, float(timeout)

    def close(self) -> None:
        if self._router is not None:
            self._router.close()
        self.api_client.close()

    def router(self) -> Router:
        """The one connection to the router that the leases of this client share."""
        if self._router is None or self._router.closed:
            self._router = Router(str(self.router_url), timeout=self.timeout,
                                  ca_file=self.router_ca_file)
        return self._router

    def __enter__(self) -> "SandboxClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the objects ---------------------------------------------------------------------------

    def _get(self, group: str, plural: str, name: str) -> Dict[str, Any]:
        return _api(f"get {plural}/{name}", self.custom.get_namespaced_custom_object, group,
                    VERSION, self.namespace, plural, name, _request_timeout=self.timeout)

    def _create(self, group: str, plural: str, body: Dict[str, Any]) -> Dict[str, Any]:
        return _api(f"create {plural}", self.custom.create_namespaced_custom_object, group,
                    VERSION, self.namespace, plural, body, _request_timeout=self.timeout)

    def _delete(self, group: str, plural: str, name: str) -> None:
        try:
            _api(f"delete {plural}/{name}", self.custom.delete_namespaced_custom_object, group,
                 VERSION, self.namespace, plural, name, _request_timeout=self.timeout)
        except errors.NotFoundError:
            pass

    def claim(self, pool: str, *, name: Optional[str] = None,
              env: Optional[Mapping[str, str]] = None,
              labels: Optional[Mapping[str, str]] = None,
              timeout: float = 120.0) -> "SandboxLease":
        """Creates a SandboxClaim on the warm pool (a generated name unless given) and
        returns its handle; entering it waits Ready. env (a cold start: a running pod cannot
        take it) goes into the sandbox's containers when the pool's template allows it
        (envVarsInjectionPolicy Allowed or Overrides; otherwise the claim is refused and never
        becomes Ready, reason EnvVarsInjectionRejected). A missing pool is NotFoundError here."""
        self._get(EXT_GROUP, "sandboxwarmpools", pool)
        md: Dict[str, Any] = {"namespace": self.namespace, "labels": dict(labels or {})}
        if name:
            md["name"] = name
        else:
            md["generateName"] = f"{pool[:50]}-"
        spec: Dict[str, Any] = {"warmPoolRef": {"name": pool}}
        if env:
            spec["env"] = [{"name": str(k), "value": str(v)} for k, v in env.items()]
        obj = self._create(EXT_GROUP, "sandboxclaims", {
            "apiVersion": f"{EXT_GROUP}/{VERSION}", "kind": "SandboxClaim", "metadata": md,
            "spec": spec})
        return SandboxLease(self, "SandboxClaim", obj["metadata"]["name"], timeout, owned=True)

    def create_sandbox(self, template: str, *, name: Optional[str] = None,
                       timeout: float = 120.0) -> "SandboxLease":
        """A sandbox of the SandboxTemplate: claimed from a warm pool of that template when the
        namespace has one, else a Sandbox made from the template's pod template."""
        pools = _api("list sandboxwarmpools", self.custom.list_namespaced_custom_object,
                     EXT_GROUP, VERSION, self.namespace, "sandboxwarmpools",
                     _request_timeout=self.timeout)
        for p in pools.get("items", []):
            if ((p.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name") == template:
                return self.claim(p["metadata"]["name"], name=name, timeout=timeout)
        tspec = self._get(EXT_GROUP, "sandboxtemplates", template).get("spec") or {}
        pt = dict(tspec.get("podTemplate") or {})
        pmd = dict(pt.get("metadata") or {})
        pmd["labels"] = {**(pmd.get("labels") or {}), TEMPLATE_LABEL: name_hash(template)}
        pt["metadata"] = pmd
        spec: Dict[str, Any] = {"podTemplate": pt}
        if isinstance(tspec.get("service"), bool):
            spec["service"] = tspec["service"]
        md: Dict[str, Any] = {"namespace": self.namespace}
        if name:
            md["name"] = name
        else:
            md["generateName"] = f"{template[:50]}-"
        obj = self._create(GROUP, "sandboxes", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Sandbox", "metadata": md, "spec": spec})
        return SandboxLease(self, "Sandbox", obj["metadata"]["name"], timeout, owned=True)

    def get(self, name: str, *, kind: str = "SandboxClaim",
            timeout: float = 120.0) -> "SandboxLease":
        """A handle on an existing claim (or kind="Sandbox"): leaving it does not delete it."""
        if kind not in ("SandboxClaim", "Sandbox"):
            raise ValueError("kind must be SandboxClaim or Sandbox")
        lease = SandboxLease(self, kind, name, timeout, owned=False)
        lease.refresh()
        return lease

    def delete(self, name: str, *, kind: str = "SandboxClaim") -> None:
        """Deletes a claim (the controller deletes its sandbox) or a Sandbox; gone is fine."""
        if kind == "SandboxClaim":
            self._delete(EXT_GROUP, "sandboxclaims", name)
        elif kind == "Sandbox":
            self._delete(GROUP, "sandboxes", name)
        else:
            raise ValueError("kind must be SandboxClaim or Sandbox")


class SandboxLease:
    """A claimed or created sandbox: its Kubernetes objects, its address, its connection.

    Attributes once Ready: sandbox_name, pod_ip, grpc_port, rest_port, token (None when the
    sandbox has no token Secret). With `with`, the connection (a sandboxd.Sandbox, also
    `.sandbox`) is open inside the block and its methods are the handle's own (run, start,
    files, processes...); the claim or Sandbox this handle created is deleted on the way out.
    """

    def __init__(self, client: SandboxClient, kind: str, name: str, timeout: float,
                 owned: bool) -> None:
        self.client, self.kind, self.name, self.timeout = client, kind, name, float(timeout)
        self.namespace = client.namespace
        self.owned = owned
        self.sandbox_name: Optional[str] = name if kind == "Sandbox" else None
        self.pod_ip: Optional[str] = None
        self.grpc_port, self.rest_port = client.grpc_port, client.rest_port
        self.token: Optional[str] = None
        self.ready = False
        self.reason = ""
        self.sandbox: Optional[Sandbox] = None
        self._resolved = False  # ports and token read since the last Ready
        self.forwarders: List[Forwarder] = []  # open while connected through a port-forward
        self.endpoint: Optional[Tuple[str, int, int]] = None  # what address() returned last

    def _object(self) -> Dict[str, Any]:
        if self.kind == "SandboxClaim":
            return self.client._get(EXT_GROUP, "sandboxclaims", self.name)
        return self.client._get(GROUP, "sandboxes", self.name)

    def refresh(self) -> bool:
        """Reads the objects once; True when the sandbox is Ready with an address."""
        obj = self._object()
        cond = _condition(obj)
        self.reason = str(cond.get("reason") or "")
        if self.kind == "SandboxClaim":
            self.sandbox_name = ((obj.get("status") or {}).get("sandbox") or {}).get("name")
            if cond.get("status") != "True" or not self.sandbox_name:
                self.ready = False
                return False
            obj = self.client._get(GROUP, "sandboxes", self.sandbox_name)
            cond = _condition(obj)
        if cond.get("reason") == "InvalidSpec":
            raise errors.InvalidArgumentError(
                f"sandbox {self.sandbox_name}: {cond.get('message') or 'invalid spec'}")
        ips: List[str] = (obj.get("status") or {}).get("podIPs") or []
        self.ready = cond.get("status") == "True" and bool(ips)
        if self.ready:
            self.pod_ip = ips[0]
        return self.ready

    def wait_ready(self, timeout: Optional[float] = None) -> "SandboxLease":
        """Waits (at most timeout, default the handle's) until the sandbox is Ready, then
        reads its ports and token. TimeoutError names the last reason the controller gave."""
        limit = self.timeout if timeout is None else float(timeout)
        deadline = time.monotonic() + limit
        delay = 0.05
        while not self.refresh():
            left = deadline - time.monotonic()
            if left <= 0:
                raise errors.TimeoutError(f"{self.kind} {self.namespace}/{self.name} not Ready "
                                          f"after {limit:g}s ({self.reason or 'no status yet'})")
            time.sleep(min(delay, left))
            delay = min(delay * 2, 1.0)
        self._read_ports()
        self._read_token()
        self._resolved = True
        return self

    def _read_ports(self) -> None:
        try:
            pod = _api(f"get pod {self.sandbox_name}", self.client.core.read_namespaced_pod,
                       self.sandbox_name, self.namespace, _request_timeout=self.client.timeout)
        except (errors.PermissionDeniedError, errors.NotFoundError):
            return  # the client's ports (sandboxd's defaults unless told)
        for c in pod.spec.containers or []:
            for p in c.ports or []:
                if p.name == "sandboxd-grpc":
                    self.grpc_port = int(p.container_port)
                elif p.name == "sandboxd-http":
                    self.rest_port = int(p.container_port)

    def _read_token(self) -> None:
        name = token_secret_name(str(self.sandbox_name))
        try:
            sec = _api(f"get secret {name}", self.client.core.read_namespaced_secret, name,
                       self.namespace, _request_timeout=self.client.timeout)
        except errors.NotFoundError:
            self.token = None  # a sandbox the controller gave no token
            return
        raw = (sec.data or {}).get("token")
        self.token = base64.b64decode(raw).decode() if raw else None

    def _pod_ip_answers(self) -> bool:
        try:
            with socket.create_connection((str(self.pod_ip), self.grpc_port), PROBE_TIMEOUT):
                return True
        except OSError:
            return False

    def address(self) -> Tuple[str, int, int]:
        """(host, grpc_port, rest_port) to dial, as the client's connect mode says; with a
        port-forward, the local listeners it opened (closed by close_forwards())."""
        mode = self.client.connect_mode
        if mode == "auto":
            in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
            mode = "pod-ip" if in_pod or self._pod_ip_answers() else "port-forward"
        if mode == "pod-ip":
            self.endpoint = (str(self.pod_ip), self.grpc_port, self.rest_port)
            return self.endpoint
        self.close_forwards()
        cfg = self.client.api_client.configuration
        try:
            for port in (self.grpc_port, self.rest_port):
                self.forwarders.append(Forwarder(kubernetes.client.ApiClient(cfg), self.namespace,
                                                 str(self.sandbox_name), port, self.client.timeout))
            # Fail here, with the API server's reason, rather than on the first call.
            self.forwarders[0].open_stream().close()
        except BaseException:
            self.close_forwards()
            raise
        self.endpoint = ("127.0.0.1", self.forwarders[0].port, self.forwarders[1].port)
        return self.endpoint

    def close_forwards(self) -> None:
        for f in self.forwarders:
            f.close()
        self.forwarders = []

    def connect(self, **kw: Any) -> Sandbox:
        """A sandboxd.Sandbox on the sandbox's address (see address()), with its token
        (waits Ready first)."""
        if not (self.ready and self._resolved):
            self.wait_ready()
        kw.setdefault("timeout", self.client.timeout)
        kw.setdefault("token", self.token or "")  # "": none, not $SANDBOXD_TOKEN
        if self.client.connect_mode == "router":
            # By name: the router finds the pod and sandboxd's ports (named on the pod).
            self.sandbox = self.client.router().sandbox(str(self.sandbox_name),
                                                        namespace=self.namespace, **kw)
            return self.sandbox
        host, grpc_port, rest_port = self.address()
        self.sandbox = Sandbox(host, grpc_port=grpc_port, rest_port=rest_port, **kw)
        return self.sandbox

    def _close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
        self.close_forwards()

    def delete(self, wait: float = 0.0) -> None:
        """Deletes the claim or Sandbox (the controller removes the rest); with wait, polls
        up to that many seconds until it is gone (TimeoutError otherwise)."""
        self._close()
        self.client.delete(self.name, kind=self.kind)
        deadline = time.monotonic() + wait
        while wait > 0:
            try:
                self._object()
            except errors.NotFoundError:
                return
            if time.monotonic() >= deadline:
                raise errors.TimeoutError(f"{self.kind} {self.name} still there after {wait:g}s")
            time.sleep(0.1)

    def info(self) -> Dict[str, Any]:
        """What a script wants to know (no token)."""
        return {"kind": self.kind, "name": self.name, "namespace": self.namespace,
                "sandbox": self.sandbox_name, "ready": self.ready, "reason": self.reason,
                "pod_ip": self.pod_ip, "grpc_port": self.grpc_port, "rest_port": self.rest_port}

    def __enter__(self) -> "SandboxLease":
        try:
            self.connect()
        except BaseException:
            if self.owned:
                self.delete()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self._close()
        if self.owned:
            self.delete()

    def __getattr__(self, attr: str) -> Any:
        sb = self.__dict__.get("sandbox")
        if sb is None:
            raise AttributeError(f"{attr}: the sandbox is not connected (use `with` or connect())")
        return getattr(sb, attr)


class AsyncSandboxClient:
    """SandboxClient for asyncio: the same methods, awaited. The Kubernetes calls run in a
    worker thread (the official client is synchronous); the connection is an AsyncSandbox.

        async with AsyncSandboxClient("agents") as client:
            async with await client.claim("python-pool") as sb:
                r = await sb.run("echo hi")
    """

    def __init__(self, namespace: Optional[str] = None, **kw: Any) -> None:
        self.sync = SandboxClient(namespace, **kw)
        self.namespace = self.sync.namespace

    async def _lease(self, fn: Callable[..., SandboxLease], *a: Any,
                     **kw: Any) -> "AsyncSandboxLease":
        return AsyncSandboxLease(await asyncio.to_thread(functools.partial(fn, *a, **kw)))

    async def claim(self, pool: str, **kw: Any) -> "AsyncSandboxLease":
        return await self._lease(self.sync.claim, pool, **kw)

    async def create_sandbox(self, template: str, **kw: Any) -> "AsyncSandboxLease":
        return await self._lease(self.sync.create_sandbox, template, **kw)

    async def get(self, name: str, **kw: Any) -> "AsyncSandboxLease":
        return await self._lease(self.sync.get, name, **kw)

    async def delete(self, name: str, **kw: Any) -> None:
        await asyncio.to_thread(functools.partial(self.sync.delete, name, **kw))

    async def close(self) -> None:
        self.sync.close()

    async def __aenter__(self) -> "AsyncSandboxClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncSandboxLease:
    """SandboxLease for asyncio: `async with` waits Ready, connects an AsyncSandbox (whose
    methods it then has) and deletes what it created on the way out. The lease's attributes
    (sandbox_name, pod_ip, ...) are its own."""

    def __init__(self, lease: SandboxLease) -> None:
        self.lease = lease
        self.sandbox: Optional[AsyncSandbox] = None

    async def wait_ready(self, timeout: Optional[float] = None) -> "AsyncSandboxLease":
        await asyncio.to_thread(self.lease.wait_ready, timeout)
        return self

    async def connect(self, **kw: Any) -> AsyncSandbox:
        if not (self.lease.ready and self.lease._resolved):
            await self.wait_ready()
        kw.setdefault("timeout", self.lease.client.timeout)
        kw.setdefault("token", self.lease.token or "")
        if self.lease.client.connect_mode == "router":
            self.sandbox = AsyncSandbox.connect(router=self.lease.client.router_url,
                                                name=str(self.lease.sandbox_name),
                                                namespace=self.lease.namespace,
                                                ca_file=self.lease.client.router_ca_file, **kw)
            return self.sandbox
        host, grpc_port, rest_port = await asyncio.to_thread(self.lease.address)
        self.sandbox = AsyncSandbox(host, grpc_port=grpc_port, rest_port=rest_port, **kw)
        return self.sandbox

    async def delete(self, wait: float = 0.0) -> None:
        if self.sandbox is not None:
            await self.sandbox.close()
            self.sandbox = None
        await asyncio.to_thread(self.lease.delete, wait)

    async def __aenter__(self) -> "AsyncSandboxLease":
        try:
            await self.connect()
        except BaseException:
            if self.lease.owned:
                await self.delete()
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self.sandbox is not None:
            await self.sandbox.close()
            self.sandbox = None
        await asyncio.to_thread(self.lease.close_forwards)
        if self.lease.owned:
            await asyncio.to_thread(self.lease.delete)

    def __getattr__(self, attr: str) -> Any:
        lease = self.__dict__["lease"]
        if attr in lease.__dict__ or hasattr(type(lease), attr):
            return getattr(lease, attr)
        sb = self.__dict__.get("sandbox")
        if sb is None:
            raise AttributeError(f"{attr}: the sandbox is not connected (use `async with`)")
        return getattr(sb, attr)
