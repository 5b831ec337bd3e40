// Per-request batch evidence over HTTP: every completion answer of `detaudit serve` (llama.cpp,
// OpenAI and ollama routes, streamed or not) says in "max_seqs_in_step" how many requests shared
// a forward step with it: 1 alone, >= 2 when it really ran together with another.
#include <doctest/doctest.h>

#include <future>
#include <httplib.h>
#include <latch>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "serve_util.h"
#include "test_util.h"

using json = nlohmann::json;
using namespace detaudit;

namespace {

// One completion request: a route, streamed or not.
struct route_case {
  const char* path;
  bool stream;
};

const route_case ROUTES[] = {
    {"/completion", false},      {"/completion", true},  {"/v1/completions", false}, {"/v1/completions", true},
    {"/v1/chat/completions", false}, {"/v1/chat/completions", true}, {"/api/generate", false}, {"/api/generate", true},
    {"/api/chat", false},        {"/api/chat", true},
};

json body_for(const route_case& rc, const std::string& prompt, int n_predict) {
  const std::string path = rc.path;
  const json messages = json::array({{{"role", "user"}, {"content", prompt}}});
  if (path == "/completion") return {{"prompt", prompt}, {"n_predict", n_predict}, {"stream", rc.stream}};
  if (path == "/v1/completions") return {{"prompt", prompt}, {"max_tokens", n_predict}, {"stream", rc.stream}};
  if (path == "/v1/chat/completions") return {{"messages", messages}, {"max_tokens", n_predict}, {"stream", rc.stream}};
  json b = {{"stream", rc.stream}, {"options", {{"num_predict", n_predict}}}};
  if (path == "/api/generate") b["prompt"] = prompt;
  else b["messages"] = messages;
  return b;
}

// The data: payloads of an SSE body, in order.
std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  for (size_t pos = body.find("data: "); pos != std::string::npos; pos = body.find("data: ", pos)) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

// The answer object that carries the request's evidence: the body itself, the final SSE event
// (llama.cpp), the chunk with "usage" (OpenAI), or the one NDJSON line (ollama).
json evidence_answer(const route_case& rc, const std::string& body) {
  const std::string path = rc.path;
  if (!rc.stream || path.rfind("/api/", 0) == 0) return json::parse(body);
  const std::vector<std::string> events = sse_payloads(body);
  REQUIRE(!events.empty());
  if (path == "/completion") {
    const json last = json::parse(events.back());
    CHECK(last.value("stop", false));
    for (size_t i = 0; i + 1 < events.size(); ++i) CHECK_FALSE(json::parse(events[i]).contains("max_seqs_in_step"));
    return last;
  }
  REQUIRE(events.size() >= 2);
  CHECK(events.back() == "[DONE]");
  const json last = json::parse(events[events.size() - 2]);
  CHECK(last.contains("usage"));
  return last;
}

// The request's max_seqs_in_step, checked to be there as an integer.
int64_t evidence_of(const route_case& rc, int status, const std::string& body) {
  CAPTURE(rc.path);
  CAPTURE(rc.stream);
  INFO("answer: " << body);
  REQUIRE(status == 200);
  const json j = evidence_answer(rc, body);
  REQUIRE(j.contains("max_seqs_in_step"));
  REQUIRE(j["max_seqs_in_step"].is_number_integer());
  return j["max_seqs_in_step"].get<int64_t>();
}

// A streamed /completion read on its own thread; `first_event` is ready once its first token
// event has arrived, that is once it is generating in a slot.
struct background_stream {
  std::promise<void> first;
  std::shared_future<void> first_event = first.get_future().share();
  std::string body;
  int status = 0;
  std::thread thread;

  background_stream(int port, const json& b) {
    thread = std::thread([this, port, text = b.dump()] {
      auto c = test::http_client(port);
      httplib::Request req;
      req.method = "POST";
      req.path = "/completion";
      req.body = text;
      req.set_header("Content-Type", "application/json");
      bool told = false;
      req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
        body.append(d, n);
        if (!told && body.find("\n\n") != std::string::npos) {
          told = true;
          first.set_value();
        }
        return true;
      };
      if (auto r = c.send(req)) status = r->status;
      if (!told) first.set_value();
    });
  }
  void join() {
    if (thread.joinable()) thread.join();
  }
  ~background_stream() { join(); }
};

}  // namespace

TEST_CASE("serve_evidence: a request served alone reports max_seqs_in_step 1 on every route") {
  test::serve_child srv({"-np", "2", "-c", "512", "--chat-template", "chatml"});
  for (const route_case& rc : ROUTES) {
    auto c = test::http_client(srv.port);
    auto r = c.Post(rc.path, body_for(rc, "Once upon a time", 8).dump(), "application/json");
    REQUIRE(r);
    CHECK(evidence_of(rc, r->status, r->body) == 1);
  }
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_evidence: requests that run together report max_seqs_in_step >= 2 on every route") {
  const int n = static_cast<int>(std::size(ROUTES));
  test::serve_child srv({"-np", std::to_string(n + 1), "-c", std::to_string(512 * (n + 1)), "--chat-template", "chatml"});
  // A long greedy generation (stories260K does not stop within 2000 tokens of this prompt): every
  // request below starts while it is generating, so each shares forward steps with it
  background_stream anchor(srv.port, {{"prompt", "Once upon a time"}, {"n_predict", 500}, {"stream", true}});
  std::vector<std::string> bodies(static_cast<size_t>(n));
  std::vector<int> statuses(static_cast<size_t>(n), 0);
  std::latch start(1);
  std::vector<std::thread> clients;
  for (int i = 0; i < n; ++i)
    clients.emplace_back([&, i] {
      const route_case& rc = ROUTES[i];
      const std::string body = body_for(rc, i % 2 ? "The cat" : "Lily and Ben went", 16).dump();
      start.wait();
      auto c = test::http_client(srv.port);
      if (auto r = c.Post(rc.path, body, "application/json")) {
        statuses[static_cast<size_t>(i)] = r->status;
        bodies[static_cast<size_t>(i)] = r->body;
      }
    });
  anchor.first_event.wait();
  start.count_down();
  for (std::thread& t : clients) t.join();
  anchor.join();
  for (int i = 0; i < n; ++i)
    CHECK(evidence_of(ROUTES[i], statuses[static_cast<size_t>(i)], bodies[static_cast<size_t>(i)]) >= 2);
  const int64_t anchor_seqs = evidence_of({"/completion", true}, anchor.status, anchor.body);
  CHECK(anchor_seqs >= 2);
  CHECK(anchor_seqs <= n + 1);
  CHECK(srv.stop() == 0);
}
