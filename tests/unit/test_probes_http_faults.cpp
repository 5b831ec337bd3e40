// HTTP targets against servers that misbehave: scripted responders (429 then 200, 500 forever,
// malformed bodies, a hang), a closed port, a listener that does not speak HTTP, and the older
// llama.cpp log-prob shape written by hand from llama.cpp's server README.
#include <doctest/doctest.h>

#include <cmath>

#include "probes/target.h"
#include "test_probes_http_util.h"
#include "util/error.h"

using detaudit::probes::gen_request;
using detaudit::probes::target_make;
using detaudit::probes::target_options;
using detaudit::probes::unreachable_error;
using detaudit::reports::record;
using detaudit::test::responder;
using detaudit::test::seconds_since;
using json = nlohmann::json;

namespace {

target_options fast_opts(const std::string& api) {
  target_options o;
  o.api = api;
  o.timeout_s = 5;
  o.retries = 2;
  o.backoff_s = 0.01;
  return o;
}

gen_request small_request() {
  gen_request r;
  r.prompt = "Hello";
  r.n_predict = 2;
  r.n_probs = 2;
  return r;
}

// A valid answer of llama.cpp's /completion in the newer shape (ids, log-probs).
const char* NEWER_BODY = R"({"content": " Hi there", "tokens": [17, 23], "stop_type": "limit", "tokens_evaluated": 2,
  "tokens_predicted": 2, "tokens_cached": 0,
  "completion_probabilities": [
    {"id": 17, "token": " Hi", "bytes": [32, 72, 105], "logprob": -0.5,
     "top_logprobs": [{"id": 17, "token": " Hi", "bytes": [32, 72, 105], "logprob": -0.5},
                      {"id": 9, "token": " Yo", "bytes": [32, 89, 111], "logprob": -1.25}]},
    {"id": 23, "token": " there", "bytes": [32, 116, 104, 101, 114, 101], "logprob": -0.25,
     "top_logprobs": [{"id": 23, "token": " there", "bytes": [32, 116, 104, 101, 114, 101], "logprob": -0.25},
                      {"id": 4, "token": "!", "bytes": [33], "logprob": -2.0}]}]})";

}  // namespace

TEST_CASE("probes_http_faults: a 429 with Retry-After is waited out, then the answer is read") {
  responder r;
  std::atomic<int> hits{0};
  r.srv.Post("/completion", [&](const httplib::Request&, httplib::Response& res) {
    if (hits++ == 0) {
      res.status = 429;
      res.set_header("Retry-After", "1");
      res.set_content(R"({"error": {"message": "slow down", "code": 429}})", "application/json");
      return;
    }
    res.set_content(NEWER_BODY, "application/json");
  });
  r.start();
  auto t = target_make(r.url(), fast_opts("llamacpp"));
  const auto t0 = std::chrono::steady_clock::now();
  const record rec = t->complete(small_request());
  CHECK(seconds_since(t0) >= 0.95);
  CHECK(hits == 2);
  INFO(rec.error);
  REQUIRE(rec.error.empty());
  CHECK(rec.http_status == 200);
  CHECK(rec.timings["attempts"] == 2);
  CHECK(rec.text == " Hi there");
  REQUIRE(rec.tokens.size() == 2);
  CHECK(rec.tokens[0].id == 17);
  CHECK(rec.tokens[1].text == " there");
  CHECK(rec.tokens[1].bytes.empty());
  CHECK(rec.top_logprobs[1][1].id == 4);
  CHECK(rec.top_logprobs[1][1].logprob == -2.0);
  CHECK(rec.finish_reason == "length");
  CHECK(rec.logprobs_kind == "pre-sampling");
}

TEST_CASE("probes_http_faults: 500 forever is recorded with its status after the retries") {
  responder r;
  std::atomic<int> hits{0};
  r.srv.Post("/v1/completions", [&](const httplib::Request&, httplib::Response& res) {
    ++hits;
    res.status = 500;
    res.set_content(R"({"error": {"message": "kv cache exploded", "type": "server_error", "code": 500}})", "application/json");
  });
  r.start();
  const record rec = target_make(r.url(), fast_opts("openai-completions"))->complete(small_request());
  CHECK(hits == 3);
  CHECK(rec.http_status == 500);
  CHECK(rec.error.find("HTTP 500") != std::string::npos);
  CHECK(rec.error.find("kv cache exploded") != std::string::npos);
  CHECK(rec.finish_reason == "error");
  CHECK(rec.timings["attempts"] == 3);
  CHECK(rec.request["prompt"] == "Hello");
}

TEST_CASE("probes_http_faults: malformed answers become record errors that name the problem") {
  responder r;
  r.srv.Post("/completion", [](const httplib::Request& req, httplib::Response& res) {
    const json b = json::parse(req.body);
    const std::string which = b["prompt"].get<std::string>();
    if (which == "not json") res.set_content("{\"content\": \"trunc", "application/json");
    // A number past double's range and then broken JSON: the reader's second look for the reason
    // meets the number first (nlohmann reports it as out_of_range, not parse_error).
    else if (which == "huge number") res.set_content("{\"content\": \"x\", \"n\": -1.25E616, \"t$$", "application/json");
    else if (which == "bad probs") res.set_content(R"({"content": "x", "completion_probabilities": 5})", "application/json");
    else if (which == "bad ids") res.set_content(R"({"content": "x", "tokens": ["a"]})", "application/json");
    else res.set_content(R"({"content": "x", "completion_probabilities": [{"id": 1, "token": "x", "logprob": "high"}]})", "application/json");
  });
  r.start();
  auto t = target_make(r.url(), fast_opts("llamacpp"));
  struct bad_case {
    const char* prompt;
    const char* names;
  };
  for (const bad_case& bc : {bad_case{"not json", "not valid JSON"}, bad_case{"huge number", "number overflow"},
                             bad_case{"bad probs", "completion_probabilities"},
                             bad_case{"bad ids", "tokens[0]"}, bad_case{"bad logprob", "completion_probabilities[0].logprob"}}) {
    CAPTURE(bc.prompt);
    gen_request q = small_request();
    q.prompt = bc.prompt;
    const record rec = t->complete(q);
    CHECK(rec.http_status == 200);
    CHECK(rec.error.find(bc.names) != std::string::npos);
    CHECK(rec.error.find(r.url() + "/completion") != std::string::npos);
    CHECK(rec.finish_reason == "error");
    CHECK(rec.text.empty());
    CHECK(rec.tokens.empty());
  }
}

TEST_CASE("probes_http_faults: a server that hangs is a timeout after the retries") {
  responder r;
  r.srv.Post("/completion", [&r](const httplib::Request&, httplib::Response& res) {
    const auto t0 = std::chrono::steady_clock::now();
    while (!r.stopping && seconds_since(t0) < 10) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    res.set_content("{}", "application/json");
  });
  r.start();
  target_options o = fast_opts("llamacpp");
  o.timeout_s = 0.4;
  o.retries = 1;
  auto t = target_make(r.url(), o);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(t->complete(small_request()), doctest::Contains("timed out"), unreachable_error);
  CHECK(seconds_since(t0) >= 0.8);
  CHECK(seconds_since(t0) < 5);
}

TEST_CASE("probes_http_faults: a closed port is unreachable quickly") {
  const std::string url = "http://127.0.0.1:" + std::to_string(detaudit::test::closed_port());
  target_options o = fast_opts("");
  o.api_key = "sk-test-SECRET123";
  const auto t0 = std::chrono::steady_clock::now();
  try {
    (void)target_make(url, o);
    FAIL("a closed port was reachable");
  } catch (const unreachable_error& e) {
    const std::string m = e.what();
    CHECK(m.find(url + "/props") != std::string::npos);
    CHECK(m.find("3 attempts") != std::string::npos);
    CHECK(m.find("SECRET123") == std::string::npos);
  }
  CHECK(seconds_since(t0) < 3);
  o.api = "ollama";
  CHECK_THROWS_AS(target_make(url, o)->complete(small_request()), unreachable_error);
}

TEST_CASE("probes_http_faults: a listener that does not speak HTTP is a clear error") {
  detaudit::test::garbage_listener g("SSH-2.0-OpenSSH_9.2\r\nProtocol mismatch.\r\n");
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(target_make(g.url(), fast_opts("")), doctest::Contains("not HTTP"), unreachable_error);
  CHECK_THROWS_WITH_AS(target_make(g.url(), fast_opts("openai-chat"))->probe(), doctest::Contains(g.url().c_str()), unreachable_error);
  CHECK(seconds_since(t0) < 5);
}

TEST_CASE("probes_http_faults: a server no dialect fits is told apart from one that is down") {
  responder r;
  r.srv.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
  r.srv.Get("/props", [](const httplib::Request&, httplib::Response& res) { res.set_content("<html>hi</html>", "text/html"); });
  r.start();
  CHECK_THROWS_WITH_AS(target_make(r.url(), fast_opts("")), doctest::Contains("pass --api NAME, one of llamacpp, ollama, openai-chat, openai-completions"),
                       detaudit::input_error);
}

TEST_CASE("probes_http_faults: an ollama server is detected before its OpenAI routes") {
  responder ol;
  ol.srv.Get("/api/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"version": "0.12.3"})", "application/json");
  });
  ol.srv.Get("/api/tags", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"models": [{"name": "qwen3:0.6b"}]})", "application/json");
  });
  ol.srv.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"object": "list", "data": [{"id": "qwen3:0.6b", "owned_by": "library"}]})", "application/json");
  });
  ol.start();
  auto t = target_make(ol.url(), fast_opts(""));
  CHECK(t->dialect() == "ollama");
  const detaudit::probes::capabilities c = t->probe();
  CHECK(c.model == "qwen3:0.6b");
  CHECK(c.build == "0.12.3");
  CHECK(!c.token_ids);
  CHECK(!c.cache_control);
  CHECK(!c.logit_hashes);
  CHECK(c.logprob_cap == 20);
  CHECK(c.logprobs_kind == "post-sampling");
}

TEST_CASE("probes_http_faults: an OpenAI server gets no llama.cpp fields and its answer is normalised") {
  responder oa;
  oa.srv.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"object": "list", "data": [{"id": "gpt-x", "owned_by": "someone"}]})", "application/json");
  });
  oa.srv.Post("/v1/chat/completions", [](const httplib::Request& req, httplib::Response& res) {
    const json b = json::parse(req.body);
    if (b.contains("cache_prompt") || b.contains("logit_hashes") || b["model"] != "gpt-x" || b["top_logprobs"] != 2) {
      res.status = 400;
      res.set_content(R"({"error": {"message": "unexpected field"}})", "application/json");
      return;
    }
    res.set_content(R"({"id": "c1", "object": "chat.completion", "system_fingerprint": "fp_abc",
      "choices": [{"index": 0, "message": {"role": "assistant", "content": "A\ufffd"}, "finish_reason": "stop",
      "logprobs": {"content": [{"token": "A", "logprob": -0.1, "bytes": [65], "top_logprobs": [{"token": "A", "logprob": -0.1, "bytes": [65]}, {"token": "B", "logprob": -2.5, "bytes": [66]}]},
                               {"token": "\ufffd", "logprob": -0.3, "bytes": [226, 128], "top_logprobs": []}]}}],
      "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11, "prompt_tokens_details": {"cached_tokens": 8}}})",
                    "application/json");
  });
  oa.start();
  auto o = target_make(oa.url(), fast_opts(""));
  CHECK(o->dialect() == "openai-chat");
  gen_request q = small_request();
  q.prompt.clear();
  q.messages = {{"user", "hi"}};
  q.cache_prompt = true;
  const record rec = o->complete(q);
  INFO(rec.error);
  REQUIRE(rec.error.empty());
  CHECK(rec.text == "A\xef\xbf\xbd");
  REQUIRE(rec.tokens.size() == 2);
  CHECK(rec.tokens[0].bytes.empty());
  CHECK(rec.tokens[1].bytes == std::vector<uint8_t>{226, 128});
  CHECK(rec.top_logprobs[0][1].token == "B");
  CHECK(rec.top_logprobs[1].empty());
  CHECK(rec.finish_reason == "stop");
  CHECK(rec.evidence["cached_tokens"] == 8);
  CHECK(rec.usage["cached_tokens"] == 8);
  CHECK(rec.logprobs_kind == "post-sampling");
  CHECK(rec.target["fingerprint"] == "fp_abc");
  CHECK(rec.logit_hashes.empty());
}

TEST_CASE("probes_http_faults: the older llama.cpp probs shape is normalised to log-probs") {
  // llama.cpp's server README before the log-prob shape: {content, probs: [{tok_str, prob}]}.
  responder r;
  r.srv.Post("/completion", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"content": " Hello world", "stop": true, "model": "tiny.gguf",
      "tokens_predicted": 2, "tokens_evaluated": 4, "tokens_cached": 3, "truncated": false,
      "stopped_eos": false, "stopped_word": false, "stopped_limit": true, "stopping_word": "",
      "timings": {"prompt_n": 1, "prompt_ms": 1.5, "predicted_n": 2, "predicted_ms": 3.0},
      "completion_probabilities": [
        {"content": " Hello", "probs": [{"tok_str": " Hello", "prob": 0.75}, {"tok_str": " Hi", "prob": 0.25}]},
        {"content": " world", "probs": [{"tok_str": " there", "prob": 0.5}, {"tok_str": " world", "prob": 0.375},
                                        {"tok_str": "!", "prob": 0.0}]}]})",
                    "application/json");
  });
  r.start();
  const record rec = target_make(r.url(), fast_opts("llamacpp"))->complete(small_request());
  INFO(rec.error);
  REQUIRE(rec.error.empty());
  CHECK(rec.text == " Hello world");
  REQUIRE(rec.tokens.size() == 2);
  CHECK(rec.tokens[0].id == -1);
  CHECK(rec.tokens[0].text == " Hello");
  CHECK(rec.tokens[0].logprob == std::log(0.75));
  CHECK(rec.tokens[1].text == " world");
  CHECK(rec.tokens[1].logprob == std::log(0.375));
  REQUIRE(rec.top_logprobs.size() == 2);
  REQUIRE(rec.top_logprobs[1].size() == 3);
  CHECK(rec.top_logprobs[0][1].token == " Hi");
  CHECK(rec.top_logprobs[0][1].logprob == std::log(0.25));
  CHECK(rec.top_logprobs[1][0].token == " there");
  CHECK(rec.top_logprobs[1][0].logprob == std::log(0.5));
  CHECK(rec.top_logprobs[1][0].id == -1);
  CHECK(std::isfinite(rec.top_logprobs[1][2].logprob));
  CHECK(rec.top_logprobs[1][2].logprob < -700);
  CHECK(rec.finish_reason == "length");
  CHECK(rec.usage["prompt_tokens"] == 4);
  CHECK(rec.usage["completion_tokens"] == 2);
  CHECK(rec.evidence["cached_tokens"] == 3);
  CHECK(rec.timings["server"]["predicted_ms"] == 3.0);
  // no detaudit serve behind it: the hash extension is not asked for
  CHECK(!rec.request.contains("logit_hashes"));
  CHECK(rec.request["return_tokens"] == true);
}

TEST_CASE("probes_http_faults: ids fill a stop-word-trimmed completion_probabilities on their common prefix") {
  // llama.cpp drops the stop word's tokens from completion_probabilities but not from "tokens".
  responder r;
  r.srv.Post("/completion", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"content": " Hi", "tokens": [17, 5, 6], "stop_type": "word", "stopping_word": " the end",
      "completion_probabilities": [{"token": " Hi", "logprob": -0.5, "top_logprobs": [{"token": " Hi", "logprob": -0.5}]}]})",
                    "application/json");
  });
  r.start();
  const record rec = target_make(r.url(), fast_opts("llamacpp"))->complete(small_request());
  INFO(rec.error);
  REQUIRE(rec.error.empty());
  REQUIRE(rec.tokens.size() == 1);
  CHECK(rec.tokens[0].id == 17);
  CHECK(rec.tokens[0].text == " Hi");
  CHECK(rec.top_logprobs[0][0].id == -1);
  CHECK(rec.finish_reason == "stop");
}

TEST_CASE("probes_http_faults: a probabilities entry that covers several byte tokens is aligned to the ids") {
  // llama.cpp b4748 sends one completion_probabilities entry per text chunk: tokens 228 and 29
  // end inside a UTF-8 character, so the chunk's entry carries token 433's id with the text of all
  // three (a real answer's shape, ids and bytes from a synthetic model with stories260K's vocabulary).
  responder r;
  r.srv.Post("/completion", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"content": "\u001ak l", "tokens": [228, 29, 433, 111], "stop_type": "limit",
      "completion_probabilities": [
        {"id": 433, "token": "\u001ak", "bytes": [26, 107], "logprob": -1.0,
         "top_logprobs": [{"id": 433, "token": "k", "bytes": [107], "logprob": -1.0}, {"id": 7, "token": "x", "bytes": [120], "logprob": -1.5}]},
        {"id": 111, "token": " l", "bytes": [32, 108], "logprob": -0.25,
         "top_logprobs": [{"id": 111, "token": " l", "bytes": [32, 108], "logprob": -0.25}, {"id": 9, "token": "y", "bytes": [121], "logprob": -2.0}]}]})",
                    "application/json");
  });
  r.start();
  const record rec = target_make(r.url(), fast_opts("llamacpp"))->complete(small_request());
  INFO(rec.error);
  REQUIRE(rec.error.empty());
  REQUIRE(rec.tokens.size() == 4);
  CHECK(rec.tokens[0].id == 228);
  CHECK(rec.tokens[1].id == 29);
  CHECK(rec.tokens[2].id == 433);
  CHECK(rec.tokens[3].id == 111);
  REQUIRE(rec.top_logprobs.size() == 4);
  CHECK(rec.top_logprobs[0].empty());
  CHECK(rec.top_logprobs[1].empty());
  REQUIRE(rec.top_logprobs[2].size() == 2);
  CHECK(rec.top_logprobs[2][1].id == 7);
  CHECK(rec.top_logprobs[3][0].id == 111);
  CHECK(rec.evidence["steps_without_logprobs"] == 2);
}

TEST_CASE("probes_http_faults: a probabilities entry whose id is not in tokens is an error") {
  responder r;
  r.srv.Post("/completion", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"content": "a", "tokens": [5],
      "completion_probabilities": [{"id": 6, "token": "a", "logprob": -1.0, "top_logprobs": []}]})",
                    "application/json");
  });
  r.start();
  const record rec = target_make(r.url(), fast_opts("llamacpp"))->complete(small_request());
  CHECK(rec.error.find("completion_probabilities[0]") != std::string::npos);
}
