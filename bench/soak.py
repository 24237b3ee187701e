#!/usr/bin/python3
"""A mixed soak of one daemon (not in CI): for --minutes, four workers keep it busy with Execute,
Start streams, uploads and downloads, and spawned processes read back through Attach, while a
sampler records every --every seconds the daemon's RSS, fds and threads and the p50/p99 of a
probe Execute. Prints the samples and whether RSS and latency stayed flat (last third against
the first third after the warm-up).

    bench/soak.py --bin build/sandboxd/sandboxd [--minutes 10] [--every 10]

Uses Debian's python3-grpcio and protoc, as the integration tests do."""

import argparse
import hashlib
import http.client
import importlib.util
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[1]


def load_protos(tmp):
    files = ["process/v1/process.proto", "sandboxd/v1/processes.proto"]
    subprocess.run(["protoc", f"-I{REPO / 'proto'}", "-I/usr/include", f"--python_out={tmp}",
                    *files], check=True)
    mods = []
    for name, f in (("soak_process_pb2", "process/v1/process_pb2.py"),
                    ("soak_processes_pb2", "sandboxd/v1/processes_pb2.py")):
        spec = importlib.util.spec_from_file_location(name, Path(tmp) / f)
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        mods.append(m)
    return mods


def usage(pid):
    status = Path(f"/proc/{pid}/status").read_text()
    rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
    threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
    return rss, len(os.listdir(f"/proc/{pid}/fd")), threads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--every", type=float, default=10)
    ap.add_argument("--table", help="also write the outcome as a markdown table to this file "
                                    "(the shape bench/report.py reads)")
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="sandboxd-soak-")
    pb, sbx = load_protos(tmp)
    root = Path(tmp) / "root"
    root.mkdir()
    d = subprocess.Popen([a.bin, "--listen-host", "127.0.0.1", "--grpc-port", "0", "--rest-port",
                          "0", "--root-dir", str(root)], stderr=subprocess.PIPE, text=True)
    ports = {}
    for line in d.stderr:
        m = re.search(r"(grpc|rest) listening on 127\.0\.0\.1 port (\d+)", line)
        if m:
            ports[m.group(1)] = int(m.group(2))
        if " ready " in line:
            break
    threading.Thread(target=lambda: [None for _ in d.stderr], daemon=True).start()
    ch = grpc.insecure_channel(f"127.0.0.1:{ports['grpc']}",
                               options=[("grpc.max_receive_message_length", 64 << 20)])
    execute = ch.unary_unary("/process.v1.ProcessService/Execute",
                             request_serializer=pb.ExecuteRequest.SerializeToString,
                             response_deserializer=pb.ExecuteResponse.FromString)
    start = ch.unary_stream("/process.v1.ProcessService/Start",
                            request_serializer=pb.StartRequest.SerializeToString,
                            response_deserializer=pb.StartResponse.FromString)
    spawn = ch.unary_unary("/sandboxd.v1.Processes/Spawn",
                           request_serializer=sbx.SpawnRequest.SerializeToString,
                           response_deserializer=sbx.ProcessInfo.FromString)
    attach = ch.unary_stream("/sandboxd.v1.Processes/Attach",
                             request_serializer=sbx.AttachRequest.SerializeToString,
                             response_deserializer=sbx.AttachEvent.FromString)
    remove = ch.unary_unary("/sandboxd.v1.Processes/Remove",
                            request_serializer=sbx.RemoveRequest.SerializeToString,
                            response_deserializer=sbx.RemoveResponse.FromString)
    stop = threading.Event()
    errors, counts = [], {"execute": 0, "stream": 0, "files": 0, "spawn": 0}

    def loop(name, fn):
        while not stop.is_set():
            try:
                fn()
                counts[name] += 1
            except Exception as e:  # noqa: BLE001 - every failure is reported
                errors.append(f"{name}: {e!r}")
                time.sleep(0.1)

    def one_execute():
        r = execute(pb.ExecuteRequest(config=pb.ProcessConfig(command=["true"])), timeout=10)
        assert r.exit_code == 0

    def one_stream():
        req = pb.StartRequest(config=pb.ProcessConfig(command=["head", "-c", "8000000",
                                                               "/dev/zero"]))
        n = sum(len(m.stdout) for m in start(req, timeout=30))
        assert n == 8000000, n

    def one_files():
        data = os.urandom(4 << 20)
        c = http.client.HTTPConnection("127.0.0.1", ports["rest"], timeout=30)
        c.request("PUT", "/v1/files/soak.bin", body=data)
        r = c.getresponse()
        r.read()
        assert r.status == 204, r.status
        c.request("GET", "/v1/files/soak.bin")
        r = c.getresponse()
        assert hashlib.sha256(r.read()).digest() == hashlib.sha256(data).digest()
        c.close()

    def one_spawn():
        p = spawn(sbx.SpawnRequest(spec=sbx.ProcessSpec(command=["sh", "-c", "seq 1 20000"])),
                  timeout=10)
        out = b"".join(ev.output.data for ev in attach(sbx.AttachRequest(id=p.id, follow=True),
                                                       timeout=30)
                       if ev.WhichOneof("event") == "output")
        assert out.count(b"\n") == 20000
        remove(sbx.RemoveRequest(id=p.id), timeout=10)

    workers = [threading.Thread(target=loop, args=(n, f), daemon=True) for n, f in
               (("execute", one_execute), ("stream", one_stream), ("files", one_files),
                ("spawn", one_spawn))]
    for w in workers:
        w.start()
    samples = []
    t0 = time.monotonic()
    print(f"{'t s':>6} {'RSS KiB':>9} {'fds':>5} {'thr':>4} {'probe p50 µs':>13} {'p99 µs':>9}  calls")
    while time.monotonic() - t0 < a.minutes * 60:
        lat = []
        end = time.monotonic() + a.every
        while time.monotonic() < end:
            s = time.monotonic()
            one_execute()
            lat.append((time.monotonic() - s) * 1e6)
            time.sleep(0.02)
        rss, fds, thr = usage(d.pid)
        lat.sort()
        row = (time.monotonic() - t0, rss, fds, thr, lat[len(lat) // 2], lat[int(len(lat) * 0.99)])
        samples.append(row)
        print(f"{row[0]:6.0f} {rss:9d} {fds:5d} {thr:4d} {row[4]:13.0f} {row[5]:9.0f}  {dict(counts)}",
              flush=True)
    stop.set()
    for w in workers:
        w.join(60)
    d.send_signal(signal.SIGTERM)
    rc = d.wait(30)
    shutil.rmtree(tmp, ignore_errors=True)
    third = max(1, len(samples) // 3)
    first, last = samples[1:1 + third] or samples[:1], samples[-third:]
    rss0, rss1 = statistics.median(s[1] for s in first), statistics.median(s[1] for s in last)
    p0, p1 = statistics.median(s[4] for s in first), statistics.median(s[4] for s in last)
    flat_rss = rss1 <= rss0 * 1.10 + 2048
    flat_lat = p1 <= p0 * 1.5
    print(f"\nRSS {rss0:.0f} -> {rss1:.0f} KiB ({'flat' if flat_rss else 'GROWS'}); probe p50 "
          f"{p0:.0f} -> {p1:.0f} µs ({'flat' if flat_lat else 'GROWS'}); errors {len(errors)}; "
          f"daemon exit {rc}")
    for e in errors[:5]:
        print("  ", e)
    if a.table:
        calls = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        rows = [
            ("measure", "ours", "reference", "floor / pipe", "ratio", "target", "result"),
            ("---",) * 7,
            (f"soak {a.minutes:g} min, daemon RSS KiB, first third -> last third", f"{rss0:.0f} -> {rss1:.0f}",
             "", "", f"{rss1 / rss0:.2f}×", "≤ 1.10× + 2 MiB", "PASS" if flat_rss else "FAIL"),
            (f"soak {a.minutes:g} min, probe Execute p50 µs, first third -> last third", f"{p0:.0f} -> {p1:.0f}",
             "", "", f"{p1 / p0:.2f}×", "≤ 1.5×", "PASS" if flat_lat else "FAIL"),
            (f"soak {a.minutes:g} min: errors, daemon exit status ({calls})", f"{len(errors)}, {rc}",
             "", "", "", "0, 0", "PASS" if not errors and rc == 0 else "FAIL"),
        ]
        with open(a.table, "w") as f:
            f.write("".join("| " + " | ".join(r) + " |\n" for r in rows))
    return 0 if flat_rss and flat_lat and not errors and rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
