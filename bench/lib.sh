# Sourced by the bench/*.sh scripts: building what a benchmark runs, and the head lines of a run's
# table. Needs REPO, BENCH, OUT and REV (may be empty) set; defaults SANDBOXD_TOOLS, creates OUT.

# shellcheck source=../scripts/reference.sh
. "$REPO/scripts/reference.sh"

log() { printf '\n== %s\n' "$*" >&2; }
: "${SANDBOXD_TOOLS:=${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/bin}"
mkdir -p "$OUT" "$SANDBOXD_TOOLS"

# Builds our daemon (Release) from the work tree, or from commit $REV; sets SANDBOXD. A set
# SANDBOXD_BIN is used as it is.
build_sandboxd() {
  local src=$REPO build=$OUT/build
  if [ -n "${SANDBOXD_BIN:-}" ]; then
    SANDBOXD=$SANDBOXD_BIN
    return 0
  fi
  if [ -n "$REV" ]; then
    REV=$(git -C "$REPO" rev-parse --short "$REV")
    src=$OUT/src-$REV build=$OUT/build-$REV
    if ! [ -d "$src" ]; then
      mkdir -p "$src.tmp" && git -C "$REPO" archive "$REV" | tar -x -C "$src.tmp" &&
        mv "$src.tmp" "$src"
    fi
  fi
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 ||
    { cat "$OUT/cmake.log" >&2; exit 1; }
  ninja -C "$build" sandboxd/sandboxd >"$OUT/ninja.log" 2>&1 || { cat "$OUT/ninja.log" >&2; exit 1; }
  SANDBOXD=$build/sandboxd/sandboxd
}

# Builds our router (Release) beside the daemon (build_sandboxd first); sets SANDBOXD_ROUTER. A
# set SANDBOXD_ROUTER_BIN is used as it is.
build_router() {
  if [ -n "${SANDBOXD_ROUTER_BIN:-}" ]; then
    SANDBOXD_ROUTER=$SANDBOXD_ROUTER_BIN
    return 0
  fi
  local build=$OUT/build
  [ -n "$REV" ] && build=$OUT/build-$REV
  [ -f "$build/build.ninja" ] || cmake -S "$REPO" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    >"$OUT/cmake.log" 2>&1 || { cat "$OUT/cmake.log" >&2; exit 1; }
  ninja -C "$build" router/sandboxd-router >"$OUT/ninja.log" 2>&1 || { cat "$OUT/ninja.log" >&2; exit 1; }
  SANDBOXD_ROUTER=$build/router/sandboxd-router
}

# Builds the Go client; sets SBX.
build_client() {
  (cd "$BENCH" && GOFLAGS=-buildvcs=false go build -o "$OUT/sbxbench" ./cmd/sbxbench)
  SBX=$OUT/sbxbench
}

# The head lines every run's table starts with: the machine, and which daemon of ours ran.
machine_line() {
  echo "machine: $(nproc) vCPU, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), Linux $(uname -r)"
}
ours_line() {
  if [ -n "${SANDBOXD_BIN:-}" ]; then
    echo "ours: $SANDBOXD (given)"
  elif [ -n "$REV" ]; then
    echo "ours: $SANDBOXD (commit $REV, Release)"
  else
    echo "ours: $SANDBOXD (work tree at $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$REPO" status --porcelain -- sandboxd proto CMakeLists.txt 2>/dev/null | grep -q . && echo ' + uncommitted changes'), Release)"
  fi
}
