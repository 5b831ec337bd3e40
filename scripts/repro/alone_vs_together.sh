#!/usr/bin/env bash
# One prompt alone against the same prompt beside seven others, then GSM8K alone against eight
# concurrent requests with strict-match scores on both sides (docs/repro.md).
set -euo pipefail
# shellcheck source=scripts/repro/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

repro_usage() {
  cat <<'HELP'
Usage: scripts/repro/alone_vs_together.sh [URL] [-n N] [options]

Part 1: eight short prompts, each sent alone at temperature 0 and again beside the seven others sent
at the same moment (detaudit run --probe concurrency --concurrency 8); a row per prompt says whether
the two answers are identical and where they part.
Part 2: the first N GSM8K test problems (default 100; -n 0 skips it), alone and among 8 concurrent
requests, graded with lm-evaluation-harness's strict-match: both scores and the number of changed
generations, next to the control pair (the same request twice alone).
URL: an OpenAI-compatible, llama.cpp or ollama server started with 8 or more slots (llama-server -np 8).
HELP
}

REPRO_N=100
REPRO_N_PREDICT=64
repro_parse "$@"
repro_setup
repro_url

repro_eight_prompts > "$WORK/prompts.txt"
repro_run together-prompts --target "$REPRO_URL" --prompts "$WORK/prompts.txt" --probe concurrency --concurrency 8

echo "== Eight prompts, each alone vs beside the other seven ($REPRO_URL, temperature 0, n_predict $REPRO_N_PREDICT)"
repro_py '
report = load(sys.argv[1])
prompts = open(sys.argv[2], encoding="utf-8").read().splitlines()
pair = find_pair(report, "concurrency", "concurrent-8")
rows = []
for row in pair["rows"]:
    prompt = prompts[int(row["item_id"]) - 1] if row["item_id"].isdigit() else row["item_id"]
    shown = row["identical"] or row["error"]
    rows.append([row["item_id"], excerpt(prompt, 32), verdict(row),
                 "" if shown else excerpt(row["after_a"], 24), "" if shown else excerpt(row["after_b"], 24)])
table(["ITEM", "PROMPT", "ALONE VS BESIDE 7 OTHERS", "ALONE FROM THERE", "TOGETHER FROM THERE"], rows)
print("%s prompts gave a different answer beside the others; control (alone twice): %s differ"
      % (rate(pair), rate(find_pair(report, "control", "control"))))
' "$WORK/together-prompts.json" "$WORK/prompts.txt"

[ "$REPRO_N" -gt 0 ] || exit 0
gsm8k=$(repro_gsm8k)
repro_run together-gsm8k --target "$REPRO_URL" --dataset "gsm8k:$gsm8k:$REPRO_N" --probe concurrency --concurrency 8

echo
echo "== GSM8K, first $REPRO_N problems: 1 vs 8 concurrent requests (strict-match)"
repro_py '
report = load(sys.argv[1])
rows = []
for probe, cond, name in (("control", "control", "alone vs alone again (control)"),
                          ("concurrency", "concurrent-8", "1 vs 8 concurrent requests")):
    p = find_pair(report, probe, cond)
    rows.append([name, score(p["correct_a"], p["graded"]), score(p["correct_b"], p["graded"]),
                 rate(p), "-%d/+%d" % (p["right_to_wrong"], p["wrong_to_right"])])
table(["CHANGE", "STRICT-MATCH A", "STRICT-MATCH B", "GENERATIONS CHANGED", "FLIPS -R/+W"], rows)
for row in find_pair(report, "concurrency", "concurrent-8")["rows"]:
    if not row["identical"] and not row["error"] and row["exercised"]:
        print("first changed problem, item %s: the two runs agreed for %d bytes; then \"%s\" vs \"%s\""
              % (row["item_id"], row["char_offset"], excerpt(row["after_a"], 20), excerpt(row["after_b"], 20)))
        break
' "$WORK/together-gsm8k.json"
