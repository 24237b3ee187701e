"""Directory watches (sandboxd.v1.Files/Watch) for both clients: Files.watch returns a Watch,
AsyncFiles.watch an AsyncWatch. Iterate for WatchEvents; the first is "ready" (every directory
watched). Leaving the `with` block (or close()) ends the call; the daemon keeps the watch for
--watch-retention, so files.watch(watch_id=w.watch_id, since=w.last_seq) resumes it."""

from __future__ import annotations

from typing import Any, AsyncIterator, Iterator

import grpc

from . import _watch
from . import errors
from .types import WatchEvent


class _Base:
    def __init__(self, call: Any) -> None:
        self._call = call
        self._closed = False
        self.watch_id = ""  # from the ready event
        self.last_seq = 0  # of the last event read: since= of a resume

    def _seen(self, m: Any) -> WatchEvent:
        ev = _watch.event(m)
        if ev.kind == "ready":
            self.watch_id = ev.watch_id
        self.last_seq = ev.seq
        return ev

    def _failure(self, e: grpc.RpcError) -> "errors.SandboxError | None":
        if e.code() == grpc.StatusCode.CANCELLED and self._closed:
            return None
        return errors.from_grpc(e)


class Watch(_Base):
    """A watch read synchronously: `with sb.files.watch("src", recursive=True) as w: for ev
    in w: ...`. The iteration ends with an error when the watch ends (NotFoundError: the
    directory went; ResourceExhaustedError: a limit; UnavailableError: the daemon stops)."""

    def __iter__(self) -> Iterator[WatchEvent]:
        try:
            for m in self._call:
                yield self._seen(m)
        except grpc.RpcError as e:
            err = self._failure(e)
            if err is not None:
                raise err from None

    def close(self) -> None:
        self._closed = True
        self._call.cancel()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncWatch(_Base):
    """See Watch: `async with sb.files.watch("src") as w: async for ev in w: ...`."""

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[WatchEvent]:
        try:
            async for m in self._call:
                yield self._seen(m)
        except grpc.RpcError as e:
            err = self._failure(e)
            if err is not None:
                raise err from None

    async def close(self) -> None:
        self._closed = True
        self._call.cancel()

    async def __aenter__(self) -> "AsyncWatch":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
