#!/usr/bin/env bash
# Builds detaudit and runs every test through CTest; ends with CTest's summary.
#
#   scripts/test.sh              set up, configure (warnings are errors), build, run all tests
#   scripts/test.sh --sanitize   the same suite built with AddressSanitizer + UndefinedBehaviorSanitizer
#   scripts/test.sh --tsan       the runtime, scheduler, server and run-loop tests (unit and e2e), and
#                                the load test, built with ThreadSanitizer
#   scripts/test.sh -L unit      extra arguments go to ctest (here: only tests labelled unit)
#
# The Vulkan backend is built and tested on mesa's lavapipe (label vulkan). The CUDA backend is
# built when nvcc is found (PATH or /usr/local/cuda/bin); its tests (label cuda) run only where
# nvidia-smi sees a GPU, otherwise this script says so and leaves them out (scripts/gpu-check.sh
# runs them on a GPU machine). --sanitize builds the Vulkan backend too (its tests run without leak
# checking: lavapipe's own allocations would be reported); the sanitizer builds leave CUDA out.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

build=build
cmake_args=(-DDETAUDIT_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
ctest_args=()
for a in "$@"; do
  case "$a" in
    --sanitize) build=build-sanitize; cmake_args+=(-DDETAUDIT_SANITIZE=ON -DDETAUDIT_VULKAN=ON) ;;
    --tsan) build=build-tsan
            cmake_args+=(-DDETAUDIT_TSAN=ON "-DDETAUDIT_TEST_FILTER=runtime|serve|scheduler|probes_run|sampling")
            ctest_args+=(-L 'unit|e2e|load') ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) ctest_args+=("$a") ;;
  esac
done

bash scripts/setup.sh
jobs=$(nproc 2>/dev/null || echo 2)
if [ "$build" = build ]; then
  # Line tables and function names only (-g1): a crash still gets a symbolized backtrace, and each
  # translation unit compiles about a third faster than with full -g (7.7 s against 14.3 s for
  # probes/conditions.cpp here), which keeps this script near its 20 minutes on 2 cores.
  cmake_args+=(-DDETAUDIT_VULKAN=ON "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
  nvcc_bin=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
  if [ -n "$nvcc_bin" ]; then
    cmake_args+=(-DDETAUDIT_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc_bin")
    if ! nvidia-smi -L >/dev/null 2>&1; then
      echo "test.sh: the CUDA backend is built, but this machine has no GPU: the cuda tests are NOT run here" \
           "(scripts/gpu-check.sh runs them on a GPU machine)" >&2
      ctest_args=(-LE cuda "${ctest_args[@]}")
    fi
  else
    echo "test.sh: no nvcc found: the CUDA backend is not built" >&2
  fi
fi
cmake -S . -B "$build" "${cmake_args[@]}" >/dev/null
cmake --build "$build" -j "$jobs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export TSAN_OPTIONS=${TSAN_OPTIONS:-second_deadlock_stack=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# A hung test fails after 10 minutes instead of holding the run.
ctest --test-dir "$build" --output-on-failure --timeout 600 -j "$jobs" "${ctest_args[@]}"
