"""Processes that outlive the client (sandboxd.v1.Processes), run by the SDK's tests.

    SANDBOXD_HOST=127.0.0.1 SANDBOXD_GRPC_PORT=9090 SANDBOXD_REST_PORT=8080 python background.py
"""

import os

from sandboxd import OutputChunk, Sandbox, Truncated

kw = dict(grpc_port=int(os.environ.get("SANDBOXD_GRPC_PORT", "9090")),
          rest_port=int(os.environ.get("SANDBOXD_REST_PORT", "8080")))
host = os.environ.get("SANDBOXD_HOST", "127.0.0.1")

# Start a job and let the client go.
with Sandbox(host, **kw) as sb:
    job = sb.processes.spawn("for i in 1 2 3; do echo step $i; done; read x; echo done $x",
                             tag="example", stdin=True, timeout=60)
    job_id = job.id
    with job.attach() as att:                 # follow its output until the third step
        seen = b""
        for ev in att:
            seen += ev.data if isinstance(ev, OutputChunk) else b""
            if b"step 3" in seen:
                break

# Later, another client finds it, reads from an offset, feeds it, and waits.
with Sandbox(host, **kw) as sb:
    [info] = [p for p in sb.processes.list(tag="example") if p.id == job_id]
    print("state:", info.state)
    job = sb.processes.handle(job_id)
    with job.attach(stdout_offset=7, follow=False) as att:   # skip "step 1\n"
        held = [ev for ev in att]
    print("from offset", held[0].offset, repr(b"".join(
        ev.data for ev in held if isinstance(ev, OutputChunk)).decode()))
    print("dropped:", [(ev.start, ev.end) for ev in held if isinstance(ev, Truncated)])
    job.write("now\n", eof=True)
    exit = job.wait(timeout=30)
    print("exit:", exit.exit_code, exit.reason)
    with job.attach(stdout_offset=21) as att:
        print("tail:", att.output().decode().strip())
    job.remove()
