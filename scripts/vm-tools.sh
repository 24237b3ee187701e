#!/usr/bin/env bash
# What test/image/test_vm_cgroup2.py needs to run sandboxd on a real Linux kernel whose cgroups
# are v2 only, in a virtual machine (QEMU, software emulation: KVM hangs on these VMs), into
# $SANDBOXD_TOOLS/vm (default ~/.cache/sandboxd/bin/vm), once per machine: Debian's kernel image
# (its vmlinuz, from the package, never installed), and a static grpcurl that runs inside the
# VM's initramfs. Prints the directory. Idempotent; quick when done.
#
# Why: the machine's own kernel is hybrid (memory and pids bound to v1), and gVisor's cgroup v2
# does not enforce memory.max; only a kernel of its own shows memory limits, swap and OOM kills
# on cgroup v2 for real. Cost once: qemu-system-x86 and cpio from Debian, a 70 MB kernel package,
# and about a minute and a half of Go build.
set -euo pipefail

: "${SANDBOXD_TOOLS:=${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/bin}"

# The kernel Debian's archive offers now (linux-image-amd64 points at it); the one this was
# first run with when the archive cannot say.
KERNEL_PKG=$(apt-cache depends linux-image-amd64 2>/dev/null |
  awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
KERNEL_VERSION=
[ -n "$KERNEL_PKG" ] && KERNEL_VERSION=$(apt-cache show "$KERNEL_PKG" 2>/dev/null |
  awk '/^Version:/ {print $2; exit}')
if [ -z "$KERNEL_PKG" ] || [ -z "$KERNEL_VERSION" ]; then
  KERNEL_PKG=linux-image-6.1.0-57-amd64 KERNEL_VERSION=6.1.192-3
fi
GRPCURL=github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4

log() { printf 'vm-tools: %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

dir="$SANDBOXD_TOOLS/vm"
mkdir -p "$dir"
for p in qemu-system-x86 cpio; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    log "installing $p"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends "$p" >/dev/null
  fi
done
stamp="$KERNEL_PKG=$KERNEL_VERSION"
if [ ! -f "$dir/vmlinuz" ] || [ "$(cat "$dir/.vmlinuz.version" 2>/dev/null)" != "$stamp" ]; then
  log "fetching $stamp"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && apt-get download -qq "$stamp" 2>/dev/null)
  dpkg-deb -x "$tmp"/*.deb "$tmp/x"
  cp "$tmp/x/boot/vmlinuz-${KERNEL_PKG#linux-image-}" "$dir/vmlinuz"
  echo "$stamp" >"$dir/.vmlinuz.version"
fi
if [ ! -x "$dir/grpcurl" ] || [ "$(cat "$dir/.grpcurl.version" 2>/dev/null)" != "$GRPCURL" ]; then
  log "building a static $GRPCURL"
  CGO_ENABLED=0 GOBIN="$dir" GOFLAGS=-buildvcs=false go install -p 2 -ldflags="-s -w" "$GRPCURL"
  echo "$GRPCURL" >"$dir/.grpcurl.version"
fi
echo "$dir"
