"""sandboxd.v1.Files/Watch, shared by the sync and asyncio clients: the request, and the events
decoded into WatchEvent."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ._gen.sandboxd.v1 import files_pb2 as fpb
from .types import WatchEvent

_KINDS = {fpb.WATCH_EVENT_KIND_CREATE: "create", fpb.WATCH_EVENT_KIND_WRITE: "write",
          fpb.WATCH_EVENT_KIND_CHMOD: "chmod", fpb.WATCH_EVENT_KIND_REMOVE: "remove",
          fpb.WATCH_EVENT_KIND_RENAME: "rename", fpb.WATCH_EVENT_KIND_OVERFLOW: "overflow",
          fpb.WATCH_EVENT_KIND_READY: "ready"}


def request(path: str, recursive: bool, include: Sequence[str], exclude: Sequence[str],
            watch_id: Optional[str], since: int, rescan_interval: Optional[float]) -> Any:
    """A WatchRequest; rescan_interval in seconds (at least 0.1)."""
    if since < 0:
        raise ValueError("since must be >= 0")
    if since and not watch_id:
        raise ValueError("since needs watch_id (the watch to resume)")
    req = fpb.WatchRequest(path=str(path), recursive=recursive, include=list(include),
                           exclude=list(exclude), watch_id=watch_id or "", since=since)
    if rescan_interval:
        req.rescan_interval_ms = max(int(rescan_interval * 1000), 1)
    return req


def _name(text: str, raw: bytes) -> str:
    """A path as text; a name that is not UTF-8 decoded with surrogateescape from its bytes."""
    return raw.decode("utf-8", "surrogateescape") if raw else text


def event(m: Any) -> WatchEvent:
    kind = _KINDS.get(m.kind, "unknown")
    if kind == "overflow":
        o = m.overflow
        return WatchEvent(m.seq, kind, lost=(getattr(o, "from"), o.to), reason=o.reason)
    if kind == "ready":
        r = m.ready
        return WatchEvent(m.seq, kind, watch_id=r.watch_id, resumed=r.resumed,
                          directories=r.directories)
    old = _name(getattr(m, "from"), m.from_bytes) if kind == "rename" else ""
    return WatchEvent(m.seq, kind, path=_name(m.path, m.path_bytes), is_dir=m.dir, old_path=old)
