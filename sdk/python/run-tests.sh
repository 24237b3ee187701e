#!/usr/bin/env bash
# Builds and installs the Python SDK into its virtualenv (venv.sh) and runs its tests against a
# real sandboxd and sandboxd-router: $SANDBOXD_BIN and $SANDBOXD_ROUTER_BIN, or ones built here
# with CMake into $SANDBOXD_SDK_BUILD.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
if [ -z "${SANDBOXD_BIN:-}" ] || [ -z "${SANDBOXD_ROUTER_BIN:-}" ]; then
  build="${SANDBOXD_SDK_BUILD:-$repo/build/sdk-daemon}"
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j2 --target sandboxd sandboxd-router >/dev/null
  export SANDBOXD_BIN="${SANDBOXD_BIN:-$build/sandboxd/sandboxd}"
  export SANDBOXD_ROUTER_BIN="${SANDBOXD_ROUTER_BIN:-$build/router/sandboxd-router}"
fi
# The tests import the SDK as a user gets it (install.sh: a regular install into the venv).
venv=$("$here/install.sh")
cd "$here"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
