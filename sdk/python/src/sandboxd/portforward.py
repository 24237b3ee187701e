"""Local listeners that reach a pod's ports through the API server (pods/portforward).

For a client outside the cluster, where the pod IP is not routable: each Forwarder listens on
127.0.0.1 (a free port) and carries every connection it accepts over its own port-forward
stream (a WebSocket to the API server, kubernetes.stream.portforward) to one port of the pod.
Connections are bounded in number; close() stops the listener and every connection.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from typing import Any, List, Optional, Type

from . import errors

MAX_CONNECTIONS = 64
CHUNK = 64 * 1024
_STATUS_ERRORS = {401: errors.UnauthenticatedError, 403: errors.PermissionDeniedError,
                  404: errors.NotFoundError}


def _stream_error(what: str, e: Exception) -> errors.SandboxError:
    """The API server's refusal of the stream as a typed error with its message (the
    WebSocket handshake reports "Handshake status 403 Forbidden -+-+- headers -+-+- body")."""
    text = str(getattr(e, "reason", None) or e)
    m = re.search(r"Handshake status (\d{3})", text)
    cls: Type[errors.SandboxError] = errors.UnavailableError
    if m:
        cls = _STATUS_ERRORS.get(int(m.group(1)), errors.UnavailableError)
        body = text.rsplit("-+-+-", 1)[-1].strip()
        try:
            text = str(json.loads(body).get("message") or text)
        except (ValueError, AttributeError):
            text = text.split("-+-+-", 1)[0].strip()
    return cls(f"{what}: {text}")


def _pipe(src: Any, dst: Any) -> None:
    """Copies src to dst until EOF or an error, then ends dst's writing side."""
    try:
        while True:
            data = src.recv(CHUNK)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class Forwarder:
    """127.0.0.1:<port> → pod namespace/name's remote_port through the API server.

    api_client: a kubernetes ApiClient used by this forwarder alone (the stream helper swaps
    the client's transport while it opens a stream, so a shared client is not safe)."""

    def __init__(self, api_client: Any, namespace: str, pod: str, remote_port: int,
                 timeout: float = 30.0) -> None:
        import kubernetes  # type: ignore[import-untyped]
        from kubernetes.stream import portforward  # type: ignore[import-untyped]

        self._core = kubernetes.client.CoreV1Api(api_client)
        self._portforward = portforward
        self.namespace, self.pod, self.remote_port = namespace, pod, int(remote_port)
        self.timeout = float(timeout)
        self._open_lock = threading.Lock()
        self._lock = threading.Lock()
        self._conns: List[socket.socket] = []
        self._closed = False
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True,
                                        name=f"port-forward {pod}:{remote_port}")
        self._thread.start()

    def open_stream(self) -> Any:
        """One port-forward stream's socket to the pod's port (raises UnavailableError)."""
        with self._open_lock:
            try:
                pf = self._portforward(self._core.connect_get_namespaced_pod_portforward,
                                       self.pod, self.namespace, ports=str(self.remote_port),
                                       _request_timeout=self.timeout)
            except Exception as e:  # ApiException, WebSocket handshake errors, OSError
                raise _stream_error(f"port-forward to pod {self.namespace}/{self.pod}:"
                                    f"{self.remote_port}", e) from None
        return pf.socket(self.remote_port)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._closed or len(self._conns) >= MAX_CONNECTIONS:
                    conn.close()
                    continue
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        remote: Optional[Any] = None
        try:
            remote = self.open_stream()
            back = threading.Thread(target=_pipe, args=(remote, conn), daemon=True)
            back.start()
            _pipe(conn, remote)
            back.join()
        except errors.SandboxError:
            pass  # the client sees its connection closed
        finally:
            if remote is not None:
                remote.close()
            conn.close()
            with self._lock:
                if conn in self._conns:
                    self._conns.remove(conn)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._conns = self._conns, []
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(5)
