#!/usr/bin/env bash
# Runs the E2B SDK's conformance tests against $SANDBOXD_BIN: makes (once) a virtualenv with
# Debian's Python and the pinned packages of requirements.txt from PyPI.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv="${SANDBOXD_E2B_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/e2b-venv}"
stamp="$venv/.requirements"
if ! cmp -s "$here/requirements.txt" "$stamp" 2>/dev/null; then
  echo "test/e2b: preparing $venv" >&2
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt" >&2
  cp "$here/requirements.txt" "$stamp"
fi
cd "$here"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider . "$@"
