// detaudit serve's input limits, each a 4xx OpenAI error object: request bodies (--max-body, and
// no chunked or compressed body that would slip past it), prompts longer than a slot,
// n_predict / max_tokens / num_predict beyond a slot, log-prob counts beyond their bounds, slot
// file names that would leave --slot-save-path, and API keys (wrong keys of every length are
// 401). Also: serve listens on 127.0.0.1 unless told otherwise.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <httplib.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include "serve/http_server.h"
#include "serve_util.h"
#include "test_util.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace detaudit;

namespace {

bool is_openai_error(const json& j, int status) {
  return j.is_object() && j.contains("error") && j["error"].is_object() && j["error"]["message"].is_string() &&
         !j["error"]["message"].get<std::string>().empty() && j["error"]["code"] == status;
}

struct raw_answer {
  int status = 0;
  std::string body;
};

// Sends `head` (request line and headers, without the blank line) and `body` exactly as given on
// one connection, then reads the answer until the server closes it or sends a whole body.
raw_answer raw_exchange(int port, const std::string& head, const std::string& body) {
  const int fd = test::connect_loopback(port);
  const std::string req = head + "\r\n\r\n" + body;
  CHECK(::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size()));
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    const size_t end = got.find("\r\n\r\n");
    if (end != std::string::npos) {
      const size_t cl = got.find("Content-Length: ");
      if (cl != std::string::npos && cl < end && got.size() >= end + 4 + std::stoul(got.substr(cl + 16))) break;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 500) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  raw_answer r;
  INFO(got);
  REQUIRE(got.rfind("HTTP/1.1 ", 0) == 0);
  r.status = std::stoi(got.substr(9, 3));
  const size_t end = got.find("\r\n\r\n");
  if (end != std::string::npos) r.body = got.substr(end + 4);
  return r;
}

// A /completion body of exactly `size` bytes (padded with spaces), asking for one token.
std::string padded_body(size_t size) {
  std::string b = R"({"prompt": "Once upon a time", "n_predict": 1})";
  REQUIRE(size >= b.size());
  return b + std::string(size - b.size(), ' ');
}

// POSTs and checks the status and the error object; `field` (if any) must be named in it.
void expect_error(int port, const std::string& path, const json& body, int status, const std::string& field) {
  auto c = test::http_client(port);
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  REQUIRE(r);
  INFO(path << " " << body.dump().substr(0, 200) << " -> " << r->body);
  CHECK(r->status == status);
  const json j = json::parse(r->body, nullptr, false);
  CHECK(is_openai_error(j, status));
  if (!field.empty() && is_openai_error(j, status)) CHECK(j["error"]["message"].get<std::string>().find(field) != std::string::npos);
}

json user_chat(const std::string& text) { return json::array({{{"role", "user"}, {"content", text}}}); }

}  // namespace

TEST_CASE("serve_limits: --max-body bounds request bodies, and chunked or compressed bodies are refused") {
  test::serve_child srv({"-np", "1", "-c", "128", "--max-body", "4096"});
  const int port = srv.port;
  const std::string head = "POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json";
  const std::string fits = padded_body(4096);
  const raw_answer ok = raw_exchange(port, head + "\r\nContent-Length: 4096", fits);
  INFO(ok.body);
  CHECK(ok.status == 200);
  const std::string over = padded_body(4097);
  const raw_answer big = raw_exchange(port, head + "\r\nContent-Length: 4097", over);
  CHECK(big.status == 413);
  CHECK(is_openai_error(json::parse(big.body, nullptr, false), 413));

  // Chunked: httplib would read any length; a valid body twice the limit would be answered.
  const std::string chunked_body = padded_body(8192);
  char size_hex[16];
  std::snprintf(size_hex, sizeof size_hex, "%zx", chunked_body.size());
  const raw_answer chunked =
      raw_exchange(port, head + "\r\nTransfer-Encoding: chunked", std::string(size_hex) + "\r\n" + chunked_body + "\r\n0\r\n\r\n");
  INFO(chunked.body);
  CHECK(chunked.status == 411);
  CHECK(is_openai_error(json::parse(chunked.body, nullptr, false), 411));

  // gzip: 64 KiB of JSON in a few hundred bytes; inflated while read, it would pass --max-body.
  const std::string dir = test::scratch_dir("serve_limits_gzip");
  {
    std::ofstream f(dir + "/body.json", std::ios::binary);
    f << padded_body(65536);
  }
  const test::cmd_result gz = test::run_cmd("gzip -c " + dir + "/body.json");
  REQUIRE(gz.exit_code == 0);
  REQUIRE(gz.out.size() < 4096);
  const raw_answer packed =
      raw_exchange(port, head + "\r\nContent-Encoding: gzip\r\nContent-Length: " + std::to_string(gz.out.size()), gz.out);
  INFO(packed.body);
  CHECK(packed.status == 415);
  CHECK(is_openai_error(json::parse(packed.body, nullptr, false), 415));
  CHECK(test::post_json(port, "/tokenize", {{"content", "still serving"}})["tokens"].size() > 0);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_limits: prompts, n_predict and max_tokens beyond a slot are 400 on every route") {
  test::serve_child srv({"-np", "1", "-c", "128", "--chat-template", "chatml"});
  const int port = srv.port;
  std::string long_text;
  for (int i = 0; i < 300; ++i) long_text += "story ";
  expect_error(port, "/completion", {{"prompt", long_text}, {"n_predict", 1}}, 400, "prompt");
  expect_error(port, "/completion", {{"prompt", long_text}, {"n_predict", 1}, {"stream", true}}, 400, "prompt");
  expect_error(port, "/completion", {{"prompt", json::array({json::array()})}}, 400, "prompt");
  expect_error(port, "/v1/completions", {{"prompt", long_text}, {"max_tokens", 1}}, 400, "prompt");
  expect_error(port, "/v1/chat/completions", {{"messages", user_chat(long_text)}, {"max_tokens", 1}}, 400, "prompt");
  expect_error(port, "/api/generate", {{"prompt", long_text}, {"raw", true}, {"stream", false}}, 400, "prompt");
  expect_error(port, "/api/chat", {{"messages", user_chat(long_text)}, {"stream", false}}, 400, "prompt");

  for (const int64_t n : {int64_t{129}, int64_t{1} << 31, int64_t{1} << 40}) {
    CAPTURE(n);
    expect_error(port, "/completion", {{"prompt", "a"}, {"n_predict", n}}, 400, "n_predict");
    expect_error(port, "/v1/completions", {{"prompt", "a"}, {"max_tokens", n}}, 400, "max_tokens");
    expect_error(port, "/v1/chat/completions", {{"messages", user_chat("a")}, {"max_tokens", n}}, 400, "max_tokens");
    expect_error(port, "/v1/chat/completions", {{"messages", user_chat("a")}, {"max_completion_tokens", n}}, 400,
                 "max_completion_tokens");
    expect_error(port, "/api/generate", {{"prompt", "a"}, {"raw", true}, {"stream", false}, {"options", {{"num_predict", n}}}}, 400,
                 "num_predict");
  }
  // The slot's whole context is still a valid request: it ends when the slot is full.
  const json full = test::post_json(port, "/completion", {{"prompt", "Once"}, {"n_predict", 128}, {"temperature", 0}});
  CHECK(full["tokens_predicted"].get<int64_t>() <= 128);
  CHECK(test::post_json(port, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}})["usage"]["completion_tokens"] == 2);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_limits: n_probs, logprobs and top_logprobs beyond their documented bounds are 400") {
  test::serve_child srv({"-np", "1", "-c", "128", "--chat-template", "chatml"});
  const int port = srv.port;
  expect_error(port, "/completion", {{"prompt", "a"}, {"n_predict", 1}, {"n_probs", 101}}, 400, "n_probs");
  expect_error(port, "/completion", {{"prompt", "a"}, {"n_predict", 1}, {"n_probs", int64_t{1} << 40}}, 400, "n_probs");
  expect_error(port, "/completion", {{"prompt", "a"}, {"n_predict", 1}, {"n_probs", -1}}, 400, "n_probs");
  expect_error(port, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 1}, {"logprobs", 21}}, 400, "logprobs");
  expect_error(port, "/v1/chat/completions", {{"messages", user_chat("a")}, {"max_tokens", 1}, {"logprobs", true}, {"top_logprobs", 21}},
               400, "top_logprobs");
  expect_error(port, "/api/generate",
               {{"prompt", "a"}, {"raw", true}, {"stream", false}, {"logprobs", true}, {"top_logprobs", 21}}, 400, "top_logprobs");
  const json at_bound = test::post_json(port, "/completion", {{"prompt", "a"}, {"n_predict", 1}, {"n_probs", 100}});
  CHECK(at_bound["completion_probabilities"][0]["top_logprobs"].size() == 100);
  const json oa = test::post_json(port, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 1}, {"logprobs", 20}});
  CHECK(oa["choices"][0]["logprobs"]["top_logprobs"][0].size() == 20);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_limits: slot file names cannot leave --slot-save-path") {
  const std::string dir = test::scratch_dir("serve_limits_slots");
  const std::string slots = dir + "/slots";
  fs::create_directories(slots);
  test::serve_child srv({"-np", "1", "-c", "128", "--slot-save-path", slots});
  const int port = srv.port;
  test::post_json(port, "/completion", {{"prompt", "Once upon a time"}, {"n_predict", 2}});
  const std::vector<std::string> bad = {"../x",
                                        "..",
                                        ".",
                                        "a/../../x",
                                        "/tmp/detaudit-serve-limits-x",
                                        dir + "/x",
                                        "a/b",
                                        "a\\b",
                                        "..\\x",
                                        "",
                                        std::string("a\0b", 3),
                                        std::string("\0", 1),
                                        "x\n",
                                        std::string(256, 'f')};
  for (const std::string& name : bad) {
    CAPTURE(json(name).dump());
    for (const char* action : {"save", "restore"})
      expect_error(port, std::string("/slots/0?action=") + action, {{"filename", name}}, 400, "file");
  }
  CHECK(!fs::exists(dir + "/x"));
  CHECK(!fs::exists("/tmp/detaudit-serve-limits-x"));
  CHECK(fs::is_empty(slots));
  // A plain name is saved inside the folder and restored from it.
  CHECK(test::post_json(port, "/slots/0?action=save", {{"filename", "slot0.bin"}})["filename"] == "slot0.bin");
  CHECK(fs::is_regular_file(slots + "/slot0.bin"));
  CHECK(test::post_json(port, "/slots/0?action=restore", {{"filename", "slot0.bin"}})["id_slot"] == 0);
  expect_error(port, "/slots/0?action=restore", {{"filename", "missing.bin"}}, 404, "");
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_limits: wrong API keys of the same and other lengths are 401 and never echoed") {
  const std::string key = "k3y-limits-0123456789abcdef";
  test::serve_child srv({"-np", "1", "-c", "128", "--api-key-env", "DETAUDIT_LIMITS_KEY"}, "", {{"DETAUDIT_LIMITS_KEY", key}});
  const int port = srv.port;
  std::string first = key, last = key;
  first[0] = 'K';
  last.back() = 'F';
  const std::vector<std::string> wrong = {first, last, key.substr(0, key.size() - 1), key + "0", "", "x", std::string(4096, 'k')};
  const std::vector<std::string> wrong_raw = {"Bearer" + key, "Basic " + key, key, "bearer  " + key};
  const std::string body = R"({"prompt": "a", "n_predict": 1})";
  auto check_401 = [&](const httplib::Headers& h, const std::string& given) {
    auto c = test::http_client(port);
    auto r = c.Post("/completion", h, body, "application/json");
    REQUIRE(r);
    CHECK(r->status == 401);
    CHECK(is_openai_error(json::parse(r->body, nullptr, false), 401));
    if (given.size() >= 8) CHECK(r->body.find(given) == std::string::npos);
    CHECK(r->body.find(key) == std::string::npos);
  };
  for (const std::string& w : wrong) {
    CAPTURE(w.size());
    check_401({{"Authorization", "Bearer " + w}}, w);
    check_401({{"X-Api-Key", w}}, w);
  }
  for (const std::string& w : wrong_raw) check_401({{"Authorization", w}}, w);
  check_401({}, "");
  auto c = test::http_client(port);
  auto rb = c.Post("/completion", {{"Authorization", "Bearer " + key}}, body, "application/json");
  REQUIRE(rb);
  CHECK(rb->status == 200);
  auto rx = c.Post("/completion", {{"X-Api-Key", key}}, body, "application/json");
  REQUIRE(rx);
  CHECK(rx->status == 200);
  auto rh = c.Get("/health");
  REQUIRE(rh);
  CHECK(rh->status == 200);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_limits: serve listens on 127.0.0.1 unless --host says otherwise") {
  CHECK(serve::http_server_params{}.host == "127.0.0.1");
  const test::cmd_result help = test::run_cmd(test::detaudit_bin() + " serve --help");
  REQUIRE(help.exit_code == 0);
  const size_t at = help.out.find("--host");
  REQUIRE(at != std::string::npos);
  const std::string line = help.out.substr(at, help.out.find('\n', at) - at);
  CHECK(line.find("=127.0.0.1 ") != std::string::npos);
  CHECK(help.out.find("--max-body") != std::string::npos);
  // Started with no --host: the address it prints is the loopback one.
  const std::string dir = test::scratch_dir("serve_limits_host");
  const test::cmd_result r = test::run_cmd("(" + test::detaudit_bin() + " serve -m " + test::fixture("models/stories260K.gguf") +
                                           " --port 0 -t 1 -c 64 > " + dir + "/out & pid=$!; for i in $(seq 600); do"
                                           " grep -q listening " + dir + "/out && break; sleep 0.05; done; kill $pid; wait $pid; cat " +
                                           dir + "/out)");
  CHECK(r.out.rfind("listening on http://127.0.0.1:", 0) == 0);
}
