// Known answers for two answers to one request (issue 46.2): a condition whose request is byte for
// byte alone's (cache-warm where the target has no cache control; a concurrent request the queue
// test calls queued) and whose answer differs is run-to-run noise at least, whatever the
// condition's evidence says. Such a row is judged: status differs, counted in differ (and not in
// not_exercised), marked noisy (so not beyond noise), its reason says why, and --fail-on any fails
// on it. A request that is not alone's (llama.cpp's cache-on, cache_prompt true) stays not exercised.
#include "verdict_harness.h"

using namespace detaudit::verdicts_test;

namespace {

const answer ONE = answer({"One", " way"}).top(1, {{" way", -0.25}, {" road", -1.5}});
const answer TWO = answer({"One", " road"}).top(1, {{" road", -0.5}, {" way", -0.75}});

// Rule: openai-chat has no cache control and no cached-token counts. cache-off and cache-on are not
// sent; cache-warm is sent as alone's own request (requests in order: alone, control, cache-warm).
// Its answer " road" against alone's " way": token 1, byte 4 ("One" 0-2, ' ' 3); margins 1.25 and 0.25. Not shown to
// be exercised ("does not report cached tokens"), but the same request: differs, judged, noisy.
// Pair cache-warm: 1 item, 1 differ, 0 errors, 0 not exercised; beyond noise 0. Exit 1.
TEST_CASE("verdicts openai-chat: cache-warm sent as alone's own request and answered otherwise is noise, not a pass") {
  planted p(OPENAI_CHAT);
  p.item("same request twice", {ONE, ONE, TWO});
  const outcome r = run_planted(p, "--probe cache");
  const json& row = r.row("alone", "cache-warm");
  check_verdict(row, {.status = "differs", .token_index = 1, .char_offset = 4, .margin_a = 1.25, .margin_b = 0.25,
                      .exercised = false, .reason = "run-to-run noise"});
  CHECK(row.value("reason", "").find("does not report cached tokens") != std::string::npos);
  CHECK(row.value("same_request", false) == true);
  CHECK(row.value("noisy", false) == true);
  const json& pair = r.pair("alone", "cache-warm");
  check_counts(pair, 1, 1, 0, 0);
  CHECK(pair.value("differ_beyond_noise", int64_t{-1}) == 0);
  CHECK(pair.value("same_request", int64_t{-1}) == 1);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("run-to-run noise: the same request as alone's") != std::string::npos);
}

// Rule: the same on a serial server under the concurrency probe: the concurrent request is alone's
// own body; the queue test finds a queue (windows as in test_verdicts_concurrency.cpp), and the
// answer differs: differs, not exercised, same request, noise. Exit 1 (not 5: a row was judged).
TEST_CASE("verdicts openai-chat: a queued concurrent request answered otherwise is noise, not a pass") {
  planted p(OPENAI_CHAT);
  p.server("concurrency", "serial").server("delay_ms", 150);
  p.item("queued twice", {ONE, ONE, TWO});
  const outcome r = run_planted(p, "--probe concurrency --concurrency 4");
  const json& row = r.row("alone", "concurrent-4");
  check_verdict(row, {.status = "differs", .token_index = 1, .char_offset = 4, .margin_a = 1.25, .margin_b = 0.25,
                      .exercised = false, .reason = "run-to-run noise"});
  CHECK(row.value("reason", "").find("a queue") != std::string::npos);
  check_counts(r.pair("alone", "concurrent-4"), 1, 1, 0, 0);
  CHECK(r.exit_code == 1);
}

// Rule (the boundary): llama.cpp's cache-on carries cache_prompt true where alone sent false, so its
// request is not alone's. It reports 0 cached tokens (not exercised: "no tokens were served from
// the cache") and answers otherwise: still not exercised, not counted in differ; the divergence is
// shown (token 1, byte 4). cache-warm, the same body as cache-on, answers as cache-on did (no request
// was answered two ways) and reports 8 cached tokens: exercised, a counted difference from alone,
// exit 1. Requests in order: alone, control, cache-off, cache-on, cache-warm.
TEST_CASE("verdicts llamacpp: a different answer to another request that was not exercised stays not exercised") {
  planted p(LLAMACPP);
  p.item("other request", {ONE, ONE, answer(ONE).set("cached_tokens", 0), answer(TWO).set("cached_tokens", 0),
                           answer(TWO).set("cached_tokens", 8)});
  const outcome r = run_planted(p, "--probe cache");
  const json& row = r.row("alone", "cache-on");
  check_verdict(row, {.status = "not_exercised", .token_index = 1, .char_offset = 4, .margin_a = 1.25, .margin_b = 0.25,
                      .exercised = false, .reason = "no tokens were served from the cache"});
  CHECK(row.value("same_request", true) == false);
  check_counts(r.pair("alone", "cache-on"), 1, 0, 0, 1);
  check_verdict(r.row("alone", "cache-warm"), {.status = "differs", .token_index = 1, .char_offset = 4, .margin_a = 1.25,
                                               .margin_b = 0.25});
  CHECK(r.exit_code == 1);
}

// Rule (a request answered twice need not be alone's; hostile review): on llama.cpp cache-on and
// cache-warm carry the same body (cache_prompt true, the same slot), different from alone's. The
// server reports 0 cached tokens throughout (neither exercised); cache-on answers as alone does,
// cache-warm otherwise. cache-warm's request was answered otherwise under cache-on: noise, counted
// (token 1, byte 4); cache-on's row is identical and stays not exercised. Requests in order: alone,
// control, cache-off, cache-on, cache-warm. Exit 1.
TEST_CASE("verdicts llamacpp: cache-on and cache-warm answering one request two ways is noise, not a pass") {
  planted p(LLAMACPP);
  const answer one = answer(ONE).set("cached_tokens", 0);
  p.item("twin requests", {one, one, one, one, answer(TWO).set("cached_tokens", 0)});
  const outcome r = run_planted(p, "--probe cache");
  check_verdict(r.row("alone", "cache-warm"), {.status = "differs", .token_index = 1, .char_offset = 4, .margin_a = 1.25,
                                               .margin_b = 0.25, .exercised = false,
                                               .reason = "was answered otherwise under cache-on"});
  check_verdict(r.row("alone", "cache-on"), not_exercised("no tokens were served from the cache"));
  CHECK(r.exit_code == 1);
}

}  // namespace
