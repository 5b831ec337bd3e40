// Known answers for the cache, seed, batch, speculation and cross rules (issue 16, "Condition
// rules"). Request order (docs/probes.md): alone, control, then cache-off, cache-on, cache-warm
// where the target has per-request cache control (a llama.cpp-family server: /props answers),
// else cache-warm only. The seed probe's requests are at temperature > 0 and do not take planted
// answers from the list.
#include "verdict_harness.h"

using namespace detaudit::verdicts_test;

namespace {

const answer CACHED = answer({"Cached", " reply"});

answer with_cache(int cached) { return answer(CACHED).set("cached_tokens", cached); }

// Rule (cache): cache-off needs cached_tokens == 0, cache-on and cache-warm > 0. Planted (prompt of
// 8 tokens): alone 0, control 0, cache-off 0, cache-on 6, cache-warm 6 -> all three exercised.
// Also the request order and fields: alone, control and cache-off go with cache_prompt false,
// cache-on and cache-warm with true.
TEST_CASE("verdicts llamacpp: cache counts as they should be exercise every cache condition") {
  planted p(LLAMACPP);
  p.item("cache all good", {with_cache(0), with_cache(0), with_cache(0), with_cache(6), with_cache(6)});
  const outcome r = run_planted(p, "--probe cache");
  for (const char* c : {"cache-off", "cache-on", "cache-warm"}) {
    CAPTURE(c);
    check_verdict(r.row("alone", c), {.status = "identical"});
  }
  REQUIRE(r.requests.size() == 5);
  const bool want[] = {false, false, false, true, true};
  for (size_t i = 0; i < 5; ++i) CHECK(r.requests[i].value("cache_prompt", json(nullptr)) == json(want[i]));
  CHECK(r.exit_code == 0);
}

// Rule (cache-off): cached_tokens > 0 although cache_prompt was false -> not exercised, "K prompt
// tokens came from the cache although cache_prompt was false"; K = 3 as planted (timings.cache_n).
TEST_CASE("verdicts llamacpp: cached tokens under cache-off are not exercised") {
  planted p(LLAMACPP);
  p.item("cache off hit", {with_cache(0), with_cache(0), with_cache(3), with_cache(6), with_cache(6)});
  const outcome r = run_planted(p, "--probe cache");
  check_verdict(r.row("alone", "cache-off"),
                not_exercised("3 prompt tokens came from the cache although cache_prompt was false"));
  check_verdict(r.row("alone", "cache-on"), {.status = "identical"});
}

// Rule (cache counts without cache_n): llama.cpp builds without timings.cache_n report prompt_n
// and tokens_evaluated; cached = tokens_evaluated - prompt_n = 8 - 5 = 3 on cache-off -> the same
// reason with K = 3; cache-on and cache-warm (8 - 2 = 6) are exercised.
TEST_CASE("verdicts llamacpp: cached tokens derived from prompt_n and tokens_evaluated decide cache-off") {
  planted p(LLAMACPP);
  p.item("cache derived", {with_cache(0), with_cache(0), with_cache(3), with_cache(6), with_cache(6)});
  p.case_field("cache derived", "cache_n", false);
  const outcome r = run_planted(p, "--probe cache");
  check_verdict(r.row("alone", "cache-off"), not_exercised("3 prompt tokens came from the cache"));
  check_verdict(r.row("alone", "cache-warm"), {.status = "identical"});
}

// Rule (cache-on / cache-warm): cached_tokens 0 -> not exercised, "no tokens were served from the
// cache"; cache-off with 0 is as it should be -> exercised.
TEST_CASE("verdicts llamacpp: zero cached tokens under cache-on and cache-warm are not exercised") {
  planted p(LLAMACPP);
  p.item("cache never", {with_cache(0)});
  const outcome r = run_planted(p, "--probe cache");
  check_verdict(r.row("alone", "cache-off"), {.status = "identical"});
  for (const char* c : {"cache-on", "cache-warm"}) {
    CAPTURE(c);
    check_verdict(r.row("alone", c), not_exercised("no tokens were served from the cache"));
  }
  check_counts(r.pair("alone", "cache-warm"), 1, 0, 0, 1);
}

// Rule (cache, missing count): a server that reports no cached tokens at all -> every cache
// condition not exercised, "the target does not report cached tokens".
TEST_CASE("verdicts llamacpp: a server that reports no cached tokens exercises no cache condition") {
  planted p(LLAMACPP);
  p.item("cache unreported", {CACHED});
  const outcome r = run_planted(p, "--probe cache");
  for (const char* c : {"cache-off", "cache-on", "cache-warm"}) {
    CAPTURE(c);
    check_verdict(r.row("alone", c), not_exercised("does not report cached tokens"));
  }
}

// Rule (cache on llama.cpp's chat route): the OpenAI-shaped answer carries llama.cpp's timings;
// cache_n 0, 0, 0, 5, 5 -> all exercised.
TEST_CASE("verdicts llamacpp-chat: timings.cache_n on the chat route exercises the cache conditions") {
  planted p(LLAMACPP_CHAT);
  p.item("cache chat route", {with_cache(0), with_cache(0), with_cache(0), with_cache(5), with_cache(5)});
  p.case_field("cache chat route", "cache_report", "timings");
  const outcome r = run_planted(p, "--probe cache");
  for (const char* c : {"cache-off", "cache-on", "cache-warm"}) {
    CAPTURE(c);
    check_verdict(r.row("alone", c), {.status = "identical"});
  }
}

// Rule (cache without per-request control): an OpenAI server (no /props) gets only cache-warm;
// cache-off and cache-on are flagged "no per-request prompt-cache control". cache-warm's
// usage.prompt_tokens_details.cached_tokens is 0 -> "no tokens were served from the cache". No
// request carries cache_prompt (OpenAI's API rejects unknown fields).
TEST_CASE("verdicts openai-chat: cached_tokens 0 under cache-warm is not exercised") {
  planted p(OPENAI_CHAT);
  p.item("openai cache zero", {CACHED, CACHED, with_cache(0)});
  const outcome r = run_planted(p, "--probe cache");
  for (const char* c : {"cache-off", "cache-on"}) {
    CAPTURE(c);
    check_verdict(r.row("alone", c), unsent("no per-request prompt-cache control"));
  }
  check_verdict(r.row("alone", "cache-warm"), not_exercised("no tokens were served from the cache"));
  REQUIRE(r.requests.size() == 3);
  for (const json& q : r.requests) CHECK_FALSE(q.contains("cache_prompt"));
}

// Rule (cache-warm): usage cached_tokens 7 > 0 -> exercised.
TEST_CASE("verdicts openai-chat: cached_tokens above zero under cache-warm is exercised") {
  planted p(OPENAI_CHAT);
  p.item("openai cache hit", {CACHED, CACHED, with_cache(7)});
  const outcome r = run_planted(p, "--probe cache");
  check_verdict(r.row("alone", "cache-warm"), {.status = "identical"});
  CHECK(r.exit_code == 0);
}

// Rule (cache, missing count): ollama reports no cached tokens -> cache-warm not exercised,
// "the target does not report cached tokens".
TEST_CASE("verdicts ollama: cache-warm on a server without cache counts is not exercised") {
  planted p(OLLAMA);
  p.item("ollama cache", {CACHED});
  const outcome r = run_planted(p, "--probe cache");
  check_verdict(r.row("alone", "cache-warm"), not_exercised("does not report cached tokens"));
  check_verdict(r.row("alone", "cache-off"), unsent("no per-request prompt-cache control"));
}

// Rule (seed check, seed-fixed): the server honours seeds (the answer is a function of the seed),
// so the check passes: seed 42, 42 again, 43 -> equal, equal, different. The K = 3 seed-fixed
// answers at seed 42 are equal: rows #0 vs #1 and #0 vs #2 identical, exercised. The check comes
// first: the first three requests are at the seed temperature with seeds 42, 42, 43.
TEST_CASE("verdicts openai-chat: a server that honours seeds passes the seed check and its seed-fixed rows are identical") {
  planted p(OPENAI_CHAT);
  p.item("seed honoured", {CACHED}).seeded("seed honoured", answer({"Dice", " say"}), true);
  const outcome r = run_planted(p, "--probe seed --seed 42 --seed-k 3 --seed-temperature 0.7");
  for (const char* k : {"seed-fixed#1", "seed-fixed#2"}) {
    CAPTURE(k);
    check_verdict(r.row("seed-fixed#0", k), {.status = "identical"});
  }
  REQUIRE(r.requests.size() >= 3);
  const int64_t want[] = {42, 42, 43};
  for (size_t i = 0; i < 3; ++i) {
    CHECK(r.requests[i].value("temperature", 0.0) == 0.7);
    CHECK(r.requests[i].value("seed", int64_t{-1}) == want[i]);
  }
  CHECK(r.exit_code == 0);
}

// Rule (seed check failed): the server ignores seeds (a fresh answer every time), so the two
// seed-42 answers of the check differ: seed-fixed is not sent, its rows are not exercised with a
// reason about the seed. Only the three check requests carry a seed. The seed probe judged
// nothing (seed-none is never a pair): UNJUDGED, exit 5.
TEST_CASE("verdicts openai-chat: a server that ignores seeds fails the seed check and its seed-fixed rows are not exercised") {
  planted p(OPENAI_CHAT);
  p.item("seed ignored", {CACHED}).seeded("seed ignored", answer({"Dice", " say"}), false);
  const outcome r = run_planted(p, "--probe seed --seed 42 --seed-k 3 --seed-temperature 0.7");
  for (const char* k : {"seed-fixed#1", "seed-fixed#2"}) {
    CAPTURE(k);
    check_verdict(r.row("seed-fixed#0", k), not_exercised("seed"));
  }
  std::vector<int64_t> seeds;
  for (const json& q : r.requests)
    if (q.contains("seed")) seeds.push_back(q["seed"].get<int64_t>());
  CHECK(seeds == std::vector<int64_t>{42, 42, 43});
  CHECK(r.exit_code == 5);
}

// Rule (not_argmax only when greedy): the same planted step, " 4" sampled at -1.0 while " 6" has
// -0.25 (rank 1), at temperature 0 (alone, control) and at 0.7 (seed-fixed). Greedy rows mark both
// sides at step 1; the seed rows, sampled at 0.7, mark nothing.
TEST_CASE("verdicts llamacpp: a non-top sampled token is not_argmax at temperature 0 only") {
  planted p(LLAMACPP);
  const answer roll = answer({"Roll", " 4"}).top(1, {{" 6", -0.25}, {" 4", -1.0}});
  p.item("roll", {roll}).seeded("roll", roll, true);
  const outcome r = run_planted(p, "--probe seed --seed 7 --seed-k 2 --seed-temperature 0.7");
  check_verdict(r.row("alone", "control"),
                {.status = "identical", .not_argmax_a = true, .not_argmax_b = true, .not_argmax_step_a = 1, .not_argmax_step_b = 1});
  check_verdict(r.row("seed-fixed#0", "seed-fixed#1"), {.status = "identical"});
}

// Rule (batch and speculation on a server): nothing is sent for them; the rows are flagged not
// exercised with the advice to compare two servers with --probe cross, even though the server's
// answers report draft counts. Only alone and control reach the server. Neither probe judged an
// item: UNJUDGED, exit 5 (issue 46.5), each probe named.
TEST_CASE("verdicts llamacpp: batch and speculation on an HTTP target are not exercised") {
  planted p(LLAMACPP);
  p.item("no variants", {answer(CACHED).set("draft_proposed", 5).set("draft_accepted", 3)});
  const outcome r = run_planted(p, "--probe batch,speculation");
  for (const char* c : {"ubatch-1", "ubatch-8192"}) {
    CAPTURE(c);
    check_verdict(r.row("alone", c), unsent("--probe cross"));
  }
  check_verdict(r.row("alone", "spec-ngram"), unsent("speculative decoding"));
  CHECK(r.requests.size() == 2);
  CHECK(r.exit_code == 5);
  CHECK(r.err.find("probe batch judged nothing") != std::string::npos);
  CHECK(r.err.find("probe speculation judged nothing") != std::string::npos);
}

// Rule (a probe that judged nothing; issue 46.5): as above, with --fail-on none: no gate, not even
// the unjudged rule -> exit 0. And with the repeat probe beside them, repeat is judged but batch
// still is not: exit 5 (every probe asked for must judge something; the control pair never counts).
TEST_CASE("verdicts llamacpp: a probe that judged nothing is UNJUDGED unless --fail-on none") {
  planted p(LLAMACPP);
  p.item("nothing judged", {CACHED});
  verdict_server srv(p.cases());
  const std::string dir = fresh_dir();
  const std::string prompts = prompts_write(dir, p.prompts());
  const std::string base = "run --target " + srv.url() + " " + p.api_flags() + " --prompts " + prompts + " ";
  const outcome none = outcome_of(detaudit_cli(base + run_flags(dir + "/none", 16, "none") + " --probe batch"));
  CHECK(none.exit_code == 0);
  const outcome both = outcome_of(detaudit_cli(base + run_flags(dir + "/both") + " --probe repeat,batch"));
  check_verdict(both.row("alone", "repeat"), {.status = "identical"});
  CHECK(both.exit_code == 5);
  CHECK(both.err.find("probe batch judged nothing") != std::string::npos);
  CHECK(both.err.find("probe repeat judged nothing") == std::string::npos);
}

// Rule (cross pairs: only the explicit exercised:false flag of either side). Two OpenAI servers,
// cache probe. Within each target cache-warm reports cached_tokens 0 -> not exercised. Across the
// targets, A:cache-warm vs B:cache-warm carries no explicit flag -> exercised, and B's answer
// "Cross b" differs from A's "Cross a" at token 1, byte 6. A:cache-off vs B:cache-off carries the
// explicit flag -> not exercised. Exit 1 (a counted difference).
TEST_CASE("verdicts openai-chat: cross pairs judge only the explicit exercised flag") {
  planted pa(OPENAI_CHAT), pb(OPENAI_CHAT);
  const answer ca = answer({"Cross", " a"}), cb = answer({"Cross", " b"});
  pa.item("cross cache", {ca, ca, answer(ca).set("cached_tokens", 0)});
  pb.item("cross cache", {ca, ca, answer(cb).set("cached_tokens", 0)});
  verdict_server a(pa.cases()), b(pb.cases());
  const std::string dir = fresh_dir();
  const std::string prompts = prompts_write(dir, pa.prompts());
  const outcome r = outcome_of(detaudit_cli("run --target " + a.url() + " --target " + b.url() + " " + pa.api_flags() +
                                        " --prompts " + prompts + " " + run_flags(dir + "/run") + " --probe cache,cross"));
  check_verdict(r.row("A:alone", "A:cache-warm"), not_exercised("no tokens were served from the cache"));
  check_verdict(r.row("A:alone", "B:alone"), {.status = "identical"});
  check_verdict(r.row("A:cache-warm", "B:cache-warm"), {.status = "differs", .token_index = 1, .char_offset = 6});
  check_verdict(r.row("A:cache-off", "B:cache-off"), not_exercised("no per-request prompt-cache control"));
  CHECK(r.exit_code == 1);
}

// Rule (retokenized across targets stays a separate, non-failing status; issue 46.3): target A
// answers "Hello" as "Hel"+"lo" every time, B as "H"+"ello". Within each target every answer is
// identical; A:alone vs B:alone is retokenized (token 0, texts equal: char_offset -1), counted in
// the cross pair's retokenized, and --fail-on any passes: exit 0.
TEST_CASE("verdicts openai-chat: retokenized across two targets does not fail --fail-on any") {
  planted pa(OPENAI_CHAT), pb(OPENAI_CHAT);
  pa.item("cross retokenized", {answer({"Hel", "lo"})});
  pb.item("cross retokenized", {answer({"H", "ello"})});
  verdict_server a(pa.cases()), b(pb.cases());
  const std::string dir = fresh_dir();
  const std::string prompts = prompts_write(dir, pa.prompts());
  const outcome r = outcome_of(detaudit_cli("run --target " + a.url() + " --target " + b.url() + " " + pa.api_flags() +
                                            " --prompts " + prompts + " " + run_flags(dir + "/run") + " --probe repeat,cross"));
  check_verdict(r.row("A:alone", "B:alone"), {.status = "retokenized", .token_index = 0, .char_offset = -1});
  CHECK(r.pair("A:alone", "B:alone").value("one_target", true) == false);
  check_verdict(r.row("A:alone", "A:control"), {.status = "identical"});
  CHECK(r.exit_code == 0);
}

// Rule (ids across targets name two vocabularies): A answers " cat" with id 900, B with id 901,
// the same bytes: across targets ids are not compared where bytes are known -> identical; exit 0.
TEST_CASE("verdicts llamacpp: the same bytes under other ids on two targets are identical") {
  planted pa(LLAMACPP), pb(LLAMACPP);
  pa.item("cross ids", {answer({"The", " cat"}).id(1, 900)});
  pb.item("cross ids", {answer({"The", " cat"}).id(1, 901)});
  verdict_server a(pa.cases()), b(pb.cases());
  const std::string dir = fresh_dir();
  const std::string prompts = prompts_write(dir, pa.prompts());
  const outcome r = outcome_of(detaudit_cli("run --target " + a.url() + " --target " + b.url() + " " + pa.api_flags() +
                                            " --prompts " + prompts + " " + run_flags(dir + "/run") + " --probe repeat,cross"));
  check_verdict(r.row("A:alone", "B:alone"), {.status = "identical"});
  CHECK(r.exit_code == 0);
}

// Rule (every probe judges something on every target; hostile review): target A answers the
// burst in parallel (exercised), target B one request at a time (a queue, not exercised): the
// concurrency probe judged nothing on B -> UNJUDGED, exit 5, naming the target.
TEST_CASE("verdicts openai-chat: a probe that judged nothing on one of two targets is UNJUDGED") {
  planted pa(OPENAI_CHAT), pb(OPENAI_CHAT);
  pa.server("delay_ms", 150);
  pb.server("concurrency", "serial").server("delay_ms", 150);
  pa.item("two targets", {CACHED});
  pb.item("two targets", {CACHED});
  verdict_server a(pa.cases()), b(pb.cases());
  const std::string dir = fresh_dir();
  const std::string prompts = prompts_write(dir, pa.prompts());
  const outcome r = outcome_of(detaudit_cli("run --target " + a.url() + " --target " + b.url() + " " + pa.api_flags() +
                                            " --prompts " + prompts + " " + run_flags(dir + "/run") +
                                            " --probe concurrency --concurrency 4"));
  check_verdict(r.row("A:alone", "A:concurrent-4"), {.status = "identical"});
  check_verdict(r.row("B:alone", "B:concurrent-4"), not_exercised("one after another (a queue)"));
  CHECK(r.err.find("probe concurrency judged nothing on target B") != std::string::npos);
  CHECK(r.exit_code == 5);
}

}  // namespace
