#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, -DSANDBOXD_FUZZ=ON) and runs each, one after the other,
# for SECONDS seconds (default 60), starting from its committed corpus. Not part of CI: CTest
# only replays the corpus. New inputs go to $BUILD/fuzz-work/NAME/corpus, findings (crash-*,
# leak-*, timeout-*, oom-*) to $BUILD/fuzz-work/NAME/, libFuzzer's output to
# $BUILD/fuzz-work/NAME/log; a finding worth keeping is copied into the target's corpus
# (the corpus/NAME/ beside it) once fixed. Each target's final figures (runs, exec/s, cov, ft, corpus) are printed at the
# end and appended to $BUILD/fuzz-work/summary.
# Usage: scripts/fuzz.sh [SECONDS [NAME...]]   (NAME: tar_unpack, path, http_args, kube_watch, ...)
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-60}
shift || true
BUILD=${BUILD:-build/fuzz}

if [ $# -eq 0 ]; then
  for f in $(git ls-files -- '*/fuzz/fuzz_*.c' '*/fuzz/*/fuzz_*.c'); do
    name=$(basename "$f" .c)
    case $name in fuzz_main | fuzz_box) ;; *) set -- "$@" "${name#fuzz_}" ;; esac
  done
fi

./scripts/setup.sh
CC=clang cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSANDBOXD_FUZZ=ON \
  >/dev/null
ninja -C "$BUILD" -j2 "${@/#/fuzz_}"

# target_dir NAME: the fuzz directory of target NAME (its corpus/; its source there or in a
# subfolder named for the layer it tests).
target_dir() {
  local src
  src=$(git ls-files -- "*/fuzz/fuzz_$1.c" "*/fuzz/*/fuzz_$1.c" | head -1)
  echo "${src%%/fuzz/*}/fuzz"
}

# summarize NAME LOG: one line from libFuzzer's last status line and final stats.
summarize() {
  local done_line runs rate
  done_line=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$2" | tail -1 || true)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$2" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$2" | tail -1)
  printf '%-14s %6ss  runs %-10s exec/s %-6s cov %-5s ft %-6s corpus %s\n' "$1" "$secs" \
    "${runs:-?}" "${rate:-?}" \
    "$(grep -oE 'cov: [0-9]+' <<<"$done_line" | cut -d' ' -f2)" \
    "$(grep -oE 'ft: [0-9]+' <<<"$done_line" | cut -d' ' -f2)" \
    "$(grep -oE 'corp: [0-9]+/[0-9]+[a-zA-Z]*' <<<"$done_line" | cut -d' ' -f2)"
}

status=0
summary=()
for name in "$@"; do
  work="$BUILD/fuzz-work/$name"
  mkdir -p "$work/corpus"
  echo "== fuzz $name for ${secs}s"
  set +e
  d=$(target_dir "$name")
  "$BUILD/$d/fuzz_$name" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" "$d/corpus/$name" \
    2>&1 | tee "$work/log" | grep --line-buffered -E '^(==|#[0-9]+[[:space:]]+(DONE|pulse))|ERROR|check failed|SUMMARY'
  rc=${PIPESTATUS[0]}
  set -e
  [ "$rc" -eq 0 ] || status=1
  line=$(summarize "$name" "$work/log")
  summary+=("$line")
  echo "$(date -u +%FT%TZ) $line" >>"$BUILD/fuzz-work/summary"
done
printf '%s\n' "${summary[@]}"
exit $status
