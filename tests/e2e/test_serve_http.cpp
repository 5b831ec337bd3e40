// detaudit serve over HTTP: the real binary on 127.0.0.1 (--port 0), driven by httplib::Client.
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <vector>

#include "serve_util.h"
#include "test_util.h"

using json = nlohmann::json;

namespace {

// stories260K behind `detaudit serve`; env_key (if any) reaches it as DETAUDIT_TEST_KEY.
struct server_proc : detaudit::test::serve_child {
  explicit server_proc(const std::vector<std::string>& extra, const char* env_key = nullptr)
      : serve_child(extra, "", env_key ? std::vector<std::pair<std::string, std::string>>{{"DETAUDIT_TEST_KEY", env_key}}
                                       : std::vector<std::pair<std::string, std::string>>{}) {}
};

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
  return r->get_header_value("Content-Type").rfind("application/json", 0) == 0 ? json::parse(r->body) : json(r->body);
}

bool is_openai_error(const json& j, int status) {
  return j.is_object() && j.contains("error") && j["error"]["message"].is_string() && !j["error"]["message"].get<std::string>().empty() &&
         j["error"]["type"].is_string() && j["error"]["code"] == status;
}

// The data: payloads of an SSE body, in order.
std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    REQUIRE(end != std::string::npos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

int64_t metric_value(const std::string& text, const std::string& name) {
  const std::string key = "\ndetaudit_" + name + " ";
  const size_t p = text.find(key);
  REQUIRE(p != std::string::npos);
  return std::stoll(text.substr(p + key.size()));
}

}  // namespace

TEST_CASE("serve_http: every endpoint answers in the llama.cpp and OpenAI shapes") {
  server_proc srv({"-np", "2", "-c", "512", "--chat-template", "chatml", "--slot-save-path",
                   detaudit::test::scratch_dir("serve_http_slots")});
  const int port = srv.port;

  CHECK(get(port, "/health") == json{{"status", "ok"}});

  json c = post(port, "/completion",
                {{"prompt", "Once upon a time"}, {"n_predict", 6}, {"n_probs", 3}, {"return_tokens", true}, {"logit_hashes", true}});
  CHECK(c["content"].is_string());
  CHECK(c["tokens"].size() == 6);
  CHECK(c["completion_probabilities"].size() == 6);
  CHECK(c["completion_probabilities"][0]["top_logprobs"].size() == 3);
  CHECK(c["completion_probabilities"][0]["bytes"].is_array());
  CHECK(c["logit_hashes"].size() == 6);
  CHECK(c["chained_hash"].get<std::string>().size() == 16);
  CHECK(c["stop_type"] == "limit");
  CHECK(c["timings"]["predicted_n"] == 6);
  CHECK(c["tokens_evaluated"].get<int>() > 0);
  CHECK(c["model"] == "stories260K.gguf");

  json ids = post(port, "/completion", {{"prompt", c["tokens"]}, {"n_predict", 2}});
  CHECK(ids["timings"]["prompt_n"] == 6);
  CHECK(post(port, "/completion", {{"prompt", "Once"}, {"n_predict", 20}, {"stop", c["content"]}})["stop_type"] == "word");

  json oc = post(port, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"logprobs", 2}, {"logit_hashes", true}});
  CHECK(oc["object"] == "text_completion");
  CHECK(oc["choices"][0]["logprobs"]["tokens"].size() == 4);
  CHECK(oc["choices"][0]["logprobs"]["top_logprobs"][0].size() == 2);
  CHECK(oc["choices"][0]["finish_reason"] == "length");
  CHECK(oc["usage"]["completion_tokens"] == 4);
  CHECK(oc["system_fingerprint"].get<std::string>().find("exact") != std::string::npos);
  CHECK(oc["chained_hash"].get<std::string>().size() == 16);
  // the same prompt and settings give the same hashes on either API
  CHECK(oc["logit_hashes"][0] == c["logit_hashes"][0]);

  json chat = post(port, "/v1/chat/completions",
                   {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}}},
                    {"max_tokens", 3}, {"logprobs", true}, {"top_logprobs", 2}});
  CHECK(chat["object"] == "chat.completion");
  CHECK(chat["choices"][0]["message"]["role"] == "assistant");
  CHECK(chat["choices"][0]["logprobs"]["content"].size() == 3);
  CHECK(chat["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size() == 2);
  CHECK(chat["system_fingerprint"].is_string());
  // A "developer" message is a system message to the template, as in llama-server: the same prompt,
  // so the same answer bit for bit.
  json dev = post(port, "/v1/chat/completions",
                  {{"messages", {{{"role", "developer"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}}},
                   {"max_tokens", 3}, {"logprobs", true}, {"top_logprobs", 2}});
  CHECK(dev["usage"]["prompt_tokens"] == chat["usage"]["prompt_tokens"]);
  CHECK(dev["choices"][0]["logprobs"] == chat["choices"][0]["logprobs"]);
  CHECK(dev["chained_hash"] == chat["chained_hash"]);
  json user_only = post(port, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 3}});
  CHECK(user_only["usage"]["prompt_tokens"] != chat["usage"]["prompt_tokens"]);

  json tok = post(port, "/tokenize", {{"content", "Hello world"}, {"with_pieces", true}});
  REQUIRE(tok["tokens"].size() > 0);
  CHECK(tok["tokens"][0]["piece"].is_string());
  json plain = post(port, "/tokenize", {{"content", "Hello world"}});
  json detok = post(port, "/detokenize", {{"tokens", plain["tokens"]}});
  CHECK(detok["content"].get<std::string>().find("Hello world") != std::string::npos);

  json models = get(port, "/v1/models");
  CHECK(models["data"][0]["id"] == "stories260K.gguf");
  json props = get(port, "/props");
  CHECK(props["total_slots"] == 2);
  CHECK(props["numerics"] == "exact");
  CHECK(props["model_sha256"].get<std::string>().size() == 64);
  CHECK(props["default_generation_settings"]["n_ctx"] == 256);
  json slots = get(port, "/slots");
  CHECK(slots.size() == 2);
  CHECK(slots[0]["n_ctx"] == 256);

  json saved = post(port, "/slots/0?action=save", {{"filename", "s0.bin"}});
  CHECK(saved["id_slot"] == 0);
  CHECK(post(port, "/slots/0?action=erase", json::object())["id_slot"] == 0);
  CHECK(post(port, "/slots/0?action=restore", {{"filename", "s0.bin"}})["id_slot"] == 0);
  CHECK(is_openai_error(post(port, "/slots/0?action=fly", json::object(), 400), 400));

  const std::string metrics = get(port, "/metrics").get<std::string>();
  CHECK(metric_value(metrics, "requests_total") >= 5);
  CHECK(metric_value(metrics, "generated_tokens_total") > 0);
  CHECK(metrics.find("# TYPE detaudit_steps_total counter") != std::string::npos);

  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_http: streaming answers are server-sent events that add up to the plain answer") {
  server_proc srv({"-np", "1", "-c", "256", "--chat-template", "chatml"});
  const int port = srv.port;
  const json req = {{"prompt", "Once upon a time"}, {"n_predict", 8}, {"logit_hashes", true}};
  const json plain = post(port, "/completion", req);
  json sreq = req;
  sreq["stream"] = true;
  auto c = client(port);
  auto r = c.Post("/completion", sreq.dump(), "application/json");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->get_header_value("Content-Type").rfind("text/event-stream", 0) == 0);
  const std::vector<std::string> events = sse_payloads(r->body);
  REQUIRE(events.size() == 9);
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json e = json::parse(events[i]);
    CHECK(e["stop"] == false);
    CHECK(e["logit_hash"] == plain["logit_hashes"][i]);
    text += e["content"].get<std::string>();
  }
  const json last = json::parse(events.back());
  CHECK(last["stop"] == true);
  CHECK(last["chained_hash"] == plain["chained_hash"]);
  CHECK(text == plain["content"]);

  json creq = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 4}, {"stream", true}};
  auto rc = c.Post("/v1/chat/completions", creq.dump(), "application/json");
  REQUIRE(rc);
  const std::vector<std::string> chunks = sse_payloads(rc->body);
  REQUIRE(chunks.size() >= 2);
  CHECK(chunks.back() == "[DONE]");
  const json fin = json::parse(chunks[chunks.size() - 2]);
  CHECK(fin["object"] == "chat.completion.chunk");
  CHECK(fin["choices"][0]["finish_reason"] == "length");
  CHECK(json::parse(chunks[0])["choices"][0]["delta"]["role"] == "assistant");

  auto ro = c.Post("/v1/completions", json({{"prompt", "Once"}, {"max_tokens", 3}, {"stream", true}}).dump(), "application/json");
  REQUIRE(ro);
  CHECK(sse_payloads(ro->body).back() == "[DONE]");
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_http: bad requests get their status and an OpenAI error object") {
  server_proc srv({"-np", "1", "-c", "128"});
  const int port = srv.port;
  struct bad_case {
    const char* name;
    const char* method;
    const char* path;
    std::string body;
    int status;
  };
  const std::string long_prompt(3000, 'x');
  const std::vector<bad_case> cases = {
      {"malformed JSON", "POST", "/completion", "{\"prompt\": ", 400},
      {"body not an object", "POST", "/completion", "[1, 2]", 400},
      {"prompt missing", "POST", "/completion", "{}", 400},
      {"prompt of the wrong type", "POST", "/completion", "{\"prompt\": 5}", 400},
      {"n_predict a string", "POST", "/completion", "{\"prompt\": \"a\", \"n_predict\": \"ten\"}", 400},
      {"temperature negative", "POST", "/completion", "{\"prompt\": \"a\", \"temperature\": -1}", 400},
      {"stop a number", "POST", "/completion", "{\"prompt\": \"a\", \"stop\": 3}", 400},
      {"token id outside the vocabulary", "POST", "/completion", "{\"prompt\": [1, 99999999]}", 400},
      {"prompt longer than the slot", "POST", "/completion", "{\"prompt\": \"" + long_prompt + "\"}", 400},
      {"n=2 on completions", "POST", "/v1/completions", "{\"prompt\": \"a\", \"n\": 2}", 400},
      {"n=2 on chat", "POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"n\": 2}", 400},
      {"messages missing", "POST", "/v1/chat/completions", "{}", 400},
      {"bad role", "POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"wizard\", \"content\": \"a\"}]}", 400},
      {"detokenize ids not an array", "POST", "/detokenize", "{\"tokens\": 3}", 400},
      {"unknown route", "GET", "/nope", "", 404},
      {"unknown POST route", "POST", "/v2/completions", "{}", 404},
      {"slot that does not exist", "POST", "/slots/7?action=erase", "{}", 404},
      {"body too large", "POST", "/completion", std::string(9u << 20, ' '), 413},
      {"grammar", "POST", "/completion", "{\"prompt\": \"a\", \"grammar\": \"root ::= [a-z]+\"}", 400},
      {"ignore_eos", "POST", "/completion", "{\"prompt\": \"a\", \"ignore_eos\": true}", 400},
      {"logit_bias", "POST", "/v1/completions", "{\"prompt\": \"a\", \"logit_bias\": {\"5\": 100}}", 400},
      {"json response_format", "POST", "/v1/chat/completions",
       "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"response_format\": {\"type\": \"json_object\"}}", 400},
  };
  // Neutral values of the rejected fields are accepted.
  post(port, "/completion", {{"prompt", "a"}, {"n_predict", 2}, {"grammar", ""}, {"ignore_eos", false}, {"logit_bias", json::array()},
                             {"typical_p", 1.0}, {"n_keep", 4}});
  for (const bad_case& bc : cases) {
    CAPTURE(bc.name);
    auto c = client(port);
    auto r = std::string(bc.method) == "GET" ? c.Get(bc.path) : c.Post(bc.path, bc.body, "application/json");
    REQUIRE(r);
    INFO(r->body);
    CHECK(r->status == bc.status);
    CHECK(is_openai_error(json::parse(r->body, nullptr, false), bc.status));
    CHECK(get(port, "/health")["status"] == "ok");
  }
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_http: an API key guards every route but /health") {
  server_proc srv({"-np", "1", "-c", "128", "--api-key-env", "DETAUDIT_TEST_KEY"}, "sesame");
  const int port = srv.port;
  auto c = client(port);
  auto r = c.Post("/completion", "{\"prompt\": \"a\", \"n_predict\": 1}", "application/json");
  REQUIRE(r);
  CHECK(r->status == 401);
  CHECK(is_openai_error(json::parse(r->body), 401));
  auto wrong = client(port);
  wrong.set_bearer_token_auth("sesamf");
  auto rw = wrong.Get("/props");
  REQUIRE(rw);
  CHECK(rw->status == 401);
  CHECK(get(port, "/health")["status"] == "ok");
  auto ok = client(port);
  ok.set_bearer_token_auth("sesame");
  auto ro = ok.Post("/completion", "{\"prompt\": \"a\", \"n_predict\": 1}", "application/json");
  REQUIRE(ro);
  CHECK(ro->status == 200);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_http: 8 concurrent requests give the tokens, log-probs and hashes of one-by-one requests") {
  server_proc srv({"-np", "8", "-c", "2048"});
  const int port = srv.port;
  const std::vector<std::string> prompts = {"Once upon a time", "The cat", "Lily and Ben went", "One day",
                                            "The sun was", "Tom had a big", "She said", "In the park"};
  auto request_for = [](const std::string& p, size_t i) {
    json r = {{"prompt", p}, {"n_predict", 24}, {"n_probs", 5}, {"logit_hashes", true}, {"return_tokens", true},
              {"cache_prompt", false}};
    if (i % 2 == 1) {
      r["temperature"] = 0.8;
      r["seed"] = 1000 + i;
    }
    return r;
  };
  std::vector<json> alone(prompts.size()), together(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) alone[i] = post(port, "/completion", request_for(prompts[i], i));
  std::vector<std::thread> threads;
  std::vector<std::string> bodies(prompts.size());
  std::vector<int> statuses(prompts.size(), 0);
  for (size_t i = 0; i < prompts.size(); ++i)
    threads.emplace_back([&, i] {
      auto c = client(port);
      auto r = c.Post("/completion", request_for(prompts[i], i).dump(), "application/json");
      if (r) {
        statuses[i] = r->status;
        bodies[i] = r->body;
      }
    });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(prompts[i]);
    REQUIRE(statuses[i] == 200);
    together[i] = json::parse(bodies[i]);
    CHECK(together[i]["tokens"] == alone[i]["tokens"]);
    CHECK(together[i]["completion_probabilities"] == alone[i]["completion_probabilities"]);
    CHECK(together[i]["logit_hashes"] == alone[i]["logit_hashes"]);
    CHECK(together[i]["chained_hash"] == alone[i]["chained_hash"]);
    CHECK(together[i]["content"] == alone[i]["content"]);
  }
  CHECK(metric_value(get(port, "/metrics").get<std::string>(), "max_seqs_in_step") >= 2);
  CHECK(srv.stop() == 0);
}

namespace {

// A raw HTTP/1.1 POST on its own socket, so a test can read part of a streamed answer and then
// vanish, as a client that was killed does.
struct raw_request {
  int fd = -1;
  raw_request(int port, const std::string& path, const std::string& body) {
    fd = detaudit::test::connect_loopback(port);
    const std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    REQUIRE(::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size()));
  }
  // Reads until `needle` has arrived (or 60 s pass); returns what was read.
  std::string read_until(const std::string& needle) {
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (got.find(needle) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 500) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }
  void vanish() {
    if (fd < 0) return;
    linger l{1, 0};  // close with RST, as a killed process's socket
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    ::close(fd);
    fd = -1;
  }
  ~raw_request() { vanish(); }
};

int64_t metric_now(int port, const std::string& name) { return metric_value(get(port, "/metrics").get<std::string>(), name); }

bool wait_metric(int port, const std::string& name, int64_t at_least) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (metric_now(port, name) >= at_least) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace

TEST_CASE("serve_http: a full queue answers 503 and a vanished streaming client frees its slot") {
  // One slot, a queue of one. A streams a generation that would take hours (a 65536-token slot);
  // B waits in the queue; C finds it full. When A's client vanishes, A stops and B is served.
  server_proc srv({"-np", "1", "-c", "65536", "--queue", "1"});
  const int port = srv.port;
  raw_request a(port, "/completion", json{{"prompt", "Once upon a time"}, {"n_predict", -1}, {"stream", true}}.dump());
  CHECK(a.read_until("data: ").find("data: ") != std::string::npos);
  int b_status = 0;
  std::jthread b_thread([&] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(90, 0);  // without the cancellation B would wait for A's whole slot
    auto r = c.Post("/completion", json{{"prompt", "The cat"}, {"n_predict", 4}}.dump(), "application/json");
    if (r) b_status = r->status;
  });
  REQUIRE(wait_metric(port, "requests_waiting", 1));
  {
    auto c = client(port);
    auto r = c.Post("/completion", json{{"prompt", "The dog"}, {"n_predict", 4}}.dump(), "application/json");
    REQUIRE(r);
    CHECK(r->status == 503);
    CHECK(is_openai_error(json::parse(r->body), 503));
  }
  CHECK(metric_now(port, "requests_rejected_total") == 1);
  a.vanish();
  b_thread.join();
  CHECK(b_status == 200);
  CHECK(metric_now(port, "requests_cancelled_total") == 1);
  // A was stopped long before its 4096-token slot filled.
  CHECK(metric_now(port, "generated_tokens_total") < 60000);
  bool idle = false;  // /slots is published after the step that answered B
  for (int i = 0; i < 500 && !idle; ++i) {
    idle = get(port, "/slots")[0]["is_processing"] == false;
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(idle);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_http: a draft model drafts, and the answers equal the server without one") {
  server_proc plain({"-np", "2", "-c", "1024"});
  server_proc drafted({"-np", "2", "-c", "1024", "--draft", detaudit::test::fixture("models/stories260K.gguf"), "--draft-max", "4"});
  for (double temp : {0.0, 0.9}) {
    CAPTURE(temp);
    const json body = {{"prompt", "Lily and Ben went"}, {"n_predict", 32}, {"n_probs", 3}, {"logit_hashes", true},
                       {"return_tokens", true}, {"temperature", temp}, {"seed", 5}};
    const json a = post(plain.port, "/completion", body);
    const json b = post(drafted.port, "/completion", body);
    CHECK(a["tokens"] == b["tokens"]);
    CHECK(a["completion_probabilities"] == b["completion_probabilities"]);
    CHECK(a["logit_hashes"] == b["logit_hashes"]);
    CHECK(b["draft_accepted"].get<int64_t>() > 0);
  }
  CHECK(metric_value(get(drafted.port, "/metrics").get<std::string>(), "draft_accepted_total") > 0);
  CHECK(get(drafted.port, "/props")["speculative"] == true);
  CHECK(plain.stop() == 0);
  CHECK(drafted.stop() == 0);
}
