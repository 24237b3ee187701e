#!/usr/bin/env bash
# The controller at scale on the real control plane of test/controller: a pool of 500, 500
# claims, then 10,000 Suspended Sandboxes listed (bench/controller.py says what each figure is).
#
#   bench/controller.sh                       # the full run (~10 minutes on 2 vCPUs)
#   bench/controller.sh --quick               # pool 100, 100 claims, 2,000 idle Sandboxes
#   bench/controller.sh --baseline REV        # also the listed case with the controller of REV
#   bench/controller.sh -- --concurrency 16   # anything after -- goes to bench/controller.py
#
# Builds the controller (Release) into $OUT (default /tmp/sandboxd-bench-controller), outside
# the repo; the control plane's binaries come from scripts/k8s-tools.sh (built once a machine).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/sandboxd-bench-controller}
: "${SANDBOXD_TOOLS:=${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/bin}"
export SANDBOXD_TOOLS
BASELINE="" EXTRA=()
while [ $# -gt 0 ]; do
  case $1 in
    --quick) EXTRA+=(--pool 100 --claims 100 --idle 2000); shift ;;
    --baseline) BASELINE=$2; shift 2 ;;
    --) shift; EXTRA+=("$@"); break ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"

for b in etcd kube-apiserver kube-scheduler kwok; do
  [ -x "$SANDBOXD_TOOLS/$b" ] || { "$REPO/scripts/k8s-tools.sh"; break; }
done

build() { # SRC BUILD
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 ||
    { cat "$OUT/cmake.log" >&2; exit 1; }
  ninja -C "$2" -j2 controller/sandboxd-controller >"$OUT/ninja.log" 2>&1 ||
    { cat "$OUT/ninja.log" >&2; exit 1; }
}

echo "== building the controller" >&2
build "$REPO" "$OUT/build"
ARGS=(--bin "$OUT/build/controller/sandboxd-controller")
if [ -n "$BASELINE" ]; then
  rev=$(git -C "$REPO" rev-parse --short "$BASELINE")
  src=$OUT/src-$rev
  if ! [ -d "$src" ]; then
    mkdir -p "$src.tmp" && git -C "$REPO" archive "$rev" | tar -x -C "$src.tmp" && mv "$src.tmp" "$src"
  fi
  echo "== building the controller of $rev" >&2
  build "$src" "$OUT/build-$rev"
  ARGS+=(--baseline-bin "$OUT/build-$rev/controller/sandboxd-controller" --baseline-label "$rev")
fi
echo "== load before the run: $(cut -d' ' -f1-3 /proc/loadavg) (2 vCPUs shared with others)" >&2
exec /usr/bin/python3 "$REPO/bench/controller.py" "${ARGS[@]}" "${EXTRA[@]}"
