#!/usr/bin/env bash
# The controller at scale on the real control plane of test/controller: a pool of 500, 500
# claims, then 10,000 Suspended Sandboxes listed (bench/controller.py says what each figure is).
#
#   bench/controller.sh                       # the full run (~10 minutes on 2 vCPUs)
#   bench/controller.sh --quick               # pool 100, 50 + 100 claims, 2,000 idle Sandboxes
#   bench/controller.sh --out DIR             # the run's table.md and log in DIR/controller-DATE
#   bench/controller.sh --baseline REV        # also the listed case with the controller of REV
#   bench/controller.sh -- --concurrency 16   # anything after -- goes to bench/controller.py
#
# Builds the controller (Release) into $BUILD (default /tmp/sandboxd-bench-controller), outside
# the repo; the control plane's binaries come from scripts/k8s-tools.sh (built once a machine).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-/tmp/sandboxd-bench-controller}
OUT=/tmp/sandboxd-bench
: "${SANDBOXD_TOOLS:=${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/bin}"
export SANDBOXD_TOOLS
BASELINE="" EXTRA=()
while [ $# -gt 0 ]; do
  case $1 in
    --quick) EXTRA+=(--pool 100 --serial 50 --claims 100 --idle 2000); shift ;;
    --out) OUT=$2; shift 2 ;;
    --baseline) BASELINE=$2; shift 2 ;;
    --) shift; EXTRA+=("$@"); break ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$BUILD"
RUN=$OUT/controller-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN"

for b in etcd kube-apiserver kube-scheduler kube-controller-manager kwok; do
  [ -x "$SANDBOXD_TOOLS/$b" ] || { "$REPO/scripts/k8s-tools.sh"; break; }
done

build() { # SRC BUILD; a build dir configured for another source tree is made anew
  if [ -f "$2/CMakeCache.txt" ] &&
    ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$1" "$2/CMakeCache.txt"; then
    rm -rf "$2"
  fi
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$BUILD/cmake.log" 2>&1 ||
    { cat "$BUILD/cmake.log" >&2; exit 1; }
  ninja -C "$2" -j2 controller/sandboxd-controller >"$BUILD/ninja.log" 2>&1 ||
    { cat "$BUILD/ninja.log" >&2; exit 1; }
}

echo "== building the controller" >&2
build "$REPO" "$BUILD/build"
ARGS=(--bin "$BUILD/build/controller/sandboxd-controller")
if [ -n "$BASELINE" ]; then
  rev=$(git -C "$REPO" rev-parse --short "$BASELINE")
  src=$BUILD/src-$rev
  if ! [ -d "$src" ]; then
    mkdir -p "$src.tmp" && git -C "$REPO" archive "$rev" | tar -x -C "$src.tmp" && mv "$src.tmp" "$src"
  fi
  echo "== building the controller of $rev" >&2
  build "$src" "$BUILD/build-$rev"
  ARGS+=(--baseline-bin "$BUILD/build-$rev/controller/sandboxd-controller" --baseline-label "$rev")
fi
HEAD=(
  "bench/controller.sh, $(date -u '+%Y-%m-%d %H:%M UTC')"
  "machine: $(nproc) vCPU, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), Linux $(uname -r); the API server, etcd, the scheduler, kwok, the driver and the controller all on it"
  "ours: the controller of the work tree at $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$REPO" status --porcelain -- controller 2>/dev/null | grep -q . && echo ' + uncommitted changes') (Release)"
  "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (anything but this benchmark running adds noise)"
)
printf '%s\n' "${HEAD[@]}" >&2
hargs=()
for h in "${HEAD[@]}"; do hargs+=(--head "$h"); done
/usr/bin/python3 "$REPO/bench/controller.py" "${ARGS[@]}" --table "$RUN/table.md" "${hargs[@]}" \
  "${EXTRA[@]}"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)  " >>"$RUN/table.md"
echo "table in $RUN/table.md" >&2
