#!/usr/bin/env bash
# Runs the E2B SDK's conformance tests against $SANDBOXD_BIN: makes (once) a virtualenv with
# Debian's Python and the pinned packages of requirements.txt from PyPI.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=$("$here/venv.sh")
cd "$here"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider . "$@"
