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

# fake_llama NAME NUMBER COMMIT [NUMBER2 COMMIT2]: a llama-bench stand-in that logs its arguments and
# prints one record per test asked for (-p P / -n N), in llama-bench's field names; NUMBER and COMMIT
# are JSON values (COMMIT quoted as JSON: '"abc"', or null). With NUMBER2 and COMMIT2, every call
# after the first (the build probe) reports those instead.
fake_llama() {
  cat > "$work/$1" <<FAKE
#!/usr/bin/env bash
echo "\$*" >> "$work/$1.calls"
num='$2'; com='$3'
if [ -n '${4:-}' ] && [ "\$(wc -l < "$work/$1.calls")" -gt 1 ]; then num='${4:-}'; com='${5:-}'; fi
p=0; n=0
while [ \$# -gt 0 ]; do case "\$1" in -p) p=\$2; shift;; -n) n=\$2; shift;; esac; shift; done
recs=()
[ "\$p" -gt 0 ] && recs+=("{\"build_commit\": \$com, \"build_number\": \$num, \"n_prompt\": \$p, \"n_gen\": 0, \"n_depth\": 0, \"avg_ts\": 100.0, \"stddev_ts\": 1.0}")
[ "\$n" -gt 0 ] && recs+=("{\"build_commit\": \$com, \"build_number\": \$num, \"n_prompt\": 0, \"n_gen\": \$n, \"n_depth\": 0, \"avg_ts\": 50.0, \"stddev_ts\": 0.5}")
(IFS=,; echo "[\${recs[*]}]")
FAKE
  chmod +x "$work/$1"
}
fake_llama named 9749 '"d32676d77"'
fake_llama unnamed 0 '"unknown"'
fake_llama markdown 9749 '"d32676d77|x"'
fake_llama nullcommit 9749 null
fake_llama capital 9749 '"Unknown"'
fake_llama switches 9749 '"d32676d77"' 0 '"unknown"'
fake_llama other 9749 '"d32676d77"' 9750 '"0123abcd"'

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
# With two types, the refusal comes before the second type's file is generated.
if BENCH_TYPES="q8_0 q4_0" LLAMA_BENCH=$work/unnamed bash "$root/scripts/bench/run.sh" "$work/models" > /dev/null 2>&1; then
  fail "run.sh accepted a llama-bench that reports build 0 (unknown), with two types"
fi
[ ! -e "$work/models/tiny-q4_0.gguf" ] || fail "the second type's file was generated before the refusal"
# A commit that is not a commit name (it would go into the Markdown header as it stands): refused.
if LLAMA_BENCH=$work/markdown bash "$root/scripts/bench/run.sh" "$work/models" > "$work/markdown.out" 2> "$work/markdown.err"; then
  fail "run.sh accepted the build commit 'd32676d77|x'"
fi
grep -q "reports build commit 'd32676d77|x', which is not a commit name" "$work/markdown.err" \
  || { cat "$work/markdown.err" >&2; fail "the refusal of a commit with '|' does not say why"; }
# refused NAME PATTERN: run.sh with the stand-in NAME fails and says PATTERN; CALLS: the stand-in's calls.
refused() {
  if LLAMA_BENCH=$work/$1 bash "$root/scripts/bench/run.sh" "$work/models" > "$work/$1.out" 2> "$work/$1.err"; then
    fail "run.sh accepted the stand-in $1"
  fi
  grep -qF "$2" "$work/$1.err" || { cat "$work/$1.err" >&2; fail "the refusal of $1 does not say: $2"; }
  [ ! -s "$work/$1.out" ] || fail "a table was printed for $1: $(cat "$work/$1.out")"
}
refused nullcommit "reports build_commit 'None', which is not a string"
refused capital "reports build 9749 (commit 'Unknown'): it was built outside a git checkout"
[ "$(wc -l < "$work/capital.calls")" = 1 ] || fail "the stand-in that said 'Unknown' was measured"
# A binary whose measurements name another build than its probe did: refused after that measurement.
refused switches "reports build 0 (commit 'unknown'): it was built outside a git checkout"
[ "$(wc -l < "$work/switches.calls")" = 2 ] || fail "expected the probe and one measurement of the switching stand-in"
refused other "measured $work/models/tiny-q8_0.gguf as build 9750 (0123abcd), not the build 9749 (d32676d77) it reported first"
# Output that is not JSON records, or JSON too deep for the reader: refused with a message, not a traceback.
printf '#!/usr/bin/env bash\necho "$*" >> "%s/deep.calls"\nhead -c 100000 /dev/zero | tr "\\0" "["\n' "$work" > "$work/deep"
chmod +x "$work/deep"
refused deep "printed no JSON records (RecursionError)"
printf '#!/usr/bin/env bash\necho "$*" >> "%s/text.calls"\necho "build: d32676d77 (9749)"\n' "$work" > "$work/text"
chmod +x "$work/text"
refused text "printed no JSON records (JSONDecodeError)"
# No weight type at all.
if BENCH_TYPES=" " LLAMA_BENCH=$work/named bash "$root/scripts/bench/run.sh" "$work/models" > /dev/null 2> "$work/notypes.err"; then
  fail "run.sh accepted BENCH_TYPES with no type"
fi
grep -q "BENCH_TYPES names no weight type" "$work/notypes.err" || { cat "$work/notypes.err" >&2; fail "no message for an empty BENCH_TYPES"; }
echo "bench run.sh: build read from the binary; unnamed builds, commits that are not names and builds that change refused"
