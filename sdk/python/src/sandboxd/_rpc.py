"""The transport of a unary gRPC call (a _common.Unary), once per flavour: call() for the sync
modules (client, processes), acall() for the asyncio ones (aio, aio_processes). What to send
and how to read the answer is the Unary's; only the waiting differs."""

from __future__ import annotations

from typing import Any, TypeVar

import grpc

from . import _common as c
from . import errors

T = TypeVar("T")


def call(session: c.Session, stub: Any, u: c.Unary[T]) -> T:
    if u.check_open:
        session.check_open()
    try:
        if u.trailers:
            r, call = getattr(stub, u.method).with_call(u.request, metadata=session.metadata(),
                                                        timeout=session.deadline(u.timeout))
            return u.decode(r, call.trailing_metadata())  # type: ignore[call-arg]
        r = getattr(stub, u.method)(u.request, metadata=session.metadata(),
                                    timeout=session.deadline(u.timeout))
    except grpc.RpcError as e:
        raise errors.from_grpc(e) from None
    return u.decode(r)


async def acall(session: c.Session, stub: Any, u: c.Unary[T]) -> T:
    if u.check_open:
        session.check_open()
    try:
        call = getattr(stub, u.method)(u.request, metadata=session.metadata(),
                                       timeout=session.deadline(u.timeout))
        r = await call
        if u.trailers:
            return u.decode(r, await call.trailing_metadata())  # type: ignore[call-arg]
    except grpc.RpcError as e:
        raise errors.from_grpc(e) from None
    return u.decode(r)
