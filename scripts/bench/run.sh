#!/usr/bin/env bash
# The performance suite of docs/performance.md: detaudit bench on generated models, side by side
# with llama.cpp's llama-bench (one or two builds) on the same files when they are given.
set -euo pipefail

usage() {
  cat <<'HELP'
Usage: scripts/bench/run.sh [--contended] [MODELS_DIR]

Generates the 1B preset (n_embd 2048, 22 layers, 32 heads, 4 KV heads, n_ff 5632) in each weight
type with 'detaudit synth --preset 1b --seed 7' into MODELS_DIR (default bench-models/; files
already there are reused by name: delete them after changing synth), then on each file runs
  detaudit bench -m FILE -p 512 -n 128 -t 2 --numerics exact --json
and, when LLAMA_BENCH / LLAMA_BENCH_2 name llama-bench binaries,
  llama-bench -m FILE -p 512 -n 128 -t 2 -o json
Prints one Markdown table (t/s of each engine, and exact / each llama.cpp) with the CPU model and
its SIMD flags, and writes it to bench-results/YYYY-MM-DD-HHMM.md. It never builds llama.cpp.

Before measuring (and before generating any file but the first type's), each llama-bench is run
once (-p 0 -n 1 -r 1) to read the build number and commit it was compiled with; the table's header
names them, and every later record of that binary must name the same. A binary that reports build 0 or commit
"unknown" was built outside a git checkout and cannot say which llama.cpp it is: run.sh refuses it
(docs/performance.md, "Building llama.cpp for the comparison", says how to build one that can).

  --contended   measure everything twice: quiet, then beside one busy process (a shell loop,
                normal priority, pinned to no core in particular) started before each engine's
                run and stopped after it; the table adds each engine's contended t/s and the
                contended / quiet ratio, so the engine that suffers more on a shared machine shows.

Environment:
  DETAUDIT_BIN    detaudit binary (default build/cli/detaudit)
  LLAMA_BENCH     a llama-bench binary to measure beside it (default: none)
  LLAMA_BENCH_2   a second one (e.g. an older build) (default: none)
  BENCH_PRESET    synth preset (default 1b)
  BENCH_TYPES     weight types or mixtures (default "q4_k_m q5_k_m q6_k q8_0 q4_0")
  BENCH_NUMERICS  detaudit numerics (default exact; "exact,float" adds float rows)
  BENCH_THREADS   threads (default 2)
  BENCH_ARGS      size flags for both tools (default "-p 512 -n 128 -r 3")
  BENCH_RESULTS   folder of the dated tables (default bench-results)
HELP
}

die() { echo "run.sh: $*" >&2; exit 1; }

contended=0
args=()
for a in "$@"; do
  case "$a" in
    -h|--help) usage; exit 0 ;;
    --contended) contended=1 ;;
    -*) die "unknown option $a (see --help)" ;;
    *) args+=("$a") ;;
  esac
done
[ "${#args[@]}" -le 1 ] || die "one MODELS_DIR at most (see --help)"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
models=${args[0]:-bench-models}
detaudit=${DETAUDIT_BIN:-$root/build/cli/detaudit}
preset=${BENCH_PRESET:-1b}
read -r -a types <<< "${BENCH_TYPES:-q4_k_m q5_k_m q6_k q8_0 q4_0}"
[ "${#types[@]}" -ge 1 ] || die "BENCH_TYPES names no weight type"
numerics=${BENCH_NUMERICS:-exact}
threads=${BENCH_THREADS:-2}
read -r -a sizes <<< "${BENCH_ARGS:--p 512 -n 128 -r 3}"
results=${BENCH_RESULTS:-bench-results}
[ -x "$detaudit" ] || die "no detaudit binary at $detaudit: build it or set DETAUDIT_BIN"
command -v python3 >/dev/null || die "python3 is needed to print the table"
llamas=()
for v in LLAMA_BENCH LLAMA_BENCH_2; do
  b=${!v:-}
  [ -z "$b" ] && continue
  found=$(command -v "$b" 2>/dev/null) || die "$v=$b: no such executable (a path, or a name on PATH)"
  [ -f "$found" ] && [ -x "$found" ] || die "$v=$b is not an executable file"
  llamas+=("$found")
done
mkdir -p "$models" "$results"
work=$(mktemp -d "${TMPDIR:-/tmp}/detaudit-bench.XXXXXX")
busy_pid=
stop_busy() {
  if [ -n "$busy_pid" ]; then
    kill "$busy_pid" 2>/dev/null || true
    wait "$busy_pid" 2>/dev/null || true
    busy_pid=
  fi
}
trap 'stop_busy; rm -rf "$work"' EXIT
start_busy() {
  bash -c 'while :; do :; done' &
  busy_pid=$!
}

# measure TAG FILE OUT_PREFIX: runs every engine on FILE, beside a busy process when TAG is contended.
measure() {
  local tag=$1 file=$2 prefix=$3 i got
  [ "$tag" = contended ] && start_busy
  echo "run.sh: [$tag] detaudit bench on $file" >&2
  "$detaudit" bench -m "$file" "${sizes[@]}" -t "$threads" --numerics "$numerics" --json > "$prefix.detaudit.json" \
    || { stop_busy; die "detaudit bench failed on $file"; }
  stop_busy
  for i in "${!llamas[@]}"; do
    [ "$tag" = contended ] && start_busy
    echo "run.sh: [$tag] ${llamas[$i]} on $file" >&2
    "${llamas[$i]}" -m "$file" "${sizes[@]}" -t "$threads" -o json > "$prefix.llama$i.json" 2> "$prefix.llama$i.err" \
      || { stop_busy; die "llama-bench failed on $file: $(tail -n 3 "$prefix.llama$i.err")"; }
    stop_busy
    got=$(build_of "$prefix.llama$i.json" "${llamas[$i]}") || exit 1
    [ "$got" = "$(cat "$work/build$i.txt")" ] || die "${llamas[$i]} measured $file as $got, not the $(cat "$work/build$i.txt") it reported first"
  done
}

# generate TYPE: the model file of TYPE, generated unless it is there.
generate() {
  local file="$models/$preset-$1.gguf"
  if [ ! -f "$file" ]; then
    echo "run.sh: generating $file" >&2
    "$detaudit" synth -o "$file.part" --preset "$preset" --type "$1" --seed 7 >/dev/null || die "synth failed for $file"
    mv "$file.part" "$file"
  fi
}

# The build a llama-bench was compiled with, from its JSON records (build_number and build_commit,
# llama.cpp's build-info): build_of FILE BINARY prints "build N (COMMIT)" when every record of FILE
# names the same build, and stops the run with the reason otherwise.
build_of() {
  python3 - "$1" "$2" <<'PY' || exit 1
import json, re, sys
path, binary = sys.argv[1], sys.argv[2]
try:
    recs = json.load(open(path))
except (ValueError, RecursionError) as e:
    sys.exit(f"run.sh: {binary} printed no JSON records ({type(e).__name__})")
if not isinstance(recs, list) or not recs or not all(isinstance(r, dict) for r in recs):
    sys.exit(f"run.sh: {binary} printed no JSON records to read its build from")
builds = set()
for rec in recs:
    number, commit = rec.get("build_number"), rec.get("build_commit")
    if not isinstance(number, int) or isinstance(number, bool) or not 0 <= number < 10**9:
        sys.exit(f"run.sh: {binary} reports build_number {str(number)[:40]!r}, which is not a build number")
    if not isinstance(commit, str):
        sys.exit(f"run.sh: {binary} reports build_commit {str(commit)[:40]!r}, which is not a string")
    commit = commit.strip()
    if number == 0 or commit.lower() in ("", "unknown"):
        sys.exit(f"run.sh: {binary} reports build {number} (commit {commit!r}): it was built outside a git "
                 "checkout and cannot say which llama.cpp it is. Build it from a git checkout, or configure a "
                 "current llama.cpp with -DLLAMA_BUILD_NUMBER=N -DLLAMA_BUILD_COMMIT=HASH "
                 "(docs/performance.md, \"Building llama.cpp for the comparison\")")
    if not re.fullmatch(r"[0-9A-Za-z._+-]{1,64}", commit):  # it goes into a Markdown header
        sys.exit(f"run.sh: {binary} reports build commit {commit[:80]!r}, which is not a commit name")
    builds.add(f"build {number} ({commit})")
if len(builds) != 1:
    sys.exit(f"run.sh: {binary}'s records name more than one build: {', '.join(sorted(builds))}")
print(builds.pop())
PY
}

# Read on the first type's file, before the other files are generated and before any measurement, so
# that a binary which cannot name its build stops the run before an hour of measuring an unknown
# llama.cpp; each measurement's records must then name the same build.
generate "${types[0]}"
for i in "${!llamas[@]}"; do
  echo "run.sh: reading the build of ${llamas[$i]}" >&2
  "${llamas[$i]}" -m "$models/$preset-${types[0]}.gguf" -p 0 -n 1 -r 1 -t "$threads" -o json > "$work/build$i.json" 2> "$work/build$i.err" \
    || die "llama-bench failed on $models/$preset-${types[0]}.gguf: $(tail -n 3 "$work/build$i.err")"
  build_of "$work/build$i.json" "${llamas[$i]}" > "$work/build$i.txt"
done

for type in "${types[@]}"; do generate "$type"; done
for type in "${types[@]}"; do
  file="$models/$preset-$type.gguf"
  measure quiet "$file" "$work/$type.quiet"
  [ "$contended" = 1 ] && measure contended "$file" "$work/$type.contended"
done

stamp=$(date -u +%Y-%m-%d-%H%M)
out="$results/$stamp.md"
python3 - "$work" "$stamp" "$threads" "$contended" "${#llamas[@]}" "${llamas[@]}" "--" "${types[@]}" > "$work/table.md" <<'PY'
import json, os, platform, sys

work, stamp, threads, contended = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
n_llama = int(sys.argv[5])
llamas = sys.argv[6:6 + n_llama]
types = sys.argv[6 + n_llama + 1:]
SIMD = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512dq", "avx512vl",
        "avx512_vnni", "avx512_bf16", "amx_int8", "asimd", "asimddp", "i8mm", "sve")

def cpu():
    name, flags = platform.processor() or "unknown", []
    try:
        for line in open("/proc/cpuinfo"):
            key = line.split(":", 1)[0].strip()
            if key in ("model name", "Model") and name in ("unknown", platform.processor()):
                name = line.split(":", 1)[1].strip()
            if key in ("flags", "Features") and not flags:
                have = set(line.split(":", 1)[1].split())
                flags = [f for f in SIMD if f in have]
    except OSError:
        pass
    return name, flags

def load(path):
    return json.load(open(path)) if os.path.exists(path) else []

def key(r):
    return (int(r.get("n_prompt", 0)), int(r.get("n_gen", 0)), int(r.get("n_depth", 0)))

def test_name(k):
    name = f"pp{k[0]}" if k[0] > 0 else f"tg{k[1]}"
    return name + (f" @ d{k[2]}" if k[2] else "")

def ts(r):
    return f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f}" if r else "-"

def ratio(a, b):
    return f"{a['avg_ts'] / b['avg_ts']:.2f}" if a and b and b["avg_ts"] > 0 else "-"

def llama_label(i):
    build = open(os.path.join(work, f"build{i}.txt")).read().strip()
    return f"llama.cpp {build}: {llamas[i]}"

name, flags = cpu()
print(f"# detaudit bench, {stamp} UTC\n")
print(f"- machine: {name}, {os.cpu_count()} CPUs; SIMD: {' '.join(flags) or 'none found'}; threads: {threads}")
first = next((r for t in types for r in load(os.path.join(work, f"{t}.quiet.detaudit.json"))), None)
if first:
    print(f"- detaudit {first['detaudit_version']} (build {first['build_commit']}), kernels {first.get('simd', '?')}")
for i in range(n_llama):
    print(f"- L{i + 1}: {llama_label(i)}")
if contended:
    print("- contended: each engine's run beside one busy process (a shell loop, no core pinning)")
print()

cols = ["model", "test"]
phases = ["quiet"] + (["contended"] if contended else [])
for ph in phases:
    suffix = "" if ph == "quiet" else " (contended)"
    cols += [f"detaudit {{}} t/s{suffix}"] + [f"L{i + 1} t/s{suffix}" for i in range(n_llama)]
    cols += [f"{{}} / L{i + 1}{suffix}" for i in range(n_llama)]
if contended:
    cols += ["detaudit contended/quiet"] + [f"L{i + 1} contended/quiet" for i in range(n_llama)]

rows = []
numerics_seen = []
for t in types:
    recs = {ph: load(os.path.join(work, f"{t}.{ph}.detaudit.json")) for ph in phases}
    ll = {ph: [load(os.path.join(work, f"{t}.{ph}.llama{i}.json")) for i in range(n_llama)] for ph in phases}
    keys = sorted({key(r) for r in recs["quiet"]}, key=lambda k: (k[0] == 0, k))
    for nm in sorted({r["numerics"] for r in recs["quiet"]}, key=lambda n: n != "exact"):
        if nm not in numerics_seen:
            numerics_seen.append(nm)
        for k in keys:
            row = []
            mine = {ph: next((r for r in recs[ph] if key(r) == k and r["numerics"] == nm), None) for ph in phases}
            theirs = {ph: [next((r for r in ll[ph][i] if key(r) == k), None) for i in range(n_llama)] for ph in phases}
            m = mine["quiet"]
            row += [f"{m['model_type']} ({nm})", test_name(k)]
            for ph in phases:
                row += [ts(mine[ph])] + [ts(x) for x in theirs[ph]] + [ratio(mine[ph], x) for x in theirs[ph]]
            if contended:
                row += [ratio(mine["contended"], mine["quiet"])]
                row += [ratio(theirs["contended"][i], theirs["quiet"][i]) for i in range(n_llama)]
            rows.append(row)

label = "/".join(numerics_seen) or "exact"
cols = [c.replace("{}", label) for c in cols]
print("| " + " | ".join(cols) + " |")
print("| " + " | ".join("---" if i < 2 else "---:" for i in range(len(cols))) + " |")
for r in rows:
    print("| " + " | ".join(r) + " |")
PY
mv "$work/table.md" "$out"
cat "$out"
echo "run.sh: wrote $out" >&2
