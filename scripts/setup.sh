#!/usr/bin/env bash
# Installs every build and test dependency of sandboxd on a Debian 12 machine. Idempotent, and
# quick when everything is already there. Go tools are built once per machine into
# $SANDBOXD_TOOLS (default ~/.cache/sandboxd/bin), outside the repo.
#
#   scripts/setup.sh            everything the test suite needs (the controller's control plane
#                               is built from source: ~20 minutes once per machine)
#   scripts/setup.sh --daemon   only what building and running sandboxd needs, grpcurl and
#                               grpc-health-probe (what scripts/dev.sh prints examples of)
set -euo pipefail

: "${SANDBOXD_TOOLS:=${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/bin}"
export SANDBOXD_TOOLS

# Versions of the Go-built tools (from the Go module proxy).
GRPCURL=github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4
HEALTH_PROBE=github.com/grpc-ecosystem/grpc-health-probe@v0.4.62
# Code generators of the Go SDK (sdk/go/gen.sh).
PROTOC_GEN_GO=google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC=google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
# schemathesis (PyPI) checks the running daemon against api/openapi.yaml.
SCHEMATHESIS_VERSION=4.32.5

# What building and running the daemon needs (scripts/dev.sh); the rest is for the tests.
DAEMON_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libgrpc-dev protobuf-compiler protobuf-c-compiler libprotobuf-c-dev libprotobuf-dev
  libmicrohttpd-dev libnghttp2-dev libjansson-dev libseccomp-dev libssl-dev libcurl4-openssl-dev libyaml-dev python3
  golang-go curl ca-certificates
)
DEB_PACKAGES=(
  build-essential cmake ninja-build pkg-config clang clang-format libclang-rt-14-dev
  libgrpc-dev protobuf-compiler protobuf-c-compiler libprotobuf-c-dev libprotobuf-dev
  libmicrohttpd-dev libnghttp2-dev libjansson-dev libseccomp-dev libcurl4-openssl-dev libyaml-dev
  python3 python3-grpcio python3-protobuf python3-pytest python3-yaml python3-venv
  # test/hostile/test_h2c_hostile.py: an HTTP/2 client that misbehaves on purpose.
  python3-h2
  golang-go curl ca-certificates wrk
  # test/router/test_tls.py makes its certificates with the openssl tool.
  openssl
  tmux
  # Terminals (test/integration/test_terminal*.py): a WebSocket client nobody here wrote, and a
  # real browser driven headless through its driver.
  python3-websockets python3-selenium chromium chromium-driver
  # sandboxd-static: the static archives (most come with libgrpc-dev already), and what
  # scripts/static-deps.sh needs to build libmicrohttpd and libcurl from Debian's source.
  libssl-dev zlib1g-dev libc-ares-dev libre2-dev libabsl-dev dpkg-dev xz-utils
  # test/image: rootfs trees, gVisor, containers and images without a Docker engine.
  busybox-static debootstrap runsc podman buildah runc catatonit uidmap
)

log() { printf 'setup: %s\n' "$*" >&2; }

# shellcheck source=reference.sh
. "$(dirname "$0")/reference.sh"

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

install_debs() {
  local missing=()
  for p in "$@"; do
    # golang-go: any Go >= 1.22 on PATH will do.
    if [ "$p" = golang-go ] && command -v go >/dev/null; then continue; fi
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

# go_tool NAME MODULE@VERSION: builds it into $SANDBOXD_TOOLS unless that version is there.
go_tool() {
  local name=$1 mod=$2 stamp="$SANDBOXD_TOOLS/.$1.version"
  if [ -x "$SANDBOXD_TOOLS/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$mod" ]; then
    return 0
  fi
  log "building $mod"
  mkdir -p "$SANDBOXD_TOOLS"
  GOBIN="$SANDBOXD_TOOLS" GOFLAGS=-buildvcs=false go install "$mod"
  echo "$mod" >"$stamp"
}

if [ "${1:-}" = --daemon ]; then
  install_debs "${DAEMON_PACKAGES[@]}"
  go_tool grpcurl "$GRPCURL"
  go_tool grpc-health-probe "$HEALTH_PROBE"
  log "ready to build and run sandboxd; grpcurl and grpc-health-probe in $SANDBOXD_TOOLS"
  exit 0
fi
install_debs "${DEB_PACKAGES[@]}"
go_tool grpcurl "$GRPCURL"
go_tool grpc-health-probe "$HEALTH_PROBE"
go_tool protoc-gen-go "$PROTOC_GEN_GO"
go_tool protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC"
# schemathesis, into a venv of Debian's Python next to the Go tools.
install_schemathesis() {
  local venv="${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/venv"
  if "$venv/bin/schemathesis" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
    return 0
  fi
  log "installing schemathesis $SCHEMATHESIS_VERSION into $venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q "schemathesis==$SCHEMATHESIS_VERSION"
}

mkdir -p "$SANDBOXD_TOOLS"
# libmicrohttpd without HTTPS for sandboxd-static; without it only that target is skipped.
"$(dirname "$0")/static-deps.sh" >/dev/null || log "static-deps.sh failed: no sandboxd-static or sandboxd-controller-static"
build_reference
build_reference_router
install_schemathesis
# The Python SDK's virtualenv (pinned packages from PyPI).
"$(dirname "$0")/../sdk/python/venv.sh" >/dev/null
# The E2B JavaScript SDK's tests (test/e2b-js): node and npm where the image lacks them (Debian's
# nodejs is older than the SDK needs: those tests then skip, saying so), and the pinned SDK.
command -v node >/dev/null && command -v npm >/dev/null || install_debs nodejs npm
"$(dirname "$0")/../test/e2b-js/run-tests.sh" --prepare || log "test/e2b-js: the e2b npm package is not installed"
# The Go SDK's modules, fetched once.
(cd "$(dirname "$0")/../sdk/go" && GOFLAGS=-buildvcs=false go mod download)
# kube-apiserver, kube-scheduler, kube-controller-manager, etcd and kwok for the controller's tests,
# and an OCI registry and crane for its image entrypoint lookups.
bash "$(dirname "$0")/k8s-tools.sh"
# A kernel with cgroup v2 only, run in QEMU, for the cgroup v2 test (test/image): its absence
# only makes that test skip, saying why.
bash "$(dirname "$0")/vm-tools.sh" >/dev/null || log "vm-tools.sh failed: the cgroup v2 VM test will skip"
log "ready; tools in $SANDBOXD_TOOLS"
