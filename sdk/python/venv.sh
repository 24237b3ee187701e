#!/usr/bin/env bash
# Makes (once) the virtualenv of the Python SDK's build and tests, with Debian's Python and the
# pinned packages of requirements-test.txt from PyPI, and prints its path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv="${SANDBOXD_SDK_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/sdk-venv}"
stamp="$venv/.requirements"
if ! cmp -s "$here/requirements-test.txt" "$stamp" 2>/dev/null; then
  echo "sdk/python: preparing $venv" >&2
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements-test.txt" >&2
  cp "$here/requirements-test.txt" "$stamp"
fi
echo "$venv"
