#!/usr/bin/env bash
# Builds libFuzzer targets with clang (ASan + UBSan) and runs them for a while.
#
#   scripts/fuzz.sh TARGET [SECONDS]    e.g. scripts/fuzz.sh gguf 60
#   scripts/fuzz.sh --all [SECONDS]     every target in turn (TARGETS below)
#
# Configures build-fuzz/ (override with DETAUDIT_FUZZ_BUILD) with clang++ and
# CMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined", builds fuzz_TARGET, and runs it on a
# copy of tests/fuzz/corpus/TARGET (the committed seeds are never modified). Crashing inputs are
# written to build-fuzz/fuzz-work/TARGET/artifacts/. Exits non-zero when a fuzzer finds something
# (--all: when any does, after running them all); prints the executions and peak RSS per target.
# Memory is part of the contract: a run over 1024 MB of RSS, or one malloc over 512 MB, is a finding.
set -euo pipefail

targets=(gguf tokenizer serve_request records lmeval answers)

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: scripts/fuzz.sh TARGET|--all [SECONDS]   (targets: ${targets[*]})" >&2
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
for tool in clang clang++ cmake; do
  command -v "$tool" >/dev/null || { echo "fuzz.sh: $tool not found (scripts/setup.sh installs it)" >&2; exit 2; }
done

if [[ $target == --all ]]; then
  run=("${targets[@]}")
else
  [[ -d $root/tests/fuzz/corpus/$target ]] || { echo "fuzz.sh: no seed corpus at $root/tests/fuzz/corpus/$target" >&2; exit 2; }
  run=("$target")
fi

configure_and_build() {
  # Line tables are all a sanitizer's stack trace needs, and compile faster than full -g.
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG" \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link,address,undefined" \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined" \
    -DDETAUDIT_FUZZ=ON >/dev/null
  cmake --build "$build" -j2 --target "${run[@]/#/fuzz_}"
}

# Runs one built target; returns non-zero when it found something.
fuzz_one() {
  local name=$1 work=$build/fuzz-work/$1 rc execs
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp "$root/tests/fuzz/corpus/$name"/* "$work/corpus/"
  set +e
  "$build/tests/fuzz/fuzz_$name" -max_total_time="$seconds" -print_final_stats=1 \
    -rss_limit_mb=1024 -malloc_limit_mb=512 \
    -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/fuzz.log" 2>&1
  rc=$?
  set -e
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$work/fuzz.log" | tail -n 1)
  peak=$(awk '/stat::peak_rss_mb/ {print $2}' "$work/fuzz.log" | tail -n 1)
  tail -n 25 "$work/fuzz.log"
  echo "fuzz_$name: ${execs:-unknown} executions in ${seconds} s, peak RSS ${peak:-unknown} MB (log: $work/fuzz.log)"
  if [[ $rc -ne 0 ]]; then
    echo "fuzz_$name: FINDING (exit $rc); reproducer(s) in $work/artifacts/:" >&2
    ls -1 "$work/artifacts" >&2 || true
    return 1
  fi
}

configure_and_build
failed=()
for name in "${run[@]}"; do
  fuzz_one "$name" || failed+=("$name")
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz.sh: findings in: ${failed[*]}" >&2
  exit 1
fi
