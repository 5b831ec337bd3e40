// Streamed answers (`detaudit run --stream`): scripted servers end streams early, send error events
// and events that are not JSON, or cut the connection inside a chunked stream. Against the real
// `detaudit serve` (a streamed answer makes the same record as the whole answer):
// tests/e2e/test_probes_http_stream.cpp.
#include <doctest/doctest.h>

#include "probes/target.h"
#include "test_probes_http_util.h"
#include "util/error.h"

using detaudit::probes::target_make;
using detaudit::probes::target_options;
using detaudit::probes::unreachable_error;
using detaudit::reports::record;
using detaudit::test::responder;
using detaudit::test::stream_test::opts;
using detaudit::test::stream_test::request;
using json = nlohmann::json;

namespace {

record scripted(const std::string& path, const std::string& body, const std::string& type, const std::string& api) {
  responder srv;
  srv.srv.Post(path, [&](const httplib::Request&, httplib::Response& res) { res.set_content(body, type.c_str()); });
  srv.start();
  auto t = target_make(srv.url(), opts(api, true));
  return t->complete(request(path != "/completion"));
}

const char* SSE = "text/event-stream";

// A raw HTTP/1.1 listener: 404 to every GET; to every POST the start of a chunked event stream,
// then the connection is closed.
struct cut_listener {
  int fd = -1;
  int port = 0;
  std::atomic<int> posts{0};
  std::atomic<bool> stopping{false};
  std::thread th;

  cut_listener() {
    fd = detaudit::test::loopback_listen(&port);
    th = std::thread([this] { serve(); });
  }
  ~cut_listener() {
    stopping = true;
    th.join();
    ::close(fd);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }

  void serve() {
    while (!stopping) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept(fd, nullptr, nullptr);
      if (c < 0) continue;
      std::string req;
      char buf[4096];
      pollfd pc{c, POLLIN, 0};
      while (req.find("\r\n\r\n") == std::string::npos && ::poll(&pc, 1, 1000) > 0) {
        const ssize_t n = ::read(c, buf, sizeof buf);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
      }
      std::string reply = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      if (req.rfind("POST", 0) == 0) {
        ++posts;
        reply = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                "19\r\ndata: {\"content\": \"Hi\"}\n\n\r\n";
      }
      (void)::write(c, reply.data(), reply.size());
      ::close(c);
    }
  }
};

}  // namespace

TEST_CASE("probes_http_stream: a stream that ends early or carries an error is that item's error") {
  struct bad {
    const char* name;
    const char* path;
    const char* api;
    std::string body;
    const char* expect;
  };
  const std::string chunk = R"(data: {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": null}]})";
  const std::string last = R"(data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})";
  const std::vector<bad> cases = {
      {"llama.cpp without its final event", "/completion", "llamacpp",
       "data: {\"content\": \"Hi\", \"stop\": false}\n\ndata: {\"content\": \" there\", \"stop\": false}\n\n",
       "the event stream ended early: 2 complete event(s), no final event (\"stop\": true)"},
      {"OpenAI without [DONE]", "/v1/chat/completions", "openai-chat", chunk + "\n\n" + last + "\n\n",
       "the event stream ended early: 2 complete event(s), no [DONE] event"},
      {"an event cut in the middle", "/v1/chat/completions", "openai-chat", chunk + "\n\n" + chunk.substr(0, 30),
       "ended early: 1 complete event(s), the last one cut off, no [DONE] event"},
      {"an event without its blank line", "/completion", "llamacpp", "data: {\"content\": \"\", \"stop\": true}\n",
       "ended early: 0 complete event(s), the last one cut off"},
      {"an error event", "/v1/chat/completions", "openai-chat",
       chunk + "\n\ndata: {\"error\": {\"code\": 500, \"message\": \"slot 3 failed\"}}\n\n",
       "the stream ended with an error event: slot 3 failed"},
      {"an event that is not JSON", "/completion", "llamacpp", "data: {\"content\": \"Hi\"\n\n",
       "stream event 0 is not a JSON object ('{\"content\": \"Hi\"')"},
      {"text that is not a string", "/completion", "llamacpp", "data: {\"content\": 7, \"stop\": true}\n\n",
       "stream event 0: 'content' is not a string"},
  };
  for (const bad& c : cases) {
    CAPTURE(c.name);
    const record r = scripted(c.path, c.body, SSE, c.api);
    CHECK(r.http_status == 200);
    CHECK(r.error.find(c.expect) != std::string::npos);
    CHECK(r.error.find(std::string("POST http://127.0.0.1:")) == 0);
    CHECK(r.finish_reason == "error");
    CHECK(r.text.empty());
    CHECK(r.tokens.empty());
  }
}

TEST_CASE("probes_http_stream: CRLF lines, comments, other fields and split data lines are read as the standard says") {
  const std::string body =
      ": a comment\r\nevent: message\r\nid: 1\r\ndata: {\"content\": \"Once\", \"stop\": false,\r\n"
      "data:  \"tokens\": [5]}\r\n\r\n"
      "data: {\"content\": \" upon\", \"stop\": false, \"tokens\": [9]}\r\r"
      "data: {\"content\": \"\", \"stop\": true, \"stop_type\": \"limit\", \"tokens\": []}\n\n";
  const record r = scripted("/completion", body, SSE, "llamacpp");
  INFO("error: " << r.error);
  REQUIRE(r.error.empty());
  CHECK(r.text == "Once upon");
  REQUIRE(r.tokens.size() == 2);
  CHECK(r.tokens[0].id == 5);
  CHECK(r.tokens[1].id == 9);
  CHECK(r.finish_reason == "length");
}

TEST_CASE("probes_http_stream: a server that answers a stream request with one JSON object is read as such") {
  const record r = scripted("/v1/chat/completions",
                            R"({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}]})",
                            "application/json", "openai-chat");
  INFO("error: " << r.error);
  REQUIRE(r.error.empty());
  CHECK(r.text == "Hello");
  CHECK(r.finish_reason == "stop");
}

TEST_CASE("probes_http_stream: a connection cut inside a chunked stream is retried, then the target is unreachable") {
  // GETs (the capability probe) are answered 404; each POST gets a chunked event stream whose
  // connection closes after one event, without the last chunk.
  cut_listener cut;
  target_options o = opts("llamacpp", true);
  o.retries = 1;
  o.backoff_s = 0.01;
  auto t = target_make(cut.url(), o);
  try {
    (void)t->complete(request(false));
    FAIL("expected unreachable_error");
  } catch (const unreachable_error& e) {
    INFO(std::string(e.what()));
    CHECK(std::string(e.what()).find("POST " + cut.url() + "/completion: ") == 0);
    CHECK(std::string(e.what()).find("(after 2 attempts)") != std::string::npos);
  }
  CHECK(cut.posts == 2);
}

TEST_CASE("probes_http_stream: --stream is refused for ollama targets") {
  CHECK_THROWS_WITH_AS(target_make("http://127.0.0.1:9", opts("ollama", true)),
                       doctest::Contains("--stream: ollama targets stream a format detaudit does not read"),
                       detaudit::input_error);
}
