#!/usr/bin/env bash
# Builds and checks the CUDA backend on a bare GPU machine: the engine, the CUDA kernels, the
# backend tests (tests/backend, CUDA against the CPU backend and kernels/ref, bit for bit) and a
# short benchmark (scripts/gpu-check/bench_main.cpp).
#
#   scripts/gpu-check.sh --prepare DIR   on a development machine: copies into DIR the headers and
#                                        static libraries the GPU machine lacks (nlohmann-json,
#                                        xxhash, doctest, pcre2)
#   scripts/gpu-check.sh [--deps DIR] [--build DIR] [--arch LIST] [--reps N] [--no-bench]
#                                        on the GPU machine (CUDA toolkit, CMake, a C++20 compiler;
#                                        no -dev packages, no network): builds without the project's
#                                        CMake, runs the tests, then the benchmark
#   scripts/gpu-check.sh --build-only --arch 90 [--deps DIR] [--build DIR]
#                                        builds the two programs (gpu_check_bench,
#                                        detaudit_cuda_tests) on a machine without a GPU and stops
#   scripts/gpu-check.sh --no-build [--build DIR] ...
#                                        runs the programs already in the build folder (copied there
#                                        from a --build-only machine: GPU time is not spent compiling)
#
# DIR defaults to build-gpu-deps, the build folder to build-gpu-check (both ignored by git). The
# CUDA architecture is --arch, else the local GPU's (nvidia-smi), else 80;89;90. Order: the engine and the
# benchmark driver are built, the device is checked (none: one line "no CUDA device", exit 2),
# the two 1B models are written in the background while the tests build and run, then the
# benchmark runs (exact rows --reps times, float rows once). Exit status: 0 when every test
# passed, 2 when there is no CUDA device, 1 otherwise.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps="$root/build-gpu-deps"
build="$root/build-gpu-check"
reps=2
bench=1
prepare=""
arch=""
mode=all   # all | build-only | no-build

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare) prepare="${2:?--prepare needs a folder}"; shift 2 ;;
    --deps) deps="${2:?--deps needs a folder}"; shift 2 ;;
    --build) build="${2:?--build needs a folder}"; shift 2 ;;
    --reps) reps="${2:?--reps needs a number}"; shift 2 ;;
    --no-bench) bench=0; shift ;;
    --arch) arch="${2:?--arch needs a list such as 90 or 80;90}"; shift 2 ;;
    --build-only) mode=build-only; shift ;;
    --no-build) mode=no-build; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-check.sh: unknown argument $1" >&2; usage >&2; exit 1 ;;
  esac
done

# ---- --prepare: what the bare machine lacks ----
copy_dep() {  # copy_dep SRC DEST_SUBDIR
  [ -e "$1" ] || { echo "gpu-check.sh --prepare: $1 not found (install the -dev package)" >&2; exit 1; }
  mkdir -p "$2"
  cp -r "$1" "$2/"
}

if [ -n "$prepare" ]; then
  libdir=/usr/lib/x86_64-linux-gnu
  rm -rf "$prepare/include" "$prepare/lib"
  copy_dep /usr/include/nlohmann "$prepare/include"
  copy_dep /usr/include/doctest "$prepare/include"
  copy_dep /usr/include/xxhash.h "$prepare/include"
  copy_dep /usr/include/pcre2.h "$prepare/include"
  copy_dep "$libdir/libxxhash.a" "$prepare/lib"
  copy_dep "$libdir/libpcre2-8.a" "$prepare/lib"
  echo "gpu-check.sh: dependencies copied to $prepare ($(du -sh "$prepare" | cut -f1)); on the GPU machine run" \
       "scripts/gpu-check.sh --deps $prepare"
  exit 0
fi

# ---- build ----
mkdir -p "$build"
build=$(cd "$build" && pwd)
t0=$(date +%s)
build_targets() {  # build_targets TARGET...: fails the script with the first errors of the log
  if ! cmake --build "$build" -j "$jobs" --target "$@" >"$build/build.log" 2>&1; then
    grep -B2 -A8 -m 20 "error" "$build/build.log" >&2 || tail -n 40 "$build/build.log" >&2
    echo "gpu-check.sh: the build failed (log: $build/build.log)" >&2
    exit 1
  fi
}

if [ "$mode" = no-build ]; then
  for p in gpu_check_bench detaudit_cuda_tests; do
    [ -x "$build/$p" ] || { echo "gpu-check.sh --no-build: $build/$p missing: build it with --build-only" \
                                 "and copy it here" >&2; exit 1; }
  done
  mkdir -p "$build/tmp"
else
for f in include/nlohmann/json.hpp include/doctest/doctest.h include/xxhash.h include/pcre2.h lib/libxxhash.a \
         lib/libpcre2-8.a; do
  [ -e "$deps/$f" ] || { echo "gpu-check.sh: $deps/$f missing: run scripts/gpu-check.sh --prepare $deps on a" \
                               "machine with the -dev packages and copy the folder here" >&2; exit 1; }
done
deps=$(cd "$deps" && pwd)
nvcc_bin=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
[ -n "$nvcc_bin" ] || { echo "gpu-check.sh: nvcc not found (PATH or /usr/local/cuda/bin)" >&2; exit 1; }
command -v cmake >/dev/null || { echo "gpu-check.sh: cmake not found" >&2; exit 1; }

[ -n "$arch" ] || arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .' || true)
if ! [[ "$arch" =~ ^[0-9]+(\;[0-9]+)*$ ]]; then
  arch="80;89;90"
  echo "gpu-check.sh: nvidia-smi reports no GPU: building for $arch"
fi
jobs=$(nproc 2>/dev/null || echo 2)
mkdir -p "$build/cmake" "$build/tmp"

cat > "$build/cmake/CMakeLists.txt" <<EOF
# Generated by scripts/gpu-check.sh: the engine, the CUDA kernels, the backend tests and the
# benchmark driver, without the project's find_package/pkg-config dependencies.
cmake_minimum_required(VERSION 3.18)
project(detaudit_gpu_check LANGUAGES C CXX CUDA)
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(CMAKE_CUDA_STANDARD 17)
find_package(CUDAToolkit REQUIRED)
find_package(Threads REQUIRED)
set(src "$root")
set(deps "$deps")
# Every engine source but the HTTP server (cpp-httplib) and the Vulkan backend: a glob that
# follows new folders, so this list cannot fall behind the project's own CMake.
file(GLOB_RECURSE engine_sources \${src}/engine/*.cpp \${src}/engine/kernels/cuda/*.cu)
list(FILTER engine_sources EXCLUDE REGEX "/engine/(serve|kernels/vulkan)/")
add_compile_options(\$<\$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off> \$<\$<COMPILE_LANGUAGE:CXX>:-fno-fast-math>
                    \$<\$<COMPILE_LANGUAGE:CUDA>:-fmad=false> \$<\$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-ffp-contract=off>)
add_library(engine STATIC \${engine_sources})
set_target_properties(engine PROPERTIES CUDA_RUNTIME_LIBRARY Shared)
# build_commit.h (runtime/bench.cpp): the commit, as the project's own build writes it.
add_custom_target(build_commit
  COMMAND \${CMAKE_COMMAND} -DSRC=\${src} -DOUT=\${CMAKE_BINARY_DIR}/generated/build_commit.h
          -P \${src}/engine/util/build_commit.cmake
  BYPRODUCTS \${CMAKE_BINARY_DIR}/generated/build_commit.h)
add_dependencies(engine build_commit)
target_include_directories(engine PUBLIC \${src}/engine \${deps}/include \${CMAKE_BINARY_DIR}/generated)
target_compile_definitions(engine PUBLIC DETAUDIT_HAVE_CUDA DETAUDIT_VERSION="gpu-check")
target_link_libraries(engine PUBLIC \${deps}/lib/libpcre2-8.a \${deps}/lib/libxxhash.a CUDA::cudart Threads::Threads)

file(GLOB backend_tests \${src}/tests/backend/*.cpp)
add_executable(detaudit_cuda_tests \${src}/tests/unit/main.cpp \${backend_tests})
target_include_directories(detaudit_cuda_tests PRIVATE \${src}/tests)
target_compile_definitions(detaudit_cuda_tests PRIVATE DETAUDIT_TEST_GPU_API="cuda"
                           DETAUDIT_TEST_TMP_DEFAULT="$build/tmp")
target_link_libraries(detaudit_cuda_tests PRIVATE engine)

add_executable(gpu_check_bench \${src}/scripts/gpu-check/bench_main.cpp)
target_link_libraries(gpu_check_bench PRIVATE engine)
EOF

cmake -S "$build/cmake" -B "$build" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
      "-DCMAKE_CUDA_FLAGS_RELEASE=-O2 -DNDEBUG" "-DCMAKE_CUDA_ARCHITECTURES=$arch" \
      "-DCMAKE_CUDA_COMPILER=$nvcc_bin" ${CXX:+"-DCMAKE_CUDA_HOST_COMPILER=$CXX"} >/dev/null
build_targets gpu_check_bench
echo "gpu-check.sh: engine and CUDA kernels built in $(( $(date +%s) - t0 )) s (CUDA architectures $arch," \
     "$jobs jobs)"
if [ "$mode" = build-only ]; then
  t1=$(date +%s)
  build_targets detaudit_cuda_tests
  echo "gpu-check.sh: tests built in $(( $(date +%s) - t1 )) s; copy $build/gpu_check_bench and" \
       "$build/detaudit_cuda_tests to the GPU machine's build folder and run scripts/gpu-check.sh --no-build"
  exit 0
fi
fi

# ---- device, tests, benchmark ----
"$build/gpu_check_bench" --list || exit 2

# The synthetic 1B models take minutes to write: in the background, while the tests build and run.
synth_pid=""
trap '[ -z "$synth_pid" ] || kill "$synth_pid" 2>/dev/null || true' EXIT
if [ "$bench" = 1 ]; then
  "$build/gpu_check_bench" --dir "$build/models" --synth >"$build/synth.log" 2>&1 &
  synth_pid=$!
fi
if [ "$mode" = all ]; then
  t1=$(date +%s)
  build_targets detaudit_cuda_tests
  echo "gpu-check.sh: tests built in $(( $(date +%s) - t1 )) s"
fi

status=0
export DETAUDIT_TEST_TMP="$build/tmp"
t2=$(date +%s)
"$build/detaudit_cuda_tests" || status=1
echo "gpu-check.sh: tests ran in $(( $(date +%s) - t2 )) s"
if [ "$bench" = 1 ]; then
  wait "$synth_pid" || { cat "$build/synth.log" >&2; status=1; }
  synth_pid=""
  cat "$build/synth.log"
  t3=$(date +%s)
  "$build/gpu_check_bench" --dir "$build/models" --reps "$reps" || status=1
  echo "gpu-check.sh: benchmark took $(( $(date +%s) - t3 )) s"
fi
echo "gpu-check.sh: $(( $(date +%s) - t0 )) s in all"
if [ "$status" = 0 ]; then echo "gpu-check.sh: all CUDA checks passed"; else echo "gpu-check.sh: FAILED (see above)"; fi
exit "$status"
