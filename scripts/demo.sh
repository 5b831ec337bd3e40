#!/usr/bin/env bash
# The main job on the built-in engine and a generated model.
#
# Sets up and builds detaudit, generates a small random model with `detaudit synth`, shows what
# `detaudit inspect` and `detaudit tokenize` make of it, then audits the built-in engine in float
# and in exact numerics, in process and through `detaudit serve`. Output goes to ./demo-out (or $1).
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

# The main job: `detaudit run` sends every prompt alone, again alone (the control pair), beside 7
# other requests, with the prompt cache off/on/warm and at micro-batch sizes 1 and 8192, records
# every response and reports item by item where the outputs part.
cat > "$out/prompts.txt" <<'PROMPTS'
Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.
Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting.
Betty is saving money for a new wallet which costs $100.
Julie is reading a 120-page book. Yesterday, she was able to read 12 pages.
James writes a 3-page letter to 2 different friends twice a week.
Mark has a garden with flowers. He planted plants of three different colors in it.
Albert is wondering how much pizza he can eat in one day.
Ken created a care package to send to his brother, who was away at boarding school.
Alexis is applying for a new job and bought a new set of business clothes to wear to the interview.
Tina makes $18.00 an hour. If she works more than 8 hours per shift, she is eligible for overtime.
A deep-sea monster rises from the waters once every hundred years to feast on a ship.
Tobias is buying a new pair of shoes that costs $95.
PROMPTS
for numerics in float exact; do
  rm -rf "$out/run-$numerics"
  set +e
  "$bin" run --target "engine:$out/tiny-q8_0.gguf?numerics=$numerics&threads=2" --prompts "$out/prompts.txt" --raw \
    --probe concurrency,cache,batch --n-predict 32 --out "$out/run-$numerics" --junit "$out/run-$numerics.junit.xml" \
    > "$out/run-$numerics.txt" 2> "$out/run-$numerics.log"
  rc=$?
  set -e
  echo "== detaudit run --target 'engine:tiny-q8_0.gguf?numerics=$numerics' --probe concurrency,cache,batch  (exit $rc)"
  sed -n '1,16p' "$out/run-$numerics.txt"
  echo
done
echo "float numerics round and reduce as ordinary engines do, so batch shape and the cache move the"
echo "logits and flip tokens (exit 1 under --fail-on any); exact numerics sum integers, so nothing"
echo "about the batch can (exit 0). Full reports: $out/run-*.txt; records: $out/run-*/records.jsonl."
echo

# The same audit over HTTP, as against any server: detaudit serve with 8 slots, in float and then
# in exact numerics, audited with the concurrency and cache probes.
serve_pid=
trap '[ -n "$serve_pid" ] && kill $serve_pid 2>/dev/null || true' EXIT
for numerics in float exact; do
  "$bin" serve -m "$out/tiny-q8_0.gguf" -np 8 -c 4096 -t 2 --numerics "$numerics" --port 0 \
    > "$out/serve-$numerics.out" 2> "$out/serve-$numerics.log" &
  serve_pid=$!
  for _ in $(seq 1 100); do grep -q listening "$out/serve-$numerics.out" 2>/dev/null && break; sleep 0.1; done
  url=$(sed -n 's/^listening on //p' "$out/serve-$numerics.out")
  rm -rf "$out/run-serve-$numerics"
  set +e
  "$bin" run --target "$url" --prompts "$out/prompts.txt" --raw --probe concurrency,cache --n-predict 32 \
    --out "$out/run-serve-$numerics" > "$out/run-serve-$numerics.txt" 2> "$out/run-serve-$numerics.log"
  rc=$?
  set -e
  echo "== detaudit run --target $url --probe concurrency,cache   (detaudit serve -np 8 --numerics $numerics; exit $rc)"
  sed -n '1,9p' "$out/run-serve-$numerics.txt"
  echo
  kill $serve_pid 2>/dev/null || true
  wait $serve_pid 2>/dev/null || true
  serve_pid=
done
echo "Compare two runs item by item: $bin compare $out/run-float $out/run-exact"
"$bin" report "$out/run-float" --format html -o "$out/run-float.html"
echo "The float run as one self-contained HTML page with plots: $out/run-float.html"
echo "Other formats: $bin report $out/run-float --format md|json|junit|html"
