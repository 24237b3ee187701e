#!/usr/bin/env bash
# Makes (once) the virtualenv of the Python SDK's build and tests, with Debian's Python and the
# pinned packages of requirements-test.txt from PyPI, and prints its path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../../scripts/venv.sh" "$here/requirements-test.txt" \
  "${SANDBOXD_SDK_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/sdk-venv}"
