#!/usr/bin/env bash
# Benchmarks sandboxd against the reference Go daemon, side by side in one run, and prints one
# table of ratios with PASS/FAIL per target. Targets never make it exit non-zero: a benchmark is
# not a test. See bench/README.md for what each figure means.
#
#   bench/run.sh            full run (1 GiB streams, 3 rounds; about 4-5 minutes on 2 vCPUs)
#   bench/run.sh --quick    quick run (256 MiB streams, 2 rounds, 1 s windows; under 2 minutes)
#
# Options (after --quick, to override it):
#   --rounds N          rounds; every measurement runs once per round, ours and the reference
#                       back to back, the order flipped every round (3)
#   --duration D        recorded window of each latency measurement, Go syntax (2s)
#   --warmup D          unrecorded warm-up before each window (300ms)
#   --stream-bytes N    bytes each Start streams (1073741824)
#   --chunks "A B"      equal --stream-chunk-size values given to both daemons ("65536 4096")
#   --ready-runs N      cold starts per daemon for start-to-ready and idle RSS (3)
#   --window N          client HTTP/2 window for streams, 0 for grpc-go's BDP default (16777216)
#   --conns N           client connections shared by the 16 concurrent Execute clients (1)
#   --profile           also perf-record our daemon during a stream and an Execute run
#   --rev REV           build sandboxd from commit REV (exported with git archive) instead of
#                       the work tree, e.g. --rev HEAD for figures that a commit reproduces
#   --out DIR           build and result directory, outside the repo (/tmp/sandboxd-bench)
#
# Environment: SANDBOXD_TOOLS (where the reference daemon is built and cached, as setup.sh does;
# default ~/.cache/sandboxd/bin), SANDBOXD_BIN (use this sandboxd binary, skip the build).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$REPO/bench
OUT=/tmp/sandboxd-bench
ROUNDS=3 DURATION=2s WARMUP=300ms STREAM_BYTES=1073741824 CHUNKS="65536 4096" READY_RUNS=3
WINDOW=16777216 CONNS=1 PROFILE=0 REV=

while [ $# -gt 0 ]; do
  case $1 in
  --quick) ROUNDS=2 DURATION=1s WARMUP=200ms STREAM_BYTES=268435456 READY_RUNS=3 ;;
  --rounds) ROUNDS=$2; shift ;;
  --duration) DURATION=$2; shift ;;
  --warmup) WARMUP=$2; shift ;;
  --stream-bytes) STREAM_BYTES=$2; shift ;;
  --chunks) CHUNKS=$2; shift ;;
  --ready-runs) READY_RUNS=$2; shift ;;
  --window) WINDOW=$2; shift ;;
  --conns) CONNS=$2; shift ;;
  --profile) PROFILE=1 ;;
  --rev) REV=$2; shift ;;
  --out) OUT=$2; shift ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

. "$BENCH/lib.sh"
T0=$(date +%s)

# --- build -------------------------------------------------------------------------------------
log "building (into $OUT)"
build_sandboxd
# The static no-op: no libc, no loader; see noop.c.
gcc -O2 -static -nostdlib -nostartfiles -fno-stack-protector -o "$OUT/noop" "$BENCH/noop.c"
build_client

# The reference daemon, built and cached as scripts/setup.sh does (scripts/reference.sh).
build_reference
REF=$SANDBOXD_TOOLS/reference-sandboxd

# --- daemons -----------------------------------------------------------------------------------
RUN=$OUT/run-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN/roots" "$RUN/logs"
RES=$RUN/results.jsonl
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

# Both daemons run with the same small environment, which every spawned program inherits.
DENV=(env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" LANG=C.UTF-8)
declare -A ADDR PID

# start LABEL CHUNK: one daemon; CHUNK "default" (and "probe": the pair that only gets calls to
# an unknown method, which must not disturb the others) passes no --stream-chunk-size.
start() {
  local label=$1 chunk=$2 key=$1/$2 gp rp root cf=()
  read -r gp rp < <("$SBX" freeport -n 2)
  root=$RUN/roots/$label-$chunk
  mkdir -p "$root"
  if [ "$label" = ours ]; then
    [ "$chunk" = default ] || [ "$chunk" = probe ] || cf=(--stream-chunk-size "$chunk")
    "${DENV[@]}" "$SANDBOXD" --listen-host 127.0.0.1 --grpc-port "$gp" --rest-port "$rp" \
      --root-dir "$root" "${cf[@]}" >>"$RUN/logs/$label-$chunk.log" 2>&1 &
  else
    [ "$chunk" = default ] || [ "$chunk" = probe ] || cf=(-stream-chunk-size "$chunk")
    "${DENV[@]}" "$REF" -grpc-port "$gp" -rest-port "$rp" -root-dir "$root" "${cf[@]}" \
      >>"$RUN/logs/$label-$chunk.log" 2>&1 &
  fi
  PID[$key]=$!
  PIDS+=("$!")
  ADDR[$key]=127.0.0.1:$gp
}

# both FIRST_FIRST CMD...: runs CMD for ours and ref (in the order of the round), with {L}, {A}
# and {P} replaced by label, address and pid of the daemon for chunk $CHUNK.
both() {
  local order=(ours ref) l a
  [ $((ROUND % 2)) -eq 0 ] && order=(ref ours)
  for l in "${order[@]}"; do
    ensure "$l/$CHUNK"
    a=()
    for x in "$@"; do
      x=${x//\{L\}/$l}
      x=${x//\{A\}/${ADDR[$l/$CHUNK]}}
      x=${x//\{P\}/${PID[$l/$CHUNK]}}
      a+=("$x")
    done
    m "${a[@]}"
  done
}

# ensure KEY: restarts the daemon KEY (label/chunk) if it died, and records that it did.
ensure() {
  local key=$1 pid=${PID[$1]} st
  st=$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null || echo gone)
  [ "$st" != Z ] && [ "$st" != gone ] && return 0
  wait "$pid" && st=0 || st=$?
  echo "DAEMON DIED: $key (pid $pid, wait status $st; 139 = SIGSEGV), restarted; log $RUN/logs/${key/\//-}.log" |
    tee -a "$RUN/deaths.txt" >&2
  start "${key%/*}" "${key#*/}"
  "$SBX" wait -addr "${ADDR[$key]}" -timeout 30s
}

# m CMD...: one measurement; a failure is reported and the run goes on.
m() { "$@" || echo "run.sh: measurement failed: $*" >&2; }

{
  echo "# sandboxd benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
  machine_line
  ours_line
  echo "reference: $REFERENCE_MODULE@$REFERENCE_VERSION"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (anything but this benchmark running adds noise)"
  echo "options: rounds=$ROUNDS duration=$DURATION warmup=$WARMUP stream-bytes=$STREAM_BYTES chunks='$CHUNKS' window=$WINDOW conns=$CONNS ready-runs=$READY_RUNS"
} >"$RUN/header.txt"
cat "$RUN/header.txt" >&2

# --- start-to-ready and idle RSS: fresh daemons, one cold start each in turn -------------------
log "start-to-ready and idle RSS ($READY_RUNS cold starts each)"
for ((i = 0; i < READY_RUNS; i++)); do
  sm=(); [ "$i" -eq 0 ] && sm=(-smaps)
  ROUND=$i
  for l in $( [ $((i % 2)) -eq 0 ] && echo "ours ref" || echo "ref ours"); do
    if [ "$l" = ours ]; then
      m "${DENV[@]}" "$SBX" ready -label ours -runs 1 "${sm[@]}" -out "$RES" -- "$SANDBOXD" \
        --listen-host 127.0.0.1 --grpc-port '{PORT}' --rest-port '{PORT2}' --root-dir '{ROOT}'
    else
      m "${DENV[@]}" "$SBX" ready -label ref -runs 1 "${sm[@]}" -out "$RES" -- "$REF" \
        -grpc-port '{PORT}' -rest-port '{PORT2}' -root-dir '{ROOT}'
    fi
  done
done 2> >(tee "$RUN/ready.txt" >&2)

log "starting the daemons under test"
for c in default $CHUNKS probe; do start ours "$c"; start ref "$c"; done
for k in "${!ADDR[@]}"; do "$SBX" wait -addr "${ADDR[$k]}" -timeout 30s; done

# --- rounds ------------------------------------------------------------------------------------
L=(-duration "$DURATION" -warmup "$WARMUP" -out "$RES")
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
  log "round $ROUND/$ROUNDS (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  CHUNK=default
  m "$SBX" spawn -cmd /bin/true -name true "${L[@]}"
  m "$SBX" spawn -cmd "$OUT/noop" -name noop "${L[@]}"
  both "$SBX" rtt -addr {A} -label {L} -pid {P} -method health "${L[@]}"
  CHUNK=probe
  both "$SBX" rtt -addr {A} -label {L} -pid {P} -method unknown "${L[@]}"
  CHUNK=default
  for prog in /bin/true:true "$OUT/noop:noop"; do
    for c in 1 16; do
      both "$SBX" exec -addr {A} -label {L} -pid {P} -cmd "${prog%:*}" -name "${prog##*:}" \
        -clients "$c" -conns "$([ "$c" = 1 ] && echo 1 || echo "$CONNS")" "${L[@]}"
    done
  done
  m "$SBX" spawn -cmd /bin/true -name true "${L[@]}"
  m "$SBX" spawn -cmd "$OUT/noop" -name noop "${L[@]}"
  m "$SBX" pipe -bytes "$STREAM_BYTES" -out "$RES"
  for CHUNK in default $CHUNKS; do
    both "$SBX" stream -addr {A} -label {L} -pid {P} -chunk "$CHUNK" -bytes "$STREAM_BYTES" \
      -window "$WINDOW" -out "$RES"
  done
  m "$SBX" pipe -bytes "$STREAM_BYTES" -out "$RES"
done 2> >(tee "$RUN/progress.txt" >&2)
for k in "${!PID[@]}"; do CHUNK=${k#*/} ensure "$k"; done

# --- optional profile of our daemon ------------------------------------------------------------
if [ "$PROFILE" = 1 ]; then
  if command -v perf >/dev/null; then
    log "profiling our daemon (perf, cpu-clock, call graphs) into $RUN/profile-*.txt"
    p=${PID[ours/default]} a=${ADDR[ours/default]}
    for what in stream exec; do
      perf record -q -e cpu-clock -F 1999 -g -p "$p" -o "$RUN/perf-$what.data" -- sleep 4 \
        >/dev/null 2>&1 &
      pp=$!
      sleep 0.2
      if [ "$what" = stream ]; then
        "$SBX" stream -addr "$a" -label profile -bytes "$STREAM_BYTES" -window "$WINDOW" >/dev/null || true
      else
        "$SBX" exec -addr "$a" -label profile -cmd "$OUT/noop" -name noop -clients 16 -duration 3s >/dev/null || true
      fi
      wait "$pp" || true
      perf report -i "$RUN/perf-$what.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null |
        grep '%' | head -40 >"$RUN/profile-$what.txt" || true
      echo "-- top of our daemon's profile while: $what (see $RUN/profile-$what.txt)" >&2
      head -15 "$RUN/profile-$what.txt" >&2
    done
  else
    echo "perf not installed: no profile" >&2
  fi
fi

# --- the table ---------------------------------------------------------------------------------
{
  cat "$RUN/header.txt"
  echo
  "$SBX" report "$RES" || echo "run.sh: the report failed; raw results are in $RES"
  [ -s "$RUN/deaths.txt" ] && sed 's/^/note: /' "$RUN/deaths.txt"
  echo
  echo "run time $(($(date +%s) - T0)) s; load average at end: $(cut -d' ' -f1-3 /proc/loadavg); raw results: $RES"
} >"$RUN/table.md"
echo
cat "$RUN/table.md"
ln -sfn "$RUN" "$OUT/latest"
exit 0
