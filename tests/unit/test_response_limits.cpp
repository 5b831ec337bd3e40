// Bounds on what an HTTP target's answer may cost (probes/response_limits.h): derived from the
// request, applied while the answer is parsed (values, depth, events) and once it is read (tokens,
// alternatives, text); server metadata cut to a fixed size before it is stored.
#include <doctest/doctest.h>

#include <string>

#include "probes/response_limits.h"
#include "probes/target_http.h"

using namespace detaudit::probes;
using json = nlohmann::json;

namespace {

std::string nested(size_t depth) { return std::string(depth - 1, '[') + "1" + std::string(depth - 1, ']'); }

}  // namespace

TEST_CASE("response_limits: the bounds follow what the request asked") {
  const response_limits l = response_limits_for({{"prompt", "Hello"}, {"n_predict", 4}, {"n_probs", 2}});
  CHECK(l.max_tokens == 4 + TOKEN_MARGIN);
  CHECK(l.max_alts == 2 + ALT_MARGIN);
  CHECK(l.max_events == l.max_tokens + 64);
  CHECK(l.max_depth == ANSWER_MAX_DEPTH);
  CHECK(l.max_body < (size_t(2) << 20));  // about a megabyte, not the client's 256 MiB
  CHECK(l.asked == "n_predict 4, n_probs 2");
  // OpenAI's names, ollama's options, no limit at all
  CHECK(response_limits_for({{"max_tokens", 8}, {"top_logprobs", 5}}).max_alts == 5 + ALT_MARGIN);
  CHECK(response_limits_for({{"options", {{"num_predict", 3}}}}).max_tokens == 3 + TOKEN_MARGIN);
  const response_limits unlimited = response_limits_for({{"n_predict", -1}});
  CHECK(unlimited.max_tokens == TOKENS_UNLIMITED + TOKEN_MARGIN);
  CHECK(unlimited.max_body <= (size_t(256) << 20));
  // a long prompt may be echoed: its bytes are allowed for
  const std::string prompt(100000, 'x');
  CHECK(response_limits_for({{"prompt", prompt}, {"n_predict", 4}}).max_body ==
        response_limits_for({{"prompt", ""}, {"n_predict", 4}}).max_body + 6 * 100000);
}

TEST_CASE("response_limits: parsing stops at the value budget, shared by a stream's events, and at 64 levels") {
  response_limits l = response_limits_for({{"n_predict", 4}});
  l.max_values = 100;
  size_t used = 0;
  const json ok = json_parse_bounded(R"({"a": [1, 2, 3]})", l, &used);
  CHECK(ok["a"].size() == 3);
  CHECK(used == 6);  // the object, its key, the array and its three numbers
  std::string many = "[";
  for (int i = 0; i < 200; ++i) many += (i ? ",0" : "0");
  many += "]";
  CHECK_THROWS_WITH_AS(json_parse_bounded(many, l, nullptr), doctest::Contains("more than 100 JSON values"), response_error);
  // two events of 60 values each: the second passes the shared budget
  std::string sixty = "[";
  for (int i = 0; i < 59; ++i) sixty += (i ? ",0" : "0");
  sixty += "]";
  size_t stream_used = 0;
  CHECK_NOTHROW(json_parse_bounded(sixty, l, &stream_used));
  CHECK_THROWS_AS(json_parse_bounded(sixty, l, &stream_used), response_error);
  // depth: 64 levels pass, 65 do not
  l.max_values = 1000;
  CHECK_NOTHROW(json_parse_bounded(nested(64), l, nullptr));
  CHECK_THROWS_WITH_AS(json_parse_bounded(nested(65), l, nullptr), doctest::Contains("more than 64 levels deep"), response_error);
  CHECK_THROWS_AS(json_parse_bounded(nested(100000), l, nullptr), response_error);
  // not JSON: discarded, as json::parse would
  CHECK(json_parse_bounded("{\"a\": ", l, nullptr).is_discarded());
}

TEST_CASE("response_limits: tokens, alternatives and text beyond what was asked are refused") {
  const response_limits l = response_limits_for({{"n_predict", 4}, {"n_probs", 2}});
  detaudit::reports::record rec;
  rec.tokens.resize(4 + TOKEN_MARGIN);
  CHECK_NOTHROW(record_limits_check(rec, l));
  rec.tokens.resize(40);
  CHECK_THROWS_WITH_AS(record_limits_check(rec, l), doctest::Contains("holds 40 tokens, more than the 4 asked"), response_error);
  rec.tokens.resize(4);
  rec.top_logprobs.assign(4, std::vector<detaudit::reports::alt_rec>(2));
  rec.top_logprobs[3].resize(2 + ALT_MARGIN + 1);
  CHECK_THROWS_WITH_AS(record_limits_check(rec, l), doctest::Contains("step 3 holds 19 alternatives"), response_error);
  rec.top_logprobs[3].resize(2);
  rec.text.assign(l.max_text + 1, 'x');
  CHECK_THROWS_WITH_AS(record_limits_check(rec, l), doctest::Contains("text holds"), response_error);
}

TEST_CASE("response_limits: stored metadata is cut to its size and depth, saying so") {
  const json small = {{"prompt_ms", 1.5}, {"cache_n", 3}};
  CHECK(json_bounded(small, 1024) == small);
  json wide = json::array();
  for (int i = 0; i < 100000; ++i) wide.push_back(i);
  const json cut = json_bounded(wide, 4096);
  CHECK(cut.dump().size() < 4096 + 200);
  CHECK(cut.back().get<std::string>().find("more left out") != std::string::npos);
  const json long_string = json_bounded({{"s", std::string(1 << 20, 'a')}}, 4096);
  CHECK(long_string.dump().size() < 4096 + 200);
  CHECK(long_string["s"].get<std::string>().find("1048576 bytes, cut") != std::string::npos);
  const json deep = json::parse(nested(40));
  const std::string shallow = json_bounded(deep, 1 << 20).dump();
  CHECK(shallow.find("nested more than 16 levels: left out") != std::string::npos);
  CHECK(text_bounded("abc", 10) == "abc");
  CHECK(text_bounded(std::string(300, 'z'), 256).size() < 300);
}
