"""Getting started with the sandboxd Python SDK (run by the SDK's tests).

    SANDBOXD_HOST=127.0.0.1 SANDBOXD_GRPC_PORT=9090 SANDBOXD_REST_PORT=8080 python quickstart.py
"""

import io
import os
import tempfile

from sandboxd import NotFoundError, Sandbox

host = os.environ.get("SANDBOXD_HOST", "127.0.0.1")
grpc_port = int(os.environ.get("SANDBOXD_GRPC_PORT", "9090"))
rest_port = int(os.environ.get("SANDBOXD_REST_PORT", "8080"))

with Sandbox(host, grpc_port=grpc_port, rest_port=rest_port) as sb:
    # Run a command to completion.
    r = sb.run(["python3", "-c", "print(6 * 7)"], timeout=30)
    print("run:", r.exit_code, r.stdout_text.strip())

    # Start a process, talk to its stdin, stream its output.
    with sb.start("while read line; do echo \"echo: $line\"; done") as p:
        p.write("hello\n")
        print("stream:", p.read(timeout=10).data.decode().strip())
        p.close_stdin()
        print("exit:", p.wait(timeout=10).exit_code)

    # Files: upload, stat, list, download (streamed, any size).
    sb.files.upload(io.BytesIO(b"some data\n"), "quickstart/data.txt")
    print("stat:", sb.files.stat("quickstart/data.txt").size)
    print("list:", [e.name for e in sb.files.list("quickstart")])
    with tempfile.TemporaryDirectory() as d:
        sb.files.download("quickstart/data.txt", os.path.join(d, "copy.txt"))
        print("download:", open(os.path.join(d, "copy.txt")).read().strip())

    # Errors are typed and carry the daemon's code.
    try:
        sb.files.stat("quickstart/missing")
    except NotFoundError as e:
        print("error:", e.code)
    sb.files.remove("quickstart", recursive=True)
