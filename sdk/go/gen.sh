#!/usr/bin/env bash
# Regenerates internal/processpb, internal/processespb and internal/filespb from the repository's proto/ with Debian's protoc and the
# pinned protoc-gen-go / protoc-gen-go-grpc (installed into $SANDBOXD_TOOLS by
# scripts/setup.sh). With --check, generates into a temp dir and fails if the committed code
# differs. The generated code is committed because a Go module is built from its source alone
# (`go get` runs no generator); the check in the test suite keeps it in step with proto/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tools="${SANDBOXD_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/bin}"
mod=github.com/sandboxd/sandboxd/sdk/go/internal
check=0
gen=$here/internal
if [ "${1:-}" = --check ]; then
  check=1
  gen=$(mktemp -d)
  trap 'rm -rf "$gen"' EXIT
fi

# generate PROTO GO_PACKAGE_DIR: the Go code of one .proto into $gen/GO_PACKAGE_DIR.
generate() {
  local proto=$1 dir=$2 out
  out=$(mktemp -d)
  PATH="$tools:$PATH" protoc -I"$here/../../proto" \
    --go_out="$out" --go_opt=paths=source_relative --go_opt=M"$proto=$mod/$dir" \
    --go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
    --go-grpc_opt=M"$proto=$mod/$dir" "$proto"
  mkdir -p "$gen/$dir"
  mv "$out/$(dirname "$proto")/"*.go "$gen/$dir/"
  rm -rf "$out"
}
generate process/v1/process.proto processpb
generate sandboxd/v1/processes.proto processespb
generate sandboxd/v1/files.proto filespb
if [ $check = 1 ]; then
  for d in processpb processespb filespb; do
    diff -ru "$here/internal/$d" "$gen/$d" || {
      echo "sdk/go: internal/$d is stale; run sdk/go/gen.sh" >&2
      exit 1
    }
  done
fi
