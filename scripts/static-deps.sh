#!/usr/bin/env bash
# Builds the one static library that Debian does not ship in a form sandboxd-static can link:
# libmicrohttpd.a. Debian's is built with HTTPS, so it needs gnutls, whose static link needs
# p11-kit, of which Debian ships no static archive. This builds the same Debian source version
# as the installed libmicrohttpd-dev (with Debian's patches) with --disable-https, once per
# machine, into $SANDBOXD_STATIC_DEPS (default ~/.cache/sandboxd/static). The source comes from
# Debian's archive through apt with a private source list: the system's apt setup is unchanged.
# Prints the path of the library.
set -euo pipefail

: "${SANDBOXD_STATIC_DEPS:=${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/static}"
ver=$(dpkg-query -W -f='${source:Version}' libmicrohttpd-dev)
prefix="$SANDBOXD_STATIC_DEPS/libmicrohttpd-$ver"
lib="$prefix/lib/libmicrohttpd.a"
if [ -f "$lib" ]; then
  echo "$lib"
  exit 0
fi

log() { printf 'static-deps: %s\n' "$*" >&2; }
log "building libmicrohttpd $ver without HTTPS into $prefix"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. /etc/os-release
mkdir -p "$work/lists/partial"
printf 'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n' \
  "${SANDBOXD_DEBIAN_MIRROR:-http://deb.debian.org/debian}" "$VERSION_CODENAME" >"$work/src.list"
apt_src=(-o Dir::Etc::SourceList="$work/src.list" -o Dir::Etc::SourceParts=/nonexistent
  -o Dir::State::Lists="$work/lists")
apt-get "${apt_src[@]}" update -qq >"$work/apt.log" 2>&1 &&
  (cd "$work" && apt-get "${apt_src[@]}" source "libmicrohttpd=$ver") >>"$work/apt.log" 2>&1 ||
  { cat "$work/apt.log" >&2; log "could not get the source of libmicrohttpd $ver"; exit 1; }
src=$(find "$work" -maxdepth 1 -type d -name 'libmicrohttpd-*' | head -n1)
if ! (cd "$src" &&
  ./configure --prefix="$prefix" --enable-static --disable-shared --disable-https \
    --disable-doc --disable-examples --disable-curl --disable-dauth --with-pic \
    CFLAGS="-O2 -ffunction-sections -fdata-sections" &&
  make -j2 -C src/microhttpd && make -C src/microhttpd install DESTDIR="$work/dest" &&
  make -C src/include install DESTDIR="$work/dest") >"$work/build.log" 2>&1; then
  tail -n 40 "$work/build.log" >&2
  exit 1
fi
# Into place in one rename, so that an interrupted build never passes for a finished one.
[ -f "$work/dest$lib" ] || { log "no $lib after the build"; exit 1; }
mkdir -p "$SANDBOXD_STATIC_DEPS"
rm -rf "$prefix"
mv "$work/dest$prefix" "$prefix"
echo "$lib"
