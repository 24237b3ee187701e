#!/usr/bin/python3
"""commands.run("true") through the E2B Python SDK against sandboxd's E2B port, the same program
through our own Python SDK to the same daemon, and a local spawn of it (the floor), in the same
rounds; optionally files.write / read of one file through both. Prints one table with the ratios.
A benchmark, not a test: nothing here fails on a figure. bench/e2b.sh runs it (builds the daemon,
makes the two virtualenvs, hides root's shell start-up files); see the "E2B" section of
bench/README.md.

The SDKs live in two virtualenvs (their protobuf stacks differ), so each runs in a worker process
of its own (this file with --worker, under that virtualenv's python), kept for the whole run: one
Sandbox each, warm connections, driven a window at a time over stdin/stdout (JSON lines).
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

# E2B's commands.run(cmd) is envd's Start of /bin/bash -l -c cmd: every path runs this argv.
ARGV = ["/bin/bash", "-l", "-c", "true"]
# The small environment run.sh gives its daemons (which every spawned program inherits).
DENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/"), "LANG": "C.UTF-8"}


# --- the worker: one SDK, under its own virtualenv ---------------------------------------------

def e2b_ops(url):
    os.environ["E2B_DEBUG"] = "true"  # no control plane: envd calls go to E2B_SANDBOX_URL
    os.environ["E2B_SANDBOX_URL"] = url
    from e2b import Sandbox
    sbx = Sandbox.create()

    def run():
        r = sbx.commands.run("true")
        if r.exit_code != 0:
            raise RuntimeError(f"exit code {r.exit_code}")

    return {"run": run, "write": lambda p, d: sbx.files.write(p, d),
            "read": lambda p: bytes(sbx.files.read(p, format="bytes"))}


def ours_ops(grpc_port, rest_port):
    from sandboxd import Sandbox
    sb = Sandbox("127.0.0.1", grpc_port=grpc_port, rest_port=rest_port, token=None)

    def run():
        r = sb.run(ARGV, timeout=60)
        if r.exit_code != 0:
            raise RuntimeError(f"exit code {r.exit_code}")

    def execute():
        r = sb.execute(ARGV)
        if r.exit_code != 0:
            raise RuntimeError(f"exit code {r.exit_code}")

    return {"run": run, "execute": execute, "write": lambda p, d: sb.files.write_bytes(p, d),
            "read": lambda p: sb.files.read_bytes(p, max_bytes=1 << 30)}


def closed_loop(fn, warmup, duration):
    """Latencies (ns) of fn called back to back over a recorded window after a warm-up."""
    end = time.monotonic() + warmup
    while time.monotonic() < end:
        fn()
    out, end = [], time.monotonic() + duration
    while time.monotonic() < end:
        t0 = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t0)
    return out


def files_loop(ops, path, size, reps):
    data = os.urandom(size)
    w, r = [], []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        ops["write"](path, data)
        t1 = time.perf_counter_ns()
        got = ops["read"](path)
        t2 = time.perf_counter_ns()
        if got != data:
            raise RuntimeError(f"read back {len(got)} bytes, not the {size} written")
        w.append(t1 - t0)
        r.append(t2 - t1)
    return w, r


def worker(args):
    ops = e2b_ops(args.url) if args.worker == "e2b" else ours_ops(args.grpc_port, args.rest_port)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        q = json.loads(line)
        c0 = time.process_time()
        try:
            if q["op"] == "files":
                w, r = files_loop(ops, q["path"], q["size"], q["reps"])
                a = {"write": w, "read": r}
            else:
                a = {"samples": closed_loop(ops[q["op"]], q["warmup"], q["duration"])}
        except Exception as e:  # noqa: BLE001 - reported to the driver, the run goes on
            a = {"error": f"{type(e).__name__}: {e}"}
        a["client_cpu"] = time.process_time() - c0
        print(json.dumps(a), flush=True)


# --- the driver ---------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def daemon_cpu(pid):
    """utime + stime of the daemon (all threads), s."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def spawn_floor(warmup, duration):
    """The same argv spawned and reaped by this process: posix_spawn (vfork+exec), stdio on
    /dev/null, the daemon's environment."""
    null = os.open(os.devnull, os.O_RDWR)
    acts = [(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, null, 1),
            (os.POSIX_SPAWN_DUP2, null, 2)]

    def one():
        pid = os.posix_spawn(ARGV[0], ARGV, DENV, file_actions=acts)
        _, st = os.waitpid(pid, 0)
        if st != 0:
            raise RuntimeError(f"local spawn: wait status {st}")
    try:
        return closed_loop(one, warmup, duration)
    finally:
        os.close(null)


def files_floor(d, size, reps):
    """What a daemon cannot beat for a write (write, fsync, rename, fsync of the directory, as
    ours does) and a read (page cache warm) of the same file."""
    data, path, tmp = os.urandom(size), d / "floor.bin", d / ".floor.tmp"
    w, r = [], []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        os.rename(tmp, path)
        dfd = os.open(d, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
        t1 = time.perf_counter_ns()
        got = path.read_bytes()
        t2 = time.perf_counter_ns()
        assert got == data
        w.append(t1 - t0)
        r.append(t2 - t1)
    return w, r


class Worker:
    def __init__(self, python, argv, log):
        self.p = subprocess.Popen([python, __file__, *argv], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=log, text=True)
        if not json.loads(self.p.stdout.readline() or "{}").get("ready"):
            raise SystemExit(f"e2b_sdk.py: the worker {argv[:2]} did not start (see {log.name})")

    def ask(self, **q):
        self.p.stdin.write(json.dumps(q) + "\n")
        self.p.stdin.flush()
        a = json.loads(self.p.stdout.readline() or '{"error": "the worker died"}')
        if "error" in a:
            print(f"e2b_sdk.py: measurement failed: {q['op']}: {a['error']}", file=sys.stderr)
        return a

    def close(self):
        self.p.stdin.close()
        self.p.wait(30)


def pct(xs, p):
    """Nearest-rank percentile."""
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, -(-len(s) * p // 100) - 1))] if s else float("nan")


def start_daemon(args, run):
    ports = {k: free_port() for k in ("grpc", "rest", "e2b")}
    (run / "root").mkdir(parents=True, exist_ok=True)
    log = open(run / "sandboxd.log", "wb")
    p = subprocess.Popen(
        [args.sandboxd, "--listen-host", "127.0.0.1", "--grpc-port", str(ports["grpc"]),
         "--rest-port", str(ports["rest"]), "--e2b-port", str(ports["e2b"]),
         "--root-dir", str(run / "root")],
        stdout=log, stderr=subprocess.STDOUT, env=DENV)
    url = f"http://127.0.0.1:{ports['e2b']}"
    end = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 204:
                    break
        except OSError:
            pass
        if p.poll() is not None or time.monotonic() > end:
            raise SystemExit(f"e2b_sdk.py: sandboxd did not come up (see {run / 'sandboxd.log'})")
        time.sleep(0.05)
    return p, ports, url


def rat(a, b):
    """a / b as a ratio cell; empty when either is missing or b is not above zero."""
    return f"{a / b:.2f}×" if a == a and b == b and b > 0 and a >= 0 else ""


def report(rows, files, rounds):
    """The table: latencies in µs, nearest-rank percentiles pooled over the rounds."""
    fl = rows.get("floor", [])
    f50 = pct(fl, 50)
    print("| measure | floor (local spawn) | our SDK | E2B SDK | E2B / floor | ours / floor | E2B / ours |")
    print("|---|---|---|---|---|---|---|")

    def line(name, fn, unit, f=None):
        o, e = fn(rows.get("ours-run", [])), fn(rows.get("e2b-run", []))
        fv = fn(fl) if f is None else f
        fs = "" if fv != fv else f"{fv:.0f}"
        print(f"| {name} ({unit}) | {fs} | {o:.0f} | {e:.0f} | {rat(e, fv)} | {rat(o, fv)} | {rat(e, o)} |")

    us = lambda p: lambda xs: pct(xs, p) / 1e3  # noqa: E731
    for p in (50, 90, 99):
        line(f'commands.run("true") p{p}', us(p), "µs")
    calls = lambda xs: len(xs) / (sum(xs) / 1e9) if xs else float("nan")  # noqa: E731
    line('commands.run("true") calls/s, 1 client', calls, "calls/s")
    o, e = pct(rows.get("ours-run", []), 50), pct(rows.get("e2b-run", []), 50)
    print(f'| commands.run("true"): what the path adds to a local spawn, p50 − floor (µs) |  | '
          f'{(o - f50) / 1e3:.0f} | {(e - f50) / 1e3:.0f} |  |  | {rat(e - f50, o - f50)} |')
    cpu = rows.get("cpu", {})
    if cpu.get("ours-run") and cpu.get("e2b-run"):
        a = cpu["ours-run"][0] / max(cpu["ours-run"][1], 1) * 1e6
        b = cpu["e2b-run"][0] / max(cpu["e2b-run"][1], 1) * 1e6
        print(f"| daemon CPU per call (µs) |  | {a:.0f} | {b:.0f} |  |  | {rat(b, a)} |")
        a = cpu["ours-run"][2] / max(cpu["ours-run"][1], 1) * 1e6
        b = cpu["e2b-run"][2] / max(cpu["e2b-run"][1], 1) * 1e6
        print(f"| the SDK's own CPU per call, client side (µs) |  | {a:.0f} | {b:.0f} |  |  | {rat(b, a)} |")
    ex = rows.get("ours-execute", [])
    if ex:
        print(f"| our SDK's unary execute() of the same argv, p50 (µs; p99 {pct(ex, 99) / 1e3:.0f}) | "
              f"{f50 / 1e3:.0f} | {pct(ex, 50) / 1e3:.0f} |  |  | {rat(pct(ex, 50), f50)} |  |")
    for what in ("write", "read"):
        if not files.get(("floor", what)):
            continue
        mbs = lambda xs: files["size"] / (pct(xs, 50) / 1e9) / 1e6 if xs else float("nan")  # noqa: E731
        fv = mbs(files[("floor", what)])
        o, e = mbs(files.get(("ours", what), [])), mbs(files.get(("e2b", what), []))
        floor_what = "write+fsync+rename" if what == "write" else "read, page cache warm"
        print(f"| files.{what} {files['size'] >> 20} MiB, MB/s of the p50 "
              f"(floor: {floor_what}) | {fv:.0f} | {o:.0f} | {e:.0f} | {rat(e, fv)} | "
              f"{rat(o, fv)} | {rat(e, o)} |")
    if files.get(("ours", "cpu")) is not None and files.get(("e2b", "cpu")) is not None:
        o, e = files[("ours", "cpu")] * 1e3, files[("e2b", "cpu")] * 1e3
        print(f"| files: the SDK's own CPU per write + read, client side (ms) |  | {o:.0f} | {e:.0f} "
              f"|  |  | {rat(e, o)} |")
        o, e = files[("ours", "daemon")] * 1e3, files[("e2b", "daemon")] * 1e3
        print(f"| files: daemon CPU per write + read (ms) |  | {o:.0f} | {e:.0f} |  |  | {rat(e, o)} |")
    n = {k: len(v) for k, v in rows.items() if k != "cpu"}
    print(f"\nsamples over {rounds} rounds: {n}")


def driver(args):
    run = Path(args.run)
    run.mkdir(parents=True, exist_ok=True)
    daemon, ports, url = start_daemon(args, run)
    logs = open(run / "workers.log", "w")
    workers = {}
    try:
        workers["e2b"] = Worker(args.e2b_python, ["--worker", "e2b", "--url", url], logs)
        workers["ours"] = Worker(args.sdk_python, ["--worker", "ours", "--grpc-port",
                                                   str(ports["grpc"]), "--rest-port",
                                                   str(ports["rest"])], logs)
        rows, cpu = {"cpu": {}}, {}
        L = {"warmup": args.warmup, "duration": args.duration}
        for rnd in range(1, args.rounds + 1):
            la = " ".join(f"{x:.2f}" for x in os.getloadavg())
            print(f"round {rnd}/{args.rounds} (load average {la})", file=sys.stderr)
            order = ["floor", "ours-run", "e2b-run", "ours-execute"]
            if rnd % 2 == 0:
                order.reverse()
            for k in order:
                if k == "floor":
                    rows.setdefault(k, []).extend(spawn_floor(args.warmup, args.duration))
                    continue
                sdk, op = k.split("-")
                c0 = daemon_cpu(daemon.pid)
                a = workers[sdk].ask(op=op, **L)
                s = a.get("samples", [])
                rows.setdefault(k, []).extend(s)
                c = cpu.setdefault(k, [0.0, 0, 0.0])
                c[0] += daemon_cpu(daemon.pid) - c0
                c[1] += len(s)
                c[2] += a.get("client_cpu", 0.0)
        rows["cpu"] = cpu
        files = {"size": args.file_bytes}
        if args.file_bytes:
            files[("floor", "write")], files[("floor", "read")] = files_floor(
                run / "root", args.file_bytes, args.file_reps)
            for sdk in (["ours", "e2b"] if args.rounds % 2 else ["e2b", "ours"]):
                path = f"bench-{sdk}.bin" if sdk == "ours" else str(run / "root" / "bench-e2b.bin")
                c0 = daemon_cpu(daemon.pid)
                a = workers[sdk].ask(op="files", path=path, size=args.file_bytes, reps=args.file_reps)
                files[(sdk, "daemon")] = (daemon_cpu(daemon.pid) - c0) / args.file_reps
                files[(sdk, "write")], files[(sdk, "read")] = a.get("write", []), a.get("read", [])
                files[(sdk, "cpu")] = a.get("client_cpu", 0.0) / args.file_reps
        if daemon.poll() is not None:
            print(f"note: DAEMON DIED (exit status {daemon.returncode}); log {run / 'sandboxd.log'}")
        report(rows, files, args.rounds)
    finally:
        for w in workers.values():
            w.close()
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", choices=["e2b", "ours"])
    ap.add_argument("--url")
    ap.add_argument("--grpc-port", type=int)
    ap.add_argument("--rest-port", type=int)
    ap.add_argument("--sandboxd", default=os.environ.get("SANDBOXD_BIN"))
    ap.add_argument("--e2b-python", help="python of a virtualenv with the e2b SDK")
    ap.add_argument("--sdk-python", help="python of a virtualenv with our SDK (sandboxd)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=3.0, help="recorded window, s")
    ap.add_argument("--warmup", type=float, default=0.3, help="unrecorded warm-up, s")
    ap.add_argument("--file-bytes", type=int, default=10 << 20, help="0: no files rows")
    ap.add_argument("--file-reps", type=int, default=10)
    ap.add_argument("--run", default="/tmp/sandboxd-bench/e2b-manual", help="run directory")
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if not (args.sandboxd and args.e2b_python and args.sdk_python):
        ap.error("--sandboxd (or SANDBOXD_BIN), --e2b-python and --sdk-python are needed")
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
