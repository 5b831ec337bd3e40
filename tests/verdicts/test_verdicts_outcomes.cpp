// Known answers for errors, flips, not_argmax and exit codes (issue 16: "status: error >
// not_exercised > ...", "not_argmax", "Exit codes": 0 ok, 1 diverged, 2 input incl. a fatal first
// request, 3 incomplete).
#include "verdict_harness.h"

using namespace detaudit::verdicts_test;

namespace {

const answer FINE = answer({"Fine", " thanks"});

// Rule (status error first): control's request fails with HTTP 500 (no retries). Its row is an
// error: counted in errors, never in differ. A failed request leaves the run incomplete: exit 3.
TEST_CASE("verdicts openai-chat: a failed control request is an error row and the run exits 3") {
  planted p(OPENAI_CHAT);
  p.item("control fails", {FINE, answer(FINE).error(500, "planted failure")});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"), {.status = "error"});
  check_verdict(r.row("alone", "repeat"), {.status = "identical"});
  check_counts(r.pair("alone", "control"), 1, 0, 1, 0);
  CHECK(r.exit_code == 3);
}

// Rule (error > not_exercised): on ollama cache-warm could not be judged anyway (no cache counts:
// "does not report"), but its request failed with HTTP 500: the row is an error, not "not
// exercised". cache-off, never sent, stays not exercised. Exit 3.
TEST_CASE("verdicts ollama: an error outranks not exercised") {
  planted p(OLLAMA);
  p.item("error outranks", {FINE, FINE, answer(FINE).error(500, "planted failure")});
  const outcome r = run_planted(p, "--probe cache");
  check_verdict(r.row("alone", "cache-warm"), {.status = "error"});
  check_counts(r.pair("alone", "cache-warm"), 1, 0, 1, 0);
  check_verdict(r.row("alone", "cache-off"), unsent("no per-request prompt-cache control"));
  CHECK(r.exit_code == 3);
}

// Rule (exit 3): every request answers HTTP 500; with no retries each is recorded with its error
// and the run goes on. Every row is an error; the run is incomplete: exit 3, and stderr says how
// to continue (--resume).
TEST_CASE("verdicts llamacpp: a run whose every request fails exits 3 with every row an error") {
  planted p(LLAMACPP);
  p.item("all fail", {answer(FINE).error(500, "planted outage")});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"), {.status = "error"});
  check_verdict(r.row("alone", "repeat"), {.status = "error"});
  CHECK(r.err.find("--resume") != std::string::npos);
  CHECK(r.exit_code == 3);
}

// Rule (exit 2, a fatal first request): the server refuses the run's first request with HTTP 400
// (the request itself is wrong; sending the rest would fail the same way). detaudit stops at
// once: exit 2, one line on stderr naming the refusal, no report, nothing to resume, and the
// server saw that one generation request only.
TEST_CASE("verdicts openai-chat: a first request refused with 400 exits 2 at once with one line") {
  planted p(OPENAI_CHAT);
  p.item("refused", {answer(FINE).error(400, "planted: unsupported field")});
  const outcome r = run_planted(p, "--probe repeat");
  CHECK(r.exit_code == 2);
  CHECK(r.out.empty());
  std::string err = r.err;
  while (!err.empty() && err.back() == '\n') err.pop_back();
  CHECK(err.find('\n') == std::string::npos);
  CHECK(err.find("400") != std::string::npos);
  CHECK(err.find("--resume") == std::string::npos);
  CHECK(r.requests.size() == 1);
}

// Rule (flips, graded with gsm8k strict-match "#### N"): three items, alone vs control.
//   q1 reference 72: "#### 72" -> "#### 71": right-to-wrong; token 1 (" 72" vs " 71"), byte 6.
//   q2 reference 5:  "#### 4"  -> "#### 5":  wrong-to-right; token 1, byte 5.
//   q3 reference 9:  "#### 7"  -> "#### 8":  wrong-to-other-wrong (both wrong, other answers).
// Pair: graded 3, correct_a 1 (q1), correct_b 1 (q2), one flip of each kind; --fail-on flips
// fails on the right-to-wrong flip: exit 1.
TEST_CASE("verdicts openai-chat: graded items flip right-to-wrong, wrong-to-right and wrong-to-other-wrong") {
  planted p(OPENAI_CHAT);
  p.item("flip q1", {answer({"####", " 72"}), answer({"####", " 71"})});
  p.item("flip q2", {answer({"####", " 4"}), answer({"####", " 5"})});
  p.item("flip q3", {answer({"####", " 7"}), answer({"####", " 8"})});
  verdict_server srv(p.cases());
  const std::string dir = fresh_dir();
  const std::string prompts = file_write(dir, "items.jsonl",
                                         R"({"id": "q1", "prompt": "flip q1", "answer": "#### 72", "grader": "gsm8k"})" "\n"
                                         R"({"id": "q2", "prompt": "flip q2", "answer": "#### 5", "grader": "gsm8k"})" "\n"
                                         R"({"id": "q3", "prompt": "flip q3", "answer": "#### 9", "grader": "gsm8k"})" "\n");
  const outcome r = outcome_of(detaudit_cli("run --target " + srv.url() + " " + p.api_flags() + " --prompts " + prompts + " " +
                                        run_flags(dir + "/run", 16, "flips") + " --probe repeat"));
  check_verdict(r.row("alone", "control", "q1"), {.status = "differs", .token_index = 1, .char_offset = 6, .flip = "right-to-wrong"});
  check_verdict(r.row("alone", "control", "q2"), {.status = "differs", .token_index = 1, .char_offset = 5, .flip = "wrong-to-right"});
  check_verdict(r.row("alone", "control", "q3"), {.status = "differs", .token_index = 1, .char_offset = 5, .flip = "wrong-to-other-wrong"});
  const json& pair = r.pair("alone", "control");
  CHECK(pair.value("graded", -1) == 3);
  CHECK(pair.value("correct_a", -1) == 1);
  CHECK(pair.value("correct_b", -1) == 1);
  CHECK(pair.value("right_to_wrong", -1) == 1);
  CHECK(pair.value("wrong_to_right", -1) == 1);
  CHECK(pair.value("wrong_to_other_wrong", -1) == 1);
  CHECK(r.exit_code == 1);
}

// Rule (flips only on judged rows): on llama.cpp cache-warm carries cache_prompt true (not alone's
// request), reports 0 cached tokens (not exercised), and its answer turns a right "#### 72" wrong
// ("#### 71"), as does cache-on, the same body (so no request was answered two ways). Not exercised
// -> flip "none" and no right-to-wrong in the pair, so --fail-on flips passes: exit 0. The divergence
// is still shown. Requests: alone, control, cache-off, cache-on, cache-warm.
TEST_CASE("verdicts llamacpp: a right-to-wrong answer on a row not exercised is no flip") {
  planted p(LLAMACPP);
  const answer right = answer({"####", " 72"}).set("cached_tokens", 8);
  const answer wrong = answer({"####", " 71"}).set("cached_tokens", 0);
  p.item("flip unexercised", {right, right, answer(right).set("cached_tokens", 0), wrong, wrong});
  verdict_server srv(p.cases());
  const std::string dir = fresh_dir();
  const std::string prompts = file_write(dir, "items.jsonl",
                                         R"({"id": "q1", "prompt": "flip unexercised", "answer": "#### 72", "grader": "gsm8k"})" "\n");
  const outcome r = outcome_of(detaudit_cli("run --target " + srv.url() + " " + p.api_flags() + " --prompts " + prompts + " " +
                                        run_flags(dir + "/run", 16, "flips") + " --probe cache"));
  check_verdict(r.row("alone", "cache-warm", "q1"), not_exercised("no tokens were served from the cache", 1, 6));
  CHECK(r.pair("alone", "cache-warm").value("right_to_wrong", -1) == 0);
  CHECK(r.exit_code == 0);
}

// Rule (two answers to one request are judged, flips included; issue 46.2): on ollama cache-warm is
// alone's own request and is not shown to be exercised (no cache counts); its answer turns a right
// "#### 72" wrong ("#### 71"). The same request answered otherwise: differs, a right-to-wrong flip
// counted, --fail-on flips exits 1.
TEST_CASE("verdicts ollama: a right-to-wrong answer to alone's own request is a flip") {
  planted p(OLLAMA);
  p.item("flip same request", {answer({"####", " 72"}), answer({"####", " 72"}), answer({"####", " 71"})});
  verdict_server srv(p.cases());
  const std::string dir = fresh_dir();
  const std::string prompts = file_write(dir, "items.jsonl",
                                         R"({"id": "q1", "prompt": "flip same request", "answer": "#### 72", "grader": "gsm8k"})" "\n");
  const outcome r = outcome_of(detaudit_cli("run --target " + srv.url() + " " + p.api_flags() + " --prompts " + prompts + " " +
                                        run_flags(dir + "/run", 16, "flips") + " --probe cache"));
  check_verdict(r.row("alone", "cache-warm", "q1"), {.status = "differs", .token_index = 1, .char_offset = 6, .exercised = false,
                                                     .reason = "run-to-run noise", .flip = "right-to-wrong"});
  CHECK(r.pair("alone", "cache-warm").value("right_to_wrong", -1) == 1);
  CHECK(r.exit_code == 1);
}

// Rule (control differs: run-to-run noise): the control pair differs -> --fail-on any fails with
// the reason "run-to-run noise"; exit 1. "Same a" vs "Same b": token 1, byte 5.
TEST_CASE("verdicts openai-completions: a differing control pair fails --fail-on any as run-to-run noise") {
  planted p(OPENAI_COMPLETIONS);
  p.item("noise", {answer({"Same", " a"}), answer({"Same", " b"})});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"), {.status = "differs", .token_index = 1, .char_offset = 5});
  CHECK(r.err.find("run-to-run noise") != std::string::npos);
  CHECK(r.exit_code == 1);
}

// Rule (not_argmax): at temperature 0 a step whose sampled token has rank > 0 (some alternative
// with a strictly higher log-prob) marks its side; not_argmax_step is the first such step. Both
// sides generate "The a end". Alone samples each step's best. Control's step 1 samples " a" at
// -1.0 under " b" -0.25 (rank 1), and step 2 " end" at -2.0 under " fin" -1.0 (rank 1): first
// step 1. Tokens and texts agree, but the shared alternatives' log-probs moved from step 1 (largest
// |d|: " end" -0.5 vs -2.0, 1.5): drifted, not_argmax_b true at step 1, side a false (-1).
void not_argmax(const dialect& d) {
  planted p(d);
  p.item("not argmax", {answer({"The", " a", " end"}).top(1, {{" a", -0.25}, {" b", -1.0}}).top(2, {{" end", -0.5}, {" fin", -1.5}}),
                        answer({"The", " a", " end"}).top(1, {{" b", -0.25}, {" a", -1.0}}).top(2, {{" fin", -1.0}, {" end", -2.0}})});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"),
                {.status = "drifted", .not_argmax_b = true, .not_argmax_step_b = 1, .drift_step = 1, .max_drift = 1.5});
  check_verdict(r.row("alone", "repeat"), {.status = "identical"});
  CHECK(r.exit_code == 0);
}
VERDICTS_EACH_DIALECT("a greedy answer whose sampled token is not the top alternative is not_argmax", not_argmax)

// Rule (rank when the sampled token is not among the alternatives: their number, here 2 > 0):
// control's step 1 samples " x" (log-prob -3.0) while the alternatives are " a" -0.5 and " b"
// -1.0 -> not_argmax_b at step 1. Alone's step 1 lists " x" first. Same tokens; the one shared
// alternative " a" moved from -1.0 to -0.5: drifted at step 1 by 0.5.
TEST_CASE("verdicts openai-chat: a sampled token missing from its alternatives is not_argmax") {
  planted p(OPENAI_CHAT);
  p.item("not among", {answer({"Go", " x"}).top(1, {{" x", -0.25}, {" a", -1.0}}),
                       answer({"Go", " x"}).logprob(1, -3.0).top(1, {{" a", -0.5}, {" b", -1.0}})});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"),
                {.status = "drifted", .not_argmax_b = true, .not_argmax_step_b = 1, .drift_step = 1, .max_drift = 0.5});
}

// Rule (rank counts strictly higher alternatives only): control's step 1 samples " b" at -0.5
// while " a" also has -0.5: nothing is strictly higher, rank 0 -> not not_argmax. The alternatives
// moved (" b" -0.25 -> -0.5, " a" -1.0 -> -0.5): drifted at step 1 by 0.5.
TEST_CASE("verdicts openai-chat: a sampled token tied with the top alternative is not not_argmax") {
  planted p(OPENAI_CHAT);
  p.item("tied top", {answer({"Go", " b"}).top(1, {{" b", -0.25}, {" a", -1.0}}),
                      answer({"Go", " b"}).top(1, {{" a", -0.5}, {" b", -0.5}})});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"), {.status = "drifted", .drift_step = 1, .max_drift = 0.5});
}

// Rule (drift: same tokens, a shared alternative's log-prob differs, bit for bit): control's step 0
// lists " cat" at -0.5 + 2^-20 where alone has -0.5; nothing else moves. Tokens agree: drifted at
// step 0 by 2^-20. --fail-on drift fails on it (exit 1).
void drift_rule(const dialect& d) {
  planted p(d);
  const double moved = -0.5 + 1.0 / 1048576.0;
  p.item("drift", {answer({" cat", " sat"}).top(0, {{" cat", -0.5}, {" dog", -1.0}}).top(1, {{" sat", -0.25}, {" ran", -2.0}}),
                   answer({" cat", " sat"}).top(0, {{" cat", moved}, {" dog", -1.0}}).top(1, {{" sat", -0.25}, {" ran", -2.0}})});
  verdict_server srv(p.cases());
  const std::string dir = fresh_dir();
  const std::string prompts = prompts_write(dir, p.prompts());
  const outcome r = outcome_of(detaudit_cli("run --target " + srv.url() + " " + p.api_flags() + " --prompts " + prompts + " " +
                                            run_flags(dir + "/run", 16, "drift") + " --probe repeat"),
                               dir + "/run");
  // A dialect that sends probabilities loses the exact value in log(p); the step is still found.
  check_verdict(r.row("alone", "control"),
                {.status = "drifted", .drift_step = 0, .max_drift = d.probs ? std::nullopt : std::optional<double>(1.0 / 1048576.0)});
  check_verdict(r.row("alone", "repeat"), {.status = "identical"});
  CHECK(r.pair("alone", "control").value("drifted", -1) == 1);
  CHECK(r.err.find("--fail-on drift: control alone vs control: 1 of 1 items drifted") != std::string::npos);
  CHECK(r.exit_code == 1);
}
VERDICTS_EACH_DIALECT("a log-prob moved by 2^-20 with the same tokens is drifted, and --fail-on drift fails", drift_rule)

}  // namespace

// Rule (exit 2 only for a refusal of every request): the first item is refused with 400 (its own
// fault: a prompt too long, say), but the target takes another item, which detaudit sends once
// with one token to tell the two apart. The run goes on: item 1's rows are errors (exit 3, the
// run is incomplete), item 2's identical. The server saw the extra one-token request.
TEST_CASE("verdicts openai-chat: a first item refused on its own is that item's error, not the run's end") {
  planted p(OPENAI_CHAT);
  p.item("too long", {answer(FINE).error(400, "planted: the prompt exceeds the context")});
  p.item("fine", {answer(FINE)});
  const outcome r = run_planted(p, "--probe repeat");
  CHECK(r.exit_code == 3);
  check_verdict(r.row("alone", "control", "1"), {.status = "error"});
  check_verdict(r.row("alone", "control", "2"), {.status = "identical"});
  CHECK(r.err.find("refused the first request") == std::string::npos);
  int asked_fine = 0;  // alone, control and repeat, and the one-token request that told the two apart
  for (const json& q : r.requests) asked_fine += q.value("prompt", "") == "fine";
  CHECK(asked_fine == 4);
}

// Rule (a report of part of a run is no PASS; hostile review): a run of two items whose records of
// the second item are lost (as when the run is killed before it): run.json says the run holds 2
// items, the records hold 1. `detaudit report` ends INCOMPLETE, exit 3, saying how to go on.
TEST_CASE("verdicts: report on a run folder with items missing is INCOMPLETE, exit 3") {
  planted p(OPENAI_CHAT);
  p.item("first item", {FINE}).item("second item", {FINE});
  const outcome r = run_planted(p, "--probe repeat");
  REQUIRE(r.exit_code == 0);
  const std::string records = r.run_dir + "/records.jsonl";
  std::string kept;
  std::istringstream in(test::file_text(records));
  for (std::string line; std::getline(in, line);)
    if (json::parse(line).value("item_id", "") == "1") kept += line + "\n";
  file_write(r.run_dir, "records.jsonl", kept);
  const test::cmd_result rep = detaudit_cli("report " + r.run_dir + " --fail-on any");
  INFO(rep.err);
  CHECK(rep.exit_code == 3);
  CHECK(rep.err.find("incomplete: 1 of the run's 2 item(s) have records") != std::string::npos);
  CHECK(rep.err.find("INCOMPLETE: ") != std::string::npos);
}
