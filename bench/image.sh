#!/usr/bin/env bash
# The static build and the gVisor tax, measured in one run and printed as one table:
#
#   1. binary size: sandboxd-static against the dynamic sandboxd (with the shared libraries it
#      needs, which an image would have to carry) and the reference daemon;
#   2. idle RSS and start-to-ready of sandboxd-static, the dynamic sandboxd and the reference
#      (sbxbench ready: median of cold starts);
#   3. Execute latency and calls/s of sandboxd-static natively and as PID 1 of a gVisor sandbox
#      (runsc --platform=ptrace --network=host do), same binary, same tree, same programs: the
#      static no-op (bench/noop.c) and busybox `true`; plus one gRPC round trip (health Check).
#
#   bench/image.sh [--rounds N] [--duration D] [--warmup D] [--ready-runs N] [--out DIR]
#
# Native and gVisor alternate within every round, the order flipped each round. Needs root and
# what scripts/setup.sh installs (runsc, busybox-static). Results: $OUT/image-*/ (results.jsonl,
# table.md), outside the repo. A benchmark, not a test: it never fails on a figure.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$REPO/bench
OUT=/tmp/sandboxd-bench
ROUNDS=3 DURATION=2s WARMUP=300ms READY_RUNS=3 REV=
while [ $# -gt 0 ]; do
  case $1 in
  --rounds) ROUNDS=$2; shift ;;
  --duration) DURATION=$2; shift ;;
  --warmup) WARMUP=$2; shift ;;
  --ready-runs) READY_RUNS=$2; shift ;;
  --out) OUT=$2; shift ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "image.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

. "$BENCH/lib.sh"
for t in runsc busybox; do
  command -v "$t" >/dev/null || { echo "image.sh: $t is not installed (scripts/setup.sh)" >&2; exit 1; }
done

log "building sandboxd and sandboxd-static (Release), sbxbench, noop (into $OUT)"
cmake -S "$REPO" -B "$OUT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 ||
  { cat "$OUT/cmake.log" >&2; exit 1; }
ninja -C "$OUT/build" sandboxd/sandboxd sandboxd/sandboxd-static >"$OUT/ninja.log" 2>&1 ||
  { cat "$OUT/ninja.log" >&2; exit 1; }
DYN=$OUT/build/sandboxd/sandboxd STATIC=$OUT/build/sandboxd/sandboxd-static
build_client
build_reference
REF=$SANDBOXD_TOOLS/reference-sandboxd

RUN=$OUT/image-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN"
RES=$RUN/results.jsonl
gcc -O2 -static -nostdlib -nostartfiles -fno-stack-protector -o "$RUN/noop" "$BENCH/noop.c"

# --- 1. sizes -----------------------------------------------------------------------------------
size_of() { stat -c %s "$1"; }
strip -o "$RUN/sandboxd.stripped" "$DYN"
strip -o "$RUN/reference.stripped" "$REF"
libs=0
for l in $(ldd "$DYN" | grep -o '/[^ ]*'); do libs=$((libs + $(stat -L -c %s "$l"))); done
{
  printf '{"kind":"size","label":"static","bytes":%d}\n' "$(size_of "$STATIC")"
  printf '{"kind":"size","label":"dynamic","bytes":%d,"libs_bytes":%d,"libs":%d}\n' \
    "$(size_of "$RUN/sandboxd.stripped")" "$libs" "$(ldd "$DYN" | grep -c '/')"
  printf '{"kind":"size","label":"ref","bytes":%d,"unstripped":%d}\n' \
    "$(size_of "$RUN/reference.stripped")" "$(size_of "$REF")"
} >>"$RES"

# --- 2. idle RSS and start-to-ready ---------------------------------------------------------------
log "idle RSS and start-to-ready ($READY_RUNS cold starts each)"
DENV=(env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" LANG=C.UTF-8)
for ((i = 0; i < READY_RUNS; i++)); do
  for d in static:"$STATIC" dynamic:"$DYN"; do
    "${DENV[@]}" "$SBX" ready -label "${d%%:*}" -runs 1 -out "$RES" -- "${d#*:}" \
      --listen-host 127.0.0.1 --grpc-port '{PORT}' --rest-port '{PORT2}' --root-dir '{ROOT}'
  done
  "${DENV[@]}" "$SBX" ready -label ref -runs 1 -out "$RES" -- "$REF" \
    -grpc-port '{PORT}' -rest-port '{PORT2}' -root-dir '{ROOT}'
done

# --- 3. native against gVisor -------------------------------------------------------------------
# One tree for both: sandboxd-static, the no-op and a static busybox; nothing else.
TREE=$RUN/tree
mkdir -p "$TREE/bin" "$TREE/workspace" "$RUN/runsc-state" "$RUN/runsc-tmp"
cp "$STATIC" "$TREE/sandboxd"
cp "$RUN/noop" "$TREE/noop"
cp "$(command -v busybox)" "$TREE/bin/busybox"
ln -s busybox "$TREE/bin/true"
read -r NP NR GP GR < <("$SBX" freeport -n 4)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$RUN/runsc-tmp" "$RUN/runsc-state"
}
trap cleanup EXIT
"${DENV[@]}" "$STATIC" --listen-host 127.0.0.1 --grpc-port "$NP" --rest-port "$NR" \
  --root-dir "$TREE/workspace" >"$RUN/native.log" 2>&1 &
PIDS+=("$!")
NATIVE_PID=$!
TMPDIR=$RUN/runsc-tmp runsc --root="$RUN/runsc-state" --rootless --network=host \
  --platform=ptrace --ignore-cgroups do -root "$TREE" -force-overlay=false -cwd / \
  /sandboxd --listen-host 127.0.0.1 --grpc-port "$GP" --rest-port "$GR" \
  --root-dir /workspace >"$RUN/gvisor.log" 2>&1 &
PIDS+=("$!")
"$SBX" wait -addr "127.0.0.1:$NP" -timeout 30s
"$SBX" wait -addr "127.0.0.1:$GP" -timeout 60s

declare -A ADDR=([native]=127.0.0.1:$NP [gvisor]=127.0.0.1:$GP)
declare -A NOOP=([native]=$TREE/noop [gvisor]=/noop)
declare -A TRUE=([native]=$TREE/bin/true [gvisor]=/bin/true)
L=(-duration "$DURATION" -warmup "$WARMUP" -out "$RES")
for ((round = 1; round <= ROUNDS; round++)); do
  log "round $round/$ROUNDS (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  order=(native gvisor)
  [ $((round % 2)) -eq 0 ] && order=(gvisor native)
  for where in "${order[@]}"; do
    pid=0
    [ "$where" = native ] && pid=$NATIVE_PID
    "$SBX" rtt -addr "${ADDR[$where]}" -label "$where" -pid "$pid" -method health "${L[@]}"
    for prog in noop true; do
      [ $prog = noop ] && path=${NOOP[$where]} || path=${TRUE[$where]}
      for c in 1 16; do
        "$SBX" exec -addr "${ADDR[$where]}" -label "$where" -pid "$pid" -cmd "$path" \
          -name "$prog" -clients "$c" "${L[@]}"
      done
    done
  done
done 2> >(tee "$RUN/progress.txt" >&2)

{
  echo "# sandboxd-static and the gVisor tax, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "machine: $(nproc) vCPU, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), Linux $(uname -r); $(runsc --version | head -n1)"
  echo "ours: work tree at $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?'), Release; reference: $REFERENCE_MODULE@$REFERENCE_VERSION"
  echo "options: rounds=$ROUNDS duration=$DURATION warmup=$WARMUP ready-runs=$READY_RUNS"
  echo
  /usr/bin/python3 "$BENCH/image_report.py" "$RES"
} >"$RUN/table.md"
echo
cat "$RUN/table.md"
ln -sfn "$RUN" "$OUT/image-latest"
