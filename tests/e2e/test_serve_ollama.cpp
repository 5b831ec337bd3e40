// detaudit serve's ollama routes over HTTP: the real binary on 127.0.0.1, driven by httplib::Client;
// answers compared with the llama.cpp and OpenAI routes for the same request.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "test_probes_http_util.h"

using json = nlohmann::json;

namespace {

httplib::Client client(int port) { return detaudit::test::http_client(port); }
json post(int port, const std::string& path, const json& body, int expect = 200) {
  return detaudit::test::post_json(port, path, body, expect);
}

json get(int port, const std::string& path) {
  auto c = client(port);
  auto r = c.Get(path.c_str());
  REQUIRE(r);
  INFO(path << " -> " << r->body);
  CHECK(r->status == 200);
  return json::parse(r->body);
}

const json OPTIONS = {{"num_predict", 6}, {"temperature", 0}, {"seed", 7}};

}  // namespace

TEST_CASE("serve_ollama: version, tags, and generate in ollama's shape with the tokens of /completion") {
  detaudit::test::serve_proc srv({"-np", "2", "-c", "512", "--chat-template", "chatml"});
  const int port = srv.port;
  CHECK(get(port, "/api/version")["version"].is_string());
  const json tags = get(port, "/api/tags");
  REQUIRE(tags["models"].size() == 1);
  CHECK(tags["models"][0]["name"] == "stories260K.gguf");
  CHECK(tags["models"][0]["digest"].get<std::string>().size() == 64);
  CHECK(tags["models"][0]["size"].get<int64_t>() > 0);

  const json g = post(port, "/api/generate",
                      {{"model", "stories260K.gguf"}, {"prompt", "Once upon a time"}, {"raw", true}, {"stream", false},
                       {"options", OPTIONS}, {"logprobs", true}, {"top_logprobs", 2}, {"logit_hashes", true}});
  CHECK(g["model"] == "stories260K.gguf");
  CHECK(g["done"] == true);
  CHECK(g["done_reason"] == "length");
  CHECK(g["eval_count"] == 6);
  CHECK(g["prompt_eval_count"].get<int>() > 0);
  CHECK(g["total_duration"].get<int64_t>() >= g["eval_duration"].get<int64_t>());
  CHECK(g["created_at"].get<std::string>().back() == 'Z');
  REQUIRE(g["logprobs"].size() == 6);
  CHECK(g["logprobs"][0]["top_logprobs"].size() == 2);
  CHECK(g["logprobs"][0]["bytes"].is_array());

  const json c = post(port, "/completion",
                      {{"prompt", "Once upon a time"}, {"n_predict", 6}, {"temperature", 0}, {"seed", 7}, {"n_probs", 2},
                       {"logit_hashes", true}});
  CHECK(g["response"] == c["content"]);
  CHECK(g["logit_hashes"] == c["logit_hashes"]);
  CHECK(g["chained_hash"] == c["chained_hash"]);
  for (size_t i = 0; i < 6; ++i) {
    CAPTURE(i);
    const json& a = g["logprobs"][i];
    const json& b = c["completion_probabilities"][i];
    CHECK(a["token"] == b["token"]);
    CHECK(a["logprob"] == b["logprob"]);
    CHECK(a["top_logprobs"][1]["token"] == b["top_logprobs"][1]["token"]);
    CHECK(a["top_logprobs"][1]["logprob"] == b["top_logprobs"][1]["logprob"]);
  }

  // a stop string in options ends generation there
  json stop_opts = OPTIONS;
  stop_opts["num_predict"] = 20;
  stop_opts["stop"] = {g["response"]};
  const json s = post(port, "/api/generate", {{"prompt", "Once upon a time"}, {"raw", true}, {"stream", false}, {"options", stop_opts}});
  CHECK(s["done_reason"] == "stop");
  CHECK(s["response"] == "");
  CHECK(!s.contains("logprobs"));

  // an empty prompt only "loads the model"
  const json l = post(port, "/api/generate", {{"model", "x"}, {"stream", false}});
  CHECK(l["done_reason"] == "load");
  CHECK(l["done"] == true);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_ollama: chat and templated generate render as /v1/chat/completions does") {
  detaudit::test::serve_proc srv({"-np", "1", "-c", "512", "--chat-template", "chatml"});
  const int port = srv.port;
  const json msgs = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}};
  const json oa = post(port, "/v1/chat/completions", {{"messages", msgs}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", true},
                                                      {"top_logprobs", 2}});
  const json ch = post(port, "/api/chat", {{"model", "m"}, {"messages", msgs}, {"stream", false}, {"options", OPTIONS},
                                           {"logprobs", true}, {"top_logprobs", 2}});
  CHECK(ch["message"]["role"] == "assistant");
  CHECK(ch["message"]["content"] == oa["choices"][0]["message"]["content"]);
  CHECK(ch["done_reason"] == oa["choices"][0]["finish_reason"]);
  REQUIRE(ch["logprobs"].size() == oa["choices"][0]["logprobs"]["content"].size());
  CHECK(ch["logprobs"][0] == oa["choices"][0]["logprobs"]["content"][0]);

  // without raw, generate renders {system, prompt} as a conversation
  const json tg = post(port, "/api/generate", {{"prompt", "Hi"}, {"system", "Be brief."}, {"stream", false}, {"options", OPTIONS}});
  CHECK(tg["response"] == oa["choices"][0]["message"]["content"]);

  // ollama's default is streaming: one NDJSON line holding the whole answer
  auto c = client(port);
  auto r = c.Post("/api/chat", json({{"messages", msgs}, {"options", OPTIONS}}).dump(), "application/json");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->get_header_value("Content-Type") == "application/x-ndjson");
  REQUIRE(!r->body.empty());
  CHECK(r->body.back() == '\n');
  CHECK(r->body.find('\n') == r->body.size() - 1);
  const json line = json::parse(r->body);
  CHECK(line["done"] == true);
  CHECK(line["message"]["content"] == ch["message"]["content"]);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_ollama: bad requests get 400 naming the field") {
  detaudit::test::serve_proc srv({"-np", "1", "-c", "256", "--chat-template", "chatml"});
  const int port = srv.port;
  struct bad_case {
    const char* path;
    json body;
    const char* names;
  };
  const std::vector<bad_case> cases = {
      {"/api/generate", {{"prompt", "a"}, {"options", 3}}, "options"},
      {"/api/generate", {{"prompt", "a"}, {"options", {{"num_predict", "ten"}}}}, "num_predict"},
      {"/api/generate", {{"prompt", "a"}, {"options", {{"temperature", -1}}}}, "temperature"},
      {"/api/generate", {{"prompt", "a"}, {"images", {"aGk="}}}, "images"},
      {"/api/generate", {{"prompt", "a"}, {"format", "json"}}, "format"},
      {"/api/generate", {{"prompt", 5}}, "prompt"},
      {"/api/generate", {{"prompt", "a"}, {"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs"},
      {"/api/chat", json::object(), "messages"},
      {"/api/chat", {{"messages", {{{"role", "tool"}, {"content", "x"}}}}}, "role"},
  };
  for (const bad_case& bc : cases) {
    CAPTURE(bc.path);
    CAPTURE(bc.body.dump());
    const json e = post(port, bc.path, bc.body, 400);
    REQUIRE(e["error"]["message"].is_string());
    CHECK(e["error"]["message"].get<std::string>().find(bc.names) != std::string::npos);
  }
  CHECK(get(port, "/health")["status"] == "ok");
  CHECK(srv.stop() == 0);
}
