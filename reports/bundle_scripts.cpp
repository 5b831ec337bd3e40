// A bundle's reproducers and the bundle.json they read. repro.py is the same text in every bundle
// (it reads bundle.json and the body files next to it); repro.sh starts with the bundle's values
// as shell variables, so that it needs no JSON reader to know what to send.
#include "reports/audit/utf8.h"
#include "reports/bundle_internal.h"
#include "reports/compare_internal.h"
#include "util/error.h"

namespace detaudit::reports {
namespace {

json side_json(const bundle_side& s, const std::string& request_file) {
  return {{"name", s.name},     {"report_name", s.report_name},   {"condition", s.rec->condition},
          {"repetition", s.rec->repetition}, {"label", json_str(s.rec->target, "label", "A")},
          {"url", s.url},       {"path", s.path},                 {"n_concurrent", s.n_concurrent},
          {"warm", s.warm},     {"request", request_file}};
}

// 'text' for sh, with every ' written as '\''. Inside single quotes the shell reads every other
// byte as itself ($(), backticks, newlines included); a NUL byte cannot be in a shell word at all.
// Throws input_error for one.
std::string sq(const std::string& s) {
  if (s.find('\0') != std::string::npos)
    throw input_error("bundle: a value holds a NUL byte, which no shell script can carry: '" + escape_line(s) + "'");
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

const char* const REPRO_PY = R"PY(#!/usr/bin/env python3
"""Replays the pair of requests of a detaudit bundle and says whether the two responses agree.

Prints "identical" (exit 0) or "different: ..." with the first differing token, then "differed K
of N" over the --tries and both texts around the first difference (exit 1); exit 2 when a request
fails. Reads bundle.json and the request files next to this script. Python's
standard library only. README.md says what the pair is.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def load(name):
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return json.load(f)


def post(url, path, body, key, timeout):
    if not url.startswith(("http://", "https://")):
        raise ValueError("not an http(s) URL: %r" % url)
    if not path.startswith("/"):
        raise ValueError("not a path on the server: %r" % path)
    req = urllib.request.Request(url.rstrip("/") + path, data=json.dumps(body).encode("utf-8"),
                                 headers={"Content-Type": "application/json"})
    if key:
        req.add_header("Authorization", "Bearer " + key)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read().decode("utf-8", "replace"))


def tokens_and_text(j):
    """The generated tokens (ids, or token strings; None when the answer has neither) and text."""
    if isinstance(j.get("content"), str):  # llama.cpp /completion
        if isinstance(j.get("tokens"), list) and j["tokens"]:
            return j["tokens"], j["content"]
        ids = [p.get("id") for p in j.get("completion_probabilities") or [] if isinstance(p, dict)]
        return (ids if ids and None not in ids else None), j["content"]
    if isinstance(j.get("choices"), list) and j["choices"]:  # OpenAI
        ch = j["choices"][0]
        text = (ch.get("message") or {}).get("content") if "message" in ch else ch.get("text")
        lp = ch.get("logprobs") or {}
        toks = None
        if isinstance(lp.get("content"), list):
            toks = [t.get("token") for t in lp["content"]]
        elif isinstance(lp.get("tokens"), list):
            toks = lp["tokens"]
        return toks, text or ""
    if "response" in j:  # ollama /api/generate
        return None, j.get("response") or ""
    return None, (j.get("message") or {}).get("content") or ""  # ollama /api/chat


def around(xa, xb):
    """Both texts around their first differing character: 40 before, a mark, 60 after, one line each."""
    n = min(len(xa), len(xb))
    i = next((k for k in range(n) if xa[k] != xb[k]), n)
    lo = max(0, i - 40)
    return ["A: " + json.dumps(xa[lo:i] + "\u27e6" + xa[i:i + 60], ensure_ascii=False),
            "B: " + json.dumps(xb[lo:i] + "\u27e6" + xb[i:i + 60], ensure_ascii=False)]


def first_difference(a, b):
    """(None, []) when identical, else (the words after "different: ", both texts around it)."""
    (ta, xa), (tb, xb) = tokens_and_text(a), tokens_and_text(b)
    return first_difference_words(ta, xa, tb, xb), around(xa, xb)


def first_difference_words(ta, xa, tb, xb):
    if ta is not None and tb is not None:
        n = min(len(ta), len(tb))
        for i in range(n):
            if ta[i] != tb[i]:
                return "first differing token %d: %r vs %r" % (i, ta[i], tb[i])
        if len(ta) != len(tb):
            return "first differing token %d: one side ends there (%d vs %d tokens)" % (n, len(ta), len(tb))
    if xa == xb:
        return None
    n = min(len(xa), len(xb))
    i = next((k for k in range(n) if xa[k] != xb[k]), n)
    return "first differing character %d: %r vs %r" % (i, xa[i:i + 20], xb[i:i + 20])


def send_side(side, url, fillers, key, timeout):
    body = load(side["request"])
    if side["warm"]:
        post(url, side["path"], body, key, timeout)
    if side["n_concurrent"] <= 0:
        return post(url, side["path"], body, key, timeout)
    bodies = [body] + fillers
    results, errors = [None] * len(bodies), [None] * len(bodies)
    barrier = threading.Barrier(len(bodies))

    def work(i):
        barrier.wait()
        try:
            results[i] = post(url, side["path"], bodies[i], key, timeout)
        except Exception as e:  # reported below for the item's own request
            errors[i] = e

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors[0] is not None:
        raise errors[0]
    return results[0]


def http_once(meta, args, key):
    fillers = [load(f) for f in meta["fillers"]]
    url_a = args.url or meta["a"]["url"]
    url_b = args.url_b or args.url or meta["b"]["url"]
    a = send_side(meta["a"], url_a, fillers, key, args.timeout)
    b = send_side(meta["b"], url_b, fillers, key, args.timeout)
    diff, lines = first_difference(a, b)
    return diff, (lines if diff is not None else [])


def records_of(run_dir):
    out = []
    for path in sorted(glob.glob(os.path.join(run_dir, "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            out += [json.loads(line) for line in f if line.strip()]
    return out


def engine_once(meta, args):
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")
        cmd = [args.detaudit, "run", "--target=" + args.target, "--prompts=" + os.path.join(HERE, meta["item_file"])]
        cmd += meta["engine_args"] + ["--out=" + run_dir]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode not in (0, 1):
            raise OSError("detaudit run exited %d: %s" % (p.returncode, p.stderr.strip()[-400:]))
        names = {meta["a"]["report_name"], meta["b"]["report_name"]}
        for pair in json.loads(p.stdout)["pairs"]:
            for row in pair["rows"]:
                if row["item_id"] == meta["item_id"] and {row["cond_a"], row["cond_b"]} == names:
                    if row["identical"]:
                        return None, []
                    return ("first differing token %d: %r vs %r" % (row["token_index"], row["token_a"], row["token_b"]),
                            ["A: " + json.dumps(row["before_a"] + "\u27e6" + row["after_a"], ensure_ascii=False),
                             "B: " + json.dumps(row["before_b"] + "\u27e6" + row["after_b"], ensure_ascii=False)])
        recs = {}
        for r in records_of(run_dir):
            if r["item_id"] == meta["item_id"]:
                recs[(r["target"].get("label"), r["condition"], r["repetition"])] = r
        sides = []
        for s in (meta["a"], meta["b"]):
            r = recs.get((s["label"], s["condition"], s["repetition"]))
            if r is None:
                raise OSError("detaudit run wrote no record for %s" % s["name"])
            sides.append({"content": r["text"], "tokens": [t["id"] for t in r["tokens"]]})
        diff, lines = first_difference(sides[0], sides[1])
        return diff, (lines if diff is not None else [])


def main():
    sys.stdout.reconfigure(errors="backslashreplace")  # a terminal that cannot show a character gets its escape
    meta = load("bundle.json")
    ap = argparse.ArgumentParser(description="Replay this bundle's pair: %s vs %s of item %s."
                                 % (meta["a"]["name"], meta["b"]["name"], meta["item_id"]))
    ap.add_argument("--url", help="server base URL for both sides (default: the recorded one, %s)" % meta["a"]["url"])
    ap.add_argument("--url-b", help="server base URL for side B only (default: --url, else the recorded one)")
    ap.add_argument("--api-key-env", default="DETAUDIT_REPRO_KEY",
                    help="environment variable holding the server's key (default: DETAUDIT_REPRO_KEY)")
    ap.add_argument("--tries", type=int, default=1,
                    help="replay N times and say how often the pair differed (default 1)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per request (default 600)")
    ap.add_argument("--detaudit", default=os.environ.get("DETAUDIT", "detaudit"),
                    help="engine targets: the detaudit binary (default: $DETAUDIT, else detaudit on PATH)")
    ap.add_argument("--target", default=meta.get("engine_spec"),
                    help="engine targets: the target spec (default: the recorded one)")
    args = ap.parse_args()
    if args.tries < 1:
        ap.error("--tries must be at least 1, found %d" % args.tries)
    key = os.environ.get(args.api_key_env, "")
    tries, differed, first = max(1, args.tries), 0, None
    for _ in range(tries):
        try:
            diff, lines = engine_once(meta, args) if meta["engine"] else http_once(meta, args, key)
        except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
            print("error: %s" % e, file=sys.stderr)
            return 2
        if diff is not None:
            differed += 1
            first = first or (diff, lines)
    if first is None:
        print("identical")
        if tries > 1:
            print("differed 0 of %d" % tries)
        return 0
    print("different: " + first[0])
    print("differed %d of %d" % (differed, tries))
    for line in first[1]:
        print(line)
    return 1


if __name__ == "__main__":
    sys.exit(main())
)PY";

const char* const REPRO_SH_HTTP = R"SH(
# Sends side A, then side B (the concurrent side beside the filler bodies as background jobs), and
# compares the generated texts. Usage: sh repro.sh [URL]. A key: export DETAUDIT_REPRO_KEY=...
set -u
cd "$(dirname "$0")" || exit 2
if [ $# -ge 1 ]; then URL_A=$1; URL_B=$1; fi
for u in "$URL_A" "$URL_B"; do
  case $u in
    http://*|https://*) ;;
    *) echo "error: not an http(s) URL: $u" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT

post() {  # URL PATH BODY_FILE OUT_FILE
  if [ -n "${DETAUDIT_REPRO_KEY:-}" ]; then
    curl -sS -f -g --proto =http,https -H 'Content-Type: application/json' -H "Authorization: Bearer $DETAUDIT_REPRO_KEY" \
      --data-binary @"$3" -o "$4" -- "$1$2"
  else
    curl -sS -f -g --proto =http,https -H 'Content-Type: application/json' --data-binary @"$3" -o "$4" -- "$1$2"
  fi
}

side() {  # URL PATH BODY_FILE N WARM OUT_FILE
  if [ "$5" = 1 ]; then post "$1" "$2" "$3" "$tmp/warm.json" || return 1; fi
  if [ "$4" -le 0 ]; then post "$1" "$2" "$3" "$6"; return $?; fi
  pids=""
  for f in fillers/filler-*.json; do
    post "$1" "$2" "$f" "$tmp/$(basename "$f")" &
    pids="$pids $!"
  done
  post "$1" "$2" "$3" "$6" &
  own=$!
  wait "$own"
  rc=$?
  for p in $pids; do wait "$p"; done
  return $rc
}

text_of() {  # OUT_FILE: the generated text as a JSON string
  if command -v jq >/dev/null 2>&1; then
    jq -c '.content // .choices[0].message.content // .choices[0].text // .response // .message.content // ""' "$1"
  else
    python3 -c 'import json, sys
j = json.load(open(sys.argv[1], encoding="utf-8"))
c = (j.get("choices") or [{}])[0]
t = j.get("content")
if t is None: t = (c.get("message") or {}).get("content") if "message" in c else c.get("text")
if t is None: t = j.get("response")
if t is None: t = (j.get("message") or {}).get("content")
print(json.dumps(t or ""))' "$1"
  fi
}

side "$URL_A" "$PATH_A" request-A.json "$N_A" "$WARM_A" "$tmp/a.json" || { echo "error: side A failed" >&2; exit 2; }
side "$URL_B" "$PATH_B" request-B.json "$N_B" "$WARM_B" "$tmp/b.json" || { echo "error: side B failed" >&2; exit 2; }
if [ "$(text_of "$tmp/a.json")" = "$(text_of "$tmp/b.json")" ]; then
  echo identical
  exit 0
fi
echo "different: the generated texts differ (python3 repro.py names the first differing token)"
echo "A: $(text_of "$tmp/a.json")"
echo "B: $(text_of "$tmp/b.json")"
exit 1
)SH";

const char* const REPRO_SH_ENGINE = R"SH(
# Runs `detaudit run` on item.jsonl under the pair's probes and reads its JSON report.
# Usage: sh repro.sh [DETAUDIT_BINARY] (default: $DETAUDIT, else detaudit on PATH). Run it from the
# folder the audit ran in when the spec's model path is relative.
set -u
HERE=$(dirname "$0")
BIN=${1:-${DETAUDIT:-detaudit}}
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
run_it "$BIN" "$tmp/run" > "$tmp/report.json" 2> "$tmp/stderr"
rc=$?
if [ $rc -gt 1 ]; then tail -n 5 "$tmp/stderr" >&2; echo "error: detaudit run exited $rc" >&2; exit 2; fi
if command -v jq >/dev/null 2>&1; then
  verdict=$(jq -r --arg id "$ITEM" --arg a "$COND_A" --arg b "$COND_B" '[.pairs[].rows[] | select(.item_id == $id and
    ((.cond_a == $a and .cond_b == $b) or (.cond_a == $b and .cond_b == $a)))][0] |
    if . == null then "missing" elif .identical then "identical" else "different \(.token_index)" end' "$tmp/report.json")
else
  verdict=$(python3 -c 'import json, sys
rep, item, names = json.load(open(sys.argv[1])), sys.argv[2], {sys.argv[3], sys.argv[4]}
rows = [r for p in rep["pairs"] for r in p["rows"] if r["item_id"] == item and {r["cond_a"], r["cond_b"]} == names]
print("missing" if not rows else "identical" if rows[0]["identical"] else "different %d" % rows[0]["token_index"])' \
    "$tmp/report.json" "$ITEM" "$COND_A" "$COND_B")
fi
texts() {  # both texts around the first difference, one JSON string a line
  python3 -c 'import json, sys
sys.stdout.reconfigure(errors="backslashreplace")
rep, item, names = json.load(open(sys.argv[1])), sys.argv[2], {sys.argv[3], sys.argv[4]}
r = [r for p in rep["pairs"] for r in p["rows"] if r["item_id"] == item and {r["cond_a"], r["cond_b"]} == names][0]
print("A: " + json.dumps(r["before_a"] + "\u27e6" + r["after_a"], ensure_ascii=False))
print("B: " + json.dumps(r["before_b"] + "\u27e6" + r["after_b"], ensure_ascii=False))' "$tmp/report.json" "$ITEM" "$COND_A" "$COND_B"
}
case $verdict in
  identical) echo identical; exit 0 ;;
  different*) echo "different: first differing token ${verdict#different }"; texts; exit 1 ;;
  *) echo "error: the report has no row for $COND_A vs $COND_B (python3 repro.py compares the records)" >&2; exit 2 ;;
esac
)SH";

}  // namespace

json bundle_manifest(const bundle_ctx& c) {
  json fillers = json::array();
  for (size_t k = 0; k < c.fillers.size(); ++k) fillers.push_back("fillers/filler-" + std::to_string(k + 1) + ".json");
  json m = {{"schema", 1},
            {"item_id", c.item_id},
            {"run_id", c.manifest.value("run_id", json(""))},
            {"a", side_json(c.a, "request-A.json")},
            {"b", side_json(c.b, "request-B.json")},
            {"fillers", fillers},
            {"recorded", {{"identical", c.row.d.identical}, {"token_index", c.row.d.token_index}}},
            {"engine", c.engine}};
  if (c.row.oracle) {
    const row_oracle& o = *c.row.oracle;
    m["oracle"] = {{"class", o.cls.empty() ? json(nullptr) : json(o.cls)},
                   {"step", o.step},
                   {"logprob_a", o.logprob_a ? json(*o.logprob_a) : json(nullptr)},
                   {"logprob_b", o.logprob_b ? json(*o.logprob_b) : json(nullptr)},
                   {"rank_a", o.rank_a},
                   {"rank_b", o.rank_b},
                   {"argmax_token", o.argmax_token},
                   {"argmax_logprob", o.logprob_a ? json(o.argmax_logprob) : json(nullptr)},
                   {"bound", o.bound},
                   {"sentence", oracle_sentence(c.row)}};
  }
  if (c.engine) {
    m["engine_spec"] = c.engine_spec;
    m["engine_args"] = c.engine_args;
    m["item_file"] = "item.jsonl";
  }
  return m;
}

std::string bundle_repro_py() { return REPRO_PY; }

std::string bundle_repro_sh(const bundle_ctx& c) {
  // A comment ends at a newline: what a record says is escaped onto one line before it goes there.
  std::string out = "#!/bin/sh\n# detaudit bundle: item " + escape_line(c.item_id) + ", " + escape_line(c.a.name) + " vs " +
                    escape_line(c.b.name) + ". README.md says more.\n";
  if (c.engine) {
    out += "ITEM=" + sq(c.item_id) + "\nCOND_A=" + sq(c.a.report_name) + "\nCOND_B=" + sq(c.b.report_name) + "\n";
    out += "run_it() {  # BINARY OUT_DIR\n  \"$1\" run --target=" + sq(c.engine_spec) + " --prompts=\"$HERE/item.jsonl\"";
    for (const std::string& a : c.engine_args) out += " " + sq(a);
    out += " --out=\"$2\"\n}\n";
    return out + REPRO_SH_ENGINE;
  }
  out += "URL_A=" + sq(c.a.url) + "\nURL_B=" + sq(c.b.url) + "\nPATH_A=" + sq(c.a.path) + "\nPATH_B=" + sq(c.b.path) + "\n";
  out += "N_A=" + std::to_string(c.a.n_concurrent) + "\nN_B=" + std::to_string(c.b.n_concurrent) + "\n";
  out += "WARM_A=" + std::string(c.a.warm ? "1" : "0") + "\nWARM_B=" + std::string(c.b.warm ? "1" : "0") + "\n";
  return out + REPRO_SH_HTTP;
}

}  // namespace detaudit::reports
