#!/usr/bin/env bash
# Holds `detaudit serve` under load on 127.0.0.1 (tests/load/load_test.cpp) and exits with its status.
#
#   scripts/load.sh                         64 connections for 60 s
#   scripts/load.sh --seconds 10            any option of detaudit_load is passed on:
#                                           --connections N --seconds S --parallel N --slow M --seed N --json FILE
#                                           --detaudit BIN --model FILE
#
# Configures build/ the way scripts/test.sh does (override with DETAUDIT_LOAD_BUILD=DIR: an already
# configured build folder is used as it is), builds the detaudit and detaudit_load targets, runs
# detaudit_load. Passes when no request crashed the server, no status but the documented 503
# backpressure was 5xx, RSS stayed flat, every exact-mode answer equalled the request sent alone,
# and beside M slow-head connections (12) GET /health answered within 1 s throughout.
set -euo pipefail

for a in "$@"; do
  if [[ $a == -h || $a == --help ]]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
  fi
done

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${DETAUDIT_LOAD_BUILD:-$root/build}
command -v cmake >/dev/null || { echo "load.sh: cmake not found (scripts/setup.sh installs it)" >&2; exit 2; }

# A fresh build/ gets scripts/test.sh's configuration (Vulkan on; CUDA where nvcc is found), so
# that the two scripts share it without reconfiguring each other's choices.
if [[ ! -f $build/CMakeCache.txt ]]; then
  bash "$root/scripts/setup.sh"
  cmake_args=(-DDETAUDIT_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDETAUDIT_VULKAN=ON)
  nvcc_bin=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
  [[ -n $nvcc_bin ]] && cmake_args+=(-DDETAUDIT_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc_bin")
  cmake -S "$root" -B "$build" "${cmake_args[@]}" >/dev/null
fi
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target detaudit detaudit_load
exec "$build/tests/load/detaudit_load" "$@"
