#!/usr/bin/env bash
# Checks that the generated code matches proto/, vets, and runs the Go SDK's tests (and those
# of the sbx CLI) against a real sandboxd and sandboxd-router: $SANDBOXD_BIN and
# $SANDBOXD_ROUTER_BIN, or ones built here with CMake.
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
cd "$here"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
./gen.sh --check
unformatted=$(gofmt -l .)
[ -z "$unformatted" ] || { echo "gofmt: $unformatted" >&2; exit 1; }
go vet ./...
exec go test -count=1 -p 1 "$@" ./...
