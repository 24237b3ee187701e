#!/usr/bin/env bash
# Runs the E2B JavaScript SDK's conformance tests against $SANDBOXD_BIN with node's own test
# runner. The pinned SDK (package-lock.json) is installed once from npm into a cache outside the
# repo, made again when the lockfile changes. `--prepare` only installs it (scripts/setup.sh).
#
#   SANDBOXD_BIN=$PWD/build/gcc/sandboxd/sandboxd test/e2b-js/run-tests.sh [--test-name-pattern=RE]
#
# Through a control plane (test/controller/test_e2b_sdk.py): with SANDBOXD_E2B_TEMPLATE set (and
# E2B_API_URL, E2B_API_KEY, E2B_DOMAIN, maybe E2B_SANDBOX_URL), one sandbox of that template is
# made by Sandbox.create, or SANDBOXD_E2B_SANDBOX_ID names one made before; every test file
# works in it, and it is killed at the end (routed.mjs checks what follows the kill).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache="${SANDBOXD_E2B_JS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/e2b-js}"
stamp="$cache/.package-lock.json"

# The SDK 2.51 needs node >= 20.18.1 (its undici); Debian 12's own nodejs is 18. ctest counts
# exit 77 as skipped, and this says why.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "test/e2b-js: SKIP: node and npm are not installed (scripts/setup.sh installs them)" >&2
  exit 77
fi
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number);
  process.exit(a > 20 || (a === 20 && b >= 18) ? 0 : 1)'; then
  echo "test/e2b-js: SKIP: node $(node --version) is older than the SDK's 20.18.1" >&2
  exit 77
fi

if ! cmp -s "$here/package-lock.json" "$stamp" 2>/dev/null; then
  echo "test/e2b-js: installing the pinned e2b SDK into $cache" >&2
  mkdir -p "$cache"
  cp "$here/package.json" "$here/package-lock.json" "$cache/"
  (cd "$cache" && npm ci --no-audit --no-fund --loglevel=error >&2)
  cp "$here/package-lock.json" "$stamp"
fi
[ "${1:-}" = --prepare ] && exit 0

export E2B_JS_MODULES="$cache/node_modules"
cd "$here"
# One file at a time: each starts its own daemon, and the machine's cores are shared. Files named
# on the command line run alone; options (--test-name-pattern=...) go to node.
files=()
opts=()
for a in "$@"; do
  case "$a" in *.test.mjs) files+=("$a") ;; *) opts+=("$a") ;; esac
done
[ ${#files[@]} -eq 0 ] && files=("$here"/*.test.mjs)
[ -z "${SANDBOXD_E2B_TEMPLATE:-}" ] && exec node --test --test-concurrency=1 "${opts[@]}" "${files[@]}"

if [ -z "${SANDBOXD_E2B_SANDBOX_ID:-}" ]; then
  SANDBOXD_E2B_SANDBOX_ID=$(node routed.mjs create)
  export SANDBOXD_E2B_SANDBOX_ID
fi
rc=0
node --test --test-concurrency=1 "${opts[@]}" "${files[@]}" || rc=$?
node routed.mjs kill "$SANDBOXD_E2B_SANDBOX_ID" || rc=$((rc ? rc : 1))
exit "$rc"
