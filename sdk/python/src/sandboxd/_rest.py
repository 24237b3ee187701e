"""The REST side of the files API, shared by Files (sync) and AsyncFiles: each small request as
data (method, URL, query, headers, JSON body, and how the answer becomes the SDK's value), the
URLs and headers of the streamed transfers, and the checks of their answers. The two classes
only send, stream and wait."""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Dict, Generic, List, Mapping, Optional, Tuple

import httpx

from . import _common as c
from . import errors
from .types import FileEntry, FileStat, Health, UploadResult

ERROR_BODY = 65536  # what is read at most of an error answer's body
READY_PATH = "/readyz"
READY_POLL = 0.05  # seconds between two readiness polls of wait_ready


@dataclass(frozen=True)
class Request(Generic[c.T]):
    """One REST request with a small answer: what to send and how to read the answer (a
    streamed body, when there is one, is the caller's)."""

    method: str
    url: str
    decode: Callable[[httpx.Response], c.T]
    params: Optional[Dict[str, str]] = None
    headers: Optional[Dict[str, str]] = None
    json: Any = None

    def options(self) -> Dict[str, Any]:
        """httpx's keyword arguments for all of it but the body."""
        return {"params": self.params, "headers": self.headers, "json": self.json}


def client_options(ep: c.Endpoint) -> Dict[str, Any]:
    """The settings of the HTTP client (httpx.Client or AsyncClient) of an endpoint."""
    return dict(base_url=ep.rest_url, headers=ep.headers(), trust_env=False,
                timeout=httpx.Timeout(ep.timeout), follow_redirects=False)


def file_url(route: str, path: str) -> str:
    """/v1/<route>/<percent-encoded path relative to the root>."""
    # "." and ".." segments are percent-encoded: HTTP clients would otherwise resolve them
    # away, and the daemon must see them (a path that climbs out is refused there, 403).
    segs = str(path).lstrip("/").split("/")
    enc = [s.replace(".", "%2E") if s in (".", "..") else urllib.parse.quote(s, safe="")
           for s in segs]
    return f"/v1/{route}/" + "/".join(enc)


def mode_param(mode: Optional[int]) -> Dict[str, str]:
    if mode is None:
        return {}
    if not 0 <= int(mode) <= 0o777:
        raise ValueError(f"mode {mode:o} out of range")
    return {"mode": "0%03o" % int(mode)}


def _flag(on: bool) -> str:
    return "true" if on else "false"


def tar_query() -> Dict[str, str]:
    """The query of a directory transfer (its body is a tar stream)."""
    return {"archive": "tar"}


def transport_error(what: str, e: httpx.TransportError) -> errors.SandboxError:
    """What a request that got no answer raises: TimeoutError when it timed out."""
    if isinstance(e, httpx.TimeoutException):
        return errors.TimeoutError(f"{what}: {e}")
    return errors.UnavailableError(f"{what}: {e}")


# ---------------------------------------------------------------------------------------------
# Requests with a small answer


def stat(path: str) -> Request[FileStat]:
    return Request("GET", file_url("stat", path), lambda r: FileStat.from_json(r.json()))


def exists(path: str) -> Request[bool]:
    """HEAD of the path: True when it answers (NotFoundError when it does not)."""
    return Request("HEAD", file_url("files", path), lambda r: True)


def mkdir(path: str, parents: bool, mode: Optional[int]) -> Request[None]:
    params = {"parents": _flag(parents), **mode_param(mode)}
    return Request("PUT", file_url("dirs", path), c.ignore, params=params)


def move(src: str, dst: str, overwrite: bool) -> Request[None]:
    return Request("POST", "/v1/move", c.ignore,
                   json={"from": src, "to": dst, "overwrite": overwrite})


def remove(path: str, recursive: bool) -> Request[None]:
    return Request("DELETE", file_url("files", path), c.ignore,
                   params={"recursive": _flag(recursive)})


def upload_size(headers: Mapping[str, str], sent: int) -> Tuple[int, Optional[str]]:
    size = headers.get("x-sandboxd-size")
    return (int(size) if size and size.isdigit() else sent), headers.get("x-sandboxd-sha256")


def upload(path: str, mode: Optional[int], total: Optional[int]) -> Request[UploadResult]:
    """The PUT of a file whose body (total bytes, None when unknown: chunked) is the caller's."""
    headers = {"Content-Type": "application/octet-stream"}
    if total is not None:
        headers["Content-Length"] = str(total)
    return Request("PUT", file_url("files", path),
                   lambda r: UploadResult(*upload_size(r.headers, total or 0)),
                   params=mode_param(mode), headers=headers)


def upload_dir(path: str) -> Request[int]:
    """The PUT of a directory tree whose tar stream is the caller's; answers the entries."""
    return Request("PUT", file_url("files", path), lambda r: int(r.json().get("entries", 0)),
                   params=tar_query(), headers={"Content-Type": "application/x-tar"})


def _health(r: httpx.Response) -> Health:
    d = r.json()
    return Health(str(d.get("status")), int(d.get("uptime_seconds", 0)), d)


def health() -> Request[Health]:
    return Request("GET", "/v1/health", _health)


def metadata() -> Request[Mapping[str, str]]:
    return Request("GET", "/v1/metadata", lambda r: dict(r.json().get("env", {})))


# ---------------------------------------------------------------------------------------------
# Streamed answers


def range_headers(offset: int, length: Optional[int]) -> Dict[str, str]:
    """The Range header of a partial download (none for the whole file)."""
    if not offset and length is None:
        return {}
    if offset < 0 or (length is not None and length <= 0):
        raise ValueError("offset must be >= 0 and length > 0")
    end = "" if length is None else str(offset + length - 1)
    return {"Range": f"bytes={offset}-{end}"}


def _is_listing(headers: Mapping[str, str]) -> bool:
    return headers.get("content-type", "").startswith("application/json")


def expect_directory(path: str, headers: Mapping[str, str]) -> None:
    """A GET of files/<path> answers a directory with its JSON listing, a file with itself."""
    if not _is_listing(headers):
        raise errors.InvalidArgumentError(f"{path!r} is not a directory")


def entries(body: bytes) -> List[FileEntry]:
    return [FileEntry.from_json(e) for e in json.loads(body).get("entries", [])]


def download_size(path: str, headers: Mapping[str, str]) -> Optional[int]:
    """The bytes a download's answer announces (None: not said); a directory is refused."""
    if _is_listing(headers):
        raise errors.InvalidArgumentError(f"{path!r} is a directory")
    return int(headers["content-length"]) if "content-length" in headers else None


def downloaded(path: str, meter: c.Meter) -> int:
    """The bytes a download wrote, once all that its answer announced has come."""
    if meter.total is not None and meter.done != meter.total:
        raise errors.UnavailableError(f"download of {path!r} cut off at {meter.done} bytes")
    return meter.done


def ready_timeout(ep: c.Endpoint) -> float:
    """The timeout of one readiness poll."""
    return min(ep.timeout, 5.0)


def readiness(r: httpx.Response) -> Optional[errors.SandboxError]:
    """None when a readiness poll says ready, else why not."""
    return None if r.status_code == 200 else errors.from_http(r.status_code, r.content)


def not_ready(timeout: float, last: Optional[BaseException]) -> errors.TimeoutError:
    return errors.TimeoutError(f"sandboxd not ready within {timeout}s: {last}")


class CappedBuffer:
    """read_bytes()'s download target: InvalidArgumentError past cap bytes."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.buf = bytearray()

    def write(self, b: bytes) -> int:
        if len(self.buf) + len(b) > self.cap:
            raise errors.InvalidArgumentError(f"file is larger than max_bytes={self.cap}")
        self.buf += b
        return len(b)
