#!/usr/bin/env bash
# The CI examples of docs/ci.md, run as written: docs/ci/github-actions.yml (a matrix of `--shard I/N`
# jobs, then a merge-and-gate job) and docs/ci/k8s-indexed-job.yaml (an Indexed Job whose
# JOB_COMPLETION_INDEX picks the shard, then a merge-and-gate Job).
#
# From each file it takes every command line that starts with `detaudit run`, `detaudit merge` or
# `detaudit report` and runs them with these substitutions only:
#   - the --target (a server URL) becomes the built-in engine on a small generated model, exact numerics;
#   - the gsm8k:FILE of --dataset becomes an 8-item GSM8K file written here; --n-predict becomes 8;
#   - the shard: `${{ matrix.shard }}` takes each value of the workflow's matrix; the Kubernetes line
#     runs under `sh -c` with JOB_COMPLETION_INDEX=0..completions-1, as the container does;
#   - the Kubernetes volume /runs/ becomes a folder here.
# It then runs the same audit unsharded (the run line without --shard, into the folder the merge
# writes) and the same report lines, and checks that the merged run and the unsharded one report the
# same pairs and rows (`detaudit report --format json`), and that the gate (the report line with
# --fail-on) exits with the same code and prints the same reasons and verdict line.
#
# Usage: examples.sh DETAUDIT
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: examples.sh DETAUDIT" >&2; exit 2; }
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
[ -x "$bin" ] || { echo "examples.sh: $1 is not an executable" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/detaudit-ci-examples.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# `detaudit` on PATH is the binary under test, as it is on the runners.
mkdir -p "$tmp/bin"
ln -s "$bin" "$tmp/bin/detaudit"
export PATH="$tmp/bin:$PATH"

model=$tmp/model.gguf
detaudit synth -o "$model" --n-embd 64 --n-ff 128 --n-layer 1 --n-head 2 --n-head-kv 1 --type f32 >/dev/null
data=$tmp/gsm8k-test.jsonl
for i in 1 2 3 4 5 6 7 8; do
  printf '{"question": "Ann has %d apples and buys %d more. How many apples does she have now?", "answer": "%d + %d = %d\\n#### %d"}\n' \
    "$i" $((2 * i + 1)) "$i" $((2 * i + 1)) $((3 * i + 1)) $((3 * i + 1))
done >"$data"
n_items=8

# The example's command lines: `detaudit run|merge|report ...` at the start of a line (YAML comments
# excluded). A mention elsewhere outside a comment (say `run: detaudit merge ...` on one line) would be
# missed, so it is an error.
commands() {
  grep -E '^[[:space:]]*detaudit (run|merge|report) ' "$1" | sed -E 's/^[[:space:]]+//' || true
}
check_marked() {
  local all marked
  all=$(grep -vE '^[[:space:]]*#' "$1" | grep -cE 'detaudit (run|merge|report)' || true)
  marked=$(commands "$1" | wc -l)
  [ "$all" -eq "$marked" ] || fail "$1: $all lines run detaudit, but only $marked start with 'detaudit run|merge|report'"
}

# A command line as run here: the engine for the server, the small dataset, 8 tokens, /runs/ under $2.
adapt() {
  sed -E -e "s#--target [^ ]+#--target 'engine:$model?numerics=exact'#" \
         -e "s#gsm8k:[^: ]+#gsm8k:$data#" \
         -e "s#--n-predict [0-9]+#--n-predict 8#" \
         -e "s# /runs/# $2/runs/#g" <<<"$1"
}

# report_json DIR RUN OUT ERR: RUN's JSON report (RUN relative to DIR) reduced to what must not depend on
# sharding: every pair with its rows in item order, the noise model, the differences, the notes.
report_json() {
  (cd "$1" && detaudit report "$2" --format json) 2>"$4" >"$3.full" || fail "detaudit report $2 --format json: $(cat "$4")"
  python3 - "$3.full" >"$3" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for p in r["pairs"]:
    p["rows"].sort(key=lambda row: (row["item_id"], row["cond_b"]))
print(json.dumps({k: r.get(k) for k in ("pairs", "noise", "differences", "notes")}, indent=1, sort_keys=True))
PY
}

# run_example NAME FILE SHELL SHARD...: the example's shards, merge and reports, then the same audit
# unsharded; compares the two. SHELL is the shell the example's lines run in.
run_example() {
  local name=$1 file=$2 shell=$3; shift 3
  local shards=("$@") n=$#
  check_marked "$file"
  local run_lines merge_lines report_lines gate_lines
  run_lines=$(commands "$file" | grep -E '^detaudit run ' || true)
  merge_lines=$(commands "$file" | grep -E '^detaudit merge ' || true)
  report_lines=$(commands "$file" | grep -E '^detaudit report ' || true)
  gate_lines=$(grep -E -- '--fail-on' <<<"$report_lines" || true)
  one() { [ -n "$1" ] && [ "$(wc -l <<<"$1")" -eq 1 ]; }
  one "$run_lines" || fail "$name: expected one 'detaudit run' line, found: $run_lines"
  one "$merge_lines" || fail "$name: expected one 'detaudit merge' line, found: $merge_lines"
  one "$gate_lines" || fail "$name: expected one 'detaudit report' line with --fail-on (the gate), found: $gate_lines"
  # ${{ matrix.shard }} and $((JOB_COMPLETION_INDEX + 1)) as one word, to read --shard and --out.
  local run_flat
  run_flat=$(sed -E -e 's#\$\{\{[^}]*\}\}#1#g' -e 's#\$\(\([^)]*\)\)#1#g' <<<"$run_lines")
  grep -qE -- "--shard [^ ]+/$n( |$)" <<<"$run_flat" || fail "$name: the run line does not shard into the $n shards the file starts: $run_lines"

  # The two working folders hold only what the example's commands write; the logs are beside them.
  local sharded=$tmp/$name/sharded unsharded=$tmp/$name/unsharded log=$tmp/$name/log
  mkdir -p "$sharded" "$unsharded" "$log"

  # The shards, each as its job or pod runs it.
  local s cmd rc
  for s in "${shards[@]}"; do
    cmd=$(adapt "$run_lines" "$sharded")
    # shellcheck disable=SC2016  # the workflow's expression, literally
    cmd=${cmd//'${{ matrix.shard }}'/$s}
    rc=0
    (cd "$sharded" && JOB_COMPLETION_INDEX=$((s - 1)) "$shell" -c "$cmd") >"$log/shard-$s.out" 2>"$log/shard-$s.err" || rc=$?
    [ $rc -eq 0 ] || fail "$name: shard $s exited $rc: $cmd: $(tail -3 "$log/shard-$s.err")"
  done
  # The merge and the reports, in the order the file has them.
  local line out_dir gate_rc_s gate_rc_u
  cmd=$(adapt "$merge_lines" "$sharded")
  (cd "$sharded" && "$shell" -c "$cmd") >"$log/merge.out" 2>"$log/merge.err" ||
    fail "$name: the merge failed: $cmd: $(cat "$log/merge.err")"
  out_dir=$(sed -E 's#.*--out ([^ ]+).*#\1#' <<<"$(adapt "$merge_lines" ROOT)")
  (cd "$sharded" && python3 -c '
import json, sys
shards = [int(s) for s in sys.argv[2:]]
sys.exit(json.load(open(sys.argv[1])).get("shards") != {"count": len(shards), "merged": shards, "missing": []})' \
    "${out_dir//ROOT/$sharded}/run.json" "${shards[@]}") ||
    fail "$name: the merged run.json does not name shards ${shards[*]} as merged and none missing"

  # The same audit in one run: the run line without --shard, into the folder the merge writes.
  cmd=$(sed -E -e 's# --shard [^ ]+##' -e "s#--out [^ ]+#--out ${out_dir//ROOT/$unsharded}#" <<<"$(adapt "$run_flat" "$unsharded")")
  (cd "$unsharded" && "$shell" -c "$cmd") >"$log/unsharded-run.out" 2>"$log/unsharded-run.err" ||
    fail "$name: the unsharded run failed: $cmd: $(tail -3 "$log/unsharded-run.err")"

  while IFS= read -r line; do
    for side in sharded unsharded; do
      local dir=$tmp/$name/$side
      cmd=$(adapt "$line" "$dir")
      rc=0
      (cd "$dir" && "$shell" -c "$cmd") >"$log/$side-report.out" 2>"$log/$side-report.err" || rc=$?
      if [ "$line" = "$gate_lines" ]; then
        cp "$log/$side-report.err" "$log/$side-gate.err"
        if [ $side = sharded ]; then gate_rc_s=$rc; else gate_rc_u=$rc; fi
      else
        [ $rc -eq 0 ] || fail "$name ($side): '$cmd' exited $rc: $(cat "$log/$side-report.err")"
      fi
    done
  done <<<"$report_lines"

  # The checks.
  local merged_dir=${out_dir//ROOT/$sharded} single_dir=${out_dir//ROOT/$unsharded}
  report_json "$sharded" "$merged_dir" "$log/merged.json" "$log/merged-json.err"
  report_json "$unsharded" "$single_dir" "$log/unsharded.json" "$log/unsharded-json.err"
  python3 -c '
import json, sys
pairs, n = json.load(open(sys.argv[1]))["pairs"], int(sys.argv[2])
sys.exit(not (len(pairs) >= 2 and all(p["items"] == n and len(p["rows"]) == n for p in pairs)))' \
    "$log/unsharded.json" "$n_items" || fail "$name: the unsharded report does not hold every item in every pair"
  diff -u "$log/unsharded.json" "$log/merged.json" >"$log/json.diff" ||
    fail "$name: the merged run's report differs from the unsharded run's:
$(head -40 "$log/json.diff")"
  [ "$gate_rc_s" = "$gate_rc_u" ] || fail "$name: the gate exits $gate_rc_s after the merge, $gate_rc_u unsharded"
  local verdict_s verdict_u
  verdict_s=$(tail -n 1 "$log/sharded-gate.err") verdict_u=$(tail -n 1 "$log/unsharded-gate.err")
  grep -qE '^(PASS|FAIL): .*; exit [01]$' <<<"$verdict_s" || fail "$name: the gate's last stderr line is not a verdict: $verdict_s"
  [ "$verdict_s" = "$verdict_u" ] || fail "$name: the gate's verdict after the merge differs from the unsharded one:
  merged:    $verdict_s
  unsharded: $verdict_u"
  diff -u "$log/unsharded-gate.err" "$log/sharded-gate.err" >"$log/gate.diff" ||
    fail "$name: the gate's reasons differ: $(cat "$log/gate.diff")"
  echo "examples.sh: $name: $n shards merged = one run; gate exit $gate_rc_s, $verdict_s"
}

# docs/ci/github-actions.yml: the shard values are the matrix's; its run steps run in bash -e.
gha=$root/docs/ci/github-actions.yml
matrix=$(sed -nE 's/^[[:space:]]*shard: \[([0-9, ]+)\][[:space:]]*(#.*)?$/\1/p' "$gha" | tr -d ' ' | tr ',' ' ')
[ -n "$matrix" ] || fail "$gha: no 'shard: [1, 2, ...]' matrix"
# shellcheck disable=SC2086  # the matrix values, one word each
run_example github-actions "$gha" bash $matrix

# docs/ci/k8s-indexed-job.yaml: JOB_COMPLETION_INDEX = 0 .. completions-1, commands under sh -c.
k8s=$root/docs/ci/k8s-indexed-job.yaml
completions=$(sed -nE 's/^[[:space:]]*completions: ([0-9]+).*/\1/p' "$k8s")
parallelism=$(sed -nE 's/^[[:space:]]*parallelism: ([0-9]+).*/\1/p' "$k8s")
grep -qE '^[[:space:]]*completionMode: Indexed' "$k8s" || fail "$k8s: the Job is not completionMode: Indexed"
[ -n "$completions" ] || fail "$k8s: no completions"
[ "$parallelism" = "$completions" ] || fail "$k8s: parallelism $parallelism, completions $completions"
run_example k8s-indexed-job "$k8s" sh $(seq 1 "$completions")
