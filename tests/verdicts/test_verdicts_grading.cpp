// Known answers for grading (issue 46.1 and 46.8): the grader, the answer key and the few-shot set
// are part of a run's identity (--resume and merge refuse another; compare grades both sides with
// run A's grader and lists the difference), and flips read what the grader reads (the final answer
// after a thinking block).
//
// Every case runs --dataset gsm8k on a one- or two-question file over raw completions; the planted
// answer "The answer is 18." grades right by flexible-extract (the last number, 18) and wrong by
// strict-match (no "#### N" line), against the reference "... #### 18".
#include "verdict_harness.h"

using namespace detaudit::verdicts_test;

namespace {

const std::string Q1 = "How many apples are left?";
const std::string Q2 = "How many pears are left?";
const answer LOOSE = answer({"The", " answer", " is", " 18", "."});

std::string prompt_of(const std::string& q) { return "Question: " + q + "\nAnswer:"; }

// One server answering the questions' prompts, a dataset file, and runs against them.
struct gsm8k_bench {
  planted p{OPENAI_COMPLETIONS};
  std::unique_ptr<verdict_server> srv;
  std::string dir = fresh_dir();
  std::string dataset;

  explicit gsm8k_bench(const std::vector<std::pair<std::string, std::vector<answer>>>& qa) {
    std::string lines;
    for (const auto& [q, answers] : qa) {
      p.item(prompt_of(q), answers);
      lines += json({{"question", q}, {"answer", "They are counted.\n#### 18"}}).dump() + "\n";
    }
    dataset = file_write(dir, "test.jsonl", lines);
    srv = std::make_unique<verdict_server>(p.cases());
  }
  outcome run(const std::string& name, const std::string& extra, const std::string& fail_on = "any") {
    return outcome_of(detaudit_cli("run --target " + srv->url() + " " + p.api_flags() + " --dataset gsm8k:" + dataset + " " +
                                   run_flags(dir + "/" + name, 16, fail_on) + " --probe repeat " + extra),
                      dir + "/" + name);
  }
};

// Rule (resume: the grader is identity): a run graded by flexible-extract (the default), resumed
// with --grader strict: another audit -> exit 2 naming grading, nothing sent.
TEST_CASE("verdicts: --resume with another --grader exits 2 naming the grading") {
  gsm8k_bench b({{Q1, {LOOSE}}});
  REQUIRE(b.run("run", "").exit_code == 0);
  const size_t sent = b.srv->requests().size();
  const outcome r = b.run("run", "--grader strict --resume");
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("grading.graders") != std::string::npos);
  CHECK(b.srv->requests().size() == sent);
}

// Rule (merge: the grader is identity): shard 1/2 graded flexible, shard 2/2 strict -> exit 2
// naming the grading.
TEST_CASE("verdicts: merge of shards graded by different graders exits 2 naming the grading") {
  gsm8k_bench b({{Q1, {LOOSE}}, {Q2, {LOOSE}}});
  REQUIRE(b.run("s1", "--shard 1/2").exit_code == 0);
  REQUIRE(b.run("s2", "--shard 2/2 --grader strict", "none").exit_code == 0);
  const test::cmd_result r = detaudit_cli("merge --out " + b.dir + "/m " + b.dir + "/s1 " + b.dir + "/s2");
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("grading") != std::string::npos);
}

// Rule (compare across graders: both sides graded by run A's grader, the difference listed): run A
// flexible, run B strict, the same deterministic answers. By its own grader B's "The answer is 18."
// is wrong, A's right: a phantom right-to-wrong flip. Graded by A's grader (flexible) on both
// sides: right -> right, no flip; identical texts; the identity difference grading.graders listed;
// a note names the two graders. Exit 0 under --fail-on any.
TEST_CASE("verdicts: compare of a flexible-graded run with a strict-graded one reports no phantom flips") {
  gsm8k_bench b({{Q1, {LOOSE}}});
  REQUIRE(b.run("a", "").exit_code == 0);
  REQUIRE(b.run("b", "--grader strict", "none").exit_code == 0);
  const outcome r = outcome_of(detaudit_cli("compare " + b.dir + "/a " + b.dir + "/b --format json --fail-on any"));
  const json& row = r.row("A:alone", "B:alone", "gsm8k-0");
  check_verdict(row, {.status = "identical"});
  CHECK(row.value("correct_a", json()) == json(true));
  CHECK(row.value("correct_b", json()) == json(true));
  bool listed = false;
  for (const json& d : r.report.value("differences", json::array())) listed = listed || d.value("field", "") == "grading.graders";
  CHECK(listed);
  CHECK(r.report.dump().find("graded on both sides by run A's grader and answer key") != std::string::npos);
  CHECK(r.err.find("flips") == std::string::npos);
  CHECK(r.exit_code == 0);
}

// Rule (flip labels read the graded final answer; issue 46.8): strict-match, answers with thinking
// blocks. Alone "<think>#### 5</think>No idea." and control "<think>#### 7</think>No idea.": the
// texts part at byte 12 ('5' vs '7'); both final answers "No idea." grade to [invalid], wrong ->
// wrong with the same answer: flip none (reading the whole text would find 5 vs 7 and call it
// wrong-to-other-wrong).
TEST_CASE("verdicts: two thinking answers with the same graded final answer are no wrong-to-other-wrong flip") {
  gsm8k_bench b({{Q1, {answer({"<think>", "#### 5", "</think>", "No idea."}),
                       answer({"<think>", "#### 7", "</think>", "No idea."})}}});
  const outcome r = b.run("run", "--grader strict");
  const json& row = r.row("alone", "control", "gsm8k-0");
  check_verdict(row, {.status = "differs", .token_index = 1, .char_offset = 12});
  CHECK(row.value("correct_a", json()) == json(false));
  CHECK(row.value("correct_b", json()) == json(false));
}

// Rule (the counterpart): final answers "#### 5" and "#### 7" after the same thinking: both wrong,
// other answers -> wrong-to-other-wrong.
TEST_CASE("verdicts: two thinking answers whose final answers differ are a wrong-to-other-wrong flip") {
  gsm8k_bench b({{Q1, {answer({"<think>", "hm", "</think>", "#### 5"}), answer({"<think>", "hm", "</think>", "#### 7"})}}});
  const outcome r = b.run("run", "--grader strict");
  const json& row = r.row("alone", "control", "gsm8k-0");
  check_verdict(row, {.status = "differs", .token_index = 3, .char_offset = 22, .flip = "wrong-to-other-wrong"});
}

// Rule (the answer key is part of the reading; hostile review): the same grader (exact), another
// reference: run A's item says 42, run B's 41, and the server answers "42" both times. Graded by
// A's grader against A's key on both sides: right -> right, no flip (by B's own key B would be wrong,
// a phantom right-to-wrong); a note says the runs grade otherwise. Exit 0 under --fail-on flips.
TEST_CASE("verdicts: compare of runs with another answer key grades both sides by run A's key") {
  planted p(OPENAI_CHAT);
  p.item("answer please", {answer({"42"})});
  verdict_server srv(p.cases());
  const std::string dir = fresh_dir();
  auto run = [&](const std::string& name, const std::string& ref) {
    const std::string prompts = file_write(
        dir, name + ".jsonl", R"({"id": "q1", "prompt": "answer please", "answer": ")" + ref + R"(", "grader": "exact"})" "\n");
    return detaudit_cli("run --target " + srv.url() + " " + p.api_flags() + " --prompts " + prompts + " " +
                        run_flags(dir + "/" + name, 16, "none") + " --probe repeat");
  };
  REQUIRE(run("a", "42").exit_code == 0);
  REQUIRE(run("b", "41").exit_code == 0);
  const outcome r = outcome_of(detaudit_cli("compare " + dir + "/a " + dir + "/b --format json --fail-on flips"));
  const json& row = r.row("A:alone", "B:alone", "q1");
  check_verdict(row, {.status = "identical"});
  CHECK(row.value("correct_b", json()) == json(true));
  CHECK(r.report.dump().find("3 row(s) with another reference") != std::string::npos);  // alone, control, repeat
  CHECK(r.exit_code == 0);
}

}  // namespace
