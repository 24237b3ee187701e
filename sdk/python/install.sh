#!/usr/bin/env bash
# Installs the Python SDK into its virtualenv (made by venv.sh) and prints the virtualenv's
# path. A regular (not editable) install from a clean build dir: what imports it gets what a
# user would, with stubs generated from proto/ by the build and no stale module carried over.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=$("$here/venv.sh")
rm -rf "$here/build"
"$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps \
  --force-reinstall "$here" >&2
rm -rf "$here/build"
echo "$venv"
