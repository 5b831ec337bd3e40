#!/usr/bin/env bash
# Two quantizations of one model over GSM8K, item by item: correctness flips both ways and the net
# change in score (docs/repro.md).
set -euo pipefail
# shellcheck source=scripts/repro/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

repro_usage() {
  cat <<'HELP'
Usage: scripts/repro/quant_flips.sh [URL_A URL_B] [-n N] [options]

Sends the first N GSM8K test problems (default 20) at temperature 0 to two quantizations of the
same model and compares them item by item (detaudit run --probe cross --target A --target B):
strict-match score on each side, generations that changed, right->wrong and wrong->right flips and
the net change. Without URLs the script generates the same model (seed 7) twice with
`detaudit synth`, in q8_0 (A) and q4_k (B), and serves each with its own `detaudit serve`; random
weights answer no problem right, so the flips stay at zero there and the changed generations are
what to read. With URLs: two servers of one model in two quantizations, A first.
HELP
}

REPRO_N=20
repro_parse "$@"
repro_setup
case ${#REPRO_URLS[@]} in
  0) repro_synth "$WORK/tiny-q8_0.gguf" q8_0; repro_serve "$WORK/tiny-q8_0.gguf"; url_a=$REPRO_URL
     repro_synth "$WORK/tiny-q4_k.gguf" q4_k; repro_serve "$WORK/tiny-q4_k.gguf"; url_b=$REPRO_URL ;;
  2) url_a=${REPRO_URLS[0]} url_b=${REPRO_URLS[1]} ;;
  *) repro_die "expected no URL or two (quantization A, then B), found ${#REPRO_URLS[@]}" ;;
esac
[ "$REPRO_N" -gt 0 ] || repro_die "-n: expected at least 1 problem"
gsm8k=$(repro_gsm8k)
repro_run quant --target "$url_a" --target "$url_b" --dataset "gsm8k:$gsm8k:$REPRO_N" --probe cross

echo "== GSM8K, first $REPRO_N problems: A = $url_a vs B = $url_b (strict-match, temperature 0)"
repro_py '
report = load(sys.argv[1])
rows = []
for p in report["pairs"]:
    if p["probe"] not in ("cross", "control"):
        continue
    net = p["wrong_to_right"] - p["right_to_wrong"]
    rows.append(["%s vs %s" % (p["cond_a"], p["cond_b"]), score(p["correct_a"], p["graded"]),
                 score(p["correct_b"], p["graded"]), rate(p), p["right_to_wrong"], p["wrong_to_right"], "%+d" % net])
table(["PAIR", "STRICT-MATCH A", "STRICT-MATCH B", "GENERATIONS CHANGED", "RIGHT->WRONG", "WRONG->RIGHT", "NET"], rows)
cross = [p for p in report["pairs"] if p["probe"] == "cross"][0]
flips = [r for r in cross["rows"] if r["flip"] != "none"]
for r in flips[:10]:
    print("item %s: %s (first difference at token %d)" % (r["item_id"], r["flip"], r["token_index"]))
' "$WORK/quant.json"
