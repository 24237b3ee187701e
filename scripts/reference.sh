# Sourced by scripts/setup.sh and bench/*.sh: the reference daemon's version and its build.
#
# `go install module@version` cannot be used: the Go module proxy refuses the module's version
# list, which go install reads for deprecation notices. A throwaway wrapper module that requires
# the exact version builds it instead. The binary is cached in $SANDBOXD_TOOLS under a version
# stamp, so any of the scripts reuses the others' build.

REFERENCE_MODULE=sigs.k8s.io/agent-sandbox
REFERENCE_VERSION=v0.5.6
REFERENCE_CMD=packages/sandboxd/cmd/sandboxd
REFERENCE_ROUTER_CMD=sandbox-router/cmd

# build_reference_go NAME CMD: builds package CMD of the reference module into
# $SANDBOXD_TOOLS/NAME unless that version is there already.
build_reference_go() {
  local name=$1 cmd=$2
  local ref="$SANDBOXD_TOOLS/$name" stamp="$SANDBOXD_TOOLS/.$name.version"
  local tmp
  if [ -x "$ref" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$REFERENCE_VERSION" ]; then
    return 0
  fi
  printf 'building %s from %s@%s\n' "$name" "$REFERENCE_MODULE" "$REFERENCE_VERSION" >&2
  mkdir -p "$SANDBOXD_TOOLS"
  tmp=$(mktemp -d)
  printf 'module sandboxd-reference-build\n\ngo 1.22\n\nrequire %s %s\n' \
    "$REFERENCE_MODULE" "$REFERENCE_VERSION" >"$tmp/go.mod"
  printf '//go:build tools\npackage tools\n\nimport _ "%s"\n' "$REFERENCE_MODULE/$cmd" \
    >"$tmp/tools.go"
  (cd "$tmp" && GOFLAGS=-buildvcs=false go mod tidy >/dev/null 2>&1 &&
    GOFLAGS=-buildvcs=false go build -o "$ref" "$REFERENCE_MODULE/$cmd")
  rm -rf "$tmp"
  echo "$REFERENCE_VERSION" >"$stamp"
}

# Builds $SANDBOXD_TOOLS/reference-sandboxd, the reference daemon.
build_reference() { build_reference_go reference-sandboxd "$REFERENCE_CMD"; }

# Builds $SANDBOXD_TOOLS/reference-router, the reference's sandbox-router (bench/router.sh).
build_reference_router() { build_reference_go reference-router "$REFERENCE_ROUTER_CMD"; }
