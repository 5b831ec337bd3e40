// The verdict rules on hand-built records, each with the verdict it must get: tokens compared as
// bytes in every form servers write them, margins from sorted values, the not-argmax flag, the
// status of a row, each condition's evidence rule, and compare_runs on runs that are not like for
// like. (tests/verdicts/ drives the same rules through HTTP, the dialects and the CLI.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "reports/audit/conditions.h"
#include "reports/audit/identity.h"
#include "reports/audit/steps.h"
#include "reports/compare.h"
#include "reports/compare_internal.h"
#include "test_reports_util.h"
#include "util/error.h"

using namespace detaudit::reports;
using detaudit::test::rec;
using detaudit::test::with_tokens;
using detaudit::test::words;

namespace {

token_rec byte_token(std::vector<uint8_t> bytes, const std::string& text) {
  token_rec t;
  t.bytes = std::move(bytes);
  t.text = text;
  return t;
}

record with_evidence(record r, const json& e) {
  r.evidence = e;
  return r;
}

}  // namespace

TEST_CASE("verdicts steps: escaped byte forms decode to the bytes they stand for") {
  CHECK(*token_string_bytes("bytes:\\xe2\\x82") == "\xe2\x82");
  CHECK(*token_string_bytes("\\xe2\\x82\\xac") == "\xe2\x82\xac");
  CHECK(*token_string_bytes("a\\xe2") == "a\xe2");
  CHECK(*token_string_bytes("<0xE2>") == "\xe2");
  CHECK(*token_string_bytes("<0x0A>") == "\n");
  CHECK(*token_string_bytes("\\x41") == "\\x41");  // an ASCII escape is text, not a byte
  CHECK(*token_string_bytes("bytes: hello") == "bytes: hello");
  CHECK_FALSE(token_string_bytes("\xEF\xBF\xBD").has_value());  // U+FFFD: the bytes are lost
  token_rec t = byte_token({0xEF, 0xBF, 0xBD}, "\xEF\xBF\xBD");   // ollama / vLLM's form of a lost byte
  CHECK_FALSE(token_bytes(t).has_value());
  t = byte_token({0xE2}, "\xEF\xBF\xBD");
  CHECK(*token_bytes(t) == "\xe2");
}

TEST_CASE("verdicts steps: the margin comes from the values, duplicates kept") {
  CHECK(*step_margin({{-1, "b", -1.5}, {-1, "a", -0.25}, {-1, "c", -3}}) == 1.25);
  CHECK(*step_margin({{-1, "x", -0.5}, {-1, "x", -0.5}}) == 0);   // two tokens with one string: a tie
  CHECK(*step_margin({{-1, "x", -0.5}, {-1, "x", -0.75}}) == 0.25);
  CHECK_FALSE(step_margin({{-1, "x", -0.5}}).has_value());
}

TEST_CASE("verdicts steps: the rank counts alternatives strictly better than the sampled token") {
  token_rec t;
  t.id = 7;
  t.text = "b";
  CHECK(step_rank(t, {}) == -1);
  CHECK(step_rank(t, {{5, "a", -0.5}, {7, "b", -0.25}}) == 0);
  CHECK(step_rank(t, {{5, "a", -0.25}, {7, "b", -0.5}}) == 1);
  CHECK(step_rank(t, {{5, "a", -0.25}, {6, "c", -0.5}}) == 2);  // outside the alternatives
  t.logprob = -0.25;
  CHECK(step_rank(t, {{5, "a", -0.25}, {7, "b", -0.25}}) == 0);  // a tie is still the top
  record r = with_tokens("alone", {t}, "b");
  r.top_logprobs = {{{6, "c", -4}, {5, "a", -0.125}, {7, "b", -0.25}}};
  record_normalise(r);
  CHECK(r.top_logprobs[0][0].token == "a");
  CHECK(r.top_logprobs[0][2].token == "c");
  CHECK(r.tokens[0].rank == 1);
  r.temperature = 0;
  CHECK(first_not_argmax(r) == 0);
  r.temperature = 0.7;
  CHECK(first_not_argmax(r) == -1);  // sampling may pick below the top
  r.temperature.reset();
  CHECK(first_not_argmax(r) == -1);
}

TEST_CASE("verdicts diverge: the same byte token with and without a bytes field is the same token") {
  const record a = with_tokens("alone", {byte_token({}, "a"), byte_token({0xE2}, "\xEF\xBF\xBD")}, "a\xe2");
  const record b = with_tokens("control", {byte_token({}, "a"), byte_token({}, "bytes:\\xe2")}, "a\xe2");
  const record c = with_tokens("control", {byte_token({}, "a"), byte_token({}, "<0xE2>")}, "a\xe2");
  CHECK(diverge(a, b).identical);
  CHECK(diverge(a, c).identical);
  CHECK(diverge(b, c).identical);
}

TEST_CASE("verdicts diverge: a difference inside a character split over byte tokens") {
  // "x€" vs "x₭": E2 82 AC vs E2 82 AD, one byte token each.
  const record a = with_tokens("alone", {byte_token({}, "x"), byte_token({0xE2}, "?"), byte_token({0x82}, "?"),
                                         byte_token({0xAC}, "?")}, "x\xe2\x82\xac");
  const record b = with_tokens("control", {byte_token({}, "x"), byte_token({0xE2}, "?"), byte_token({0x82}, "?"),
                                           byte_token({0xAD}, "?")}, "x\xe2\x82\xad");
  const divergence d = diverge(a, b);
  CHECK_FALSE(d.identical);
  CHECK(d.token_index == 3);
  CHECK(d.char_offset == 3);
  CHECK(d.before_a == "x");  // cut at the character's first byte
  CHECK(d.after_a == "\xe2\x82\xac");
}

TEST_CASE("verdicts diverge: a side without tokens is compared on its text") {
  const record a = rec("q", "alone", words("same text"));
  record b = rec("q", "control", {});
  b.text = "same text";
  divergence d = diverge(a, b);
  CHECK(d.identical);
  CHECK(d.text_only);
  b.text = "same test";
  d = diverge(a, b);
  CHECK_FALSE(d.identical);
  CHECK(d.token_index == -1);
  CHECK(d.char_offset == 7);
}

TEST_CASE("verdicts rows: status of each kind, with the not-argmax flag") {
  record a = rec("q", "alone", {{1, "ab"}, {2, "c"}});
  record retok = rec("q", "control", {{3, "a"}, {4, "bc"}});
  pair_item row = row_make(a, retok, "alone", "control");
  CHECK(row.status == STATUS_RETOKENIZED);
  CHECK(row.d.token_index == 0);
  CHECK(row.d.char_offset == -1);
  pair_summary s;
  summary_add(s, row);
  CHECK(s.differ == 0);
  CHECK(s.retokenized == 1);

  record drift = rec("q", "control", {{1, "ab"}, {2, "c"}});
  a.logit_hashes = {1, 2};
  drift.logit_hashes = {1, 3};
  CHECK(row_make(a, drift, "alone", "control").status == STATUS_DRIFTED);

  record greedy = rec("q", "control", {{1, "ab"}, {2, "c"}});
  greedy.temperature = 0;
  greedy.top_logprobs = {{{1, "ab", -0.5}, {9, "z", -1}}, {{9, "z", -0.25}, {2, "c", -0.5}}};
  row = row_make(a, greedy, "alone", "control");
  CHECK(row.status == STATUS_IDENTICAL);
  CHECK(row.not_argmax_a == -1);
  CHECK(row.not_argmax_b == 1);

  record failed = rec("q", "control", {});
  failed.error = "HTTP 500";
  CHECK(row_make(a, failed, "alone", "control").status == STATUS_ERROR);
}

TEST_CASE("verdicts conditions: each judge needs positive evidence") {
  const record alone = rec("q", "alone", words("a"));
  auto why = [&alone](const std::string& cond, const json& evidence) {
    return condition_not_exercised(alone, with_evidence(rec("q", cond, words("a")), evidence));
  };
  CHECK(why("control", json::object()).empty());
  CHECK(why("cache-warm", json::object()).find("does not report") != std::string::npos);
  CHECK(why("cache-warm", {{"cached_tokens", 0}}) == "no tokens were served from the cache");
  CHECK(why("cache-warm", {{"cached_tokens", 5}}).empty());
  CHECK(why("cache-on", {{"cached_tokens", 5}}).empty());
  CHECK(why("cache-off", {{"cached_tokens", 0}}).empty());
  CHECK(why("cache-off", {{"cached_tokens", 3}}).find("although cache_prompt was false") != std::string::npos);
  CHECK(why("cache-off", json::object()).find("does not report") != std::string::npos);
  CHECK(why("concurrent-8", {{"overlap", true}, {"batch_width", 1}}).find("batch width 1") != std::string::npos);
  CHECK(why("concurrent-8", {{"overlap", true}, {"batch_width", 8}}).empty());
  CHECK(why("concurrent-8", {{"overlap", false}, {"batch_width", 8}}) == "the requests did not overlap in time");
  CHECK(why("concurrent-8", {{"slots_busy_max", 1}, {"slots_source", "/slots"}}).find("(/slots)") != std::string::npos);
  CHECK(why("concurrent-8", {{"slots_busy_max", 3}}).empty());
  CHECK(why("concurrent-8", {{"overlap", true}}).find("no evidence") != std::string::npos);
  CHECK(why("spec-ngram", {{"draft_proposed", 0}}) == "no draft tokens were proposed for this request");
  CHECK(why("spec-ngram", {{"draft_proposed", 4}}).empty());
  CHECK(why("spec-ngram", json::object()).find("does not report") != std::string::npos);
  record ub = with_evidence(rec("q", "ubatch-8192", words("a")), {{"ubatch", 8192}, {"ubatch_alone", 512}});
  ub.usage = {{"prompt_tokens", 512}};
  CHECK(condition_not_exercised(alone, ub).find("fits in one micro-batch of 512") != std::string::npos);
  ub.usage = {{"prompt_tokens", 513}};
  CHECK(condition_not_exercised(alone, ub).empty());
  ub.evidence["ubatch"] = 1;
  ub.usage = {{"prompt_tokens", 1}};
  CHECK_FALSE(condition_not_exercised(alone, ub).empty());
  ub.usage = {{"prompt_tokens", 2}};
  CHECK(condition_not_exercised(alone, ub).empty());
  CHECK(why("seed-fixed", {{"exercised", false}, {"reason", "the server does not honour seeds"}}) == "the server does not honour seeds");
}

TEST_CASE("verdicts conditions: spec-off needs drafts alone and none with speculation off") {
  const record on = with_evidence(rec("q", "alone", words("a")), {{"draft_proposed", 6}});
  const record none = with_evidence(rec("q", "alone", words("a")), {{"draft_proposed", 0}});
  const record off = with_evidence(rec("q", "spec-off", words("a")), {{"draft_proposed", 0}});
  CHECK(condition_not_exercised(on, off).empty());
  CHECK(condition_not_exercised(none, off).find("not on to begin with") != std::string::npos);
}

TEST_CASE("verdicts conditions: the timing test proves overlap from intervals, not from gap widths") {
  // Serial, every request ~100 ms alone, the item third: each window (e - 50, e] is empty -> a queue.
  CHECK(concurrency_timing({300, 100, 200, 400}, {100, 100, 100, 100}) == TIMING_QUEUE);
  // Together: everything ends within a few ms of 120 ms, inside each other's windows.
  CHECK(concurrency_timing({121, 119, 120, 123}, {100, 100, 100, 100}) == TIMING_OVERLAP);
  // The item ends first while the others run on together: the fillers' windows hold each other.
  CHECK(concurrency_timing({100, 180, 182, 185}, {100, 100, 100, 100}) == TIMING_OVERLAP);
  // Issue 46.4: a slow item (630 ms alone) last among fast fillers (100 ms) on a queueing server:
  // windows (50, 100], (150, 200], (250, 300], (615, 930] all empty -> a queue. The old gap test
  // saw one wide gap of three and called it batched.
  CHECK(concurrency_timing({930, 100, 200, 300}, {630, 100, 100, 100}) == TIMING_QUEUE);
  // The same latencies on a server that batches: fillers end together at ~100, the item at ~600.
  CHECK(concurrency_timing({600, 100, 101, 102}, {630, 100, 100, 100}) == TIMING_OVERLAP);
  // A window reaching back exactly to an end does not hold it: (200, 400] with an end at 200.
  CHECK(concurrency_timing({400, 200}, {400, 0}) == TIMING_UNKNOWN);
  // Unknown fillers leave a burst without proof unknown rather than a queue.
  CHECK(concurrency_timing({300, 100, 200, 400}, {100, 0, 0, 0}) == TIMING_UNKNOWN);
  CHECK(concurrency_timing({300, 100, 200, 400}, {100, std::nan(""), 100, 100}) == TIMING_UNKNOWN);
  // The concurrency row takes the item's alone latency from its alone record and the fillers' from
  // the evidence.
  record alone = rec("q", "alone", words("a"));
  alone.timings = {{"latency_ms", 100}};
  const record serial = with_evidence(rec("q", "concurrent-4", words("a")),
                                      {{"overlap", true}, {"end_ms", {300, 100, 200, 400}}, {"filler_single_ms", {100, 100, 100}}});
  CHECK(condition_not_exercised(alone, serial).find("a queue") != std::string::npos);
  const record together = with_evidence(rec("q", "concurrent-4", words("a")), {{"overlap", true}, {"end_ms", {121, 119, 120, 123}}});
  CHECK(condition_not_exercised(alone, together).empty());
  // Busy slots are believed unless the end times form a queue (a lying /slots).
  const record lying = with_evidence(rec("q", "concurrent-4", words("a")),
                                     {{"overlap", true}, {"end_ms", {300, 100, 200, 400}}, {"filler_single_ms", {100, 100, 100}},
                                      {"slots_busy_max", 8}, {"slots_source", "/slots"}});
  CHECK(condition_not_exercised(alone, lying).find("the end times form a queue") != std::string::npos);
  const record slots_unknown_fillers = with_evidence(
      rec("q", "concurrent-4", words("a")),
      {{"overlap", true}, {"end_ms", {300, 100, 200, 400}}, {"slots_busy_max", 4}, {"slots_source", "/slots"}});
  // With end times and no proof in them, busy slots do not earn "exercised" either: the end times
  // decide whenever they are there, and here they show nothing processed together.
  CHECK(condition_not_exercised(alone, slots_unknown_fillers).find("the end times do not show two requests processed together") !=
        std::string::npos);
  // Without end times, the slots decide.
  const record slots_only = with_evidence(rec("q", "concurrent-4", words("a")),
                                          {{"overlap", true}, {"slots_busy_max", 4}, {"slots_source", "/slots"}});
  CHECK(condition_not_exercised(alone, slots_only).empty());
}

// The fillers' times alone come from their own items' records when the report is made.
TEST_CASE("verdicts conditions: item fillers' times alone are filled in from their records") {
  record a1 = rec("q1", "alone", words("a")), c1 = rec("q1", "control", words("a"));
  a1.timings = {{"latency_ms", 150}};
  c1.timings = {{"latency_ms", 120}};
  record conc = with_evidence(rec("q0", "concurrent-2", words("a")),
                              {{"end_ms", {10, 20}}, {"filler_items", json::array({"q1"})}, {"filler_single_ms", json::array({nullptr})}});
  std::vector<record> v = {a1, c1, conc};
  evidence_fill_filler_latency(v);
  CHECK(v[2].evidence["filler_single_ms"] == json::array({120.0}));
}

TEST_CASE("verdicts conditions: the tables agree with each other") {
  for (const condition_def& c : condition_table()) {
    CHECK(condition_find(c.numbered ? std::string(c.name) + "8" : std::string(c.name)) == &c);
    if (c.probe != "base" && c.probe != "control") CHECK(probe_known(std::string(c.probe)));
  }
  CHECK(condition_find("concurrent-") == nullptr);
  CHECK(condition_find("concurrent-8x") == nullptr);
  CHECK(probe_rank("control") < probe_rank("repeat"));
  CHECK(probe_rank("cross") < probe_rank("nonsense"));
}

TEST_CASE("verdicts format: margins print with three significant digits") {
  report r;
  pair_summary s;
  s.probe = "control";
  s.cond_a = "alone";
  s.cond_b = "control";
  record a = rec("q", "alone", {{1, "x"}}), b = rec("q", "control", {{2, "y"}});
  a.top_logprobs = {{{1, "x", -0.5}, {2, "y", -0.5002}}};
  b.top_logprobs = {{{2, "y", -0.25}, {1, "x", -1.5}}};
  r.records = {a, b};
  summary_add(s, row_make(r.records[0], r.records[1], "alone", "control"));
  r.pairs.push_back(s);
  const std::string text = report_render(r, "text");
  INFO(text);
  CHECK(text.find("margins 0.0002 vs 1.25") != std::string::npos);
}

TEST_CASE("verdicts identity: differences are named by path, targets by label") {
  const json a = {{"request", {{"n_predict", 16}, {"chat", true}}},
                  {"targets", {{{"label", "A"}, {"model", "q8"}}, {{"label", "B"}, {"model", "q4"}}}}};
  json b = a;
  b["request"]["n_predict"] = 32;
  b["targets"][1]["model"] = "q5";
  const std::vector<identity_difference> d = identity_diff(a, b);
  REQUIRE(d.size() == 2);
  CHECK(identity_difference_text(d[0]) == "request.n_predict: 16 vs 32");
  CHECK(identity_is_request_setting(d[0]));
  CHECK(identity_difference_text(d[1]) == "targets.B.model: 'q4' vs 'q5'");
  CHECK_FALSE(identity_is_request_setting(d[1]));
  CHECK(identity_diff(a, a).empty());
}

namespace {

json run_manifest(int n_predict) {
  return {{"identity", {{"request", {{"n_predict", n_predict}, {"temperature", 0}}}, {"items", {{"count", 2}}}}}};
}

record labelled(const std::string& item, const std::string& label, const std::string& text, const std::string& sha = "") {
  record r = rec(item, "alone", words(text), "", label);
  r.prompt_sha256 = sha;
  return r;
}

}  // namespace

TEST_CASE("verdicts compare_runs: two targets per run are compared label by label") {
  std::vector<record> a = {labelled("1", "A", "x y"), labelled("1", "B", "p q")};
  std::vector<record> b = {labelled("1", "A", "x y"), labelled("1", "B", "p z")};
  const report r = compare_runs(a, b, run_manifest(16), run_manifest(16));
  REQUIRE(r.pairs.size() == 2);
  CHECK(r.pairs[0].cond_a == "A/A:alone");
  CHECK(r.pairs[0].differ == 0);
  CHECK(r.pairs[1].cond_b == "B/B:alone");
  CHECK(r.pairs[1].differ == 1);
  // --pair B=A sets run A's target B beside run B's target A.
  compare_options o;
  o.pairs = {{"B", "A"}};
  const report p = compare_runs(a, b, run_manifest(16), run_manifest(16), o);
  REQUIRE(p.pairs.size() == 1);
  CHECK(p.pairs[0].differ == 1);
  o.pairs = {{"C", "A"}};
  CHECK_THROWS_AS(compare_runs(a, b, run_manifest(16), run_manifest(16), o), detaudit::input_error);
}

TEST_CASE("verdicts compare_runs: other prompts under the same ids are not comparable, and nothing comparable is an error") {
  std::vector<record> a = {labelled("1", "A", "x y", "aaaa"), labelled("2", "A", "x y", "bbbb")};
  std::vector<record> b = {labelled("1", "A", "x y", "aaaa"), labelled("2", "A", "x z", "cccc")};
  const report r = compare_runs(a, b, run_manifest(16), run_manifest(16));
  REQUIRE(r.pairs.size() == 1);
  CHECK(r.pairs[0].not_comparable == 1);
  CHECK(r.pairs[0].differ == 0);
  CHECK(r.pairs[0].rows[1].status == STATUS_NOT_COMPARABLE);
  std::vector<record> c = {labelled("1", "A", "x y", "dddd")};
  std::vector<record> d = {labelled("1", "A", "x y", "eeee")};
  CHECK_THROWS_WITH_AS(compare_runs(c, d), doctest::Contains("prompt differs"), detaudit::input_error);
  std::vector<record> e = {labelled("9", "A", "x y")};
  CHECK_THROWS_WITH_AS(compare_runs(c, e), doctest::Contains("no item in common"), detaudit::input_error);
}

TEST_CASE("verdicts compare_runs: other request settings make rows not comparable unless ignored") {
  std::vector<record> a = {labelled("1", "A", "x y z")};
  std::vector<record> b = {labelled("1", "A", "x y")};
  CHECK_THROWS_WITH_AS(compare_runs(a, b, run_manifest(16), run_manifest(32)), doctest::Contains("request.n_predict: 16 vs 32"),
                       detaudit::input_error);
  compare_options o;
  o.ignore_settings = true;
  const report r = compare_runs(a, b, run_manifest(16), run_manifest(32), o);
  CHECK(r.pairs.at(0).differ == 1);
  REQUIRE(r.differences.size() == 1);
  CHECK(r.differences[0].field == "request.n_predict");
  CHECK(report_render(r, "text").find("request.n_predict: 16 vs 32") != std::string::npos);
}

TEST_CASE("verdicts notes: a target that answered under two system fingerprints is noted") {
  std::vector<record> v;
  for (const char* item : {"1", "2"})
    for (const char* cond : {"alone", "control"}) {
      record r = rec(item, cond, words("a b"));
      r.target["fingerprint"] = std::string(item) == "1" ? "b4748-aaa" : "b4749-bbb";
      v.push_back(r);
    }
  const report r = compare_run(v);
  const bool noted = std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) {
    return n.find("target A answered under 2 system fingerprints: 'b4748-aaa' (from item 1), 'b4749-bbb' (from item 2)") !=
           std::string::npos;
  });
  CHECK(noted);
  v.resize(2);
  const report one = compare_run(v);
  CHECK(std::none_of(one.notes.begin(), one.notes.end(), [](const std::string& n) { return n.find("fingerprints") != std::string::npos; }));
}
