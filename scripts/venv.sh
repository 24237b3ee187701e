#!/usr/bin/env bash
# Makes (once) a virtualenv with Debian's Python and the pinned packages of a requirements file
# from PyPI, and prints its path. It is made again when the requirements change (a copy of them
# inside it is the stamp).
#
#   scripts/venv.sh REQUIREMENTS VENV
set -euo pipefail
req=$1 venv=$2
if ! cmp -s "$req" "$venv/.requirements" 2>/dev/null; then
  echo "preparing $venv (from $req)" >&2
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >&2
  cp "$req" "$venv/.requirements"
fi
echo "$venv"
