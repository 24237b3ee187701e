#!/usr/bin/env bash
# Checks that the generated code matches proto/, vets, and runs the Go SDK's tests (and those
# of the sbx CLI) against a real sandboxd: $SANDBOXD_BIN, or one built here with CMake.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
if [ -z "${SANDBOXD_BIN:-}" ]; then
  build="${SANDBOXD_SDK_BUILD:-$repo/build/sdk-daemon}"
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j2 --target sandboxd >/dev/null
  export SANDBOXD_BIN="$build/sandboxd/sandboxd"
fi
cd "$here"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
./gen.sh --check
unformatted=$(gofmt -l .)
[ -z "$unformatted" ] || { echo "gofmt: $unformatted" >&2; exit 1; }
go vet ./...
exec go test -count=1 -p 1 "$@" ./...
