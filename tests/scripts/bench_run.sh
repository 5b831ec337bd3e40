#!/usr/bin/env bash
# scripts/bench/run.sh reads each llama-bench's build from the binary before measuring: a binary that
# names its build is named in the table's header; one that reports build 0 / "unknown" (built outside a
# git checkout) stops the run before any measurement. llama-bench itself is not in the test
# environment, so a stand-in script prints records in its JSON shape; detaudit and its bench are real.
# Usage: bench_run.sh DETAUDIT_BIN
set -euo pipefail
detaudit=$1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/detaudit-bench-run.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# fake_llama NAME NUMBER COMMIT: a llama-bench stand-in that logs its arguments and prints one record
# per test asked for (-p P / -n N), in llama-bench's field names.
fake_llama() {
  cat > "$work/$1" <<FAKE
#!/usr/bin/env bash
echo "\$*" >> "$work/$1.calls"
p=0; n=0
while [ \$# -gt 0 ]; do case "\$1" in -p) p=\$2; shift;; -n) n=\$2; shift;; esac; shift; done
recs=()
[ "\$p" -gt 0 ] && recs+=("{\"build_commit\": \"$3\", \"build_number\": $2, \"n_prompt\": \$p, \"n_gen\": 0, \"n_depth\": 0, \"avg_ts\": 100.0, \"stddev_ts\": 1.0}")
[ "\$n" -gt 0 ] && recs+=("{\"build_commit\": \"$3\", \"build_number\": $2, \"n_prompt\": 0, \"n_gen\": \$n, \"n_depth\": 0, \"avg_ts\": 50.0, \"stddev_ts\": 0.5}")
(IFS=,; echo "[\${recs[*]}]")
FAKE
  chmod +x "$work/$1"
}
fake_llama named 9749 d32676d77
fake_llama unnamed 0 unknown

export DETAUDIT_BIN=$detaudit BENCH_PRESET=tiny BENCH_TYPES=q8_0 BENCH_ARGS="-p 16 -n 4 -r 1" BENCH_THREADS=1
export BENCH_RESULTS=$work/results

# A binary that names its build: the header names it, and the ratios are computed against its records.
LLAMA_BENCH=$work/named bash "$root/scripts/bench/run.sh" "$work/models" > "$work/named.out" 2> "$work/named.err" \
  || { cat "$work/named.err" >&2; fail "run.sh failed with a llama-bench that names its build"; }
grep -q "^- L1: llama.cpp build 9749 (d32676d77): $work/named$" "$work/named.out" \
  || { cat "$work/named.out" >&2; fail "the header does not name build 9749 (d32676d77)"; }
grep -qE '^\| [^|]+ \| pp16 \| [0-9.]+ ± [0-9.]+ \| 100\.00 ± 1\.00 \| [0-9.]+ \|' "$work/named.out" \
  || { cat "$work/named.out" >&2; fail "no pp16 row with the stand-in's 100.00 t/s and a ratio"; }
[ "$(head -n 1 "$work/named.calls")" = "-m $work/models/tiny-q8_0.gguf -p 0 -n 1 -r 1 -t 1 -o json" ] \
  || fail "the build was not read first, with one generated token: $(head -n 1 "$work/named.calls")"
[ "$(wc -l < "$work/named.calls")" = 2 ] || fail "expected the build probe and one measurement: $(cat "$work/named.calls")"

# A binary built outside a git checkout: refused before any measurement, with the reason and the way out.
if LLAMA_BENCH=$work/unnamed bash "$root/scripts/bench/run.sh" "$work/models" > "$work/unnamed.out" 2> "$work/unnamed.err"; then
  fail "run.sh accepted a llama-bench that reports build 0 (unknown)"
fi
grep -q "reports build 0 (commit 'unknown'): it was built outside a git checkout" "$work/unnamed.err" \
  || { cat "$work/unnamed.err" >&2; fail "the refusal does not say why"; }
grep -q "LLAMA_BUILD_NUMBER" "$work/unnamed.err" || fail "the refusal does not say how to build a named binary"
[ "$(wc -l < "$work/unnamed.calls")" = 1 ] || fail "the unnamed binary was measured: $(cat "$work/unnamed.calls")"
grep -q "detaudit bench on" "$work/unnamed.err" && fail "detaudit was measured before the refusal"
[ ! -s "$work/unnamed.out" ] || fail "a table was printed: $(cat "$work/unnamed.out")"
echo "bench run.sh: build read from the binary, an unnamed build refused"
