#!/usr/bin/env bash
# Builds the static libraries that Debian does not ship in a form our static binaries can link,
# from the same Debian source versions as the installed -dev packages (with Debian's patches),
# once per machine, into $SANDBOXD_STATIC_DEPS (default ~/.cache/sandboxd/static):
#
#   libmicrohttpd.a  without HTTPS, for sandboxd-static and sandboxd-controller-static: Debian's
#                    is built with HTTPS, so it needs gnutls, whose static link needs p11-kit, of
#                    which Debian ships no static archive;
#   libcurl.a        HTTP(S) with OpenSSL and c-ares only, for sandboxd-controller-static:
#                    Debian's also links nghttp2, libssh2, librtmp, libpsl, GSSAPI and LDAP,
#                    which have no static archives in Debian. c-ares resolves names from
#                    /etc/resolv.conf and /etc/hosts itself, so a static binary needs no NSS;
#                    its CA bundle is Debian's path, where the controller image puts one.
#
# The sources come from Debian's archive through apt with a private source list: the system's
# apt setup is unchanged. Prints the paths of the two libraries.
set -euo pipefail

: "${SANDBOXD_STATIC_DEPS:=${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/static}"

log() { printf 'static-deps: %s\n' "$*" >&2; }

# build NAME SOURCE_PACKAGE DEV_PACKAGE LIBRARY SUBDIRS CONFIGURE_ARGS...: builds lib/LIBRARY of
# the source of DEV_PACKAGE's version into $SANDBOXD_STATIC_DEPS/NAME-<version>, making and
# installing only SUBDIRS (space-separated) of the source tree, and prints its path.
build() {
  local name=$1 srcpkg=$2 dev=$3 library=$4 subdirs=$5 ver prefix lib work src d
  shift 5
  ver=$(dpkg-query -W -f='${source:Version}' "$dev")
  prefix="$SANDBOXD_STATIC_DEPS/$name-$ver"
  lib="$prefix/lib/$library"
  if [ -f "$lib" ]; then
    echo "$lib"
    return 0
  fi
  log "building $name $ver into $prefix"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  . /etc/os-release
  mkdir -p "$work/lists/partial"
  printf 'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n' \
    "${SANDBOXD_DEBIAN_MIRROR:-http://deb.debian.org/debian}" "$VERSION_CODENAME" >"$work/src.list"
  local apt_src=(-o Dir::Etc::SourceList="$work/src.list" -o Dir::Etc::SourceParts=/nonexistent
    -o Dir::State::Lists="$work/lists")
  apt-get "${apt_src[@]}" update -qq >"$work/apt.log" 2>&1 &&
    (cd "$work" && apt-get "${apt_src[@]}" source --only-source "$srcpkg=$ver") >>"$work/apt.log" 2>&1 ||
    { cat "$work/apt.log" >&2; log "could not get the source of $srcpkg $ver"; return 1; }
  src=$(find "$work" -maxdepth 1 -type d -name "$srcpkg-*" | head -n1)
  if ! (cd "$src" && ./configure --prefix="$prefix" --enable-static --disable-shared --with-pic \
    CFLAGS="-O2 -ffunction-sections -fdata-sections" "$@" &&
    for d in $subdirs; do make -j2 -C "$d" && make -C "$d" install DESTDIR="$work/dest"; done) \
    >"$work/build.log" 2>&1; then
    tail -n 40 "$work/build.log" >&2
    return 1
  fi
  # Into place in one rename, so that an interrupted build never passes for a finished one.
  [ -f "$work/dest$lib" ] || { log "no $lib after the build"; return 1; }
  mkdir -p "$SANDBOXD_STATIC_DEPS"
  rm -rf "$prefix"
  mv "$work/dest$prefix" "$prefix"
  echo "$lib"
}

build libmicrohttpd libmicrohttpd libmicrohttpd-dev libmicrohttpd.a "src/microhttpd src/include" \
  --disable-https --disable-doc --disable-examples --disable-curl --disable-dauth
build libcurl curl libcurl4-openssl-dev libcurl.a "lib include" \
  --with-openssl --enable-ares --with-zlib --disable-ldap --disable-ldaps --disable-rtsp \
  --disable-dict --disable-telnet --disable-tftp --disable-pop3 --disable-imap --disable-smb \
  --disable-smtp --disable-gopher --disable-mqtt --disable-ftp --disable-file --disable-manual \
  --disable-docs --without-libpsl --without-nghttp2 --without-nghttp3 --without-ngtcp2 \
  --without-libidn2 --without-librtmp --without-libssh2 --without-zstd --without-brotli \
  --without-gssapi --without-libgsasl --disable-ntlm --disable-netrc \
  --with-ca-bundle=/etc/ssl/certs/ca-certificates.crt --with-ca-path=/etc/ssl/certs
