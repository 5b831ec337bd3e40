// Known answers for lm-evaluation-harness parity (issue 46.6): the documented round trip, `detaudit
// compare` of lm-eval's --log_samples file with `detaudit run --export lm-eval`, on committed data
// (tests/data/lm-eval/gsm8k-mini: a three-question test.jsonl, a twelve-exemplar train.jsonl, and
// samples_gsm8k.jsonl as lm-eval's gsm8k task (version 3.0) logs it, written by make_samples.py
// with Python's own random.Random(1234), json and hashlib, independently of detaudit).
//
// The planted server answers each prompt lm-eval sent (arguments.gen_args_0.arg_0 of the samples
// file) with lm-eval's logged answer, except document 2's, which it answers otherwise. So the
// server gives the logged answers only when detaudit sends lm-eval's prompts byte for byte: the
// exemplars drawn per document by lm-eval's sampler, 5 of them without --num-fewshot.
#include <fstream>

#include "verdict_harness.h"

using namespace detaudit::verdicts_test;

namespace {

const std::string MINI = "lm-eval/gsm8k-mini/";

std::vector<json> samples_read(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

// `detaudit run --dataset gsm8k:test.jsonl[:limit] --fewshot train.jsonl --export lm-eval` against a
// planted server into DIR/run; --num-fewshot left out (lm-eval's 5).
test::cmd_result run_export(const verdict_server& srv, const planted& p, const std::string& dir, const std::string& limit = "") {
  return detaudit_cli("run --target " + srv.url() + " " + p.api_flags() + " --dataset gsm8k:" + test::test_data(MINI + "test.jsonl") +
                      limit + " --fewshot " + test::test_data(MINI + "train.jsonl") + " --out " + dir +
                      "/run --retries 0 --fail-on none --probe repeat --export lm-eval");
}

// Rule (the round trip): documents are compared, not refused. doc_hash agrees (lm-eval's hash of
// the document), so every (doc_id, filter) of both filters is a row: documents 0 and 1 identical,
// document 2 differs at byte 12 ("She walks 2 + 2" vs "She walks 2 km"); lm-eval graded it right
// by both filters, the planted answer "She walks 2 km.\n#### 2" is wrong by both: right-to-wrong
// in each pair. Document 1's strict-match is [invalid] on both sides (wrong, the same answer): no
// flip. Exit 1 under --fail-on any (one item differs per filter).
TEST_CASE("verdicts: compare of lm-eval's samples with run --export lm-eval compares the documents") {
  const std::string samples = test::test_data(MINI + "samples_gsm8k.jsonl");
  const std::vector<json> logged = samples_read(samples);
  REQUIRE(logged.size() == 6);
  planted p(OPENAI_COMPLETIONS);
  for (const json& s : logged) {
    if (s["filter"] != "strict-match") continue;
    const std::string prompt = s["arguments"]["gen_args_0"]["arg_0"].get<std::string>();
    const std::string text = s["doc_id"] == 2 ? "She walks 2 km.\n#### 2" : s["resps"][0][0].get<std::string>();
    p.item(prompt, {answer({text})});
  }
  verdict_server srv(p.cases());
  const std::string dir = fresh_dir();
  const test::cmd_result run = run_export(srv, p, dir);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  // lm-eval's request settings: max_gen_toks 256, seed 1234, the task's stop strings.
  for (const json& req : srv.requests()) {
    CHECK(req.value("n_predict", int64_t{0}) == 256);
    CHECK(req.value("seed", int64_t{0}) == 1234);
    CHECK(req.value("stop", json()) == json({"Question:", "</s>", "<|im_end|>"}));
  }
  const outcome r = outcome_of(
      detaudit_cli("compare " + samples + " " + dir + "/run/lm-eval/samples_base_alone.jsonl --format json --fail-on any"));
  INFO(r.err);
  for (const char* filter : {"strict-match", "flexible-extract"}) {
    CAPTURE(filter);
    const std::string a = std::string("A:") + filter, b = std::string("B:") + filter;
    check_counts(r.pair(a, b), 3, 1, 0, 0);
    CHECK(r.pair(a, b).value("not_comparable", int64_t{-1}) == 0);
    check_verdict(r.row(a, b, "0"), {.status = "identical"});
    check_verdict(r.row(a, b, "1"), {.status = "identical"});
    check_verdict(r.row(a, b, "2"), {.status = "differs", .char_offset = 12, .flip = "right-to-wrong"});
  }
  CHECK(r.exit_code == 1);
}

// Rule (the export keeps thinking blocks; issue 46.6): lm-eval reads the text as the server sends
// it back. A planted answer "<think>#### 3</think>#### 8" is exported with resps holding the whole
// text, strict-match reading its first "#### N" (3, wrong) as lm-eval would, while detaudit's own
// field reads the final answer (8, right).
TEST_CASE("verdicts: run --export lm-eval keeps the thinking block in resps and grades as lm-eval does") {
  const std::string samples = test::test_data(MINI + "samples_gsm8k.jsonl");
  const std::vector<json> logged = samples_read(samples);
  planted p(OPENAI_COMPLETIONS);
  for (const json& s : logged)
    if (s["filter"] == "strict-match")
      p.item(s["arguments"]["gen_args_0"]["arg_0"].get<std::string>(), {answer({"<think>#### 3</think>", "#### 8"})});
  verdict_server srv(p.cases());
  const std::string dir = fresh_dir();
  const test::cmd_result run = run_export(srv, p, dir, ":1");
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const std::vector<json> exported = samples_read(dir + "/run/lm-eval/samples_base_alone.jsonl");
  REQUIRE(exported.size() == 2);
  for (const json& e : exported) {
    CAPTURE(e.dump());
    CHECK(e["resps"] == json::array({json::array({"<think>#### 3</think>#### 8"})}));
    CHECK(e["doc_hash"] == logged[0]["doc_hash"]);
    CHECK(e["prompt_hash"] == logged[0]["prompt_hash"]);
    CHECK(e["detaudit"]["final_answer"] == "#### 8");
    CHECK(e["detaudit"]["exact_match"] == 1.0);
    if (e["filter"] == "strict-match") {
      CHECK(e["filtered_resps"] == json::array({"3"}));
      CHECK(e["exact_match"] == 0.0);
    }
  }
}

}  // namespace
