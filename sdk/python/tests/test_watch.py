"""Files.watch against a real sandboxd: the sync iterator and the async one, resume, errors."""

from __future__ import annotations

import asyncio
import os

import pytest

from sandboxd import NotFoundError, PermissionDeniedError, WatchEvent
from sandboxd.aio import AsyncSandbox


def until(it, kind, path):
    got = []
    for ev in it:
        got.append(ev)
        if ev.kind == kind and ev.path == path:
            return got
    raise AssertionError(f"the watch ended before {kind} {path}: {got}")


def test_watch_sync(sb, daemon, area):
    root = daemon.root / area
    with sb.files.watch(area, recursive=True, timeout=60) as w:
        it = iter(w)
        ready = next(it)
        assert ready.kind == "ready" and ready.seq == 0 and ready.watch_id == w.watch_id
        os.makedirs(root / "a" / "b")
        (root / "a" / "b" / "f").write_text("x")
        evs = until(it, "create", "a/b/f")  # a/b is watched by now: the move away is seen
        (root / "a" / "b" / "f").rename(root / "g")
        evs += until(it, "rename", "g")
        assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
        assert WatchEvent(evs[0].seq, "create", "a", True) == evs[0]
        assert evs[-1].old_path == "a/b/f" and not evs[-1].is_dir
        assert ("create", "a/b/f") in [(e.kind, e.path) for e in evs]
        wid, last = w.watch_id, w.last_seq
    (root / "later").touch()  # while nobody reads: the daemon keeps the watch
    with sb.files.watch(watch_id=wid, since=last, timeout=60) as w:
        it = iter(w)
        ready = next(it)
        assert ready.resumed and ready.seq == last
        assert next(it) == WatchEvent(last + 1, "create", "later", False)


def test_watch_errors(sb, daemon, area):
    with pytest.raises(NotFoundError):
        list(sb.files.watch(area + "/missing"))
    with pytest.raises(PermissionDeniedError):
        list(sb.files.watch("../.."))
    with pytest.raises(NotFoundError):
        list(sb.files.watch(watch_id="0000000000000000"))
    with pytest.raises(ValueError):
        sb.files.watch(area, since=3)


async def test_watch_async(daemon, area):
    root = daemon.root / area
    async with AsyncSandbox(grpc_port=daemon.grpc_port, rest_port=daemon.rest_port) as asb:
        async with asb.files.watch(area, include=["*.txt"], timeout=60) as w:
            it = w.__aiter__()
            assert (await it.__anext__()).kind == "ready"
            (root / "skip.bin").touch()
            (root / "take.txt").write_text("x")
            ev = await asyncio.wait_for(it.__anext__(), 30)
            assert (ev.kind, ev.path) == ("create", "take.txt")
