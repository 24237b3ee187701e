"""Terminals over WebSocket with the asyncio client (AsyncSandbox.terminal): the names,
arguments and results of sandboxd.terminal, with `async` methods."""

from __future__ import annotations

import asyncio
import builtins
from typing import Any, AsyncIterator, Optional, Union

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from . import _common as c
from . import _terminal as t
from . import errors


class AsyncTerminal(t.Facts):
    """See sandboxd.terminal.Terminal: `async with await sb.terminal() as term`, `await
    term.read()`, `async for chunk in term`, `await term.write(...)`."""

    def __init__(self, ep: c.Endpoint) -> None:
        self._ep = ep
        self._s = t.State()
        self._ws: Optional[ClientConnection] = None
        self._closed = False

    async def _open(self, target: t.Target) -> None:
        try:
            self._ws = await connect(t.url(self._ep, target.path()), **t.options(self._ep))
        except (OSError, InvalidHandshake, builtins.TimeoutError) as e:
            raise t.open_error(target, e) from None
        self._s.attached = False
        try:
            while not self._s.attached:
                self._s.take(await asyncio.wait_for(self._ws.recv(), self._ep.timeout))
        except (ConnectionClosed, asyncio.TimeoutError) as e:
            await self._ws.close()
            raise errors.UnavailableError(f"terminal {target.path()}: not attached: {e}") from None

    def _conn(self) -> ClientConnection:
        if self._closed or self._ws is None:
            raise errors.UnavailableError("the terminal is closed")
        return self._ws

    async def read(self, timeout: Optional[float] = None) -> bytes:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self._s.exit is None:
            ws = self._conn()
            left = None if deadline is None else max(deadline - loop.time(), 0)
            try:
                # Cancelling recv() loses nothing (websockets): the message waits for the next.
                msg = await asyncio.wait_for(ws.recv(), left)
            except asyncio.TimeoutError:
                raise c.output_timeout(timeout) from None
            except ConnectionClosed as e:
                raise self._s.lost(e) from None
            data = self._s.take(msg)
            if data:
                return data
        return b""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[bytes]:
        while True:
            data = await self.read()
            if not data:
                return
            yield data

    async def write(self, data: Union[bytes, str]) -> None:
        ws = self._conn()
        try:
            for piece in t.pieces(data):
                await ws.send(piece)
        except ConnectionClosed as e:
            raise self._s.lost(e) from None

    async def resize(self, cols: int, rows: int) -> None:
        msg = t.resize_message(cols, rows)
        try:
            await self._conn().send(msg)
        except ConnectionClosed as e:
            raise self._s.lost(e) from None

    async def reconnect(self) -> None:
        await self._close_ws()
        self._closed = False
        await self._open(self._s.resume())

    async def _close_ws(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            await ws.close()

    async def close(self) -> None:
        self._closed = True
        await self._close_ws()

    async def __aenter__(self) -> "AsyncTerminal":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


async def open_terminal(ep: c.Endpoint, target: t.Target) -> AsyncTerminal:
    term = AsyncTerminal(ep)
    await term._open(target)
    return term
