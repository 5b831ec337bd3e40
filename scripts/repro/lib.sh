# shellcheck shell=bash
# Shared by the scripts in scripts/repro/ (sourced, not run): options, the detaudit binary, a
# self-started `detaudit serve` on a generated model, `detaudit run` / `detaudit report` calls, and
# the Python helpers that turn a report into a table.
#
# Goals: every experiment script stays a short recipe (what to send, which table to print) and
# behaves the same way: --help, a server URL as the first argument or a self-started server, small
# defaults, exit 0 whenever the experiment ran (a divergence is a finding, not a failure).
# Non-goals: general option parsing, servers other than detaudit's own being started here.

repro_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
repro_name=$(basename "$0" .sh)

repro_die() { echo "$repro_name: $*" >&2; exit 1; }

# Options every script accepts; a script sets REPRO_N / REPRO_N_PREDICT defaults before calling
# repro_parse and defines repro_usage (its --help text). Positional arguments go to REPRO_URLS.
REPRO_N=0
REPRO_N_PREDICT=32
REPRO_OUT=""
REPRO_RAW=0
REPRO_URLS=()

repro_common_help() {
  cat <<HELP
Common options:
  -n N              GSM8K problems, for the scripts that use GSM8K (default $REPRO_N)
  --n-predict N     most tokens generated per request (default $REPRO_N_PREDICT)
  --raw             send prompts as raw completions instead of chat messages
  --out DIR         keep the models, server logs and run folders in DIR (default: a temporary folder)
  -h, --help        this text
Environment: DETAUDIT_BIN (default build/cli/detaudit), DETAUDIT_GSM8K (GSM8K's test.jsonl; default
the fixtures folder from scripts/fixtures.sh --dir, then data/test.jsonl).
Without a URL the script generates a tiny model with 'detaudit synth' (q8_0, seed 7), serves it with
'detaudit serve -np 8 --numerics float --chat-template chatml' on a free port and stops it at exit
(ubatch.sh and quant_flips.sh say what they start instead).
Exit status: 0 when the experiment ran, whatever it found; 1 when it could not run.
HELP
}

repro_parse() {
  while [ $# -gt 0 ]; do
    case $1 in
      -h|--help) repro_usage; echo; repro_common_help; exit 0 ;;
      -n) [ $# -ge 2 ] || repro_die "-n needs a number"; REPRO_N=$2; shift 2 ;;
      --n-predict) [ $# -ge 2 ] || repro_die "--n-predict needs a number"; REPRO_N_PREDICT=$2; shift 2 ;;
      --out) [ $# -ge 2 ] || repro_die "--out needs a folder"; REPRO_OUT=$2; shift 2 ;;
      --raw) REPRO_RAW=1; shift ;;
      -*) repro_die "unknown option '$1' (see --help)" ;;
      *) REPRO_URLS+=("$1"); shift ;;
    esac
  done
  [[ $REPRO_N =~ ^[0-9]+$ ]] || repro_die "-n: expected a whole number, found '$REPRO_N'"
  [[ $REPRO_N_PREDICT =~ ^[1-9][0-9]*$ ]] || repro_die "--n-predict: expected a positive number, found '$REPRO_N_PREDICT'"
}

# Sets DETAUDIT (the binary) and WORK (the folder for models, logs and runs), and arranges for the
# servers started here to be stopped and a temporary WORK removed at exit.
REPRO_PIDS=()
repro_cleanup() {
  local pid
  for pid in "${REPRO_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  if [ -z "$REPRO_OUT" ] && [ -n "${WORK:-}" ]; then rm -rf "$WORK"; fi
}

repro_setup() {
  DETAUDIT=${DETAUDIT_BIN:-$repro_root/build/cli/detaudit}
  [ -x "$DETAUDIT" ] || repro_die "no detaudit binary at $DETAUDIT: build it (cmake --build build --target detaudit) or set DETAUDIT_BIN"
  command -v python3 >/dev/null || repro_die "python3 is needed to print the tables"
  if [ -n "$REPRO_OUT" ]; then
    mkdir -p "$REPRO_OUT"; WORK=$(cd "$REPRO_OUT" && pwd)
  else
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/detaudit-$repro_name.XXXXXX")
  fi
  trap repro_cleanup EXIT
  trap 'exit 130' INT TERM
}

# repro_synth FILE TYPE: the tiny llama with random weights, seed 7, in weight type TYPE.
repro_synth() {
  "$DETAUDIT" synth -o "$1" --preset tiny --type "$2" --seed 7 >/dev/null
}

# repro_serve MODEL [SERVE OPTIONS...]: starts detaudit serve on a free port and sets REPRO_URL.
repro_serve() {
  local model=$1 log; shift
  log=$WORK/serve-$((${#REPRO_PIDS[@]} + 1))
  "$DETAUDIT" serve -m "$model" -np 8 -c 8192 -t 2 --numerics float --chat-template chatml --port 0 "$@" \
    > "$log.out" 2> "$log.log" &
  REPRO_PIDS+=($!)
  local _
  for _ in $(seq 1 200); do
    grep -q '^listening on ' "$log.out" 2>/dev/null && break
    kill -0 "${REPRO_PIDS[-1]}" 2>/dev/null || { cat "$log.log" >&2; repro_die "detaudit serve exited before listening"; }
    sleep 0.1
  done
  REPRO_URL=$(sed -n 's/^listening on //p' "$log.out")
  [ -n "$REPRO_URL" ] || { cat "$log.log" >&2; repro_die "detaudit serve did not start within 20 s"; }
}

# The server URL to audit: $1 when given, else a self-started server on a synthesised q8_0 model.
repro_url() {
  if [ ${#REPRO_URLS[@]} -gt 0 ]; then
    REPRO_URL=${REPRO_URLS[0]}
  else
    repro_synth "$WORK/tiny-q8_0.gguf" q8_0
    repro_serve "$WORK/tiny-q8_0.gguf"
  fi
}

# repro_run NAME [detaudit run OPTIONS...]: a run into $WORK/NAME, its report as JSON in
# $WORK/NAME.json. Exit 1 of the run (divergence beyond --fail-on) cannot happen: --fail-on none.
# Exit 3 (some requests failed) is reported and the experiment goes on with what came back.
repro_run() {
  local name=$1 mode=--chat rc=0; shift
  [ "$REPRO_RAW" = 1 ] && mode=--raw
  rm -rf "${WORK:?}/$name"
  "$DETAUDIT" run --out "$WORK/$name" --n-predict "$REPRO_N_PREDICT" "$mode" --fail-on none "$@" \
    > "$WORK/$name.txt" 2> "$WORK/$name.log" || rc=$?
  if [ "$rc" = 3 ]; then
    grep -h "incomplete\|unreachable" "$WORK/$name.log" | sed "s/^/$repro_name: /" >&2
  elif [ "$rc" != 0 ]; then
    tail -n 20 "$WORK/$name.log" >&2
    repro_die "detaudit run failed (the end of its log is above; --out DIR keeps the whole log)"
  fi
  "$DETAUDIT" report "$WORK/$name" --format json -o "$WORK/$name.json"
  repro_py '
recs = records(sys.argv[1])
failed = [r for r in recs if r["error"]]
if not recs or len(failed) == len(recs):
    sys.exit("no response came back: " + (failed[0]["error"] if failed else "no records"))
' "$WORK/$name" || repro_die "the experiment did not run: every request failed"
}

# GSM8K's test.jsonl: $DETAUDIT_GSM8K, else the fixtures folder's data/test.jsonl.
repro_gsm8k() {
  local path=${DETAUDIT_GSM8K:-}
  if [ -z "$path" ]; then
    local dir
    dir=$(bash "$repro_root/scripts/fixtures.sh" --dir) || repro_die "set DETAUDIT_GSM8K to GSM8K's test.jsonl"
    path=$dir/data/test.jsonl
  fi
  if [ ! -f "$path" ]; then
    # Under CTest (DETAUDIT_SKIP_CODE set) a missing public file is a skipped test, not a failure.
    if [ -n "${DETAUDIT_SKIP_CODE:-}" ]; then
      echo "SKIPPED: public fixture data/test.jsonl (GSM8K) is not available: $path" >&2
      exit "$DETAUDIT_SKIP_CODE"
    fi
    repro_die "GSM8K file not found: $path (set DETAUDIT_GSM8K to GSM8K's test.jsonl)"
  fi
  echo "$path"
}

# The prompt of the temperature-0 write-up (docs/repro.md) and the seven it is sent beside.
repro_eight_prompts() {
  cat <<'PROMPTS'
Explain why the sky is blue in three short paragraphs.
Write a short story about a lighthouse keeper.
List ten facts about octopuses.
Explain how a hash map works.
Summarize the plot of Hamlet.
Describe how vaccines train the immune system.
Write four haiku about autumn.
Explain the difference between TCP and UDP.
PROMPTS
}

# Python helpers prepended to every table script: reading a report and its records, the verdict of
# one row, a printable excerpt, an aligned table.
REPRO_PY_COMMON=$(cat <<'PY'
import glob, json, os, sys

def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)

def records(run_dir):
    out = []
    for path in sorted(glob.glob(os.path.join(run_dir, "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            out += [json.loads(line) for line in f if line.endswith("\n")]
    return out

def find_pair(report, probe, cond_b, cond_a=None):
    for p in report["pairs"]:
        if p["probe"] == probe and p["cond_b"] in (cond_b, "A:" + cond_b) and (
                cond_a is None or p["cond_a"] in (cond_a, "A:" + cond_a)):
            return p
    sys.exit("report has no pair %s / %s" % (probe, cond_b))

def excerpt(s, n=36):
    s = "".join(c if c.isprintable() else "\\x%02x" % ord(c) if ord(c) < 256 else "?" for c in s)
    return s if len(s) <= n else s[:n - 3] + "..."

def verdict(row):
    if row["error"]:
        return "error: " + excerpt(row["note"], 40)
    if not row["exercised"]:
        return "not exercised: " + row["reason"]
    if row["identical"]:
        return "identical" + (", logits drift from step %d" % row["hash_step"] if row["hash_step"] >= 0 else "")
    return "differ at token %d (byte %d)" % (row["token_index"], row["char_offset"])

def row_of(pair, item_id):
    return next(r for r in pair["rows"] if r["item_id"] == item_id)

def rate(pair):
    n = pair["items"] - pair["errors"] - pair["not_exercised"]
    return "%d of %d" % (pair["differ"], n)

def score(correct, graded):
    return "%.2f (%d/%d)" % (correct / graded, correct, graded) if graded else "-"

def table(headers, rows):
    widths = [max(len(str(r[i])) for r in [headers] + rows) for i in range(len(headers))]
    for r in [headers] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
PY
)

# repro_py SCRIPT ARGS...: runs the Python table script with the helpers above.
repro_py() {
  local script=$1; shift
  python3 -c "$REPRO_PY_COMMON
$script" "$@"
}
