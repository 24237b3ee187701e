#!/usr/bin/env bash
# Terminal round trips: a keystroke to its echo on a pty running `cat` (cooked mode: the echo is
# the line discipline's), over our WebSocket route, over gRPC process.v1 (Start with a pty and a
# WriteStdin call a key) on ours and on the reference daemon, over sandboxd.v1.Processes, and on
# a local pty of this process's own (the floor), all in the same rounds. Prints one table with
# the ratios; a benchmark is not a test: nothing here fails on a figure. See the "Terminals"
# section of bench/README.md.
#
#   bench/terminal.sh            full run (3 rounds of 2000 keys and 20 bursts a path; ~30 s)
#   bench/terminal.sh --quick    quick run (2 rounds of 500 keys and 10 bursts; ~10 s)
#
# Options (after --quick, to override it):
#   --rounds N       rounds; each measures every path once, on a new `cat`, in an order that
#                    flips every round (3)
#   --keys N         timed keystrokes a path a round, each typed after the previous echo (2000)
#   --line N         keys a line: a newline (untimed) after each, so that cat's line stays short (32)
#   --bursts N       bursts a path a round (20)
#   --burst N        keys a burst, typed one message each as fast as the path takes them (100)
#   --rev REV        build sandboxd from commit REV (git archive) instead of the work tree
#   --out DIR        build and result directory, outside the repo (/tmp/sandboxd-bench)
#
# Environment: SANDBOXD_TOOLS (where the reference daemon is built and cached, as setup.sh does;
# default ~/.cache/sandboxd/bin), SANDBOXD_BIN (use this sandboxd binary, skip the build).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$REPO/bench
OUT=/tmp/sandboxd-bench
ROUNDS=3 KEYS=2000 LINE=32 BURSTS=20 BURST=100 REV=

while [ $# -gt 0 ]; do
  case $1 in
  --quick) ROUNDS=2 KEYS=500 BURSTS=10 ;;
  --rounds) ROUNDS=$2; shift ;;
  --keys) KEYS=$2; shift ;;
  --line) LINE=$2; shift ;;
  --bursts) BURSTS=$2; shift ;;
  --burst) BURST=$2; shift ;;
  --rev) REV=$2; shift ;;
  --out) OUT=$2; shift ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "terminal.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

. "$BENCH/lib.sh"
T0=$(date +%s)

log "building (into $OUT)"
build_sandboxd
build_client
build_reference
REF=$SANDBOXD_TOOLS/reference-sandboxd

# --- daemons -----------------------------------------------------------------------------------
RUN=$OUT/terminal-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN/roots/ours" "$RUN/roots/ref" "$RUN/logs"
RES=$RUN/results.jsonl
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$RUN/roots"
}
trap cleanup EXIT

DENV=(env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" LANG=C.UTF-8)
declare -A GRPC URL PID

start() {
  local l=$1 gp rp
  read -r gp rp < <("$SBX" freeport -n 2)
  if [ "$l" = ours ]; then
    "${DENV[@]}" "$SANDBOXD" --listen-host 127.0.0.1 --grpc-port "$gp" --rest-port "$rp" \
      --root-dir "$RUN/roots/ours" >>"$RUN/logs/ours.log" 2>&1 &
  else
    "${DENV[@]}" "$REF" -grpc-port "$gp" -rest-port "$rp" -root-dir "$RUN/roots/ref" \
      >>"$RUN/logs/ref.log" 2>&1 &
  fi
  PID[$l]=$!
  PIDS+=("$!")
  GRPC[$l]=127.0.0.1:$gp
  URL[$l]=http://127.0.0.1:$rp
  "$SBX" wait -addr "${GRPC[$l]}" -timeout 30s
}

# ensure L: restarts daemon L if it died, and records that it did.
ensure() {
  local l=$1 pid=${PID[$1]} st
  st=$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null || echo gone)
  [ "$st" != Z ] && [ "$st" != gone ] && return 0
  wait "$pid" && st=0 || st=$?
  echo "DAEMON DIED: $l (pid $pid, wait status $st; 139 = SIGSEGV), restarted; log $RUN/logs/$l.log" |
    tee -a "$RUN/deaths.txt" >&2
  start "$l"
}

# m CMD...: one measurement; a failure is reported and the run goes on.
m() { "$@" || echo "terminal.sh: measurement failed: $*" >&2; }

# path NAME: one run of one path.
T=(-keys "$KEYS" -line "$LINE" -bursts "$BURSTS" -burst "$BURST" -out "$RES")
path() {
  case $1 in
  floor) m "$SBX" term -transport pty "${T[@]}" ;;
  ws | grpc | procs)
    ensure ours
    m "$SBX" term -transport "$1" -label ours -addr "${GRPC[ours]}" -url "${URL[ours]}" \
      -pid "${PID[ours]}" "${T[@]}"
    ;;
  ref)
    ensure ref
    m "$SBX" term -transport grpc -label ref -addr "${GRPC[ref]}" -pid "${PID[ref]}" "${T[@]}"
    ;;
  esac
}

{
  echo "# sandboxd terminal benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
  machine_line
  ours_line
  echo "reference: $REFERENCE_MODULE@$REFERENCE_VERSION"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (anything but this benchmark running adds noise)"
  echo "options: rounds=$ROUNDS keys=$KEYS line=$LINE bursts=$BURSTS burst=$BURST"
} >"$RUN/header.txt"
cat "$RUN/header.txt" >&2

log "starting the daemons"
start ours
start ref

ORDER=(floor ws grpc ref procs)
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
  log "round $ROUND/$ROUNDS (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  if [ $((ROUND % 2)) -eq 1 ]; then
    for p in "${ORDER[@]}"; do path "$p"; done
  else
    for ((i = ${#ORDER[@]} - 1; i >= 0; i--)); do path "${ORDER[i]}"; done
  fi
done 2> >(tee "$RUN/progress.txt" >&2)
for l in ours ref; do ensure "$l"; done

{
  cat "$RUN/header.txt"
  echo
  "$SBX" termreport "$RES" || echo "terminal.sh: the report failed; raw results are in $RES"
  [ -s "$RUN/deaths.txt" ] && sed 's/^/note: /' "$RUN/deaths.txt"
  echo
  echo "run time $(($(date +%s) - T0)) s; load average at end: $(cut -d' ' -f1-3 /proc/loadavg); raw results: $RES"
} >"$RUN/table.md"
echo
cat "$RUN/table.md"
ln -sfn "$RUN" "$OUT/terminal-latest"
exit 0
