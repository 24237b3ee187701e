"""The asyncio flavour against a real sandboxd: the same calls as the sync tests."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os

import pytest

import sandboxd
import sandboxd.aio
from sandboxd import errors
from sandboxd.aio import AsyncSandbox

from test_files import _tree, make_tree


@pytest.fixture
async def asb(daemon):
    async with AsyncSandbox(grpc_port=daemon.grpc_port, rest_port=daemon.rest_port,
                            timeout=20) as s:
        yield s


async def test_run(asb, daemon, area):
    r = await asb.run(["sh", "-c", "echo $X; pwd; echo e >&2; exit 3"], env={"X": "y"}, cwd=area)
    assert r.exit_code == 3 and r.stderr == b"e\n"
    assert r.stdout.decode().splitlines() == ["y", str(daemon.root / area)]
    r = await asb.run("head -c 5000 /dev/zero", max_output=100)
    assert r.stdout == b"\0" * 100 and r.stdout_truncated
    r = await asb.run("echo s; exec sleep 60", timeout=0.5)
    assert r.timed_out and r.exit_code == -1 and r.stdout in (b"", b"s\n")
    assert (await asb.run("cat", stdin=b"in")).stdout == b"in"
    with pytest.raises(errors.ProcessExitError):
        await asb.run("exit 1", check=True)
    r = await asb.execute(["echo", "unary"])
    assert r.stdout == b"unary\n"


async def test_execute_says_what_the_daemon_dropped(daemon_factory):
    d = daemon_factory(["--max-output-bytes", str(1 << 20)])
    async with AsyncSandbox(grpc_port=d.grpc_port, rest_port=d.rest_port, timeout=20) as s:
        with pytest.warns(sandboxd.OutputTruncatedWarning) as w:
            r = await s.execute("head -c 3000000 /dev/zero >&2")
        assert w[0].filename == __file__, "the warning points at the caller"
        assert r.truncated == {"stderr": 3000000 - (1 << 20)} and r.stderr_truncated
        assert len(r.stderr) == 1 << 20 and not r.stdout_truncated
        r = await s.execute(["echo", "small"])
        assert r.truncated == {} and not r.stdout_truncated


async def test_start_stream_stdin_signal(asb):
    async with await asb.start("echo first; read l; echo got $l") as p:
        assert (await p.read(10)).data == b"first\n"
        await p.write("x\n")
        out = b"".join([ev.data async for ev in p])
        assert out == b"got x\n" and p.exit_status.exit_code == 0
    async with await asb.start("exec sleep 60") as p:
        with pytest.raises(errors.TimeoutError):
            await p.wait(0.2)
        await p.terminate()
        assert (await p.wait(10)).exit_code == -1
    async with await asb.start("trap 'echo INT; exit 4' INT; echo armed; "
                               "while :; do sleep 0.05; done") as p:
        assert (await p.read(10)).data == b"armed\n"
        await p.interrupt()
        assert (await p.wait(10)).exit_code == 4


async def test_long_output_streams(asb):
    total = 0
    async with await asb.start("head -c 33554432 /dev/zero") as p:
        async for ev in p:
            total += len(ev.data)
    assert total == 32 << 20


async def test_pty(asb):
    async with await asb.start("stty size; read x; stty size", pty=(24, 80)) as p:
        out = b""
        while b"24 80" not in out:
            out += (await p.read(10)).data
        await p.resize(50, 100)
        await p.write("\n")
        assert b"50 100" in b"".join([ev.data async for ev in p])


async def test_errors(asb):
    with pytest.raises(errors.NotFoundError):
        await asb.run(["/no/such"])
    async with await asb.start("read x") as p:
        with pytest.raises(errors.FailedPreconditionError):
            await p.resize(1, 1)
        await p.close_stdin()
        await p.wait(10)
    with pytest.raises(errors.NotFoundError):
        await asb.files.stat("no/such")
    with pytest.raises(errors.PermissionDeniedError):
        await asb.files.write_bytes("../x", b"")


async def test_concurrent_processes(asb):
    rs = await asyncio.gather(*[asb.run(f"echo {i}") for i in range(20)])
    assert [r.stdout for r in rs] == [f"{i}\n".encode() for i in range(20)]


async def test_files(asb, daemon, area, tmp_path):
    f = asb.files
    data = os.urandom(2 << 20)
    seen = []
    r = await f.upload(data, f"{area}/a.bin", mode=0o600, progress=lambda d, t: seen.append(d))
    assert r.sha256 == hashlib.sha256(data).hexdigest() and seen[-1] == len(data)
    out = io.BytesIO()
    assert await f.download(f"{area}/a.bin", out) == len(data) and out.getvalue() == data
    out = io.BytesIO()
    await f.download(f"{area}/a.bin", out, offset=5, length=10)
    assert out.getvalue() == data[5:15]
    dst = tmp_path / "a.bin"
    await f.download(f"{area}/a.bin", dst)
    assert dst.read_bytes() == data
    await f.upload(dst, f"{area}/b.bin")
    assert await f.read_bytes(f"{area}/b.bin") == data
    st = await f.stat(f"{area}/a.bin")
    assert st.size == len(data) and st.mode & 0o777 == 0o600
    await f.mkdir(f"{area}/x/y", parents=True)
    await f.move(f"{area}/b.bin", f"{area}/x/y/b.bin")
    assert [e.name for e in await f.list(f"{area}/x/y")] == ["b.bin"]
    assert await f.exists(f"{area}/x/y/b.bin")
    with pytest.raises(errors.ConflictError):
        await f.remove(f"{area}/x")
    await f.remove(f"{area}/x", recursive=True)
    assert not await f.exists(f"{area}/x")
    assert (await asb.health()).status == "ok"
    assert isinstance(await f.metadata(), dict)
    await asb.wait_ready(10)


async def test_tar_up_and_down(asb, daemon, area, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    make_tree(src)
    n = await asb.files.upload_dir(src, f"{area}/t")
    assert _tree(daemon.root / area / "t") == _tree(src)
    dst = tmp_path / "dst"
    assert await asb.files.download_dir(f"{area}/t", dst) == n
    assert _tree(dst) == _tree(src)


async def test_unix_socket_and_token(daemon):
    async with AsyncSandbox(unix_socket=daemon.socket, rest_port=daemon.rest_port,
                            token="t") as s:
        assert (await s.run("echo u")).stdout == b"u\n"


def test_sync_and_async_share_types():
    for name in ("run", "start", "execute", "health", "wait_ready", "close"):
        assert hasattr(AsyncSandbox, name) and hasattr(sandboxd.Sandbox, name)
    for name in ("upload", "download", "upload_dir", "download_dir", "stat", "list", "mkdir",
                 "move", "remove", "exists", "read_bytes", "write_bytes", "metadata"):
        assert hasattr(sandboxd.aio.AsyncFiles, name) and hasattr(sandboxd.Files, name)
    from sandboxd.aio_processes import AsyncProcesses, AsyncSpawnedProcess

    def public(cls):
        return {n for n in vars(cls) if not n.startswith("_")}

    assert public(AsyncProcesses) == public(sandboxd.Processes)
    assert public(AsyncSpawnedProcess) == public(sandboxd.SpawnedProcess)


async def test_run_large_stdin_through_a_filter(asb):
    data = os.urandom(6 << 20)
    r = await asb.run(["cat"], stdin=data, max_output=len(data))
    assert r.stdout == data


async def test_closing_the_sandbox_ends_its_processes(daemon):
    s = AsyncSandbox(grpc_port=daemon.grpc_port, rest_port=daemon.rest_port)
    p = await s.start("echo up; exec sleep 60")
    assert (await p.read(10)).data == b"up\n"
    q = await s.start("head -c 10000000 /dev/zero")
    await s.close()
    assert p._task.done() and q._task.done()
    with pytest.raises(errors.UnavailableError):
        await s.run("true")


async def test_spawned_processes(asb, daemon):
    p = await asb.processes.spawn("printf abc; read x; printf def >&2", stdin=True, tag="aio-x")
    async with p.attach() as att:
        async for ev in att:
            assert (ev.stream, ev.offset, ev.data) == ("stdout", 0, b"abc")
            break
    assert [i.id for i in await asb.processes.list(tag="aio-x")] == [p.id]
    await p.write("\n", eof=True)
    ex = await p.wait(20)
    assert ex.reason == "exited" and ex.exit_code == 0
    async with (await asb.processes.handle(p.id)).attach(stdout_offset=1) as att:
        assert await att.output() == b"bcdef"
    assert att.exit == ex
    t = await asb.processes.spawn("sleep 60 & sleep 60 & echo up; wait")
    async with t.attach() as att:
        async for ev in att:
            assert ev.data == b"up\n"
            break
    assert await t.kill() >= 3
    assert (await t.wait(20)).reason == "killed"
    r = await asb.processes.run("echo hi; exit 4", max_output=100)
    assert (r.exit_code, r.stdout, r.exit.reason) == (4, b"hi\n", "exited")
    await p.remove()
    with pytest.raises(errors.NotFoundError):
        await asb.processes.get(p.id)
    s = await asb.processes.spawn("stty size", pty=(20, 60))
    await s.wait(20)
    async with s.attach() as att:
        assert b"20 60" in await att.output()


async def test_spawned_seccomp(asb, daemon):
    probe = "awk '/^Seccomp_filters:/ {print $2}' /proc/self/status"
    base = int((await asb.processes.run(probe, seccomp="off")).stdout)
    assert int((await asb.processes.run(probe, seccomp="default")).stdout) == base + 1
    p = await asb.processes.spawn(probe, seccomp="off")
    await p.wait(20)
    async with p.attach() as att:
        assert int(await att.output()) == base
    with pytest.raises(errors.InvalidArgumentError):
        await asb.processes.spawn(probe, seccomp="bogus")
