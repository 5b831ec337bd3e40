// HTTP targets against the real `detaudit serve` on 127.0.0.1: the four dialects, detection and
// the capability probe, concurrent use, API keys kept out of every record. Redaction in-process:
// tests/unit/test_probes_http.cpp.
#include <doctest/doctest.h>

#include <thread>

#include "probes/target.h"
#include "test_probes_http_util.h"
#include "util/error.h"

using detaudit::probes::gen_request;
using detaudit::probes::target;
using detaudit::probes::target_make;
using detaudit::probes::target_options;
using detaudit::reports::record;
using json = nlohmann::json;

namespace {

const std::vector<std::string> SERVE_ARGS = {"-np", "4", "-c", "1024", "--chat-template", "chatml"};
constexpr int64_t N_PREDICT = 6;

target_options opts(const std::string& api) {
  target_options o;
  o.api = api;
  o.timeout_s = 60;
  o.retries = 0;
  return o;
}

gen_request raw_request() {
  gen_request r;
  r.prompt = "Once upon a time";
  r.n_predict = N_PREDICT;
  r.temperature = 0;
  r.seed = 42;
  r.n_probs = 3;
  return r;
}

gen_request chat_request() {
  gen_request r = raw_request();
  r.prompt.clear();
  r.messages = {{"system", "Be brief."}, {"user", "Tell me a story."}};
  return r;
}

// The checks every successful greedy answer passes, whatever the dialect.
void check_answer(const record& rec, const std::string& dialect) {
  CAPTURE(dialect);
  INFO("error: " << rec.error);
  REQUIRE(rec.error.empty());
  CHECK(rec.http_status == 200);
  CHECK(!rec.text.empty());
  REQUIRE(rec.tokens.size() == static_cast<size_t>(N_PREDICT));
  REQUIRE(rec.top_logprobs.size() == rec.tokens.size());
  std::string joined;
  for (size_t i = 0; i < rec.tokens.size(); ++i) {
    CAPTURE(i);
    REQUIRE(rec.top_logprobs[i].size() == 3);
    CHECK(rec.top_logprobs[i][0].logprob >= rec.top_logprobs[i][1].logprob);
    CHECK(rec.top_logprobs[i][1].logprob >= rec.top_logprobs[i][2].logprob);
    // greedy: the token drawn is the best alternative
    CHECK(rec.top_logprobs[i][0].token == rec.tokens[i].text);
    REQUIRE(rec.tokens[i].logprob.has_value());
    CHECK(*rec.tokens[i].logprob == rec.top_logprobs[i][0].logprob);
    joined += rec.tokens[i].text;
  }
  CHECK(joined == rec.text);
  CHECK(rec.finish_reason == "length");
  CHECK(rec.usage["completion_tokens"] == N_PREDICT);
  CHECK(rec.usage["prompt_tokens"].get<int64_t>() > 0);
  CHECK(rec.logprobs_kind == "pre-sampling");
  CHECK(rec.logit_hashes.size() == static_cast<size_t>(N_PREDICT));
  CHECK(rec.chained_hash.size() == 16);
  CHECK(rec.timings["t_end"].get<double>() >= rec.timings["t_start"].get<double>());
  CHECK(rec.timings["t_start"].get<double>() > 1.6e9);
  CHECK(rec.target["dialect"] == dialect);
  CHECK(rec.target["fingerprint"].get<std::string>().rfind("detaudit-", 0) == 0);
}

void check_ids(const record& rec) {
  for (size_t i = 0; i < rec.tokens.size(); ++i) {
    CAPTURE(i);
    CHECK(rec.tokens[i].id >= 0);
    CHECK(rec.tokens[i].id == rec.top_logprobs[i][0].id);
  }
}

}  // namespace

TEST_CASE("probes_http: each dialect answers the same greedy request identically twice") {
  detaudit::test::serve_proc srv(SERVE_ARGS);
  struct dialect_case {
    const char* api;
    bool chat;
    bool ids;
  };
  const std::vector<dialect_case> cases = {{"llamacpp", false, true},       {"openai-completions", false, false},
                                           {"ollama", false, false},        {"openai-chat", true, false},
                                           {"llamacpp", true, false},       {"ollama", true, false}};
  std::vector<record> raw, chat;
  for (const dialect_case& dc : cases) {
    CAPTURE(dc.api);
    CAPTURE(dc.chat);
    auto t = target_make(srv.url(), opts(dc.api));
    CHECK(t->dialect() == dc.api);
    const gen_request req = dc.chat ? chat_request() : raw_request();
    const record a = t->complete(req);
    const record b = t->complete(req);
    check_answer(a, dc.api);
    check_answer(b, dc.api);
    CHECK(a.text == b.text);
    CHECK(a.logit_hashes == b.logit_hashes);
    for (size_t i = 0; i < a.tokens.size() && i < b.tokens.size(); ++i) {
      CHECK(a.tokens[i].id == b.tokens[i].id);
      CHECK(a.top_logprobs[i][1].logprob == b.top_logprobs[i][1].logprob);
    }
    if (dc.ids) check_ids(a);
    else for (const auto& tok : a.tokens) CHECK(tok.id == -1);
    (dc.chat ? chat : raw).push_back(a);
  }
  // one server, one request: the same text, log-probs and hashes whichever API carried it
  for (const std::vector<record>* group : {&raw, &chat})
    for (const record& r : *group) {
      CHECK(r.text == (*group)[0].text);
      CHECK(r.logit_hashes == (*group)[0].logit_hashes);
      CHECK(r.top_logprobs[2][1].logprob == (*group)[0].top_logprobs[2][1].logprob);
      CHECK(r.top_logprobs[2][1].token == (*group)[0].top_logprobs[2][1].token);
    }
  CHECK(raw[0].request["n_probs"] == 3);
  CHECK(raw[0].request["return_tokens"] == true);
  CHECK(raw[0].request["logit_hashes"] == true);
  CHECK(raw[2].request["options"]["num_predict"] == N_PREDICT);
  CHECK(chat[0].request["top_logprobs"] == 3);
  CHECK(srv.stop() == 0);
}

TEST_CASE("probes_http: detection picks llamacpp for detaudit serve and the probe reads its capabilities") {
  detaudit::test::serve_proc srv(SERVE_ARGS);
  auto t = target_make(srv.url() + "/", opts(""));
  CHECK(t->dialect() == "llamacpp");
  CHECK(t->spec() == srv.url() + "/");
  const detaudit::probes::capabilities c = t->probe();
  CHECK(c.reachable);
  CHECK(c.token_ids);
  CHECK(c.cache_control);
  CHECK(c.logit_hashes);
  CHECK(c.metrics);
  CHECK(c.logprob_cap == 100);
  CHECK(c.logprobs_kind == "pre-sampling");
  CHECK(c.build.rfind("detaudit ", 0) == 0);
  CHECK(c.fingerprint.rfind("detaudit-", 0) == 0);
  CHECK(c.model == "stories260K.gguf");
  CHECK(c.model_sha256.size() == 64);
  CHECK(c.n_slots == 4);
  CHECK(c.raw["props"]["total_slots"] == 4);
  const json cj = detaudit::probes::capabilities_to_json(c);
  CHECK(cj["logprob_cap"] == 100);
  CHECK(cj["model"] == "stories260K.gguf");

  // an OpenAI base URL ending in /v1 names the same server
  auto o = target_make(srv.url() + "/v1", opts("openai-chat"));
  CHECK(o->dialect() == "openai-chat");
  CHECK(o->probe().logprob_cap == 20);
  CHECK(o->complete(chat_request()).error.empty());

  gen_request cached = raw_request();
  cached.cache_prompt = true;
  (void)t->complete(cached);
  const record warm = t->complete(cached);
  CHECK(warm.request["cache_prompt"] == true);
  CHECK(warm.evidence["cached_tokens"].get<int64_t>() > 0);

  const json m = t->metrics();
  REQUIRE(m.contains("detaudit_requests_total"));
  CHECK(m["detaudit_requests_total"].get<double>() >= 3);
  CHECK(srv.stop() == 0);
}

TEST_CASE("probes_http: a request kind the dialect cannot carry, a bad --api and a bad URL are input errors") {
  detaudit::test::serve_proc srv(SERVE_ARGS);
  CHECK_THROWS_AS(target_make(srv.url(), opts("openai-chat"))->complete(raw_request()), detaudit::input_error);
  CHECK_THROWS_AS(target_make(srv.url(), opts("openai-completions"))->complete(chat_request()), detaudit::input_error);
  CHECK_THROWS_WITH_AS(target_make(srv.url(), opts("vllm")), doctest::Contains("'vllm'"), detaudit::input_error);
  CHECK_THROWS_AS(target_make("ftp://127.0.0.1/", opts("")), detaudit::input_error);
  CHECK_THROWS_AS(target_make("127.0.0.1:8080", opts("")), detaudit::input_error);
  CHECK_THROWS_AS(target_make(srv.url() + "/?x=1", opts("")), detaudit::input_error);
  try {
    (void)target_make("http://me:hunter2@127.0.0.1:1/", opts(""));
    FAIL("credentials in a URL were accepted");
  } catch (const detaudit::input_error& e) {
    CHECK(std::string(e.what()).find("hunter2") == std::string::npos);
  }
  CHECK(srv.stop() == 0);
}

TEST_CASE("probes_http: complete() from many threads at once gives the answer of one request alone") {
  detaudit::test::serve_proc srv(SERVE_ARGS);
  auto t = target_make(srv.url(), opts("llamacpp"));
  gen_request req = raw_request();
  req.cache_prompt = false;
  const record alone = t->complete(req);
  REQUIRE(alone.error.empty());
  std::vector<record> together(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < together.size(); ++i) threads.emplace_back([&, i] { together[i] = t->complete(req); });
  for (std::thread& th : threads) th.join();
  for (const record& r : together) {
    CHECK(r.error.empty());
    CHECK(r.text == alone.text);
    CHECK(r.logit_hashes == alone.logit_hashes);
    CHECK(r.chained_hash == alone.chained_hash);
  }
  CHECK(srv.stop() == 0);
}

TEST_CASE("probes_http: an API key authenticates every request and never reaches a record") {
  const std::string key = "sk-test-SECRET123";
  detaudit::test::serve_proc srv(SERVE_ARGS, key.c_str());
  target_options o = opts("");
  o.api_key = key;
  auto t = target_make(srv.url(), o);
  CHECK(t->dialect() == "llamacpp");
  const json caps = detaudit::probes::capabilities_to_json(t->probe());
  CHECK(caps.dump().find("SECRET123") == std::string::npos);
  gen_request req = raw_request();
  req.extra = {{"user", "tenant " + key}};
  record rec = t->complete(req);
  CHECK(rec.error.empty());
  CHECK(rec.request["user"] == "tenant [REDACTED]");
  CHECK(detaudit::reports::record_to_json(rec).dump().find("SECRET123") == std::string::npos);

  // a wrong key: detection says so; a forced dialect records the 401
  target_options wrong = opts("");
  wrong.api_key = "sk-test-WRONG";
  CHECK_THROWS_WITH_AS(target_make(srv.url(), wrong), doctest::Contains("401"), detaudit::input_error);
  wrong.api = "llamacpp";
  rec = target_make(srv.url(), wrong)->complete(raw_request());
  CHECK(rec.http_status == 401);
  CHECK(rec.error.find("401") != std::string::npos);
  CHECK(rec.finish_reason == "error");
  CHECK(detaudit::reports::record_to_json(rec).dump().find("WRONG") == std::string::npos);

  // no key at all
  rec = target_make(srv.url(), opts("openai-chat"))->complete(chat_request());
  CHECK(rec.http_status == 401);
  CHECK(srv.stop() == 0);
}

