// /v1/completions log-probs of tokens that are not valid UTF-8 on their own (byte tokens of a
// split character): written as OpenAI does, "bytes:\xHH...", never through U+FFFD, so the bytes
// can be recovered and two different byte tokens never share a top_logprobs key. The escaping
// itself in-process: tests/unit/test_serve_logprobs.cpp.
#include <doctest/doctest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "model/synth.h"
#include "synth_util.h"
#include "serve_util.h"
#include "test_util.h"

using json = nlohmann::json;
using namespace detaudit;

namespace {

// A piece the engine reports as these bytes (llama.cpp's "bytes" array) when it is one byte
// >= 0x80: never valid UTF-8 alone. Returns "" for any other piece.
std::string lone_high_byte_text(const json& bytes) {
  if (bytes.size() != 1 || bytes[0].get<int>() < 0x80) return "";
  char buf[16];
  std::snprintf(buf, sizeof buf, "bytes:\\x%02x", bytes[0].get<int>());
  return buf;
}

}  // namespace

TEST_CASE("serve_logprobs: /v1/completions writes byte tokens in OpenAI bytes: form in tokens and top_logprobs keys") {
  test::serve_child srv({"-np", "1", "-c", "256"}, test::byte_token_model());
  const std::string prompt = "Once upon a time";
  // the engine's own account of the same greedy request: each token's bytes
  const json lc = test::post_json(srv.port, "/completion", {{"prompt", prompt}, {"n_predict", 20}, {"n_probs", 5}});
  const json oc = test::post_json(srv.port, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 20}, {"logprobs", 5}});
  REQUIRE(lc.contains("completion_probabilities"));
  REQUIRE(oc.contains("choices"));
  const json& steps = lc["completion_probabilities"];
  const json& lp = oc["choices"][0]["logprobs"];
  REQUIRE(steps.size() == 20);
  REQUIRE(lp["tokens"].size() == 20);
  int n_byte_tokens = 0, n_steps_two_byte_keys = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    CAPTURE(i);
    const std::string want = lone_high_byte_text(steps[i]["bytes"]);
    n_byte_tokens += want.empty() ? 0 : 1;
    CHECK(lp["tokens"][i] == (want.empty() ? steps[i]["token"] : json(want)));
    int n_byte_keys = 0;
    for (const json& e : steps[i]["top_logprobs"]) {
      const std::string key = lone_high_byte_text(e["bytes"]);
      if (key.empty()) continue;
      ++n_byte_keys;
      REQUIRE(lp["top_logprobs"][i].contains(key));
      CHECK(lp["top_logprobs"][i][key] == e["logprob"]);
    }
    n_steps_two_byte_keys += n_byte_keys >= 2 ? 1 : 0;
  }
  // the request really has byte tokens, generated and ranked, else this test would prove nothing
  CHECK(n_byte_tokens >= 1);
  CHECK(n_steps_two_byte_keys >= 1);
  // no token string went through U+FFFD (the text may: it holds the split characters)
  CHECK(lp["tokens"].dump().find("\xef\xbf\xbd") == std::string::npos);
  CHECK(lp["top_logprobs"].dump().find("\xef\xbf\xbd") == std::string::npos);

  // streamed, each chunk's logprobs say the same
  auto c = test::http_client(srv.port);
  auto r = c.Post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 20}, {"logprobs", 5}, {"stream", true}}.dump(),
                  "application/json");
  REQUIRE(r);
  json streamed = json::array();
  for (size_t pos = r->body.find("data: {"); pos != std::string::npos; pos = r->body.find("data: {", pos + 1)) {
    const json chunk = json::parse(r->body.substr(pos + 6, r->body.find("\n\n", pos) - pos - 6));
    const json& l = chunk["choices"][0]["logprobs"];
    if (l.is_object())
      for (const json& t : l["tokens"]) streamed.push_back(t);
  }
  CHECK(streamed == lp["tokens"]);
  CHECK(srv.stop() == 0);
}
