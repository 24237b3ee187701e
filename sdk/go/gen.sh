#!/usr/bin/env bash
# Regenerates internal/processpb from the repository's proto/ with Debian's protoc and the
# pinned protoc-gen-go / protoc-gen-go-grpc (installed into $SANDBOXD_TOOLS by
# scripts/setup.sh). With --check, generates into a temp dir and fails if the committed code
# differs. The generated code is committed because a Go module is built from its source alone
# (`go get` runs no generator); the check in the test suite keeps it in step with proto/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tools="${SANDBOXD_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/bin}"
pkg=github.com/sandboxd/sandboxd/sdk/go/internal/processpb
out="$here/internal/processpb"
check=0
[ "${1:-}" = --check ] && { check=1; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT; }
mkdir -p "$out"
PATH="$tools:$PATH" protoc -I"$here/../../proto" \
  --go_out="$out" --go_opt=paths=source_relative --go_opt=Mprocess/v1/process.proto="$pkg" \
  --go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
  --go-grpc_opt=Mprocess/v1/process.proto="$pkg" \
  process/v1/process.proto
mv "$out/process/v1/"*.go "$out/"
rm -rf "$out/process"
if [ $check = 1 ]; then
  diff -ru "$here/internal/processpb" "$out" || {
    echo "sdk/go: internal/processpb is stale; run sdk/go/gen.sh" >&2
    exit 1
  }
fi
