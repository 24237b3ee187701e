#!/usr/bin/python3
"""Watch event latency: from a file's write (utime of one of two files, alternating) to its event
at the client, over sandboxd.v1.Files/Watch (grpcio), over GET /v1/watch (SSE, http.client), and
on an inotify reader of this process's own (the floor: ctypes, a blocking read on a thread), in
the same rounds. Prints p50/p99 per path and their ratio to the floor. A benchmark, not a test.

    SANDBOXD_BIN=build/gcc/sandboxd/sandboxd bench/watch.py [--events 2000] [--rounds 3]
"""

import argparse
import ctypes
import http.client
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[1]
IN_ATTRIB = 0x4


def files_pb(tmp):
    tmp.mkdir(parents=True, exist_ok=True)
    subprocess.run(["protoc", f"-I{REPO / 'proto'}", "-I/usr/include", f"--python_out={tmp}",
                    "sandboxd/v1/files.proto"], check=True)
    sys.path.insert(0, str(tmp))
    from sandboxd.v1 import files_pb2  # noqa: E402
    return files_pb2


def floor_reader(d, q):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(0)
    libc.inotify_add_watch(fd, str(d).encode(), IN_ATTRIB)

    def run():
        while True:
            b = os.read(fd, 4096)
            q.put(time.perf_counter_ns())
            if not b:
                return
    threading.Thread(target=run, daemon=True).start()


def grpc_reader(target, pb, q):
    ch = grpc.insecure_channel(target)
    call = ch.unary_stream("/sandboxd.v1.Files/Watch", request_serializer=pb.WatchRequest.SerializeToString,
                           response_deserializer=pb.WatchEvent.FromString)(pb.WatchRequest(path="w"))
    ready = threading.Event()

    def run():
        for m in call:
            if m.kind == pb.WATCH_EVENT_KIND_READY:
                ready.set()
            else:
                q.put(time.perf_counter_ns())
    threading.Thread(target=run, daemon=True).start()
    ready.wait(10)


def sse_reader(port, q):
    c = http.client.HTTPConnection("127.0.0.1", port)
    c.request("GET", "/v1/watch/w")
    r = c.getresponse()
    ready = threading.Event()

    def run():
        while True:
            line = r.readline()
            if not line:
                return
            if line.startswith(b"event: ready"):
                ready.set()
            elif line.startswith(b"event: "):
                q.put(time.perf_counter_ns())
    threading.Thread(target=run, daemon=True).start()
    ready.wait(10)


def measure(path_files, q, n):
    lat = []
    for i in range(n):
        t0 = time.perf_counter_ns()
        os.utime(path_files[i & 1], ns=(i, i))
        t1 = q.get(timeout=10)
        lat.append((t1 - t0) / 1000)
    return lat


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    binary = os.environ.get("SANDBOXD_BIN", str(REPO / "build/gcc/sandboxd/sandboxd"))
    tmp = Path(tempfile.mkdtemp(prefix="sbx-watch-bench-"))
    pb = files_pb(tmp / "pb")
    root = tmp / "root"
    (root / "w").mkdir(parents=True)
    files = [root / "w" / "a", root / "w" / "b"]
    for f in files:
        f.touch()
    d = subprocess.Popen([binary, "--listen-host", "127.0.0.1", "--grpc-port", "0", "--rest-port", "0",
                          "--root-dir", str(root)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ports = {}
    for line in d.stdout:
        m = re.search(r"(grpc|rest) listening on \S+ port (\d+)", line)
        if m:
            ports[m.group(1)] = int(m.group(2))
        if "ready" in line and len(ports) == 2:
            break
    threading.Thread(target=lambda: [None for _ in d.stdout], daemon=True).start()
    qs = {k: queue.Queue() for k in ("floor", "grpc", "sse")}
    floor_reader(root / "w", qs["floor"])
    grpc_reader(f"127.0.0.1:{ports['grpc']}", pb, qs["grpc"])
    sse_reader(ports["rest"], qs["sse"])
    res = {k: [] for k in qs}
    for r in range(a.rounds):
        for k in (["floor", "grpc", "sse"] if r % 2 == 0 else ["sse", "grpc", "floor"]):
            for other in qs.values():  # the other readers' events of this path's writes are dropped
                while not other.empty():
                    other.get_nowait()
            lat = measure(files, qs[k], a.events)
            res[k] += lat
            for other in qs.values():
                while not other.empty():
                    other.get_nowait()
            time.sleep(0.2)
    d.terminate()
    d.wait(15)
    shutil.rmtree(tmp, ignore_errors=True)
    f50, f99 = pct(res["floor"], 0.5), pct(res["floor"], 0.99)
    print(f"watch event latency, write to event at the client ({a.rounds} rounds x {a.events} events a path)")
    print(f"{'path':<34}{'p50 us':>10}{'p99 us':>10}{'p50/floor':>11}{'p99/floor':>11}")
    names = {"floor": "floor (own inotify reader)", "grpc": "gRPC sandboxd.v1.Files/Watch",
             "sse": "SSE GET /v1/watch"}
    for k in ("floor", "grpc", "sse"):
        p50, p99 = pct(res[k], 0.5), pct(res[k], 0.99)
        print(f"{names[k]:<34}{p50:>10.1f}{p99:>10.1f}{p50 / f50:>11.1f}{p99 / f99:>11.1f}")
    print(json.dumps({k: {"p50_us": pct(v, 0.5), "p99_us": pct(v, 0.99)} for k, v in res.items()}))


if __name__ == "__main__":
    main()
