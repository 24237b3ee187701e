#!/usr/bin/env bash
# Makes (once) the virtualenv of the E2B SDK's tests and benchmark (requirements.txt: the e2b SDK
# pinned, and pytest) and prints its path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../../scripts/venv.sh" "$here/requirements.txt" \
  "${SANDBOXD_E2B_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/e2b-venv}"
