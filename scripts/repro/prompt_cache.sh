#!/usr/bin/env bash
# The same request with the prompt cache off, on, and warm (docs/repro.md):
# does restoring a cached prompt change a temperature-0 answer?
set -euo pipefail
# shellcheck source=scripts/repro/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

repro_usage() {
  cat <<'HELP'
Usage: scripts/repro/prompt_cache.sh [URL] [options]

Sends eight prompts at temperature 0 alone with cache_prompt false, then with the prompt cache off,
on, and on again right after (warm: the prompt should come from the cache), and compares each with
the first (detaudit run --probe cache). A row per prompt: whether each answer equals the cache-off
one and how many prompt tokens the warm request took from the cache. Servers without per-request
cache control (OpenAI APIs, ollama) show cache-off and cache-on as not exercised.
URL: a llama.cpp server, detaudit serve, or any OpenAI-compatible or ollama server.
HELP
}

repro_parse "$@"
repro_setup
repro_url

repro_eight_prompts > "$WORK/prompts.txt"
repro_run cache --target "$REPRO_URL" --prompts "$WORK/prompts.txt" --probe cache

echo "== prompt cache off vs on ($REPRO_URL, temperature 0, n_predict $REPRO_N_PREDICT)"
repro_py '
report, recs = load(sys.argv[1]), records(sys.argv[2])
prompts = open(sys.argv[3], encoding="utf-8").read().splitlines()
conds = ["control", "cache-off", "cache-on", "cache-warm"]
pairs = [find_pair(report, "control" if c == "control" else "cache", c) for c in conds]
warm = {r["item_id"]: r["evidence"].get("cached_tokens", "?") for r in recs if r["condition"] == "cache-warm"}
rows = []
for row in pairs[0]["rows"]:
    item = row["item_id"]
    rows.append([item, excerpt(prompts[int(item) - 1], 28)] + [verdict(row_of(p, item)) for p in pairs] + [warm.get(item, "-")])
table(["ITEM", "PROMPT", "ALONE AGAIN", "CACHE OFF", "CACHE ON", "CACHE WARM", "WARM CACHED TOKENS"], rows)
for c, p in zip(conds, pairs):
    print("alone (cache off) vs %s: %s differ, %d not exercised" % (c, rate(p), p["not_exercised"]))
for note in report["notes"]:
    if "cache" in note:
        print("note: " + note)
' "$WORK/cache.json" "$WORK/cache" "$WORK/prompts.txt"
