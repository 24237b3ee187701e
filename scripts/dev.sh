#!/usr/bin/env bash
# Sets everything up, builds sandboxd and runs it on loopback with a temporary root dir.
# Ctrl-C stops it (the daemon drains and exits).
set -euo pipefail
cd "$(dirname "$0")/.."

GRPC_PORT=${GRPC_PORT:-9090}
REST_PORT=${REST_PORT:-8080}
BUILD=${BUILD:-build/dev}

./scripts/setup.sh --daemon
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$BUILD" sandboxd >/dev/null

: "${SANDBOXD_TOOLS:=${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/bin}"
root=$(mktemp -d -t sandboxd-root.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo hello >"$root/hello.txt"

cat <<EOF_EXAMPLES
sandboxd on 127.0.0.1:$GRPC_PORT (gRPC) and 127.0.0.1:$REST_PORT (REST), root dir $root.
Try, from another shell:

  export PATH="$SANDBOXD_TOOLS:\$PATH"
  grpcurl -plaintext 127.0.0.1:$GRPC_PORT list
  grpcurl -plaintext 127.0.0.1:$GRPC_PORT describe process.v1.ProcessService
  grpcurl -plaintext -d '{"config":{"command":["sh","-c","echo hi; cat hello.txt; exit 3"]}}' \\
      127.0.0.1:$GRPC_PORT process.v1.ProcessService/Execute
  grpcurl -plaintext -d '{"config":{"command":["sh","-c","for i in 1 2 3; do echo \$i; sleep 1; done"]}}' \\
      127.0.0.1:$GRPC_PORT process.v1.ProcessService/Start
  grpc-health-probe -addr 127.0.0.1:$GRPC_PORT

  # sandboxd.v1.Processes: a process that outlives the call, read back from any offset (ids
  # count every process started, by either service: Attach the one Spawn answered)
  id=\$(grpcurl -plaintext -d '{"spec":{"command":["sh","-c","for i in 1 2 3; do echo \$i; sleep 1; done"],"tag":"demo"}}' \\
      127.0.0.1:$GRPC_PORT sandboxd.v1.Processes/Spawn | sed -n 's/^  "id": *\([0-9]*\),\$/\1/p')
  grpcurl -plaintext -d "{\"id\":\$id,\"follow\":true}" 127.0.0.1:$GRPC_PORT sandboxd.v1.Processes/Attach
  grpcurl -plaintext -d '{}' 127.0.0.1:$GRPC_PORT sandboxd.v1.Processes/List

  curl -s 127.0.0.1:$REST_PORT/v1/health
  curl -s 127.0.0.1:$REST_PORT/v1/files/                      # list the root dir
  curl -s 127.0.0.1:$REST_PORT/v1/files/hello.txt             # download
  curl -si -X PUT --data-binary @/etc/os-release "127.0.0.1:$REST_PORT/v1/files/up/os-release?mode=0600"
  curl -s 127.0.0.1:$REST_PORT/v1/stat/up/os-release
  curl -s "127.0.0.1:$REST_PORT/v1/files/up?archive=tar" | tar -tvf -
  curl -si -X DELETE "127.0.0.1:$REST_PORT/v1/files/up?recursive=true"
  curl -s 127.0.0.1:$REST_PORT/metrics

(Output bytes are base64 in grpcurl's JSON.) Ctrl-C stops the daemon.

EOF_EXAMPLES
"$BUILD/sandboxd/sandboxd" --listen-host 127.0.0.1 --grpc-port "$GRPC_PORT" \
  --rest-port "$REST_PORT" --root-dir "$root"
