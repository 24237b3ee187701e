"""Typed exceptions. Every error the daemon reports, over gRPC or REST, becomes a SandboxError
subclass that carries the daemon's code (a gRPC status name, or the REST body's `code`)."""

from __future__ import annotations

import builtins
import json
from typing import Dict, Optional, Type


class SandboxError(Exception):
    """An error reported by sandboxd or met on the way to it.

    code: the daemon's code ("NOT_FOUND", "PERMISSION_DENIED", ...), or for transport failures
    "UNAVAILABLE" / "DEADLINE_EXCEEDED". message: the daemon's message. http_status: the REST
    status when the error came over REST.
    """

    code = "UNKNOWN"

    def __init__(self, message: str, *, code: Optional[str] = None,
                 http_status: Optional[int] = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.http_status = http_status

    def __str__(self) -> str:
        s = f"{self.code}: {self.message}"
        return f"{s} (HTTP {self.http_status})" if self.http_status else s


class NotFoundError(SandboxError):
    code = "NOT_FOUND"


class PermissionDeniedError(SandboxError):
    code = "PERMISSION_DENIED"


class InvalidArgumentError(SandboxError):
    code = "INVALID_ARGUMENT"


class ConflictError(SandboxError):
    """CONFLICT over REST (a non-empty directory, an existing target), ALREADY_EXISTS over gRPC."""

    code = "CONFLICT"


class FailedPreconditionError(SandboxError):
    """E.g. resizing the terminal of a process started without a PTY."""

    code = "FAILED_PRECONDITION"


class PayloadTooLargeError(SandboxError):
    code = "PAYLOAD_TOO_LARGE"


class InsufficientStorageError(SandboxError):
    code = "INSUFFICIENT_STORAGE"


class ResourceExhaustedError(SandboxError):
    code = "RESOURCE_EXHAUSTED"


class UnauthenticatedError(SandboxError):
    """The daemon wants a (different) bearer token."""

    code = "UNAUTHENTICATED"


class UnavailableError(SandboxError):
    """The daemon cannot be reached, or it is shutting down."""

    code = "UNAVAILABLE"


class UnimplementedError(SandboxError):
    """The daemon does not serve this call (an older daemon, or a method not allowed)."""

    code = "UNIMPLEMENTED"


class TimeoutError(SandboxError, builtins.TimeoutError):
    """A deadline passed: an RPC's (DEADLINE_EXCEEDED) or a client-side wait's."""

    code = "DEADLINE_EXCEEDED"


class CancelledError(SandboxError):
    code = "CANCELLED"


class InternalError(SandboxError):
    code = "INTERNAL"


class ProcessExitError(SandboxError):
    """run(..., check=True) of a command that did not exit 0; result holds what it printed."""

    code = "PROCESS_EXIT"

    def __init__(self, result: "object", exit_code: int) -> None:
        super().__init__(f"command exited with status {exit_code}")
        self.result = result
        self.exit_code = exit_code


_BY_CODE: Dict[str, Type[SandboxError]] = {
    "NOT_FOUND": NotFoundError,
    "PERMISSION_DENIED": PermissionDeniedError,
    "INVALID_ARGUMENT": InvalidArgumentError,
    "OUT_OF_RANGE": InvalidArgumentError,
    "CONFLICT": ConflictError,
    "ALREADY_EXISTS": ConflictError,
    "FAILED_PRECONDITION": FailedPreconditionError,
    "PAYLOAD_TOO_LARGE": PayloadTooLargeError,
    "INSUFFICIENT_STORAGE": InsufficientStorageError,
    "RESOURCE_EXHAUSTED": ResourceExhaustedError,
    "UNAUTHENTICATED": UnauthenticatedError,
    "UNAVAILABLE": UnavailableError,
    "UNIMPLEMENTED": UnimplementedError,
    "METHOD_NOT_ALLOWED": UnimplementedError,
    "DEADLINE_EXCEEDED": TimeoutError,
    "CANCELLED": CancelledError,
    "INTERNAL": InternalError,
    "UNKNOWN": InternalError,
    "DATA_LOSS": InternalError,
    "ABORTED": ConflictError,
}

_BY_HTTP = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
            404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 409: "CONFLICT",
            413: "PAYLOAD_TOO_LARGE", 416: "OUT_OF_RANGE", 503: "UNAVAILABLE",
            507: "INSUFFICIENT_STORAGE"}


def error_for(code: str, message: str, http_status: Optional[int] = None) -> SandboxError:
    """The typed exception for a daemon code; unknown codes give a plain SandboxError."""
    cls = _BY_CODE.get(code, SandboxError)
    return cls(message, code=code, http_status=http_status)


def from_http(status: int, body: bytes) -> SandboxError:
    """The exception for a REST error: the JSON body's code and message when there is one."""
    code, message = None, None
    try:
        doc = json.loads(body.decode("utf-8")) if body else None
        if isinstance(doc, dict):
            code, message = doc.get("code"), doc.get("message")
    except (ValueError, UnicodeDecodeError):
        pass
    if not isinstance(code, str):
        code = _BY_HTTP.get(status, "INTERNAL" if status >= 500 else "UNKNOWN")
    if not isinstance(message, str):
        message = body[:200].decode("utf-8", "replace").strip() or f"HTTP {status}"
    return error_for(code, message, status)


def from_grpc(err: "object") -> SandboxError:
    """The exception for a grpc.RpcError (sync or aio)."""
    try:
        code = err.code().name  # type: ignore[attr-defined]
        details = err.details() or code  # type: ignore[attr-defined]
    except Exception:  # not a call error: a transport-level failure
        return UnavailableError(str(err))
    return error_for(code, details)


class OutputTruncatedWarning(UserWarning):
    """execute()'s output was cut by the daemon (its --max-output-bytes, or its output memory
    bound): result.truncated says how many bytes of each stream were dropped."""
