#!/usr/bin/env bash
# Builds the container images with buildah, without a Docker engine:
#
#   localhost/sandboxd:<version>             the injector (sandboxd.Containerfile): sandboxd-static
#                                            and sandboxd-install, FROM scratch, non-root
#   localhost/sandboxd-controller:<version>  the controller (controller.Containerfile): the static
#                                            sandboxd-controller-static (or, where the build has
#                                            none, sandboxd-controller with its shared libraries),
#                                            FROM scratch, non-root
#   localhost/sandboxd-router:<version>      the router (router.Containerfile): likewise,
#                                            sandboxd-router-static or sandboxd-router
#
# into the local container storage (where podman finds them) and, with --oci DIR, also into an
# OCI image layout at DIR (tags sandboxd-<version>, sandboxd-controller-<version>,
# sandboxd-router-<version>).
#
#   images/build.sh [--build-dir DIR] [--oci DIR] [--tag TAG] [--bins SANDBOXD_STATIC INSTALL]
#                   [--controller-bin FILE] [--router-bin FILE]
#
# --bins takes the two binaries of the injector as they are instead of building them (and skips
# the controller and the router unless --controller-bin and --router-bin give theirs); --tag
# tags the images TAG instead of the version (the tests use these).
#
# The version is the CMake project's, the revision the git commit; both go into the OCI labels
# (org.opencontainers.image.*). Needs root (or a rootless buildah setup) and buildah.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
build="$repo/build/images"
oci= tag= static_bin= install_bin= controller_bin= router_bin= bins_given=
while [ $# -gt 0 ]; do
  case $1 in
  --build-dir) build=$2; shift 2 ;;
  --oci) oci=$2; shift 2 ;;
  --tag) tag=$2; shift 2 ;;
  --bins) static_bin=$2 install_bin=$3 bins_given=1; shift 3 ;;
  --controller-bin) controller_bin=$2; shift 2 ;;
  --router-bin) router_bin=$2; shift 2 ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "build.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

log() { printf 'images: %s\n' "$*" >&2; }
command -v buildah >/dev/null || { log "buildah is not installed (scripts/setup.sh installs it)"; exit 1; }

version=$(sed -n 's/^project(sandboxd VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$revision" != unknown ] && [ -n "$(git -C "$repo" status --porcelain 2>/dev/null)" ]; then
  revision="$revision-dirty"
fi
created=$(git -C "$repo" log -1 --format=%cI 2>/dev/null || date -u +%FT%TZ)
: "${tag:=$version}"

if [ -z "$static_bin" ]; then
  log "building sandboxd-static and sandboxd-install in $build"
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j2 --target sandboxd-static sandboxd-install >/dev/null
  static_bin="$build/sandboxd/sandboxd-static" install_bin="$build/images/sandboxd-install"
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

# bud CONTAINERFILE NAME CONTEXT: builds localhost/NAME:tag, and pushes it to the OCI layout.
bud() {
  local ref="localhost/$2:$tag"
  buildah bud --isolation chroot --quiet --omit-history -f "$repo/images/$1" \
    --build-arg VERSION="$version" --build-arg REVISION="$revision" \
    --build-arg CREATED="$created" -t "$ref" "$3" >/dev/null
  log "built $ref"
  if [ -n "$oci" ]; then
    mkdir -p "$oci"
    buildah push --quiet "$ref" "oci:$oci:$2-$tag" >/dev/null
    log "pushed $ref to the OCI layout $oci as $2-$tag"
  fi
  echo "$ref"
}

mkdir "$ctx/injector"
cp "$static_bin" "$ctx/injector/sandboxd"
cp "$install_bin" "$ctx/injector/sandboxd-install"
bud sandboxd.Containerfile sandboxd "$ctx/injector"

# built NAME: the path of NAME-static where the build has that target, else of NAME (built
# now); nothing when it has neither.
built() {
  local target=$1
  if ! [ -f "$build/build.ninja" ] || ! ninja -C "$build" -t targets all | grep -q "^$1:"; then
    return 0
  fi
  if ninja -C "$build" -t targets all | grep -q "^$1-static:"; then
    target=$1-static
  fi
  cmake --build "$build" -j2 --target "$target" >/dev/null
  find "$build" -name "$target" -type f -perm -u+x | head -n1
}

# app CONTAINERFILE NAME BIN: an image of BIN (as /NAME) with a CA bundle, plus its shared
# libraries and loader if it is not static.
app() {
  local dir="$ctx/$2" root="$ctx/$2/rootfs" lib
  mkdir -p "$root"
  cp "$3" "$root/$2"
  # ldd lists nothing for a static binary ("not a dynamic executable").
  for lib in $(ldd "$root/$2" 2>/dev/null | grep -o '/[^ ]*' || true); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
  cp -L /etc/ssl/certs/ca-certificates.crt "$dir/"
  bud "$1" "$2" "$dir"
}

# The controller and the router.
if [ -z "$controller_bin" ] && [ -z "$bins_given" ]; then
  controller_bin=$(built sandboxd-controller)
fi
if [ -z "$router_bin" ] && [ -z "$bins_given" ]; then
  router_bin=$(built sandboxd-router)
fi
if [ -n "$controller_bin" ]; then
  app controller.Containerfile sandboxd-controller "$controller_bin"
else
  log "controller image not built: there is no CMake target sandboxd-controller"
fi
if [ -n "$router_bin" ]; then
  app router.Containerfile sandboxd-router "$router_bin"
else
  log "router image not built: there is no CMake target sandboxd-router"
fi
