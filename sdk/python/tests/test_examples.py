"""The getting-started example runs against the real daemon and prints what the README says."""

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"


def test_quickstart(daemon):
    env = dict(os.environ, SANDBOXD_HOST="127.0.0.1", SANDBOXD_GRPC_PORT=str(daemon.grpc_port),
               SANDBOXD_REST_PORT=str(daemon.rest_port))
    p = subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode().splitlines() == [
        "run: 0 42", "stream: echo: hello", "exit: 0", "stat: 10", "list: ['data.txt']",
        "download: some data", "error: NOT_FOUND",
    ]
