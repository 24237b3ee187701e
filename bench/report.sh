#!/usr/bin/env bash
# The benchmark report: runs every benchmark one after the other on this machine, then assembles
# their tables into one (bench/report.py): each figure with ours, the reference daemon's from the
# same run, the floor, the ratio, the target and the command that reproduces it.
#
#   bench/report.sh [--quick] [--soak MINUTES] [--only AREA,...] [--out DIR]
#
#   --quick       the quick variants (run.sh, rest.sh, terminal.sh --quick, 1 round elsewhere): ~10 minutes
#   --soak N      also the mixed soak (bench/soak.py) for N minutes (0: none; the report wants 10)
#   --only LIST   only these areas: exec, rest, terminal, image, ssh, controller, router, soak
#   --out DIR     where the runs and report.md go, outside the repo (/tmp/sandboxd-bench)
#
# A benchmark is not a test: a missed target never makes it fail; a benchmark that cannot run
# here (no runsc, no control-plane binaries) is reported as missing. Run it on a quiet machine:
# the load average before and after goes into the report's head.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=/tmp/sandboxd-bench QUICK=0 SOAK=0 ONLY=exec,rest,terminal,image,ssh,controller,router,soak
while [ $# -gt 0 ]; do
  case $1 in
  --quick) QUICK=1 ;;
  --soak) SOAK=$2; shift ;;
  --only) ONLY=$2; shift ;;
  --out) OUT=$2; shift ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "report.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT"
REPORT=$OUT/report-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$REPORT"
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date -u '+%Y-%m-%d %H:%M UTC')
runs=()

wanted() { [[ ",$ONLY," == *",$1,"* ]]; }

# Runs one benchmark, its output in $REPORT/AREA.log; finds its run dir from the newest
# directory matching PATTERN under $OUT that it made.
bench() {
  local area=$1 pattern=$2
  shift 2
  local before
  before=$(ls -d "$OUT"/$pattern 2>/dev/null | sort | tail -1 || true)
  echo "== $area: $*" | tee -a "$REPORT/progress.txt"
  if ! "$@" >"$REPORT/$area.log" 2>&1; then
    echo "   $area failed; see $REPORT/$area.log" | tee -a "$REPORT/progress.txt"
  fi
  local dir
  dir=$(ls -d "$OUT"/$pattern 2>/dev/null | sort | tail -1 || true)
  if [ -n "$dir" ] && [ "$dir" != "$before" ]; then
    runs+=("$area=$dir")
  else
    runs+=("$area=$REPORT/missing-$area")
  fi
}

q=()
[ "$QUICK" = 1 ] && q=(--quick)
r1=()
[ "$QUICK" = 1 ] && r1=(--rounds 1)

wanted exec && bench exec 'run-*' "$REPO/bench/run.sh" "${q[@]}" --out "$OUT"
wanted rest && bench rest 'rest-*' "$REPO/bench/rest.sh" "${q[@]}" --out "$OUT"
wanted terminal && bench terminal 'terminal-2*' "$REPO/bench/terminal.sh" "${q[@]}" --out "$OUT"
wanted image && bench image 'image-2*' "$REPO/bench/image.sh" "${r1[@]}" --out "$OUT"
wanted ssh && bench ssh 'ssh-2*' "$REPO/bench/ssh.sh" "${r1[@]}" --out "$OUT"
if wanted controller; then
  if [ -x "$REPO/bench/controller.sh" ]; then
    bench controller 'controller-*' "$REPO/bench/controller.sh" "${q[@]}" --out "$OUT"
  else
    runs+=("controller=$REPORT/missing-controller")
  fi
fi
wanted router && bench router 'router-2*' "$REPO/bench/router.sh" "${q[@]}" --out "$OUT"
if wanted soak && [ "$SOAK" != 0 ]; then
  # Our daemon as it is in the work tree, Release (quick when already built).
  bin=$OUT/soak-build/sandboxd/sandboxd
  mkdir -p "$REPORT/soak"
  if cmake -S "$REPO" -B "$OUT/soak-build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$REPORT/soak-build.log" 2>&1 &&
    cmake --build "$OUT/soak-build" --target sandboxd >>"$REPORT/soak-build.log" 2>&1; then
    echo "== soak: $SOAK minutes" | tee -a "$REPORT/progress.txt"
    /usr/bin/python3 "$REPO/bench/soak.py" --bin "$bin" --minutes "$SOAK" \
      --table "$REPORT/soak/table.md" >"$REPORT/soak.log" 2>&1 || true
  else
    echo "   soak: the build failed; see $REPORT/soak-build.log" | tee -a "$REPORT/progress.txt"
  fi
  runs+=("soak=$REPORT/soak")
fi

commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$REPO" status --porcelain 2>/dev/null | grep -q . && echo " (with uncommitted changes)" || true)
/usr/bin/python3 "$REPO/bench/report.py" --out "$REPORT/report.md" \
  --note "$START to $(date -u '+%H:%M UTC'); ours at $commit$dirty" \
  --note "machine: $(nproc) vCPU, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), Linux $(uname -r)" \
  --note "load average before: $LOAD0; after: $(cut -d' ' -f1-3 /proc/loadavg) (anything else running adds noise)" \
  --note "mode: $([ "$QUICK" = 1 ] && echo quick || echo full); soak: $SOAK min" \
  "${runs[@]}"
ln -sfn "$REPORT" "$OUT/report-latest"
echo "report: $REPORT/report.md"
