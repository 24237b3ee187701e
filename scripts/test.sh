#!/usr/bin/env bash
# Sets everything up, builds sandboxd twice (gcc, and clang with ASan+UBSan), checks formatting
# and runs the whole test suite against both builds.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh

echo "== clang-format"
git ls-files -- '*.c' '*.h' | xargs clang-format --dry-run --Werror

run_suite() { # NAME CC BUILD_TYPE SANITIZE
  local dir="build/$1"
  echo "== build $1 ($2, $3, sanitize=$4)"
  CC=$2 cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$3" -DSANDBOXD_SANITIZE="$4" \
    -DSANDBOXD_WERROR=ON >/dev/null
  ninja -C "$dir"
  echo "== test $1"
  ctest --test-dir "$dir" --output-on-failure --timeout 600
}

run_suite gcc gcc RelWithDebInfo OFF
run_suite asan clang Debug ON
echo "== all tests passed"
