#!/usr/bin/env bash
# The performance suite of docs/performance.md: detaudit bench (exact and float side by side) on
# generated models, and llama.cpp's llama-bench on the same files when one is given.
set -euo pipefail

usage() {
  cat <<'HELP'
Usage: scripts/bench/run.sh [MODELS_DIR]

Generates the 1B preset (n_embd 2048, 22 layers, 32 heads, 4 KV heads, n_ff 5632) in q8_0 and q4_k
with 'detaudit synth --seed 7' into MODELS_DIR (default bench-models/; files already there are
reused), runs 'detaudit bench -p 512 -n 128 -t 2 --numerics exact,float --json' on each and, when
LLAMA_BENCH names a llama-bench binary, '$LLAMA_BENCH -m FILE -p 512 -n 128 -t 2 -o json' on the
same file. Prints a Markdown table of t/s with the ratios exact/float and detaudit exact/llama.cpp,
and writes it to bench-results/YYYY-MM-DD-HHMM.md. It never builds llama.cpp.

Environment:
  DETAUDIT_BIN   detaudit binary (default build/cli/detaudit)
  LLAMA_BENCH    llama-bench binary to measure beside it (default: none)
  BENCH_PRESET   synth preset (default 1b); BENCH_TYPES weight types (default "q8_0 q4_k")
  BENCH_THREADS  threads (default 2); BENCH_ARGS extra 'detaudit bench' / llama-bench size flags
                 (default "-p 512 -n 128")
  BENCH_RESULTS  folder of the dated tables (default bench-results)
HELP
}

die() { echo "run.sh: $*" >&2; exit 1; }

case "${1:-}" in -h|--help) usage; exit 0 ;; esac
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
models=${1:-bench-models}
detaudit=${DETAUDIT_BIN:-$root/build/cli/detaudit}
preset=${BENCH_PRESET:-1b}
read -r -a types <<< "${BENCH_TYPES:-q8_0 q4_k}"
threads=${BENCH_THREADS:-2}
read -r -a sizes <<< "${BENCH_ARGS:--p 512 -n 128}"
results=${BENCH_RESULTS:-bench-results}
[ -x "$detaudit" ] || die "no detaudit binary at $detaudit: build it or set DETAUDIT_BIN"
command -v python3 >/dev/null || die "python3 is needed to print the table"
if [ -n "${LLAMA_BENCH:-}" ]; then [ -x "$LLAMA_BENCH" ] || die "LLAMA_BENCH=$LLAMA_BENCH is not an executable"; fi
mkdir -p "$models" "$results"
work=$(mktemp -d "${TMPDIR:-/tmp}/detaudit-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

for type in "${types[@]}"; do
  file="$models/$preset-$type.gguf"
  if [ ! -f "$file" ]; then
    echo "run.sh: generating $file" >&2
    "$detaudit" synth -o "$file" --preset "$preset" --type "$type" --seed 7 >/dev/null || die "synth failed for $file"
  fi
  echo "run.sh: detaudit bench on $file" >&2
  "$detaudit" bench -m "$file" "${sizes[@]}" -t "$threads" --numerics exact,float --json > "$work/$type.detaudit.json" \
    || die "detaudit bench failed on $file"
  if [ -n "${LLAMA_BENCH:-}" ]; then
    echo "run.sh: llama-bench on $file" >&2
    "$LLAMA_BENCH" -m "$file" "${sizes[@]}" -t "$threads" -o json > "$work/$type.llama.json" 2>"$work/$type.llama.err" \
      || die "llama-bench failed on $file: $(tail -n 3 "$work/$type.llama.err")"
  fi
done

stamp=$(date -u +%Y-%m-%d-%H%M)
out="$results/$stamp.md"
python3 - "$work" "$stamp" "$threads" "${LLAMA_BENCH:-}" "${types[@]}" > "$work/table.md" <<'PY'
import json, os, platform, subprocess, sys

work, stamp, threads, llama, types = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]

def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"

def test_key(r):
    return (int(r.get("n_prompt", 0)), int(r.get("n_gen", 0)), int(r.get("n_depth", 0)))

def test_name(k):
    name = f"pp{k[0]}" if k[0] > 0 else f"tg{k[1]}"
    return name + (f" @ d{k[2]}" if k[2] else "")

def ts(r):
    return f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f}" if r else "-"

def ratio(a, b):
    return f"{a['avg_ts'] / b['avg_ts']:.3f}" if a and b and b["avg_ts"] > 0 else "-"

print(f"# detaudit bench, {stamp} UTC\n")
print(f"- machine: {cpu_name()}, {os.cpu_count()} CPUs; threads: {threads}")
first = json.load(open(os.path.join(work, f"{types[0]}.detaudit.json")))
print(f"- detaudit {first[0]['detaudit_version']} (build {first[0]['build_commit']})")
print(f"- llama.cpp: {llama if llama else 'not measured (LLAMA_BENCH unset)'}\n")
print("| model | size | test | exact t/s | float t/s | exact/float | llama.cpp t/s | exact/llama.cpp |")
print("| ----- | ---: | ---- | --------: | --------: | ----------: | ------------: | --------------: |")
for t in types:
    recs = json.load(open(os.path.join(work, f"{t}.detaudit.json")))
    lpath = os.path.join(work, f"{t}.llama.json")
    lrecs = json.load(open(lpath)) if os.path.exists(lpath) else []
    keys = sorted({test_key(r) for r in recs}, key=lambda k: (k[0] == 0, k))
    for k in keys:
        ex = next((r for r in recs if test_key(r) == k and r["numerics"] == "exact"), None)
        fl = next((r for r in recs if test_key(r) == k and r["numerics"] == "float"), None)
        ll = next((r for r in lrecs if test_key(r) == k), None)
        m = ex or fl
        size = f"{m['model_size'] / 2**30:.2f} GiB" if m["model_size"] >= 2**30 else f"{m['model_size'] / 2**20:.2f} MiB"
        print(f"| {m['model_type']} | {size} | {test_name(k)} | {ts(ex)} | {ts(fl)} | {ratio(ex, fl)} | {ts(ll)} | {ratio(ex, ll)} |")
PY
mv "$work/table.md" "$out"
cat "$out"
echo "run.sh: wrote $out" >&2
