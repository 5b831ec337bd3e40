#!/usr/bin/env bash
# Builds detaudit and runs every test through CTest; ends with CTest's summary.
#
#   scripts/test.sh              set up, configure (warnings are errors), build, run all tests
#   scripts/test.sh --sanitize   the same suite built with AddressSanitizer + UndefinedBehaviorSanitizer
#   scripts/test.sh -L unit      extra arguments go to ctest (here: only tests labelled unit)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

build=build
cmake_args=(-DDETAUDIT_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
ctest_args=()
for a in "$@"; do
  case "$a" in
    --sanitize) build=build-sanitize; cmake_args+=(-DDETAUDIT_SANITIZE=ON) ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) ctest_args+=("$a") ;;
  esac
done

bash scripts/setup.sh
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build" "${cmake_args[@]}" >/dev/null
cmake --build "$build" -j "$jobs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# A hung test fails after 10 minutes instead of holding the run.
ctest --test-dir "$build" --output-on-failure --timeout 600 -j "$jobs" "${ctest_args[@]}"
