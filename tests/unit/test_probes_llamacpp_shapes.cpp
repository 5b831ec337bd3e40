// The llama.cpp dialect on answers recorded from two real llama-servers, b4748 (February 2025) and
// a 2026-08 build (tests/data/llamacpp-shapes/, README there): /completion with pre- and
// post-sampling probabilities, streamed, /v1/completions (whose logprobs llama-server writes in
// the chat shape), /v1/chat/completions, and a speculating 2026 server's draft counters. The
// speculation probe against `detaudit serve --spec ngram` over HTTP:
// tests/e2e/test_probes_llamacpp_shapes.cpp.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "probes/response_limits.h"
#include "probes/target_http.h"
#include "reports/audit/record.h"
#include "reports/audit/steps.h"
#include "test_util.h"

using namespace detaudit;
using json = nlohmann::json;

namespace {

json shape(const std::string& build, const std::string& file) {
  return json::parse(test::file_text(test::test_data("llamacpp-shapes/" + build + "/" + file)));
}

// Every step has an id, a log-prob and `n_alts` alternatives with ids, best first.
void check_steps(const reports::record& r, size_t n_tokens, size_t n_alts) {
  REQUIRE(r.tokens.size() == n_tokens);
  REQUIRE(r.top_logprobs.size() == n_tokens);
  std::string text;
  for (size_t k = 0; k < n_tokens; ++k) {
    INFO("step " << k);
    CHECK(r.tokens[k].id >= 0);
    CHECK(r.tokens[k].logprob.has_value());
    REQUIRE(r.top_logprobs[k].size() == n_alts);
    for (const reports::alt_rec& a : r.top_logprobs[k]) CHECK(a.id >= 0);
    CHECK(r.tokens[k].rank == 0);  // greedy: the top alternative
    text += *reports::token_bytes(r.tokens[k]);
  }
  CHECK(text == r.text);
}

}  // namespace

TEST_CASE("llama.cpp shapes: /completion, /v1/completions and /v1/chat/completions of b4748 and 2026-08 parse alike") {
  for (const char* build : {"b4748", "2026-08"}) {
    INFO(build);
    reports::record c;
    probes::llamacpp_parse(shape(build, "completion.json"), false, c);
    reports::record_normalise(c);
    check_steps(c, 8, 3);
    CHECK(c.text == ", there was a little girl");
    CHECK(c.usage["prompt_tokens"] == 5);
    CHECK(c.evidence["cached_tokens"] == 0);  // 2026: timings.cache_n; b4748: tokens_evaluated - prompt_n

    reports::record ps;  // post_sampling_probs: probabilities, one candidate left at temperature 0
    probes::llamacpp_parse(shape(build, "completion_post_sampling.json"), false, ps);
    REQUIRE(ps.tokens.size() == 8);
    CHECK(ps.tokens[0].logprob == 0.0);

    reports::record v1;
    probes::openai_parse(shape(build, "v1_completions.json"), false, v1);
    reports::record_normalise(v1);
    check_steps(v1, 8, 3);
    for (size_t k = 0; k < 8; ++k) CHECK(v1.tokens[k].id == c.tokens[k].id);

    reports::record chat;
    probes::openai_parse(shape(build, "v1_chat_completions.json"), true, chat);
    reports::record_normalise(chat);
    check_steps(chat, 8, 3);

    const probes::response_limits lim = probes::response_limits_for(json::object());
    reports::record st;
    probes::llamacpp_parse(probes::stream_assemble_llamacpp(test::file_text(test::test_data("llamacpp-shapes/" + std::string(build) +
                                                                                           "/completion_stream.sse.txt")),
                                                            false, lim),
                           false, st);
    CHECK_FALSE(st.tokens.empty());
    CHECK_FALSE(st.text.empty());
  }
  // 2026 reports cache hits in the OpenAI routes too.
  reports::record v1;
  probes::openai_parse(shape("2026-08", "v1_completions.json"), false, v1);
  CHECK(v1.evidence.contains("cached_tokens"));
}

TEST_CASE("llama.cpp shapes: a speculating 2026-08 server's draft counters are the speculation evidence") {
  reports::record r;
  probes::llamacpp_parse(shape("2026-08", "completion_spec_nmax0.json"), false, r);
  // Sent with "speculative.n_max": 0, which this build ignores: it drafted all the same.
  CHECK(r.evidence["draft_proposed"] == 195);
  CHECK(r.evidence["draft_accepted"] == 43);
  // Its /slots say so before any request.
  bool speculative = false;
  for (const json& s : shape("2026-08", "slots_spec.json")) speculative = speculative || s.value("speculative", false);
  CHECK(speculative);
  // A server that does not draft leaves the counters out.
  reports::record plain;
  probes::llamacpp_parse(shape("2026-08", "completion.json"), false, plain);
  CHECK_FALSE(plain.evidence.contains("draft_proposed"));
}

