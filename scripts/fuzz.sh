#!/usr/bin/env bash
# Builds a libFuzzer target with clang (ASan + UBSan) and runs it for a while.
#
#   scripts/fuzz.sh TARGET SECONDS      e.g. scripts/fuzz.sh gguf 60
#
# Configures build-fuzz/ (override with DETAUDIT_FUZZ_BUILD) with clang++ and
# CMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined", builds fuzz_TARGET, and runs it on a
# copy of tests/fuzz/corpus/TARGET (the committed seeds are never modified). Crashing inputs are
# written to build-fuzz/fuzz-work/TARGET/artifacts/. Exits non-zero when the fuzzer finds
# something; prints the number of executions.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: scripts/fuzz.sh TARGET [SECONDS]   (e.g. scripts/fuzz.sh gguf 60)" >&2
  exit 2
fi
target=$1
seconds=${2:-60}
if ! [[ $seconds =~ ^[0-9]+$ ]]; then
  echo "fuzz.sh: SECONDS must be a whole number, got '$seconds'" >&2
  exit 2
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${DETAUDIT_FUZZ_BUILD:-$root/build-fuzz}
seeds=$root/tests/fuzz/corpus/$target
for tool in clang clang++ cmake; do
  command -v "$tool" >/dev/null || { echo "fuzz.sh: $tool not found (scripts/setup.sh installs it)" >&2; exit 2; }
done
[[ -d $seeds ]] || { echo "fuzz.sh: no seed corpus at $seeds" >&2; exit 2; }

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link,address,undefined" \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined" \
  -DDETAUDIT_FUZZ=ON >/dev/null
cmake --build "$build" -j2 --target "fuzz_$target"

work=$build/fuzz-work/$target
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
cp "$seeds"/* "$work/corpus/"
log=$work/fuzz.log

set +e
"$build/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus" >"$log" 2>&1
rc=$?
set -e

execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log" | tail -n 1)
tail -n 25 "$log"
echo "fuzz_$target: ${execs:-unknown} executions in ${seconds} s (log: $log)"
if [[ $rc -ne 0 ]]; then
  echo "fuzz_$target: FINDING (exit $rc); reproducer(s) in $work/artifacts/:" >&2
  ls -1 "$work/artifacts" >&2 || true
  exit 1
fi
