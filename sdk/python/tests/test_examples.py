"""The getting-started example runs against the real daemon and prints what the README says."""

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(daemon, name):
    env = dict(os.environ, SANDBOXD_HOST="127.0.0.1", SANDBOXD_GRPC_PORT=str(daemon.grpc_port),
               SANDBOXD_REST_PORT=str(daemon.rest_port))
    p = subprocess.run([sys.executable, str(EXAMPLES / name)], env=env, capture_output=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode().splitlines()


def test_background(daemon):
    assert run_example(daemon, "background.py") == [
        "state: running", "from offset 7 'step 2\\nstep 3\\n'", "dropped: []",
        "exit: 0 exited", "tail: done now",
    ]


def test_quickstart(daemon):
    assert run_example(daemon, "quickstart.py") == [
        "run: 0 42", "stream: echo: hello", "exit: 0", "stat: 10", "list: ['data.txt']",
        "download: some data", "error: NOT_FOUND",
    ]


def test_terminal(daemon):
    assert run_example(daemon, "terminal.py") == [
        "size: 30 100", r"rest: 'world\r\nhello world\r\n' exit: 0 exited",
        r"again: 'world\r\nhello world\r\n'",
    ]
