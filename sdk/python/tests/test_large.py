"""A large upload and download with the client's memory measured: the transfer runs in a child
process whose peak RSS (VmHWM) must stay flat, whatever the file's size."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

# 1 GiB by default (about 30 s here for both directions); the suite lowers it under sanitizers.
SIZE = int(os.environ.get("SANDBOXD_SDK_LARGE_MIB", "1024")) << 20
BUDGET_KIB = 64 * 1024  # growth allowed over the baseline of a connected client

CHILD = textwrap.dedent("""
    import asyncio, hashlib, json, sys
    import sandboxd
    from sandboxd.aio import AsyncSandbox

    def hwm():
        for ln in open("/proc/self/status"):
            if ln.startswith("VmHWM:"):
                return int(ln.split()[1])

    gport, rport, src, dst, flavour = sys.argv[1:6]
    calls = [0]
    def progress(done, total):
        calls[0] += 1
    out = {}
    if flavour == "sync":
        with sandboxd.Sandbox(grpc_port=int(gport), rest_port=int(rport), timeout=60) as sb:
            sb.run("true")
            sb.files.write_bytes("warm", b"x" * 1000)
            sb.files.read_bytes("warm")
            out["base"] = hwm()
            r = sb.files.upload(src, "large.bin", progress=progress)
            out["up_sha"] = r.sha256
            out["after_up"] = hwm()
            out["down"] = sb.files.download("large.bin", dst, progress=progress)
    else:
        async def main():
            async with AsyncSandbox(grpc_port=int(gport), rest_port=int(rport), timeout=60) as sb:
                await sb.run("true")
                await sb.files.write_bytes("warm", b"x" * 1000)
                await sb.files.read_bytes("warm")
                out["base"] = hwm()
                r = await sb.files.upload(src, "large.bin", progress=progress)
                out["up_sha"] = r.sha256
                out["after_up"] = hwm()
                out["down"] = await sb.files.download("large.bin", dst, progress=progress)
        asyncio.run(main())
    out["end"] = hwm()
    out["calls"] = calls[0]
    print(json.dumps(out))
""")


def _sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)


def _run(daemon, tmp_path, flavour, size):
    src = tmp_path / "src.bin"
    with open(src, "wb") as f:
        chunk = os.urandom(1 << 20)
        for i in range(size >> 20):
            f.write(hashlib.sha256(i.to_bytes(8, "little")).digest() + chunk[32:])
    dst = tmp_path / "dst.bin"
    p = subprocess.run([sys.executable, "-c", CHILD, str(daemon.grpc_port), str(daemon.rest_port),
                        str(src), str(dst), flavour], capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr.decode()
    out = json.loads(p.stdout)
    want = _sha(src)
    try:
        assert out["up_sha"] == want
        assert out["down"] == size and _sha(dst) == want
        assert out["calls"] > 2 * (size >> 20)
        growth = out["end"] - out["base"]
        print(f"{flavour}: {size >> 20} MiB up and down; client peak RSS {out['base']} KiB "
              f"before, {out['after_up']} after the upload, {out['end']} at the end")
        assert growth < BUDGET_KIB, f"client memory grew by {growth} KiB: {out}"
    finally:
        # Nothing this size is left behind (pytest keeps the temp dirs of its last runs).
        for f in (daemon.root / "large.bin", src, dst):
            f.unlink(missing_ok=True)


def test_large_transfer_flat_memory_sync(daemon, tmp_path):
    _run(daemon, tmp_path, "sync", SIZE)


def test_large_transfer_flat_memory_async(daemon, tmp_path):
    # The same code path with asyncio; a quarter of the size keeps the suite's time down.
    _run(daemon, tmp_path, "async", max(SIZE // 4, 1 << 20))
