#!/usr/bin/env bash
# Builds a recent gVisor runsc into $SANDBOXD_TOOLS/gvisor/runsc (default
# ~/.cache/sandboxd/bin/gvisor/runsc), outside the repo, once per machine: a version stamp makes a
# second run return at once. Prints the binary's path. Runs alone; scripts/setup.sh calls it.
#
# Why not Debian's runsc: it dates from 2022 and has no cgroup v2 inside the sandbox. Newer
# gVisor mounts a cgroup2 hierarchy with the memory and pids controllers at /sys/fs/cgroup
# (--in-sandbox-cgroup=v2), the only place on a cgroup-v1 or hybrid host where sandboxd's v2
# path runs (test/image/test_gvisor_cgroup2.py).
#
# gVisor's `go` branch (generated files included, no Bazel) is what the Go module proxy serves
# as pseudo-versions of gvisor.dev/gvisor; its go.mod has no replace directives, so a plain
# `go install` builds runsc. Static (CGO_ENABLED=0): runsc re-executes itself from a root that
# holds no dynamic loader. About 4 minutes on two busy cores, an 80 MB binary.
set -euo pipefail

: "${SANDBOXD_TOOLS:=${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/bin}"

# The go branch of 2026-09-05 (in-sandbox cgroup v2 with memory and pids controllers).
GVISOR_VERSION=v0.0.0-20260905035102-160fafc42237

log() { printf 'gvisor-tools: %s\n' "$*" >&2; }

dir="$SANDBOXD_TOOLS/gvisor"
stamp="gvisor.dev/gvisor/runsc@$GVISOR_VERSION"
if [ -x "$dir/runsc" ] && [ "$(cat "$dir/.runsc.version" 2>/dev/null)" = "$stamp" ]; then
  echo "$dir/runsc"
  exit 0
fi
log "building runsc from $stamp (a few minutes on 2 cores)"
t0=$(date +%s)
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# 2 cores are shared by everyone on a machine: keep the Go build narrow.
CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS="-buildvcs=false -mod=mod" \
  go install -p 2 -trimpath -ldflags="-s -w" "$stamp" >&2
mv "$tmp/runsc" "$dir/runsc"
echo "$stamp" >"$dir/.runsc.version"
log "runsc built in $(($(date +%s) - t0)) s"
echo "$dir/runsc"
