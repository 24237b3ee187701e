#!/usr/bin/env bash
# Benchmarks sandboxd-router: the same sandboxd reached directly, through our router, through
# the reference router (sigs.k8s.io/agent-sandbox's sandbox-router: HTTP only, it cannot carry
# gRPC) and through a `kubectl port-forward` of the API server, side by side in one run, and
# prints one table of ratios with PASS/FAIL per target of issue 15. Both routers run on
# loopback, routing by X-Sandbox-Pod-IP (--allow-loopback-pod-ip). With --cluster (the default
# when the control plane's binaries are in $SANDBOXD_TOOLS) bench/router_cluster.py starts
# test/controller's control plane holding --known Sandboxes and their Pods, both routers run
# with their caches on against it (so their RSS is with that many sandboxes known), and the
# port-forward path is measured, with the API server's CPU around every transfer. Targets never
# make it exit non-zero: a benchmark is not a test. See the "Router" section of
# bench/README.md.
#
#   bench/router.sh            full run (100 MiB transfers and streams, 3 rounds, 2 s windows)
#   bench/router.sh --quick    quick run (1 round, 1 s windows)
#   bench/router.sh --no-cluster   no control plane: no port-forward column, routers uncached
#
# Options (after --quick, to override it):
#   --rounds N       rounds; each measures every path once, their order turned every round (3)
#   --bytes N        size of each upload, download, Start stream and stdin (104857600)
#   --duration D     recorded window of each latency and small-request run, Go syntax (2s)
#   --sandboxes N    sandboxd daemons, one client each, for the fan-out row (16)
#   --conns N        keep-alive connections for small requests (32)
#   --cluster        the control plane, the routers' caches and the port-forward column (the
#                    default when etcd, kube-apiserver, kwok and kubectl are in $SANDBOXD_TOOLS)
#   --no-cluster     none of that
#   --known N        Sandboxes (each with its Pod) the control plane holds (1000)
#   --roots DIR      where the sandboxes' root directories go (/dev/shm when it is a tmpfs, else
#                    the run's directory): on a tmpfs an upload's fsync costs nothing, so the
#                    upload rows measure the paths, not the disk every path waits on alike
#   --rev REV        build sandboxd and the router from commit REV instead of the work tree
#   --out DIR        build and result directory, outside the repo (/tmp/sandboxd-bench)
#
# Environment: SANDBOXD_TOOLS (where the reference router is built and cached, as setup.sh
# does), SANDBOXD_BIN and SANDBOXD_ROUTER_BIN (use these binaries, skip the build).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$REPO/bench
OUT=/tmp/sandboxd-bench
ROUNDS=3 BYTES=104857600 DURATION=2s SANDBOXES=16 CONNS=32 REV= CLUSTER=auto KNOWN=1000 ROOTS_IN=

while [ $# -gt 0 ]; do
  case $1 in
  --quick) ROUNDS=1 DURATION=1s ;;
  --rounds) ROUNDS=$2; shift ;;
  --bytes) BYTES=$2; shift ;;
  --duration) DURATION=$2; shift ;;
  --sandboxes) SANDBOXES=$2; shift ;;
  --conns) CONNS=$2; shift ;;
  --cluster) CLUSTER=yes ;;
  --no-cluster) CLUSTER=no ;;
  --known) KNOWN=$2; shift ;;
  --roots) ROOTS_IN=$2; shift ;;
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
CLUSTER_TOOLS="etcd kube-apiserver kube-scheduler kube-controller-manager kwok kubectl"
cluster_missing() {
  local b
  for b in $CLUSTER_TOOLS; do [ -x "$SANDBOXD_TOOLS/$b" ] || echo "$b"; done
  command -v openssl >/dev/null || echo openssl
}
if [ "$CLUSTER" = auto ]; then
  CLUSTER=yes
  [ -z "$(cluster_missing)" ] || CLUSTER=no
elif [ "$CLUSTER" = yes ] && [ -n "$(cluster_missing)" ]; then
  echo "router.sh: --cluster needs $(cluster_missing | tr '\n' ' ')in $SANDBOXD_TOOLS" >&2
  exit 1
fi

RUN=$OUT/router-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN/logs"
if [ -z "$ROOTS_IN" ]; then
  ROOTS_IN=$RUN
  [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && ROOTS_IN=/dev/shm
fi
ROOTS=$(mktemp -d "$ROOTS_IN/sandboxd-bench-roots.XXXXXX")
RES=$RUN/results.jsonl
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$ROOTS"
}
# The control plane stops after the routers (their informers would log its going) and before
# the daemons, kwok forwarding to sandbox 0.
stop_cluster() {
  if [ -n "${CPID:-}" ]; then
    kill -TERM "$CPID" 2>/dev/null || true
    wait "$CPID" 2>/dev/null || true
  fi
}
trap 'stop_cluster; cleanup' EXIT
# A signal ends the run through the EXIT trap too: the control plane is not left running.
trap 'exit 130' INT
trap 'exit 143' TERM
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
declare -a GP RP DP
start_daemon() {
  read -r "GP[$1]" "RP[$1]" < <("$SBX" freeport -n 2)
  mkdir -p "$ROOTS/$1"
  "${DENV[@]}" "$SANDBOXD" --listen-host 127.0.0.1 --grpc-port "${GP[$1]}" --rest-port "${RP[$1]}" \
    --root-dir "$ROOTS/$1" >>"$RUN/logs/sandboxd-$1.log" 2>&1 &
  DP[$1]=$!
  PIDS+=("$!")
}
# wait_daemon I: until daemon I answers; one that exited (a port free when picked, taken before
# it bound: other work on the machine picks ports too) starts again on new ports, 3 times at most.
wait_daemon() {
  local try j
  for ((try = 0; try < 4; try++)); do
    for ((j = 0; j < 600; j++)); do
      curl -sf -o /dev/null "http://127.0.0.1:${RP[$1]}/v1/health" && return 0
      kill -0 "${DP[$1]}" 2>/dev/null || break
      sleep 0.05
    done
    kill -0 "${DP[$1]}" 2>/dev/null && break
    echo "router.sh: sandboxd $1 exited (logs/sandboxd-$1.log); starting it on other ports" >&2
    start_daemon "$1"
  done
  echo "router.sh: sandboxd $1 did not answer" >&2
  return 1
}
for ((i = 0; i < SANDBOXES; i++)); do start_daemon "$i"; done
for ((i = 0; i < SANDBOXES; i++)); do wait_daemon "$i"; done

# The control plane, with $KNOWN Sandboxes, and the port-forward of sandbox 0 (sb-0).
CACHE=()
if [ "$CLUSTER" = yes ]; then
  log "control plane with $KNOWN sandboxes known (bench/router_cluster.py)"
  /usr/bin/python3 "$BENCH/router_cluster.py" --grpc-port "${GP[0]}" --rest-port "${RP[0]}" \
    --known "$KNOWN" --env-file "$RUN/cluster.env" 2> >(tee "$RUN/logs/cluster.log" >&2) &
  CPID=$!
  for ((i = 0; i < 9000; i++)); do # 15 minutes at most: 1,000 Pods on a loaded machine
    [ -f "$RUN/cluster.env" ] && break
    kill -0 "$CPID" 2>/dev/null || { echo "router.sh: the control plane did not come up (logs/cluster.log)" >&2; exit 1; }
    sleep 0.1
  done
  [ -f "$RUN/cluster.env" ] || { echo "router.sh: the control plane took over 15 minutes" >&2; exit 1; }
  . "$RUN/cluster.env"
  CACHE=(--cache-enabled "--cache-namespace=$CL_NS" "--kubeconfig=$CL_KUBECONFIG")
fi

# The routers, with the same flags (ours are named as the reference's).
declare -A PORT MPORT PID
for r in ours ref; do
  read -r "PORT[$r]" pp "MPORT[$r]" < <("$SBX" freeport -n 3)
  bin=$SANDBOXD_ROUTER
  [ "$r" = ref ] && bin=$REFROUTER
  "${DENV[@]}" "$bin" --http-bind-address "127.0.0.1:${PORT[$r]}" \
    --health-probe-bind-address "127.0.0.1:$pp" --metrics-bind-address "127.0.0.1:${MPORT[$r]}" \
    --allow-loopback-pod-ip "${CACHE[@]}" >>"$RUN/logs/router-$r.log" 2>&1 &
  PID[$r]=$!
  PIDS+=("$!")
  wait_http "http://127.0.0.1:${PORT[$r]}/healthz"
done
# KNOWNBY[r]: the sandboxes router r's cache holds before the first measurement: ours says it
# on /metrics, the reference in its "pod cache synced" line (it listens only after that list).
declare -A KNOWNBY=([ours]=0 [ref]=0)
if [ "$CLUSTER" = yes ]; then
  for ((i = 0; i < 600; i++)); do
    KNOWNBY[ours]=$(curl -sf "http://127.0.0.1:${MPORT[ours]}/metrics" |
      awk '$1 == "sandbox_router_cache_entries" {print $2}')
    [ "${KNOWNBY[ours]:-0}" -ge "$KNOWN" ] 2>/dev/null && break
    sleep 0.05
  done
  KNOWNBY[ref]=$(grep -o '"entries": *[0-9]*' "$RUN/logs/router-ref.log" | grep -o '[0-9]*$' | tail -1)
  log "sandboxes known: ours ${KNOWNBY[ours]:-?}, the reference ${KNOWNBY[ref]:-?} (of $KNOWN)"
fi
# rss_line KIND: each router's VmRSS and VmHWM as records of KIND.
rss_line() {
  local r
  for r in ours ref; do
    printf '{"kind":"%s","label":"%s","rss_kib":%s,"hwm_kib":%s,"known":%s}\n' "$1" "$r" \
      "$(awk '/^VmRSS/ {print $2}' "/proc/${PID[$r]}/status")" \
      "$(awk '/^VmHWM/ {print $2}' "/proc/${PID[$r]}/status")" "${KNOWNBY[$r]:-0}" >>"$RES"
  done
}
# Before any traffic: what the cache alone holds (with --no-cluster, an idle router).
rss_line rss_idle

# ADDR[l], URL[l]: where label l reaches sandbox 0; keys l i: the routing keys of sandbox i.
declare -A ADDR URL
ADDR[direct]=127.0.0.1:${GP[0]} URL[direct]=http://127.0.0.1:${RP[0]}
for r in ours ref; do ADDR[$r]=127.0.0.1:${PORT[$r]} URL[$r]=http://127.0.0.1:${PORT[$r]}; done
LABELS="direct ours ref"
if [ "$CLUSTER" = yes ]; then
  ADDR[pf]=127.0.0.1:$CL_PF_GRPC URL[pf]=http://127.0.0.1:$CL_PF_REST
  LABELS="direct ours ref pf"
fi
# The port-forward, like the direct path, needs no routing keys.
routed() { [ "$1" != direct ] && [ "$1" != pf ]; }
grpc_keys() { if routed "$1"; then echo "x-sandbox-id: sb$2;x-sandbox-pod-ip: 127.0.0.1;x-sandbox-port: ${GP[$2]}"; fi; }
http_keys() { if routed "$1"; then echo "X-Sandbox-ID: sb$2;X-Sandbox-Pod-IP: 127.0.0.1;X-Sandbox-Port: ${RP[$2]}"; fi; }
# via L CMD...: runs CMD with label L's routing keys for sandbox 0.
via() {
  local l=$1
  shift
  SBXBENCH_GRPC_METADATA=$(grpc_keys "$l" 0) SBXBENCH_HTTP_HEADERS=$(http_keys "$l" 0) "$@"
}
# m CMD...: one measurement; a failure is reported and the run goes on.
m() { "$@" || echo "router.sh: measurement failed: $*" >&2; }
# order: the labels turned by the round, so none is always first or last.
order() {
  local -a l=($LABELS)
  local i n=${#l[@]}
  for ((i = 0; i < n; i++)); do printf '%s ' "${l[(i + ROUND - 1) % n]}"; done
}
# cpu_ticks: the API server's utime+stime, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$CL_APISERVER_PID/stat"; }
TCK=$(getconf CLK_TCK)
# t L WHAT CMD...: measurement m, with the API server's CPU and the wall time around it recorded
# (kind apicpu) when there is a control plane: a port-forward costs it CPU for every byte, the
# other paths only its background (watches, kwok's Node heartbeats).
t() {
  local l=$1 what=$2 c0 w0 c1 w1
  shift 2
  if [ "$CLUSTER" != yes ]; then m "$@"; return; fi
  c0=$(cpu_ticks) w0=$(date +%s.%N)
  m "$@"
  c1=$(cpu_ticks) w1=$(date +%s.%N)
  printf '{"kind":"apicpu","label":"%s","what":"%s","bytes":%s,"cpu_s":%s,"seconds":%s}\n' \
    "$l" "$what" "$BYTES" "$(awk -v a="$c0" -v b="$c1" -v t="$TCK" 'BEGIN {print (b - a) / t}')" \
    "$(awk -v a="$w0" -v b="$w1" 'BEGIN {print b - a}')" >>"$RES"
}

{
  echo "# sandboxd-router benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
  machine_line
  ours_line
  echo "our router: $SANDBOXD_ROUTER"
  echo "reference router: $REFERENCE_MODULE/$REFERENCE_ROUTER_CMD@$REFERENCE_VERSION (HTTP only)"
  if [ "$CLUSTER" = yes ]; then
    echo "control plane: test/controller's (etcd, kube-apiserver, kwok) holding $KNOWN Sandboxes and their Pods; both routers' caches on (known: ours ${KNOWNBY[ours]:-?}, the reference ${KNOWNBY[ref]:-?}); port-forward: kubectl $("$SANDBOXD_TOOLS/kubectl" version --client 2>/dev/null | awk '/Client Version/ {print $3}') port-forward through kube-apiserver $("$SANDBOXD_TOOLS/kube-apiserver" --version 2>/dev/null | awk '{print $2}') and kwok's kubelet server"
  else
    echo "control plane: none (--no-cluster): no port-forward column, the routers' caches off"
  fi
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (anything but this benchmark running adds noise)"
  echo "sandbox roots: $ROOTS_IN ($(stat -f -c %T "$ROOTS_IN"))"
  echo "options: rounds=$ROUNDS bytes=$BYTES duration=$DURATION sandboxes=$SANDBOXES conns=$CONNS cluster=$CLUSTER$([ "$CLUSTER" = yes ] && echo " known=$KNOWN")"
} >"$RUN/header.txt"
cat "$RUN/header.txt" >&2

head -c 100 /dev/zero | tr '\0' x >"$ROOTS/0/small.txt"
head -c "$BYTES" /dev/urandom >"$ROOTS/0/big.bin"
cat "$ROOTS/0/big.bin" >/dev/null

for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
  log "round $ROUND/$ROUNDS (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  for l in $(order); do
    if [ "$l" != ref ]; then # gRPC: the reference router cannot carry it
      m via "$l" "$SBX" exec -addr "${ADDR[$l]}" -label "$l" -cmd /bin/true -name true \
        -duration "$DURATION" -out "$RES"
      t "$l" stream via "$l" "$SBX" stream -addr "${ADDR[$l]}" -label "$l" -bytes "$BYTES" -out "$RES"
      t "$l" stdin via "$l" "$SBX" stdin -addr "${ADDR[$l]}" -label "$l" -bytes "$BYTES" -out "$RES"
    fi
    t "$l" rest_get via "$l" "$SBX" restget -url "${URL[$l]}/v1/files/big.bin" -label "$l" \
      -bytes "$BYTES" -out "$RES"
    rm -f "$ROOTS/0/up.bin"
    t "$l" rest_put via "$l" "$SBX" restput -url "${URL[$l]}/v1/files/up.bin" -label "$l" \
      -bytes "$BYTES" -check "$ROOTS/0/up.bin" -out "$RES"
    # Not through the port-forward: a rate of small requests there would measure kubectl's
    # stream set-up for each of wrk's connections more than the path.
    [ "$l" = pf ] || m via "$l" "$SBX" restsmall -url "${URL[$l]}/v1/files/small.txt" -label "$l" \
      -what file -conns "$CONNS" -duration "$DURATION" -warmup 1s -out "$RES"
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
[ "$CLUSTER" = yes ] && KNOWNBY[ours]=$(awk '$1 == "sandbox_router_cache_entries" {print $2}' <<<"$metrics")
rss_line rss
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
