#!/usr/bin/env bash
# Sets everything up, builds sandboxd and runs it on loopback with a temporary root dir.
# Ctrl-C stops it (the daemon drains and exits).
set -euo pipefail
cd "$(dirname "$0")/.."

GRPC_PORT=${GRPC_PORT:-9090}
BUILD=${BUILD:-build/dev}

./scripts/setup.sh
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$BUILD" sandboxd >/dev/null

: "${SANDBOXD_TOOLS:=${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/bin}"
root=$(mktemp -d -t sandboxd-root.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo hello >"$root/hello.txt"

cat <<EOF_EXAMPLES
sandboxd on 127.0.0.1:$GRPC_PORT (gRPC), root dir $root. Try, from another shell:

  export PATH="$SANDBOXD_TOOLS:\$PATH"
  grpcurl -plaintext 127.0.0.1:$GRPC_PORT list
  grpcurl -plaintext 127.0.0.1:$GRPC_PORT describe process.v1.ProcessService
  grpcurl -plaintext -d '{"config":{"command":["sh","-c","echo hi; cat hello.txt; exit 3"]}}' \\
      127.0.0.1:$GRPC_PORT process.v1.ProcessService/Execute
  grpcurl -plaintext -d '{"config":{"command":["sh","-c","for i in 1 2 3; do echo \$i; sleep 1; done"]}}' \\
      127.0.0.1:$GRPC_PORT process.v1.ProcessService/Start
  grpc-health-probe -addr 127.0.0.1:$GRPC_PORT

(Output bytes are base64 in grpcurl's JSON.) Ctrl-C stops the daemon.

EOF_EXAMPLES
exec "$BUILD/sandboxd/sandboxd" --listen-host 127.0.0.1 --grpc-port "$GRPC_PORT" --root-dir "$root"
