#!/usr/bin/env bash
# Builds a minimal Debian tree (debootstrap --variant=minbase, the release of this machine) once
# per machine into $SANDBOXD_ROOTFS_CACHE (default ~/.cache/sandboxd/rootfs) and prints its path.
# The tests copy sandboxd into a throwaway overlay of it, never into the cached tree itself.
set -euo pipefail

: "${SANDBOXD_ROOTFS_CACHE:=${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/rootfs}"
. /etc/os-release
dir="$SANDBOXD_ROOTFS_CACHE/debian-$VERSION_CODENAME"
if [ -f "$dir/.complete" ]; then
  echo "$dir"
  exit 0
fi
mirror=${SANDBOXD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
printf 'debian-rootfs: debootstrap %s from %s into %s\n' "$VERSION_CODENAME" "$mirror" "$dir" >&2
mkdir -p "$SANDBOXD_ROOTFS_CACHE"
tmp=$(mktemp -d "$SANDBOXD_ROOTFS_CACHE/.debootstrap.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if ! debootstrap --variant=minbase "$VERSION_CODENAME" "$tmp/tree" "$mirror" >"$tmp/log" 2>&1; then
  tail -n 30 "$tmp/log" >&2
  exit 1
fi
rm -rf "$tmp/tree/var/cache/apt/archives/"*.deb
touch "$tmp/tree/.complete"
rm -rf "$dir"
mv "$tmp/tree" "$dir"
echo "$dir"
