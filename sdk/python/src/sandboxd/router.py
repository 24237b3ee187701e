"""Sandboxes reached through a sandboxd-router: one gRPC channel and one HTTP connection pool
for many sandboxes, every call and request carrying the routing keys of its own sandbox.

    from sandboxd import Router

    with Router("http://router.example:8080") as r:
        a = r.sandbox("build-1", namespace="team-a")
        b = r.sandbox("build-2", namespace="team-a", token=tok)   # its own token
        print(a.run("hostname").stdout, b.run("hostname").stdout)

`Sandbox.connect(router=URL, name=..., namespace=...)` does the same without a Router object:
the Sandboxes connected through one URL share one Router, closed with the last of them.

The keys are those of the reference router, sent as gRPC metadata (`x-sandbox-id`,
`x-sandbox-namespace`, `x-sandbox-port`, `x-sandbox-uid`, `x-sandbox-pod-ip`) and as HTTP
headers (`X-Sandbox-ID`, ...). Without a port the router finds sandboxd's gRPC port for gRPC
and its REST port for HTTP; with one (grpc_port=, rest_port=) each goes with its own protocol.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import urllib.parse
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple

import grpc
import grpc.aio
import httpx

from . import _common as c
from .client import Sandbox

if TYPE_CHECKING:
    from .aio import AsyncSandbox

Route = Tuple[Tuple[str, str], ...]


def route(name: Optional[str], namespace: Optional[str] = None, port: Optional[int] = None,
          uid: Optional[str] = None, pod_ip: Optional[str] = None) -> Route:
    """The routing headers of a sandbox, as the reference router names them. The router
    checks them (DNS-1123 labels, the port's range, the pod IP's class) and says what it
    refused; only a missing name is refused here."""
    if not name:
        raise ValueError("a sandbox name is needed to connect through a router")
    keys = [("X-Sandbox-ID", str(name)), ("X-Sandbox-Namespace", str(namespace or "default"))]
    if port is not None:
        keys.append(("X-Sandbox-Port", str(int(port))))
    if uid:
        keys.append(("X-Sandbox-UID", str(uid)))
    if pod_ip:
        keys.append(("X-Sandbox-Pod-IP", str(pod_ip)))
    return tuple(keys)


def _metadata(r: Route) -> Route:
    return tuple((k.lower(), v) for k, v in r)


def parse_url(url: str) -> Tuple[str, str, bool]:
    """(gRPC target, HTTP base URL, TLS) of a router's URL: http://host[:port] (80),
    https://host[:port] (443), or host:port (http)."""
    u = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"router URL {url!r}: want http://host:port or https://host:port")
    if u.path not in ("", "/") or u.query or u.fragment:
        raise ValueError(f"router URL {url!r}: a router is reached at its root, not a path")
    tls = u.scheme == "https"
    port = u.port or (443 if tls else 80)
    host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
    return f"{host}:{port}", f"{u.scheme}://{host}:{port}", tls


class _RoutedHTTP:
    """A router's shared httpx.Client as one sandbox's: its routing keys and token on every
    request, its timeout unless the request has one; close() leaves the pool to the router."""

    def __init__(self, http: Any, headers: Dict[str, str], timeout: float) -> None:
        self._http, self._headers, self._timeout = http, headers, httpx.Timeout(timeout)

    def _kw(self, kw: Dict[str, Any]) -> Dict[str, Any]:
        kw["headers"] = {**self._headers, **(kw.get("headers") or {})}
        kw.setdefault("timeout", self._timeout)
        return kw

    def request(self, method: str, url: str, **kw: Any) -> Any:
        return self._http.request(method, url, **self._kw(kw))

    def stream(self, method: str, url: str, **kw: Any) -> Any:
        return self._http.stream(method, url, **self._kw(kw))

    def get(self, url: str, **kw: Any) -> Any:
        return self._http.get(url, **self._kw(kw))

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


def _endpoint(router: "_RouterBase", name: Optional[str], namespace: Optional[str],
              grpc_port: Optional[int], rest_port: Optional[int], uid: Optional[str],
              pod_ip: Optional[str], token: Optional[str], timeout: Optional[float]) -> c.Endpoint:
    ep = c.Endpoint.make(grpc_target=router.grpc_target, rest_url=router.rest_url,
                         token=token if token is not None else router.token,
                         timeout=router.timeout if timeout is None else timeout)
    g = route(name, namespace, grpc_port, uid, pod_ip)
    h = route(name, namespace, rest_port, uid, pod_ip)
    return c.Endpoint(ep.grpc_target, ep.rest_url, ep.token, ep.timeout, _metadata(g), h,
                      router.ssl_context)


class _RouterBase:
    def __init__(self, url: str, token: Optional[str], timeout: float,
                 ca_file: Optional[str]) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.url = url
        self.grpc_target, self.rest_url, self.tls = parse_url(url)
        self.token, self.timeout = token, float(timeout)
        self.ca_file = ca_file
        # https:// with ca_file: that CA alone is trusted (a router with a private certificate).
        self.ssl_context = ssl.create_default_context(cafile=ca_file) if ca_file else None
        self.closed = False

    def _grpc_credentials(self) -> Any:
        root = None
        if self.ca_file:
            with open(self.ca_file, "rb") as f:
                root = f.read()
        return grpc.ssl_channel_credentials(root_certificates=root)

    def _http_options(self) -> Dict[str, Any]:
        # No headers of its own: each request carries its sandbox's (_RoutedHTTP).
        return dict(base_url=self.rest_url, trust_env=False, timeout=httpx.Timeout(self.timeout),
                    follow_redirects=False, verify=self.ssl_context or True)

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError(f"the router connection to {self.url} is closed")


class Router(_RouterBase):
    """One connection to a sandboxd-router (a gRPC channel, an HTTP keep-alive pool) for the
    Sandboxes of sandbox() or Sandbox.connect(router=this). token (default $SANDBOXD_TOKEN)
    is the default of its sandboxes; timeout is theirs unless they are given one; ca_file
    (PEM) is the CA an https:// router's certificate is checked against instead of the
    system's. Closing the Router closes what goes through it; closing one of its Sandboxes
    does not."""

    def __init__(self, url: str, *, token: Optional[str] = None, timeout: float = 30.0,
                 ca_file: Optional[str] = None) -> None:
        super().__init__(url, token, timeout, ca_file)
        if self.tls:
            self.channel = grpc.secure_channel(self.grpc_target, self._grpc_credentials(),
                                               options=c.GRPC_OPTIONS)
        else:
            self.channel = grpc.insecure_channel(self.grpc_target, options=c.GRPC_OPTIONS)
        self.http = httpx.Client(**self._http_options())

    def sandbox(self, name: str, *, namespace: Optional[str] = None,
                grpc_port: Optional[int] = None, rest_port: Optional[int] = None,
                uid: Optional[str] = None, pod_ip: Optional[str] = None,
                token: Optional[str] = None, timeout: Optional[float] = None,
                _release: Optional[Callable[[], None]] = None) -> Sandbox:
        """The sandbox called name in namespace (default "default"), through this router."""
        self._check_open()
        ep = _endpoint(self, name, namespace, grpc_port, rest_port, uid, pod_ip, token, timeout)
        http = _RoutedHTTP(self.http, ep.headers(), ep.timeout)
        sb = Sandbox.__new__(Sandbox)
        sb._setup(ep, self.channel, http, _release or (lambda: None))
        return sb

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.http.close()
            self.channel.close()

    def __enter__(self) -> "Router":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncRouter(_RouterBase):
    """Router for asyncio: its sandbox() gives AsyncSandboxes; `await close()`."""

    def __init__(self, url: str, *, token: Optional[str] = None, timeout: float = 30.0,
                 ca_file: Optional[str] = None) -> None:
        super().__init__(url, token, timeout, ca_file)
        if self.tls:
            self.channel = grpc.aio.secure_channel(self.grpc_target, self._grpc_credentials(),
                                                   options=c.GRPC_OPTIONS)
        else:
            self.channel = grpc.aio.insecure_channel(self.grpc_target, options=c.GRPC_OPTIONS)
        self.http = httpx.AsyncClient(**self._http_options())

    def sandbox(self, name: str, *, namespace: Optional[str] = None,
                grpc_port: Optional[int] = None, rest_port: Optional[int] = None,
                uid: Optional[str] = None, pod_ip: Optional[str] = None,
                token: Optional[str] = None, timeout: Optional[float] = None,
                _release: Optional[Callable[[], Any]] = None) -> "AsyncSandbox":
        """See Router.sandbox."""
        from .aio import AsyncSandbox
        self._check_open()
        ep = _endpoint(self, name, namespace, grpc_port, rest_port, uid, pod_ip, token, timeout)
        http = _RoutedHTTP(self.http, ep.headers(), ep.timeout)
        sb = AsyncSandbox.__new__(AsyncSandbox)
        sb._setup(ep, self.channel, http, _release or _nothing)
        return sb

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.http.aclose()
            await self.channel.close()

    async def __aenter__(self) -> "AsyncRouter":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


async def _nothing() -> None:
    return None


# The Routers of Sandbox.connect(router=URL): one per URL (per event loop for asyncio), counted
# by the Sandboxes using it and closed with the last.
_lock = threading.Lock()
_shared: Dict[Any, Tuple[Any, int]] = {}


def _acquire(key: Any, make: Callable[[], Any]) -> Any:
    with _lock:
        r, n = _shared.get(key, (None, 0))
        if r is None or r.closed:
            r, n = make(), 0
        _shared[key] = (r, n + 1)
        return r


def _drop(key: Any, r: Any) -> bool:
    """One user fewer of r; True when it was the last (the caller closes r)."""
    with _lock:
        cur, n = _shared.get(key, (None, 0))
        if cur is not r:
            return False
        if n > 1:
            _shared[key] = (r, n - 1)
            return False
        del _shared[key]
        return True


_ROUTE_ARGS = ("grpc_port", "rest_port", "token", "timeout")


def _check_args(kw: Dict[str, Any]) -> None:
    bad = sorted(set(kw) - set(_ROUTE_ARGS))
    if bad:
        raise TypeError(f"{', '.join(bad)}: not with router= (the router is the address)")


def connect_sync(router: Any, name: Optional[str], **kw: Any) -> Sandbox:
    """Sandbox.connect(router=...): on a Router as it is, on a URL the shared one."""
    rkw = {k: kw.pop(k) for k in ("namespace", "uid", "pod_ip")}
    ca = kw.pop("ca_file", None)
    _check_args(kw)
    if isinstance(router, Router):
        if ca is not None:
            raise TypeError("ca_file goes with a router URL: a Router has its own")
        return router.sandbox(name, **rkw, **kw)  # type: ignore[arg-type]
    url = str(router)
    route(name)  # a missing name is refused before a connection is made
    key = ("sync", url, ca)
    r = _acquire(key, lambda: Router(url, ca_file=ca))

    def release() -> None:
        if _drop(key, r):
            r.close()

    return r.sandbox(name, **rkw, **kw, _release=release)  # type: ignore[arg-type]


def connect_async(router: Any, name: Optional[str], **kw: Any) -> "AsyncSandbox":
    """AsyncSandbox.connect(router=...): on an AsyncRouter as it is, on a URL the one shared
    by the event loop's AsyncSandboxes (outside a running loop, one of its own)."""
    rkw = {k: kw.pop(k) for k in ("namespace", "uid", "pod_ip")}
    ca = kw.pop("ca_file", None)
    _check_args(kw)
    if isinstance(router, AsyncRouter):
        if ca is not None:
            raise TypeError("ca_file goes with a router URL: a AsyncRouter has its own")
        return router.sandbox(name, **rkw, **kw)  # type: ignore[arg-type]
    url = str(router)
    route(name)
    try:
        key: Any = ("async", url, ca, id(asyncio.get_running_loop()))
    except RuntimeError:
        key = ("async", url, ca, object())
    r = _acquire(key, lambda: AsyncRouter(url, ca_file=ca))

    async def release() -> None:
        if _drop(key, r):
            await r.close()

    return r.sandbox(name, **rkw, **kw, _release=release)  # type: ignore[arg-type]
