#!/usr/bin/env bash
# The tool people use instead of an exec API: ssh, over one shared (ControlMaster) connection to
# an sshd on loopback, against our Execute and the local floor, measured in the same rounds.
#
#   bench/ssh.sh [--rounds N] [--duration 2s] [--out DIR]
#
# Prints p50/p99 of each and the ratios; leaves results.jsonl and table.md in the run dir. Needs
# root (sshd), Debian's openssh-server (installed here when missing, without starting its
# service) and what scripts/setup.sh installs.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$REPO/bench
OUT=/tmp/sandboxd-bench
REV=
ROUNDS=3
DURATION=2s
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
# shellcheck source=lib.sh
. "$BENCH/lib.sh"

if ! [ -x /usr/sbin/sshd ]; then
  log "installing openssh-server (its service is not started)"
  # policy-rc.d answering 101 keeps the package's scripts from starting a system sshd.
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server >/dev/null
  rm -f /usr/sbin/policy-rc.d
  trap - EXIT
fi

build_sandboxd
build_client
RUN=$OUT/ssh-$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$RUN"
ln -sfn "$RUN" "$OUT/ssh-latest"
RES=$RUN/results.jsonl

cleanup() {
  [ -n "${MASTER_SOCK:-}" ] && ssh -S "$MASTER_SOCK" -O exit x 2>/dev/null || true
  [ -n "${SSHD_PID:-}" ] && kill "$SSHD_PID" 2>/dev/null || true
  [ -n "${DAEMON_PID:-}" ] && kill "$DAEMON_PID" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT

# sshd on a free loopback port, its own host key, our key authorised, nothing else.
read -r SSH_PORT GRPC_PORT <<<"$("$SBX" freeport -n 2)"
ssh-keygen -q -t ed25519 -N '' -f "$RUN/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$RUN/client_key"
cp "$RUN/client_key.pub" "$RUN/authorized_keys"
chmod 600 "$RUN/authorized_keys"
mkdir -p /run/sshd
cat >"$RUN/sshd_config" <<EOF
ListenAddress 127.0.0.1:$SSH_PORT
HostKey $RUN/host_key
AuthorizedKeysFile $RUN/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# The run dir lies under /tmp, which StrictModes refuses to trust for the key file.
StrictModes no
PidFile $RUN/sshd.pid
MaxSessions 64
MaxStartups 64
EOF
# A session runs root's login shell with -c, and Debian's bash then reads ~/.bashrc (it was built
# to, when sshd starts it): a home's own start-up files (a pyenv init takes 100+ ms) are not
# ssh's cost. sshd runs in a mount namespace of its own where they read as empty.
: >"$RUN/empty"
ROOT_HOME=$(getent passwd root | cut -d: -f6)
MASK=""
for f in .bashrc .bash_profile .profile; do
  [ -f "$ROOT_HOME/$f" ] && MASK+="mount --bind '$RUN/empty' '$ROOT_HOME/$f' && "
done
unshare -m --propagation private sh -c "${MASK}exec /usr/sbin/sshd -D -e -f '$RUN/sshd_config'" \
  2>"$RUN/sshd.log" &
SSHD_PID=$!
MASTER_SOCK=$RUN/master.sock
SSH_OPTS=(-p "$SSH_PORT" -i "$RUN/client_key" -o StrictHostKeyChecking=no
          -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes)
for _ in $(seq 50); do
  ssh "${SSH_OPTS[@]}" -o ControlMaster=yes -o ControlPath="$MASTER_SOCK" -fN root@127.0.0.1 &&
    break
  sleep 0.1
done
[ -S "$MASTER_SOCK" ] || { cat "$RUN/sshd.log" >&2; echo "no ssh master connection" >&2; exit 1; }

env -i PATH=/usr/bin:/bin HOME=/root "$SANDBOXD" --listen-host 127.0.0.1 --grpc-port "$GRPC_PORT" \
  --rest-port 0 --root-dir "$RUN/root" >"$RUN/sandboxd.log" 2>&1 &
DAEMON_PID=$!
"$SBX" wait -addr "127.0.0.1:$GRPC_PORT"

log "ssh over a shared connection vs Execute vs local spawn: $ROUNDS rounds of $DURATION"
for r in $(seq "$ROUNDS"); do
  "$SBX" spawn -cmd /bin/true -duration "$DURATION" -out "$RES"
  "$SBX" cmd -label ssh -name /bin/true -duration "$DURATION" -out "$RES" -- \
    ssh "${SSH_OPTS[@]}" -o ControlMaster=no -o ControlPath="$MASTER_SOCK" root@127.0.0.1 /bin/true
  "$SBX" exec -addr "127.0.0.1:$GRPC_PORT" -label ours -cmd /bin/true -duration "$DURATION" \
    -pid "$DAEMON_PID" -out "$RES"
  "$SBX" cmd -label ssh -name "/bin/true, 16 clients" -clients 16 -duration "$DURATION" \
    -out "$RES" -- \
    ssh "${SSH_OPTS[@]}" -o ControlMaster=no -o ControlPath="$MASTER_SOCK" root@127.0.0.1 /bin/true
  "$SBX" exec -addr "127.0.0.1:$GRPC_PORT" -label ours -cmd /bin/true -clients 16 \
    -duration "$DURATION" -pid "$DAEMON_PID" -out "$RES"
  echo "round $r done" >&2
done

{
  echo "bench/ssh.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), $ROUNDS rounds of $DURATION  "
  echo "machine: $(nproc) vCPU, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), Linux $(uname -r); $(/usr/sbin/sshd -V 2>&1 | head -1)  "
  echo "ours: the work tree at $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo ?)  "
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)  "
  echo
} >"$RUN/table.md"
python3 - "$RES" "$RUN/table.md" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]

def pooled(kind, label, clients):
    xs = sorted(x for r in recs if r["kind"] == kind and r.get("label") == label
                and r.get("clients", 1) == clients for x in r.get("samples_us", []))
    calls = sum(r["completed"] for r in recs if r["kind"] == kind and r.get("label") == label
                and r.get("clients", 1) == clients)
    secs = sum(r["window_s"] for r in recs if r["kind"] == kind and r.get("label") == label
               and r.get("clients", 1) == clients)
    if not xs:
        return None
    pct = lambda p: xs[min(len(xs) - 1, int(p * len(xs)))]
    return {"p50": pct(0.5), "p99": pct(0.99), "rate": calls / secs if secs else 0}

rows = []
floor = pooled("spawn", "local", 1)
for c in (1, 16):
    ssh, ours = pooled("cmd", "ssh", c), pooled("exec", "ours", c)
    rows.append(f"| /bin/true, {c} client{'s' if c > 1 else ''}: p50 µs | {ours['p50']:.0f} | "
                f"{ssh['p50']:.0f} | {floor['p50']:.0f} | {ssh['p50'] / ours['p50']:.1f}× faster |")
    rows.append(f"| /bin/true, {c} client{'s' if c > 1 else ''}: calls/s | {ours['rate']:.0f} | "
                f"{ssh['rate']:.0f} | | {ours['rate'] / ssh['rate']:.1f}× more |")
table = ["| figure | ours (Execute) | ssh (shared connection) | local spawn (floor) | ours vs ssh |",
         "|---|---:|---:|---:|---|"] + rows
open(sys.argv[2], "a").write("\n".join(table) + "\n")
print("\n".join(table))
EOF
