#!/usr/bin/env bash
# Sampling at temperature 0.7 with seed 42 three times (the answers must be identical), then five
# times without a seed (distinct answers counted) (docs/repro.md).
set -euo pipefail
# shellcheck source=scripts/repro/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

repro_usage() {
  cat <<'HELP'
Usage: scripts/repro/seeded_sampling.sh [URL] [options]

Sends "The most popular programming language in the world is" at temperature 0.7: three times with
seed 42 (detaudit run --probe seed --seed 42 --seed-k 3), which must give byte-identical answers,
and five times without a seed (--seed-k 5), which may give as many distinct answers. Prints a row per
request with the start of its answer and how many distinct answers each condition gave.
URL: an OpenAI-compatible, llama.cpp or ollama server.
HELP
}

repro_parse "$@"
repro_setup
repro_url

echo "The most popular programming language in the world is" > "$WORK/prompts.txt"
common=(--target "$REPRO_URL" --prompts "$WORK/prompts.txt" --probe seed --seed 42 --seed-temperature 0.7)
repro_run seed-fixed "${common[@]}" --seed-k 3
repro_run seed-none "${common[@]}" --seed-k 5

echo "== seed 42 x 3 and no seed x 5 at temperature 0.7 ($REPRO_URL, n_predict $REPRO_N_PREDICT)"
repro_py '
fixed_report = load(sys.argv[1])
rows, summary = [], []
for cond, run_dir in (("seed-fixed", sys.argv[2]), ("seed-none", sys.argv[3])):
    recs = sorted((r for r in records(run_dir) if r["condition"] == cond), key=lambda r: r["repetition"])
    first, texts = recs[0]["text"], []
    for r in recs:
        drawn = r["evidence"].get("seed_drawn")
        seed = "42" if cond == "seed-fixed" else "none" if drawn is None else "none (drew %s)" % drawn
        if r["error"]:
            rows.append([cond, r["repetition"] + 1, seed, "error: " + excerpt(r["error"], 30), "-"])
            continue
        texts.append(r["text"])
        rows.append([cond, r["repetition"] + 1, seed, excerpt(r["text"], 40),
                     "identical" if r["text"] == first else "differs"])
    summary.append("%s: %d of %d requests byte-identical to the first, %d distinct answer(s)"
                   % (cond, texts.count(first), len(recs), len(set(texts))))
    if cond == "seed-none" and len(texts) > 1 and len(set(texts)) == 1:
        summary.append("seed-none: every seedless answer is the same: this target samples with a fixed "
                       "default seed when the request has none")
table(["CONDITION", "RUN", "SEED", "ANSWER STARTS", "VS RUN 1"], rows)
for line in summary:
    print(line)
pair = [p for p in fixed_report["pairs"] if p["probe"] == "seed"]
if pair:
    print("report, seed pair %s vs %s: %s differ" % (pair[0]["cond_a"], pair[0]["cond_b"], rate(pair[0])))
' "$WORK/seed-fixed.json" "$WORK/seed-fixed" "$WORK/seed-none"
