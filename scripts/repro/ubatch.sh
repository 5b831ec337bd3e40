#!/usr/bin/env bash
# The same request at micro-batch 512 and 8192, and the first request after start (cold) against
# the same request once warm (docs/repro.md).
set -euo pipefail
# shellcheck source=scripts/repro/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

repro_usage() {
  cat <<'HELP'
Usage: scripts/repro/ubatch.sh [URL_UB512 URL_UB8192] [options]

Sends the same prompts, temperature 0, at micro-batch (ubatch) 512 and at 8192, and the run's very
first request (cold) again once the target is warm:
- without URLs: the built-in engine in process on a generated model in float numerics
  (detaudit run --target 'engine:MODEL?numerics=float' --probe batch,repeat): ubatch 512 is the
  target's own, 1 and 8192 are engine variants of the same model;
- with two URLs: two servers of the same model, the first started with -ub 512, the second with
  -ub 8192, compared item by item (detaudit run --target URL1 --target URL2 --probe cross,repeat).
The cold row compares the first request the target served with the same request sent again alone
(control) and a third time (repeat). One prompt is long enough (about 700 tokens on the generated
model's byte-level vocabulary) for the two micro-batch sizes to split its prompt differently.
HELP
}

REPRO_N_PREDICT=64
repro_parse "$@"
repro_setup
case ${#REPRO_URLS[@]} in
  0) repro_synth "$WORK/tiny-q8_0.gguf" q8_0
     targets=(--target "engine:$WORK/tiny-q8_0.gguf?numerics=float&threads=2&chat_template=chatml") probes=batch,repeat ;;
  2) targets=(--target "${REPRO_URLS[0]}" --target "${REPRO_URLS[1]}") probes=cross,repeat ;;
  *) repro_die "expected no URL or two (the -ub 512 server, then the -ub 8192 one), found ${#REPRO_URLS[@]}" ;;
esac

{
  echo "The most popular programming language in the world is"
  echo "Explain GGUF quantization"
  python3 -c 'print(" ".join(["Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May."] * 12)
                    + " How many clips did Natalia sell altogether in April and May?")'
} > "$WORK/prompts.txt"
repro_run ubatch "${targets[@]}" --prompts "$WORK/prompts.txt" --probe "$probes"

echo "== ubatch 512 vs 8192 (temperature 0, n_predict $REPRO_N_PREDICT): ${targets[*]}"
repro_py '
report, recs = load(sys.argv[1]), records(sys.argv[2])
prompts = open(sys.argv[3], encoding="utf-8").read().splitlines()
cross = [p for p in report["pairs"] if p["probe"] == "cross" and p["cond_a"].endswith(":alone")]
if cross:
    pairs = [("ubatch 8192", cross[0])]
else:
    pairs = [("ubatch 8192", find_pair(report, "batch", "ubatch-8192")), ("ubatch 1", find_pair(report, "batch", "ubatch-1"))]
control = find_pair(report, "control", "control")
alone = {r["item_id"]: r for r in recs if r["condition"] == "alone" and r["target"]["label"] == "A"}
rows = []
for c in control["rows"]:
    item = c["item_id"]
    cells = [item, excerpt(prompts[int(item) - 1], 28), excerpt(alone[item]["text"], 28), verdict(c)]
    cells += [verdict(row_of(p, item)) for _, p in pairs]
    rows.append(cells)
table(["ITEM", "PROMPT", "UBATCH 512 OUTPUT", "512 AGAIN"] + [n.upper() + " VS 512" for n, _ in pairs], rows)
for name, p in pairs:
    for row in p["rows"]:
        if not row["identical"] and row["exercised"] and not row["error"]:
            print("%s, item %s: \"%s\" at 512 vs \"%s\"" % (name, row["item_id"], excerpt(row["after_a"], 24), excerpt(row["after_b"], 24)))

print()
print("== cold first request vs the same request warm")
cold = [r for r in recs if r["evidence"].get("cold") and r["condition"] == "alone"]
rows = []
for r in cold:
    label, item = r["target"]["label"], r["item_id"]
    for probe, cond in (("control", "control"), ("repeat", "repeat")):
        pref = label + ":" if cross else ""
        for p in report["pairs"]:
            if p["probe"] in (probe, "cross") and p["cond_a"] == pref + "alone" and p["cond_b"] == pref + cond:
                row = row_of(p, item)
                rows.append([label, item, "alone (cold)", cond + " (warm)", verdict(row)])
table(["TARGET", "ITEM", "FIRST", "LATER", "COLD VS WARM"], rows)
for note in report["notes"]:
    if "first request" in note:
        print("note: " + note)
' "$WORK/ubatch.json" "$WORK/ubatch" "$WORK/prompts.txt"
