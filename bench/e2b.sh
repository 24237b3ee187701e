#!/usr/bin/env bash
# E2B's commands.run("true") through the unmodified E2B Python SDK (PyPI, the version test/e2b
# pins) against sandboxd's E2B port, the same program (/bin/bash -l -c true: what envd runs for
# it) through our own Python SDK (sdk/python) to the same daemon, and a local spawn of it (the
# floor), in the same rounds, their order flipped every round; and files.write / read of one file
# through both. Prints one table with the ratios; there is no reference daemon for this port
# here: the columns are the floor, our SDK and E2B's. A benchmark is not a test: nothing here
# fails on a figure. See the "E2B" section of bench/README.md.
#
#   bench/e2b.sh            full run (3 rounds of 3 s windows, 10 MiB files 10 times; ~1 minute)
#   bench/e2b.sh --quick    quick run (2 rounds of 1 s windows, files 3 times; ~20 s)
#
# Options (after --quick, to override it):
#   --rounds N          rounds; every path runs once per round (3)
#   --duration S        recorded window of each latency measurement, seconds (3)
#   --warmup S          unrecorded warm-up before each window, seconds (0.3)
#   --file-bytes N      size of the file written and read back, 0 for none (10485760)
#   --file-reps N       writes and reads of it per path (10)
#   --rev REV           build sandboxd from commit REV (git archive) instead of the work tree
#   --out DIR           build and result directory, outside the repo (/tmp/sandboxd-bench)
#
# Environment: SANDBOXD_BIN (use this sandboxd binary, skip the build), SANDBOXD_E2B_VENV and
# SANDBOXD_SDK_VENV (the two virtualenvs, made once as test/e2b and sdk/python make them).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$REPO/bench
OUT=/tmp/sandboxd-bench
ROUNDS=3 DURATION=3 WARMUP=0.3 FILE_BYTES=10485760 FILE_REPS=10 REV=

while [ $# -gt 0 ]; do
  case $1 in
  --quick) ROUNDS=2 DURATION=1 WARMUP=0.2 FILE_REPS=3 ;;
  --rounds) ROUNDS=$2; shift ;;
  --duration) DURATION=$2; shift ;;
  --warmup) WARMUP=$2; shift ;;
  --file-bytes) FILE_BYTES=$2; shift ;;
  --file-reps) FILE_REPS=$2; shift ;;
  --rev) REV=$2; shift ;;
  --out) OUT=$2; shift ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "e2b.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

. "$BENCH/lib.sh"
T0=$(date +%s)

log "building (into $OUT)"
build_sandboxd

# The E2B SDK's virtualenv, the one its tests use.
E2B_VENV=$("$REPO/test/e2b/venv.sh")
# Our SDK, installed from this tree into its virtualenv as its tests do.
log "installing sdk/python"
SDK_VENV=$("$REPO/sdk/python/install.sh")

RUN=$OUT/e2b-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN"

{
  echo "# sandboxd E2B SDK benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
  machine_line
  ours_line
  echo "SDKs: e2b $("$E2B_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("e2b"))'), ours $("$SDK_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sandboxd"))') (sdk/python)"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (anything but this benchmark running adds noise)"
  echo "options: rounds=$ROUNDS duration=${DURATION}s warmup=${WARMUP}s file-bytes=$FILE_BYTES file-reps=$FILE_REPS"
} >"$RUN/header.txt"
cat "$RUN/header.txt" >&2

# bash -l reads root's start-up files, and this machine's ~/.bashrc runs a pyenv init (100+ ms,
# see the ssh section): not what the daemon costs. As ssh.sh does for sshd, the whole run (the
# daemon, the floor, the SDKs) goes into a mount namespace of its own where they read as empty.
: >"$RUN/empty"
ROOT_HOME=$(getent passwd root | cut -d: -f6)
MASK=""
for f in .bashrc .bash_profile .bash_login .profile; do
  [ -f "$ROOT_HOME/$f" ] && MASK+="mount --bind '$RUN/empty' '$ROOT_HOME/$f' && "
done

log "$ROUNDS rounds: local spawn, our SDK, the E2B SDK"
unshare -m --propagation private sh -c "${MASK}exec \"\$@\"" sh \
  /usr/bin/python3 "$BENCH/e2b_sdk.py" --sandboxd "$SANDBOXD" --e2b-python "$E2B_VENV/bin/python" \
  --sdk-python "$SDK_VENV/bin/python" --rounds "$ROUNDS" --duration "$DURATION" \
  --warmup "$WARMUP" --file-bytes "$FILE_BYTES" --file-reps "$FILE_REPS" --run "$RUN" \
  >"$RUN/results.md" 2> >(tee "$RUN/progress.txt" >&2) ||
  echo "e2b.sh: the run failed; see $RUN/progress.txt" >&2
rm -rf "$RUN/root" # the files written

{
  cat "$RUN/header.txt"
  echo
  cat "$RUN/results.md"
  echo
  echo "run time $(($(date +%s) - T0)) s; load average at end: $(cut -d' ' -f1-3 /proc/loadavg); logs: $RUN"
} >"$RUN/table.md"
echo
cat "$RUN/table.md"
ln -sfn "$RUN" "$OUT/e2b-latest"
exit 0
