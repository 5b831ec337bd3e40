#!/usr/bin/env python3
"""Writes samples_gsm8k.jsonl: the lines lm-evaluation-harness (task gsm8k, version 3.0, default
fewshot sampler) logs with --log_samples for test.jsonl, with few-shot exemplars from train.jsonl
and the answers in ANSWERS standing in for a model's. Python's standard library only; run from
this folder: python3 make_samples.py

It restates, independently of detaudit, what lm-eval does:
- one random.Random(1234) for the task; for each document in order, rnd.sample(train, 5);
- context: each exemplar "Question: Q\\nAnswer: A", joined and followed by "\\n\\n", then
  "Question: Q\\nAnswer:";
- filters strict-match (the first "#### N") and flexible-extract (the last number);
- exact_match after removing ",", "$", everything up to "#### " and a final "." on both sides;
- doc_hash: sha256 of json.dumps(doc, indent=2, ensure_ascii=False); prompt_hash: sha256 of the
  context; target_hash: sha256 of the target (the answer).
"""
import hashlib
import json
import random
import re

ANSWERS = [
    "Tom has 12 - 4 = 8 apples.\n#### 8",
    "The jar holds 3 * 5 = 15 marbles. The answer is 15.",
    "She walks 2 + 2 = 4 km.\n#### 4",
]
UNTIL = ["Question:", "</s>", "<|im_end|>"]


def sha(s):
    return hashlib.sha256(s.encode("utf-8")).hexdigest()


def load(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def text(doc):
    return "Question: " + doc["question"] + "\nAnswer:"


def strict(resp):
    m = re.findall(r"#### (\-?[0-9\.\,]+)", resp)
    return m[0] if m else "[invalid]"


def flexible(resp):
    m = re.findall(r"(-?[$0-9.,]{2,})|(-?[0-9]+)", resp)
    if not m:
        return "[invalid]"
    last = m[-1]
    return [g for g in last if g][0]


def normalise(s):
    for pat in [",", "\\$", "(?s).*#### ", "\\.$"]:
        s = re.sub(pat, "", s)
    return s.lower()


def main():
    test, train = load("test.jsonl"), load("train.jsonl")
    rnd = random.Random(1234)
    lines = []
    for doc_id, (doc, resp) in enumerate(zip(test, ANSWERS)):
        shots = rnd.sample(train, 5)
        context = "\n\n".join(text(d) + " " + d["answer"] for d in shots) + "\n\n" + text(doc)
        target = doc["answer"]
        for name, extract in (("strict-match", strict), ("flexible-extract", flexible)):
            filtered = extract(resp)
            lines.append({
                "doc_id": doc_id, "doc": doc, "target": target,
                "arguments": {"gen_args_0": {"arg_0": context, "arg_1": {"until": UNTIL, "do_sample": False, "temperature": 0.0}}},
                "resps": [[resp]], "filtered_resps": [filtered], "filter": name, "metrics": ["exact_match"],
                "doc_hash": sha(json.dumps(doc, indent=2, ensure_ascii=False)), "prompt_hash": sha(context),
                "target_hash": sha(str(target)),
                "exact_match": 1.0 if normalise(filtered) == normalise(target) else 0.0,
            })
    with open("samples_gsm8k.jsonl", "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
