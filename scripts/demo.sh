#!/usr/bin/env bash
# The main job on the built-in engine and a generated model.
#
# Today this sets up and builds detaudit, generates a small random model with `detaudit synth`,
# shows what `detaudit inspect` and `detaudit tokenize` make of it, and says plainly which part of
# the audit is not built yet. Output goes to ./demo-out (or $1).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/demo-out}
cd "$root"

bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target detaudit >/dev/null
bin=$root/build/cli/detaudit
mkdir -p "$out"

echo "== detaudit synth: a tiny llama with random weights, Q8_0"
"$bin" synth -o "$out/tiny-q8_0.gguf" --preset tiny --type q8_0 --seed 7
echo
echo "== detaudit inspect"
"$bin" inspect "$out/tiny-q8_0.gguf"
echo
echo "== detaudit tokenize (the built-in byte-level BPE vocabulary)"
"$bin" tokenize -m "$out/tiny-q8_0.gguf" --text "Natalia sold clips to 48 of her friends." --pieces | tr '\n' ' '
echo; echo

# The experiment from the blog posts, on the built-in engine: one prompt alone, then in the same
# forward steps as 7 other sequences, then alone again with another micro-batch size and thread
# count. Each run prints per-step logit hashes; identical runs print identical bytes.
prompt="Natalia sold clips to 48 of her friends."
compare() {  # numerics, condition label, extra flags
  local numerics=$1 label=$2; shift 2
  "$bin" generate -m "$out/tiny-q8_0.gguf" -p "$prompt" -n 32 --numerics "$numerics" --hashes -t 1 > "$out/alone-$numerics.txt"
  "$bin" generate -m "$out/tiny-q8_0.gguf" -p "$prompt" -n 32 --numerics "$numerics" --hashes "$@" > "$out/$label-$numerics.txt"
  if cmp -s "$out/alone-$numerics.txt" "$out/$label-$numerics.txt"; then
    printf '  %-8s alone vs %-22s identical (every logit bit of 32 steps)\n' "$numerics" "$label:"
  else
    local step
    step=$(diff <(grep -E '^[0-9]+ ' "$out/alone-$numerics.txt") <(grep -E '^[0-9]+ ' "$out/$label-$numerics.txt") |
           grep -m1 -E '^<' | awk '{print $2}' || true)
    printf '  %-8s alone vs %-22s DIFFERENT: logits first differ at step %s\n' "$numerics" "$label:" "${step:-?}"
  fi
}
echo "== alone vs beside 7 others, and -ub 512 vs -ub 1 with 2 threads (detaudit generate --hashes)"
for numerics in float exact; do
  compare "$numerics" "beside-7-others" --batch-with 7 -t 1
  compare "$numerics" "ubatch-1-threads-2" -ub 1 -t 2
done
echo
echo "float numerics round and reduce as ordinary engines do, so batch shape moves the logits;"
echo "exact numerics sum integers, so nothing about the batch can. (Files: $out)"
echo
echo "not yet: the audit itself (detaudit run against servers and the engine, records, reports) is"
echo "the next piece of work."
