"""Hostile workloads and faults against the real daemon. Each scenario checks that the daemon
stays responsive (a prober times /healthz and a trivial Execute throughout and prints the
slowest against its bound), loses no data, and frees what it took (fds, threads, memory,
processes measured before and after)."""

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from sbx_integration_conftest import (Procs, Prober, connect_many, http_request, pid_gone,
                                      raise_nofile, temp_files, wait_until)

# Under ASan the allocator keeps what is freed (its quarantine) and never gives memory back: RSS
# says nothing there, and LeakSanitizer checks for leaks at the daemon's exit instead.
SANITIZED = os.environ.get("SANDBOXD_SANITIZED") == "ON"

# Bounds of the prober while the daemon is abused (a 2-vCPU machine shared by the workload).
HEALTHZ_BOUND = 2.0
EXECUTE_BOUND = 3.0


def usage(pid):
    """fds, threads, RSS (KiB) and children of a process."""
    status = Path(f"/proc/{pid}/status").read_text()
    field = {ln.split(":")[0]: ln.split(":")[1].split() for ln in status.splitlines()}
    kids = []
    for t in Path(f"/proc/{pid}/task").iterdir():
        kids += (t / "children").read_text().split()
    return {"fds": len(os.listdir(f"/proc/{pid}/fd")), "threads": int(field["Threads"][0]),
            "rss_kib": int(field["VmRSS"][0]), "children": len(kids)}


def zombies_of(pid):
    out = []
    for t in Path(f"/proc/{pid}/task").iterdir():
        for k in (t / "children").read_text().split():
            try:
                st = Path(f"/proc/{k}/stat").read_text()
            except FileNotFoundError:
                continue
            if st[st.rindex(")") + 2] == "Z":
                out.append(int(k))
    return out


def lasting_zombies(pid, after=1.0):
    """Zombie children of pid that are still zombies after `after` seconds: one the reaper has
    not reached yet (a process that exited a moment ago, e.g. a probe's) is not one."""
    first = set(zombies_of(pid))
    if not first:
        return []
    time.sleep(after)
    return sorted(first & set(zombies_of(pid)))


def settled(d, base, what, rss_slack_kib=32 << 10):
    """Waits until the daemon's fds, threads and children are back to base and its RSS within a
    slack of it (the allocator keeps some of what a burst took: a leak shows when the burst is
    repeated, see grows_not); prints the before and after."""
    def back():
        now = usage(d.proc.pid)
        # gRPC's thread pool may keep a thread or two it grew under load.
        ok = (now["fds"] <= base["fds"] and now["threads"] <= base["threads"] + 2 and
              now["children"] <= base["children"] and
              (SANITIZED or now["rss_kib"] <= base["rss_kib"] + rss_slack_kib))
        return now if ok else None

    try:
        now = wait_until(back, 20, what=f"{what}: the daemon back to its resting use")
    finally:
        print(f"\n{what}: before {base}, after {usage(d.proc.pid)}")
    assert not lasting_zombies(d.proc.pid)
    return now


@pytest.fixture
def hostile(sandboxd_factory):
    raise_nofile(8192)  # before the daemon starts: it inherits the limit
    d = sandboxd_factory(["--exit-drain-timeout", "200ms"])
    d.procs = Procs(d.client().channel, d.protos)
    d.prober_client = d.client()
    return d


def grows_not(d, burst, what, slack_kib=8 << 10):
    """Runs burst three times: the memory the first two took is reused by the third, not taken
    again. Each is measured a little after it ended (when the daemon trims its heap after
    processes)."""
    for _ in range(2):
        burst()
        time.sleep(3)
    first = usage(d.proc.pid)["rss_kib"]
    burst()
    time.sleep(3)
    second = usage(d.proc.pid)["rss_kib"]
    # On a loaded machine the last of a burst's processes may still be reaped, and the heap not
    # yet trimmed, 3 s on: what is transient goes within a while, a leak stays.
    deadline = time.monotonic() + 30
    while not SANITIZED and second >= first + slack_kib and time.monotonic() < deadline:
        time.sleep(1)
        second = usage(d.proc.pid)["rss_kib"]
    print(f"\n{what}: RSS {first} KiB after two bursts, {second} KiB after three")
    if SANITIZED:
        return
    assert second < first + slack_kib, f"{what}: RSS grew by {second - first} KiB on a repeat"


def finish(prober, what):
    """Lets the prober take a few samples, then stops it and checks its bounds."""
    wait_until(lambda: len(prober.execute) >= 3, 10, what="three probes")
    prober.finish(what)


def probed(d):
    """A prober on the daemon's one prober channel."""
    p = Prober(d, HEALTHZ_BOUND, EXECUTE_BOUND, client=d.prober_client)
    p.start()
    return p


def warmed(d):
    """Lets the daemon make what it makes lazily (the prober's connection, gRPC's threads, a
    stream, an upload), then starts the prober; returns (prober, the resting use from before)."""
    c = d.prober_client
    for _ in range(3):
        c.execute(["true"])
        c.start(["true"]).wait_done()
        http_request(d.rest_port, "GET", "/healthz")
        http_request(d.rest_port, "PUT", "/v1/files/.warm", body=b"x")
        http_request(d.rest_port, "DELETE", "/v1/files/.warm")
    time.sleep(0.3)
    base = usage(d.proc.pid)
    return probed(d), base


def cgroups_of(d):
    """The controllers the daemon's cgroup line names ("cgroups v1 for spawned processes: memory
    pids", maybe then "; no memory limits: <why>"), or an empty set."""
    for ln in d.lines:
        if "cgroups v" in ln and "for spawned processes" in ln:
            return set(ln.split("for spawned processes:", 1)[1].split(";")[0].split())
    return set()


def test_fork_bomb_contained(hostile):
    d = hostile
    if "pids" not in cgroups_of(d):
        pytest.skip("a fork bomb is contained by a pids cgroup, which the kernel does not give us")
    prober, base = warmed(d)
    bomb = "b() { b | b & }; b; sleep 100"
    r = d.procs.run(["sh", "-c", bomb], limits=d.procs.m.Limits(pids=200), timeout_ms=3000,
                    grace_ms=500, timeout=60)
    finish(prober, "fork bomb (pids 200, timeout 3s)")
    assert r.exit.reason == d.procs.m.EXIT_REASON_TIMED_OUT, r.exit
    settled(d, base, "fork bomb")


def test_memory_hog_dies_not_the_daemon(hostile):
    d = hostile
    if "memory" not in cgroups_of(d):
        pytest.skip("a memory hog is contained by a memory cgroup, which the kernel does not give us")
    prober, base = warmed(d)
    hog = "b = []\nwhile True: b.append(bytearray(16 << 20))"
    r = d.procs.run([sys.executable, "-c", hog], limits=d.procs.m.Limits(memory_bytes=256 << 20),
                    timeout=120)
    finish(prober, "memory hog (256 MiB limit)")
    assert r.exit.reason == d.procs.m.EXIT_REASON_OOM_KILLED, r.exit
    settled(d, base, "memory hog")


def test_output_flood_with_a_reader_that_stops(hostile):
    d = hostile
    prober, base = warmed(d)
    p = d.procs.spawn(["yes", "0123456789abcdef"], timeout_ms=4000)
    call = d.procs.attach_call(p.id, skip_stderr=True, timeout=60)
    it = iter(call)
    got = 0
    off = 0
    truncs = []
    peak = 0
    for ev in it:
        if ev.WhichOneof("event") == "output":
            assert ev.output.offset == off, "output continues where the last ended"
            off += len(ev.output.data)
            got += 1
            if got == 200:
                # The reader stops: the process and the daemon go on, the ring drops the oldest.
                for _ in range(20):
                    time.sleep(0.1)
                    peak = max(peak, usage(d.proc.pid)["rss_kib"])
        elif ev.WhichOneof("event") == "truncated":
            t = ev.truncated
            assert getattr(t, "from") == off and t.to > off, "a truncation starts where we were"
            truncs.append((getattr(t, "from"), t.to))
            off = t.to
        elif ev.WhichOneof("event") == "exit":
            break
    finish(prober, "output flood (yes, 4 s) with a reader that stops for 2 s")
    info = d.procs.get(p.id)
    assert truncs, "the dropped output is reported"
    assert off == info.stdout.end, "every byte read or reported dropped"
    print(f"flood: {info.stdout.end} bytes written, {len(truncs)} truncations, daemon peak RSS "
          f"{peak} KiB (base {base['rss_kib']} KiB)")
    assert SANITIZED or peak < base["rss_kib"] + (64 << 10), "the daemon's memory stays bounded"
    d.procs.remove(p.id)
    settled(d, base, "output flood")


def test_1000_concurrent_streams(hostile):
    d = hostile
    pb = d.protos.pb
    n = 1000

    async def one(stub):
        req = pb.StartRequest(config=pb.ProcessConfig(command=["sh", "-c", "echo ok; exec sleep 0.5"]))
        kinds, out = [], b""
        async for m in stub(req, timeout=120):
            kind = m.WhichOneof("event")
            kinds.append(kind)
            if kind == "stdout":
                out += m.stdout
            if kind == "exit":
                code = m.exit.exit_code
        return kinds[0], out, code

    async def main():
        async with grpc.aio.insecure_channel(d.target) as ch:
            stub = ch.unary_stream("/process.v1.ProcessService/Start",
                                   request_serializer=pb.StartRequest.SerializeToString,
                                   response_deserializer=pb.StartResponse.FromString)
            return await asyncio.gather(*(one(stub) for _ in range(n)), return_exceptions=True)

    prober, base = warmed(d)

    def burst():
        t0 = time.monotonic()
        results = asyncio.run(main())
        took = time.monotonic() - t0
        errors = [r for r in results if isinstance(r, BaseException)]
        assert not errors, f"{len(errors)} streams failed, e.g. {errors[0]!r}"
        assert all(r == ("init", b"ok\n", 0) for r in results)
        print(f"\n{n} streams of sleep 0.5 in {took:.1f}s")

    grows_not(d, burst, f"{n} concurrent Start streams")
    finish(prober, f"{n} concurrent Start streams")
    # Once the burst is over the daemon gives its memory back (it trims its heap when idle).
    settled(d, base, f"{n} streams", rss_slack_kib=6 << 10)


def test_10000_sequential_executes_leak_nothing(hostile):
    d = hostile
    c = d.client()
    n = int(os.environ.get("SBX_HOSTILE_EXECUTES", "10000"))
    for _ in range(300):  # warm up: thread caches, gRPC's pools
        c.execute(["true"])
    base = usage(d.proc.pid)
    t0 = time.monotonic()
    for _ in range(n):
        assert c.execute(["true"]).exit_code == 0
    took = time.monotonic() - t0
    now = usage(d.proc.pid)
    print(f"\n{n} Executes in {took:.1f}s: before {base}, after {now}")
    assert now["fds"] == base["fds"]
    assert now["threads"] == base["threads"]
    assert now["children"] == 0 and not lasting_zombies(d.proc.pid)
    assert SANITIZED or now["rss_kib"] < base["rss_kib"] + 4096, "RSS grows with Executes"


def test_1000_idle_grpc_connections(hostile):
    d = hostile
    prober, base = warmed(d)

    def burst():
        socks = connect_many(d.port, 1000)
        try:
            time.sleep(1.0)
            assert d.client().health().status == 1
        finally:
            for s in socks:
                s.close()
        wait_until(lambda: usage(d.proc.pid)["fds"] <= base["fds"], 20,
                   what="the connections' fds closed")

    grows_not(d, burst, "1000 idle gRPC connections")
    finish(prober, "1000 idle gRPC connections held open")
    settled(d, base, "1000 idle gRPC connections")


SLOW_UPLOAD = r"""
import sys, time
chunk = b"x" * 65536
for i in range(1000):
    sys.stdout.buffer.write(chunk)
    sys.stdout.buffer.flush()
    time.sleep(0.01)
"""


def slow_upload(d, name):
    """curl uploading ~64 MiB slowly from a generator; returns (curl, generator)."""
    gen = subprocess.Popen([sys.executable, "-c", SLOW_UPLOAD], stdout=subprocess.PIPE)
    curl = subprocess.Popen(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-T", "-",
                             f"{d.rest_url}/v1/files/{name}"], stdin=gen.stdout,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    gen.stdout.close()
    return curl, gen


def test_client_killed_mid_upload(hostile):
    d = hostile
    target = d.root / "precious.bin"
    target.write_bytes(b"old content")
    prober, base = warmed(d)
    curl, gen = slow_upload(d, "precious.bin")
    wait_until(lambda: temp_files(d.root), 10, what="the upload under way")
    curl.kill()
    gen.kill()
    curl.wait()
    gen.wait()
    wait_until(lambda: not temp_files(d.root), 10, what="the half upload's temp file gone")
    assert target.read_bytes() == b"old content", "the old file is intact"
    finish(prober, "client killed mid-upload")
    settled(d, base, "client killed mid-upload")


CLIENT = r"""
import grpc, sys
sys.path.insert(0, sys.argv[2])
import process_pb2 as pb
ch = grpc.insecure_channel(sys.argv[1])
start = ch.unary_stream("/process.v1.ProcessService/Start",
                        request_serializer=pb.StartRequest.SerializeToString,
                        response_deserializer=pb.StartResponse.FromString)
req = pb.StartRequest(config=pb.ProcessConfig(command=["sh", "-c", "echo $$; exec sleep 1000"]))
for m in start(req):
    if m.WhichOneof("event") == "stdout":
        print(m.stdout.decode().strip(), flush=True)
"""


def test_client_killed_mid_stream(hostile, leftovers):
    d = hostile
    prober, base = warmed(d)
    pbdir = Path(d.protos.pb.__file__).parent
    client = subprocess.Popen([sys.executable, "-c", CLIENT, d.target, str(pbdir)],
                              stdout=subprocess.PIPE)
    pid = int(client.stdout.readline())
    leftovers.add(pid)
    client.kill()
    client.wait()
    # The process dies with its call (process.v1), and is reaped.
    wait_until(lambda: pid_gone(pid), 10, what="the stream's process gone with its client")
    finish(prober, "client killed mid-stream")
    settled(d, base, "client killed mid-stream")


@pytest.fixture
def small_tmpfs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "full"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)])


def test_disk_full(sandboxd_factory, small_tmpfs):
    d = sandboxd_factory(root=small_tmpfs)
    d.prober_client = d.client()
    (small_tmpfs / "kept.txt").write_bytes(b"kept")
    prober, base = warmed(d)
    big = os.urandom(3 << 20)
    r = http_request(d.rest_port, "PUT", "/v1/files/kept.txt", body=big, timeout=30)
    assert r.status == 507, (r.status, r.body)
    assert (small_tmpfs / "kept.txt").read_bytes() == b"kept", "the old file is intact"
    assert not temp_files(small_tmpfs), "nothing half-written is left"
    r = http_request(d.rest_port, "PUT", "/v1/files/small.txt", body=b"fits", timeout=30)
    assert r.status in (200, 201, 204)
    assert (small_tmpfs / "small.txt").read_bytes() == b"fits"
    finish(prober, "disk full (2 MiB tmpfs)")
    settled(d, base, "disk full")


def test_sigterm_with_processes_and_uploads_in_flight(sandboxd_factory, leftovers):
    d = sandboxd_factory(["--termination-grace", "500ms"], shutdown_timeout=8.0)
    procs = Procs(d.client().channel, d.protos)
    sleeper = procs.spawn(["sh", "-c", "trap '' TERM; echo $$; exec sleep 1000"])
    stream = d.client().start(["sleep", "1000"])
    stream.wait_init()
    curl, gen = slow_upload(d, "inflight.bin")
    wait_until(lambda: temp_files(d.root), 10, what="the upload under way")
    pid = int(procs.attach(sleeper.id, follow=False)[0] or
              wait_until(lambda: procs.attach(sleeper.id, follow=False)[0], 5, what="pid"))
    leftovers.add(pid)
    d.sigterm()
    rc = d.wait_exit(15)
    gen.kill()
    curl.wait(10)
    gen.wait()
    assert rc == 0, d.log()
    assert pid_gone(pid), "a process ignoring SIGTERM is killed after the grace"
    assert not (d.root / "inflight.bin").exists(), "no half file takes the upload's name"
    assert not temp_files(d.root), "no temp file is left"
    stream.wait_done()


def test_symlink_swapped_during_requests(hostile, tmp_path):
    d = hostile
    outside = tmp_path / "outside-secret"
    outside.write_bytes(b"SECRET-OUTSIDE")
    (d.root / "inside.txt").write_bytes(b"inside")
    link = d.root / "link"
    link.symlink_to("inside.txt")
    stop = threading.Event()

    def swap():
        i = 0
        while not stop.is_set():
            tmp = d.root / f".swap{i % 2}"
            target = "inside.txt" if i % 2 else str(outside)
            try:
                tmp.unlink()
            except FileNotFoundError:
                pass
            tmp.symlink_to(target)
            os.replace(tmp, link)
            i += 1

    t = threading.Thread(target=swap, daemon=True)
    t.start()
    seen = {}
    try:
        for _ in range(400):
            r = http_request(d.rest_port, "GET", "/v1/files/link", timeout=10)
            seen[r.status] = seen.get(r.status, 0) + 1
            assert b"SECRET-OUTSIDE" not in r.body, "a swapped symlink led outside the root"
    finally:
        stop.set()
        t.join(5)
    print(f"\nsymlink swap: statuses {seen}")
    assert seen.get(200, 0) > 0 and set(seen) <= {200, 403, 404}


MISBEHAVING = {
    "closes stdout early": ("exec >&- 2>&-; sleep 0.3; exit 3", 3),
    "changes its process group": ("set -m; sleep 0.2 & wait; exit 4", 4),
    "daemonizes": ("setsid sh -c 'exec >/dev/null 2>&1 </dev/null; sleep 1000' & exit 5", 5),
    "leaves a background job holding stdout": ("sleep 1000 & exit 6", 6),
}


@pytest.mark.parametrize("case", list(MISBEHAVING))
def test_misbehaving_processes(hostile, case):
    d = hostile
    script, want = MISBEHAVING[case]
    prober, base = warmed(d)
    c = d.client()
    t0 = time.monotonic()
    s = c.start(["sh", "-c", script])
    s.wait_done(timeout=15)
    took = time.monotonic() - t0
    assert s.exit_code() == want
    print(f"\n{case}: exit delivered after {took:.2f}s")
    assert took < 10, "the exit is not held up by what the process left behind"
    # What it left behind is ours now (re-parented); the drain at shutdown takes it down.
    leftover_kids = usage(d.proc.pid)["children"] - base["children"]
    print(f"{case}: {leftover_kids} process(es) left behind")
    assert not lasting_zombies(d.proc.pid)
    finish(prober, case)
