#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, -DSANDBOXD_FUZZ=ON) and runs each for SECONDS seconds
# (default 60), starting from its committed corpus. Not part of CI: CTest only replays the
# corpus. New inputs go to $BUILD/fuzz-work/NAME/corpus, findings (crash-*, leak-*, timeout-*)
# to $BUILD/fuzz-work/NAME/; a finding worth keeping is copied into
# sandboxd/fuzz/corpus/NAME/ once fixed. Usage: scripts/fuzz.sh [SECONDS [NAME...]]
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-60}
shift || true
BUILD=${BUILD:-build/fuzz}

if [ $# -eq 0 ]; then
  for f in sandboxd/fuzz/fuzz_*.c; do
    name=$(basename "$f" .c)
    [ "$name" = fuzz_main ] || set -- "$@" "${name#fuzz_}"
  done
fi

./scripts/setup.sh
CC=clang cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSANDBOXD_FUZZ=ON \
  >/dev/null
ninja -C "$BUILD" "${@/#/fuzz_}"

status=0
for name in "$@"; do
  work="$BUILD/fuzz-work/$name"
  mkdir -p "$work/corpus"
  echo "== fuzz $name for ${secs}s"
  "$BUILD/sandboxd/fuzz/fuzz_$name" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" "sandboxd/fuzz/corpus/$name" ||
    status=1
done
exit $status
