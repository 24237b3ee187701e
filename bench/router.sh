#!/usr/bin/env bash
# Benchmarks sandboxd-router: the same sandboxd reached directly, through our router and
# through the reference router (sigs.k8s.io/agent-sandbox's sandbox-router: HTTP only, it cannot
# carry gRPC), side by side in one run, and prints one table of ratios with PASS/FAIL per
# target of issue 15. Both routers run on loopback without a cluster, routing by
# X-Sandbox-Pod-IP (--allow-loopback-pod-ip). Targets never make it exit non-zero: a benchmark
# is not a test. See the "Router" section of bench/README.md.
#
#   bench/router.sh            full run (100 MiB transfers and streams, 3 rounds, 2 s windows)
#   bench/router.sh --quick    quick run (1 round, 1 s windows)
#
# Options (after --quick, to override it):
#   --rounds N       rounds; each measures direct, ours and the reference once, their order
#                    turned every round (3)
#   --bytes N        size of each upload, download and Start stream (104857600)
#   --duration D     recorded window of each latency and small-request run, Go syntax (2s)
#   --sandboxes N    sandboxd daemons, one client each, for the fan-out row (16)
#   --conns N        keep-alive connections for small requests (32)
#   --rev REV        build sandboxd and the router from commit REV instead of the work tree
#   --out DIR        build and result directory, outside the repo (/tmp/sandboxd-bench)
#
# Environment: SANDBOXD_TOOLS (where the reference router is built and cached, as setup.sh
# does), SANDBOXD_BIN and SANDBOXD_ROUTER_BIN (use these binaries, skip the build).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$REPO/bench
OUT=/tmp/sandboxd-bench
ROUNDS=3 BYTES=104857600 DURATION=2s SANDBOXES=16 CONNS=32 REV=

while [ $# -gt 0 ]; do
  case $1 in
  --quick) ROUNDS=1 DURATION=1s ;;
  --rounds) ROUNDS=$2; shift ;;
  --bytes) BYTES=$2; shift ;;
  --duration) DURATION=$2; shift ;;
  --sandboxes) SANDBOXES=$2; shift ;;
  --conns) CONNS=$2; shift ;;
  --rev) REV=$2; shift ;;
  --out) OUT=$2; shift ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "router.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

. "$BENCH/lib.sh"
T0=$(date +%s)

log "building (into $OUT)"
build_sandboxd
build_router
build_client
build_reference_router
REFROUTER=$SANDBOXD_TOOLS/reference-router

RUN=$OUT/router-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN/logs" "$RUN/roots"
RES=$RUN/results.jsonl
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$RUN/roots"
}
trap cleanup EXIT
DENV=(env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" LANG=C.UTF-8)

# wait_http URL: until URL answers 200 (30 s at most).
wait_http() {
  local i
  for ((i = 0; i < 600; i++)); do
    curl -sf -o /dev/null "$1" && return 0
    sleep 0.05
  done
  echo "router.sh: nothing answered $1 within 30 s" >&2
  return 1
}

# The sandboxes: sandboxd daemons on loopback, each with a root of its own; the first is the
# one every measurement but the fan-out uses.
declare -a GP RP
for ((i = 0; i < SANDBOXES; i++)); do
  read -r "GP[$i]" "RP[$i]" < <("$SBX" freeport -n 2)
  mkdir -p "$RUN/roots/$i"
  "${DENV[@]}" "$SANDBOXD" --listen-host 127.0.0.1 --grpc-port "${GP[i]}" --rest-port "${RP[i]}" \
    --root-dir "$RUN/roots/$i" >>"$RUN/logs/sandboxd-$i.log" 2>&1 &
  PIDS+=("$!")
  [ "$i" = 0 ] && DPID=$!
done
for ((i = 0; i < SANDBOXES; i++)); do wait_http "http://127.0.0.1:${RP[i]}/v1/health"; done

# The routers, with the same flags (ours are named as the reference's).
declare -A PORT MPORT PID
for r in ours ref; do
  read -r "PORT[$r]" pp "MPORT[$r]" < <("$SBX" freeport -n 3)
  bin=$SANDBOXD_ROUTER
  [ "$r" = ref ] && bin=$REFROUTER
  "${DENV[@]}" "$bin" --http-bind-address "127.0.0.1:${PORT[$r]}" \
    --health-probe-bind-address "127.0.0.1:$pp" --metrics-bind-address "127.0.0.1:${MPORT[$r]}" \
    --allow-loopback-pod-ip >>"$RUN/logs/router-$r.log" 2>&1 &
  PID[$r]=$!
  PIDS+=("$!")
  wait_http "http://127.0.0.1:${PORT[$r]}/healthz"
done

# ADDR[l], URL[l]: where label l reaches sandbox 0; keys l i: the routing keys of sandbox i.
declare -A ADDR URL
ADDR[direct]=127.0.0.1:${GP[0]} URL[direct]=http://127.0.0.1:${RP[0]}
for r in ours ref; do ADDR[$r]=127.0.0.1:${PORT[$r]} URL[$r]=http://127.0.0.1:${PORT[$r]}; done
grpc_keys() { [ "$1" = direct ] || echo "x-sandbox-id: sb$2;x-sandbox-pod-ip: 127.0.0.1;x-sandbox-port: ${GP[$2]}"; }
http_keys() { [ "$1" = direct ] || echo "X-Sandbox-ID: sb$2;X-Sandbox-Pod-IP: 127.0.0.1;X-Sandbox-Port: ${RP[$2]}"; }
# via L CMD...: runs CMD with label L's routing keys for sandbox 0.
via() {
  local l=$1
  shift
  SBXBENCH_GRPC_METADATA=$(grpc_keys "$l" 0) SBXBENCH_HTTP_HEADERS=$(http_keys "$l" 0) "$@"
}
# m CMD...: one measurement; a failure is reported and the run goes on.
m() { "$@" || echo "router.sh: measurement failed: $*" >&2; }
order() {
  case $((ROUND % 3)) in
  1) echo "direct ours ref" ;;
  2) echo "ours ref direct" ;;
  *) echo "ref direct ours" ;;
  esac
}

{
  echo "# sandboxd-router benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
  machine_line
  ours_line
  echo "our router: $SANDBOXD_ROUTER"
  echo "reference router: $REFERENCE_MODULE/$REFERENCE_ROUTER_CMD@$REFERENCE_VERSION (HTTP only)"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (anything but this benchmark running adds noise)"
  echo "options: rounds=$ROUNDS bytes=$BYTES duration=$DURATION sandboxes=$SANDBOXES conns=$CONNS"
} >"$RUN/header.txt"
cat "$RUN/header.txt" >&2

head -c 100 /dev/zero | tr '\0' x >"$RUN/roots/0/small.txt"
head -c "$BYTES" /dev/urandom >"$RUN/roots/0/big.bin"
cat "$RUN/roots/0/big.bin" >/dev/null

for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
  log "round $ROUND/$ROUNDS (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  for l in $(order); do
    if [ "$l" != ref ]; then # gRPC: the reference router cannot carry it
      m via "$l" "$SBX" exec -addr "${ADDR[$l]}" -label "$l" -cmd /bin/true -name true \
        -duration "$DURATION" -out "$RES"
      m via "$l" "$SBX" stream -addr "${ADDR[$l]}" -label "$l" -bytes "$BYTES" -out "$RES"
    fi
    m via "$l" "$SBX" restget -url "${URL[$l]}/v1/files/big.bin" -label "$l" -bytes "$BYTES" -out "$RES"
    rm -f "$RUN/roots/0/up.bin"
    m via "$l" "$SBX" restput -url "${URL[$l]}/v1/files/up.bin" -label "$l" -bytes "$BYTES" \
      -check "$RUN/roots/0/up.bin" -out "$RES"
    m via "$l" "$SBX" restsmall -url "${URL[$l]}/v1/files/small.txt" -label "$l" -what file \
      -conns "$CONNS" -duration "$DURATION" -warmup 1s -out "$RES"
  done
done 2> >(tee "$RUN/progress.txt" >&2)

# Fan-out: one client per sandbox at once, each on its own connection, directly and through
# our router; then the router's count of upstream connections.
log "fan-out: $SANDBOXES clients on $SANDBOXES sandboxes"
for l in direct ours; do
  fan=()
  for ((i = 0; i < SANDBOXES; i++)); do
    addr=${ADDR[$l]}
    [ "$l" = direct ] && addr=127.0.0.1:${GP[i]}
    SBXBENCH_GRPC_METADATA=$(grpc_keys "$l" "$i") "$SBX" exec -addr "$addr" -label "fan-$l" \
      -cmd /bin/true -name true -duration "$DURATION" -out "$RUN/fan-$l-$i.jsonl" 2>/dev/null &
    fan+=("$!")
  done
  for p in "${fan[@]}"; do wait "$p" || echo "router.sh: a fan-out client failed" >&2; done
  cat "$RUN"/fan-$l-*.jsonl >>"$RES"
done
metrics=$(curl -sf "http://127.0.0.1:${MPORT[ours]}/metrics" || true)
for r in ours ref; do
  printf '{"kind":"rss","label":"%s","rss_kib":%s,"hwm_kib":%s}\n' "$r" \
    "$(awk '/^VmRSS/ {print $2}' "/proc/${PID[$r]}/status")" \
    "$(awk '/^VmHWM/ {print $2}' "/proc/${PID[$r]}/status")" >>"$RES"
done
printf '{"kind":"upstreams","label":"ours","open":%s,"created":%s}\n' \
  "$(awk '$1 == "sandbox_router_upstream_connections" {print $2}' <<<"$metrics" | grep . || echo null)" \
  "$(awk '$1 == "sandbox_router_upstream_connections_created_total" {print $2}' <<<"$metrics" | grep . || echo null)" >>"$RES"

{
  cat "$RUN/header.txt"
  echo
  /usr/bin/python3 "$BENCH/router_report.py" --sandboxes "$SANDBOXES" "$RES" ||
    echo "router.sh: the report failed; raw results are in $RES"
  echo
  echo "run time $(($(date +%s) - T0)) s; load average at end: $(cut -d' ' -f1-3 /proc/loadavg); raw results: $RES"
} >"$RUN/table.md"
echo
cat "$RUN/table.md"
ln -sfn "$RUN" "$OUT/latest-router"
exit 0
