"""A terminal over WebSocket, run by the SDK's tests.

    SANDBOXD_HOST=127.0.0.1 SANDBOXD_GRPC_PORT=9090 SANDBOXD_REST_PORT=8080 python terminal.py
"""

import os

from sandboxd import Sandbox

kw = dict(grpc_port=int(os.environ.get("SANDBOXD_GRPC_PORT", "9090")),
          rest_port=int(os.environ.get("SANDBOXD_REST_PORT", "8080")))
host = os.environ.get("SANDBOXD_HOST", "127.0.0.1")

with Sandbox(host, **kw) as sb:
    # A command in a new terminal of 100 x 30 (sb.terminal() alone: a login shell).
    with sb.terminal("stty size; read name; echo hello $name", cols=100, rows=30) as term:
        out = b""
        while b"\n" not in out:
            out += term.read(timeout=20)
        print("size:", out.decode().strip())
        after_size = term.offset              # the offset of the next byte read() returns
        term.write("world\n")                 # typed: the terminal echoes it
        rest = b"".join(term)                 # until the process exits
        print("rest:", repr(rest.decode()), "exit:", term.exit.exit_code, term.exit.reason)
    # The process is found again by its id, its output from any offset its ring holds.
    with sb.terminal(pid=term.id, offset=after_size) as again:
        print("again:", repr(b"".join(again).decode()))
