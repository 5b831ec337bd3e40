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
"$bin" tokenize -m "$out/tiny-q8_0.gguf" --text "Natalia sold clips to 48 of her friends in April."
echo
echo "not yet: the audit itself (detaudit run: alone vs concurrent, cache, batch, speculation) needs"
echo "the exact engine, which is the next piece of work. The model above is what it will run on."
