#!/usr/bin/env bash
# Benchmarks sandboxd's REST server against the reference Go daemon, side by side in one run, with
# the local floors measured in the same rounds, and prints one table of ratios with PASS/FAIL per
# target of issue 3. Targets never make it exit non-zero: a benchmark is not a test. See the
# "REST" section of bench/README.md for what each figure means.
#
#   bench/rest.sh            full run (1 GiB transfers, 3 rounds, 5 s wrk windows; ~4-5 minutes)
#   bench/rest.sh --quick    quick run (512 MiB transfers, 2 rounds, 2 s windows; under 2 minutes)
#
# Options (after --quick, to override it):
#   --rounds N       rounds; each runs every measurement once, ours and the reference back to back,
#                    their order flipped every round (3)
#   --bytes N        size of each upload and download (1073741824)
#   --duration D     recorded window of each small-request run, Go syntax, whole seconds (5s)
#   --warmup D       unrecorded warm-up run before each window (1s)
#   --threads N      wrk threads (2)
#   --conns N        keep-alive connections for small requests (32)
#   --tool T         small-request client: wrk, go, or auto (wrk when installed) (auto)
#   --roots DIR      where the daemons' root dirs and the floor's files go; all three on the
#                    same filesystem (default: the run directory, under --out)
#   --profile        also perf-record our daemon and strace -c -f both daemons during one upload
#                    and one download
#   --no-recycle     do not write and drop a scratch file of the upload's size before each timed
#                    upload (the recycling makes every writer draw on page cache freed a moment
#                    ago; see the README on free page reporting)
#   --keep           keep the root dirs (the 1 GiB files) after the run
#   --rev REV        build sandboxd from commit REV (git archive) instead of the work tree
#   --out DIR        build and result directory, outside the repo (/tmp/sandboxd-bench)
#
# Environment: SANDBOXD_TOOLS (where the reference daemon is built and cached, as setup.sh does;
# default ~/.cache/sandboxd/bin), SANDBOXD_BIN (use this sandboxd binary, skip the build).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$REPO/bench
OUT=/tmp/sandboxd-bench
ROUNDS=3 BYTES=1073741824 DURATION=5s WARMUP=1s THREADS=2 CONNS=32 TOOL=auto ROOTS= PROFILE=0 KEEP=0 REV= RECYCLE=1

while [ $# -gt 0 ]; do
  case $1 in
  --quick) ROUNDS=2 BYTES=536870912 DURATION=2s WARMUP=1s ;;
  --rounds) ROUNDS=$2; shift ;;
  --bytes) BYTES=$2; shift ;;
  --duration) DURATION=$2; shift ;;
  --warmup) WARMUP=$2; shift ;;
  --threads) THREADS=$2; shift ;;
  --conns) CONNS=$2; shift ;;
  --tool) TOOL=$2; shift ;;
  --roots) ROOTS=$2; shift ;;
  --profile) PROFILE=1 ;;
  --keep) KEEP=1 ;;
  --no-recycle) RECYCLE=0 ;;
  --rev) REV=$2; shift ;;
  --out) OUT=$2; shift ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "rest.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

. "$BENCH/lib.sh"
T0=$(date +%s)

# --- build (as run.sh) -------------------------------------------------------------------------
log "building (into $OUT)"
build_sandboxd
build_client

# The reference daemon, built and cached as scripts/setup.sh does (scripts/reference.sh).
build_reference
REF=$SANDBOXD_TOOLS/reference-sandboxd

TOOLNAME=$TOOL
if [ "$TOOL" = auto ]; then
  TOOLNAME=go
  command -v wrk >/dev/null && TOOLNAME=wrk
  [ "$TOOLNAME" = go ] && echo "rest.sh: wrk is not installed (apt-get install -y wrk); small requests use the Go client" >&2
fi

# --- daemons -----------------------------------------------------------------------------------
RUN=$OUT/rest-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN/logs"
[ -n "$ROOTS" ] || ROOTS=$RUN/roots
ROOTS=$ROOTS/rest-$$
mkdir -p "$ROOTS/ours" "$ROOTS/ref" "$ROOTS/floor"
RES=$RUN/results.jsonl
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  [ "$KEEP" = 1 ] || rm -rf "$ROOTS"
}
trap cleanup EXIT

DENV=(env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" LANG=C.UTF-8)
declare -A URL PID

start() {
  local l=$1 gp rp
  read -r gp rp < <("$SBX" freeport -n 2)
  if [ "$l" = ours ]; then
    "${DENV[@]}" "$SANDBOXD" --listen-host 127.0.0.1 --grpc-port 0 --rest-port "$rp" \
      --root-dir "$ROOTS/ours" >>"$RUN/logs/ours.log" 2>&1 &
  else
    "${DENV[@]}" "$REF" -grpc-port "$gp" -rest-port "$rp" -root-dir "$ROOTS/ref" >>"$RUN/logs/ref.log" 2>&1 &
  fi
  PID[$l]=$!
  PIDS+=("$!")
  URL[$l]=http://127.0.0.1:$rp
  local i
  for ((i = 0; i < 600; i++)); do
    curl -sf -o /dev/null "${URL[$l]}/v1/health" && return 0
    sleep 0.05
  done
  echo "rest.sh: $l did not answer on ${URL[$l]}/v1/health within 30 s" >&2
  return 1
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
m() { "$@" || echo "rest.sh: measurement failed: $*" >&2; }

# order: ours and ref in this round's order.
order() { [ $((ROUND % 2)) -eq 1 ] && echo "ours ref" || echo "ref ours"; }

# fresh FILE: remove FILE and flush, so that no upload pays for freeing the previous one's blocks
# or for anyone's dirty pages.
fresh() { rm -f "$1"; sync; }
# recycle DIR: the -recycle argument of restput (floorput recycles in its -dir unless -recycle=false).
recycle() { [ "$RECYCLE" = 1 ] && echo "$1" || echo ""; }

FSDESC="$(df --output=source,fstype "$ROOTS" | tail -1 | awk '{print $2 " on " $1}') (mounted on $(df --output=target "$ROOTS" | tail -1))"
{
  echo "# sandboxd REST benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
  machine_line
  ours_line
  echo "reference: $REFERENCE_MODULE@$REFERENCE_VERSION"
  echo "root dirs and floor files: $ROOTS, $FSDESC"
  echo "small requests: $TOOLNAME$([ "$TOOLNAME" = wrk ] && echo " $(wrk -v 2>&1 | head -1 | awk '{print $2}') -t$THREADS") -c$CONNS, $DURATION windows after a $WARMUP warm-up"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (anything but this benchmark running adds noise)"
  echo "options: rounds=$ROUNDS bytes=$BYTES duration=$DURATION warmup=$WARMUP threads=$THREADS conns=$CONNS tool=$TOOLNAME recycle=$RECYCLE"
} >"$RUN/header.txt"
cat "$RUN/header.txt" >&2

log "starting the daemons; files: small.txt (100 B) and big.bin ($BYTES B) in each root, floor's big.bin"
start ours
start ref
head -c 100 /dev/zero | tr '\0' x >"$RUN/small.txt"
for l in ours ref; do
  curl -sf -X PUT --data-binary @"$RUN/small.txt" "${URL[$l]}/v1/files/small.txt"
  "$SBX" restput -url "${URL[$l]}/v1/files/big.bin" -label setup -bytes "$BYTES" -check "$ROOTS/$l/big.bin" -out /dev/null
done
"$SBX" floorput -dir "$ROOTS/floor" -name big.bin -bytes "$BYTES" -out /dev/null
# Warm: every downloaded file is read once, so that all three come from the page cache.
cat "$ROOTS/ours/big.bin" "$ROOTS/ref/big.bin" "$ROOTS/floor/big.bin" >/dev/null

# --- rounds ------------------------------------------------------------------------------------
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
  log "round $ROUND/$ROUNDS (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  # Upload: floor, the two daemons, the floor again, then dd for reference.
  fresh "$ROOTS/floor/floor-up.bin"
  m "$SBX" floorput -dir "$ROOTS/floor" -bytes "$BYTES" -recycle=$RECYCLE -out "$RES"
  for l in $(order); do
    ensure "$l"
    fresh "$ROOTS/$l/up.bin"
    m "$SBX" restput -url "${URL[$l]}/v1/files/up.bin" -label "$l" -pid "${PID[$l]}" -bytes "$BYTES" \
      -check "$ROOTS/$l/up.bin" -recycle "$(recycle "$ROOTS/$l")" -out "$RES"
  done
  fresh "$ROOTS/floor/floor-up.bin"
  m "$SBX" floorput -dir "$ROOTS/floor" -bytes "$BYTES" -recycle=$RECYCLE -out "$RES"
  fresh "$ROOTS/floor/dd.bin"
  if [ "$RECYCLE" = 1 ]; then
    dd if=/dev/zero of="$ROOTS/floor/recycle.tmp" bs=1M count=$((BYTES * 9 / 8 / 1048576)) status=none
    rm -f "$ROOTS/floor/recycle.tmp"
  fi
  t0=$(date +%s%N)
  if dd if=/dev/zero of="$ROOTS/floor/dd.bin" bs=1M count=$((BYTES / 1048576)) conv=fsync status=none; then
    t1=$(date +%s%N)
    printf '{"kind":"dd_put","label":"local","bytes":%d,"want_bytes":%d,"seconds":%s,"mb_per_s":%s,"time":"%s"}\n' \
      "$BYTES" "$BYTES" "$(awk -v d=$((t1 - t0)) 'BEGIN {printf "%.4f", d / 1e9}')" \
      "$(awk -v d=$((t1 - t0)) -v b="$BYTES" 'BEGIN {printf "%.1f", b / (d / 1e9) / 1e6}')" "$(date -u +%FT%TZ)" >>"$RES"
    echo "  dd_put    local  $(tail -1 "$RES" | sed 's/.*"mb_per_s":\([0-9.]*\).*/\1/') MB/s" >&2
  fi
  rm -f "$ROOTS/floor/floor-up.bin" "$ROOTS/floor/dd.bin" "$ROOTS/ours/up.bin" "$ROOTS/ref/up.bin"

  # Download, page cache warm: floor, the two daemons, the floor again.
  m "$SBX" floorget -file "$ROOTS/floor/big.bin" -out "$RES"
  for l in $(order); do
    ensure "$l"
    m "$SBX" restget -url "${URL[$l]}/v1/files/big.bin" -label "$l" -pid "${PID[$l]}" -bytes "$BYTES" -out "$RES"
  done
  m "$SBX" floorget -file "$ROOTS/floor/big.bin" -out "$RES"

  # Small requests.
  for what in file health; do
    path=/v1/files/small.txt
    [ "$what" = health ] && path=/v1/health
    for l in $(order); do
      ensure "$l"
      m "$SBX" restsmall -url "${URL[$l]}$path" -label "$l" -what "$what" -pid "${PID[$l]}" -tool "$TOOLNAME" \
        -threads "$THREADS" -conns "$CONNS" -duration "$DURATION" -warmup "$WARMUP" -out "$RES"
    done
  done
done 2> >(tee "$RUN/progress.txt" >&2)
for l in ours ref; do ensure "$l"; done

# --- optional profile --------------------------------------------------------------------------
if [ "$PROFILE" = 1 ]; then
  log "profiling (perf of our daemon, strace -c -f of both) into $RUN/profile-*.txt"
  for what in put get; do
    for l in ours ref; do
      fresh "$ROOTS/$l/up.bin"
      cmd=("$SBX" restput -url "${URL[$l]}/v1/files/up.bin" -label "profile-$l" -bytes "$BYTES" -recycle "$(recycle "$ROOTS/$l")")
      [ "$what" = get ] && cmd=("$SBX" restget -url "${URL[$l]}/v1/files/big.bin" -label "profile-$l")
      if [ "$l" = ours ] && command -v perf >/dev/null; then
        perf record -q -e cpu-clock -F 1999 -g -p "${PID[$l]}" -o "$RUN/perf-$what.data" >/dev/null 2>&1 &
        pp=$!
        sleep 0.3
        "${cmd[@]}" -out /dev/null || true
        kill -INT "$pp"; wait "$pp" || true
        perf report -i "$RUN/perf-$what.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null |
          grep '%' | head -40 >"$RUN/profile-$what-perf.txt" || true
        echo "-- top of our daemon's perf profile during $what (see $RUN/profile-$what-perf.txt)" >&2
        head -15 "$RUN/profile-$what-perf.txt" >&2
        fresh "$ROOTS/$l/up.bin"
      fi
      if command -v strace >/dev/null; then
        strace -c -f -p "${PID[$l]}" -o "$RUN/profile-$what-strace-$l.txt" 2>/dev/null &
        sp=$!
        sleep 0.5
        "${cmd[@]}" -out /dev/null || true
        kill -INT "$sp"; wait "$sp" || true
        echo "-- syscalls of $l during $what, under strace (see $RUN/profile-$what-strace-$l.txt)" >&2
        head -12 "$RUN/profile-$what-strace-$l.txt" >&2
      fi
      rm -f "$ROOTS/$l/up.bin"
    done
  done
fi

# --- the table ---------------------------------------------------------------------------------
{
  cat "$RUN/header.txt"
  echo
  "$SBX" restreport "$RES" || echo "rest.sh: the report failed; raw results are in $RES"
  [ -s "$RUN/deaths.txt" ] && sed 's/^/note: /' "$RUN/deaths.txt"
  echo
  echo "run time $(($(date +%s) - T0)) s; load average at end: $(cut -d' ' -f1-3 /proc/loadavg); raw results: $RES"
} >"$RUN/table.md"
echo
cat "$RUN/table.md"
ln -sfn "$RUN" "$OUT/latest-rest"
exit 0
