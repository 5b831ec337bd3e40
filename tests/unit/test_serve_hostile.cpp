// detaudit serve against crafted requests (issue 17): values nested 100,000 deep and error messages
// that would quote megabytes of a client's value.
#include <doctest/doctest.h>

#include <filesystem>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve_util.h"
#include "test_util.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace detaudit;

namespace {

// POSTs `body` (raw text) and returns the status and the answer's JSON (null when not JSON).
std::pair<int, json> post_raw(int port, const std::string& path, const std::string& body,
                              const char* content_type = "application/json", const httplib::Headers& headers = {}) {
  auto c = test::http_client(port);
  auto r = c.Post(path.c_str(), headers, body, content_type);
  REQUIRE(r);
  return {r->status, json::parse(r->body, nullptr, false)};
}

// Expects a 400 error object whose message names `field` (when not empty) and stays short.
void expect_400(int port, const std::string& path, const std::string& body, const std::string& field) {
  const auto [status, j] = post_raw(port, path, body);
  INFO(path << " " << body.substr(0, 160) << " -> " << j.dump().substr(0, 300));
  CHECK(status == 400);
  REQUIRE(test::is_error_object(j, 400));
  const std::string msg = j["error"]["message"].get<std::string>();
  CHECK(msg.size() < 400);
  if (!field.empty()) CHECK(msg.find("'" + field + "'") != std::string::npos);
}

}  // namespace

TEST_CASE("serve_hostile: a value nested 100,000 deep is a 400 on every route, and the server lives") {
  test::serve_child srv({"-np", "1", "-c", "128", "--chat-template", "chatml"});
  const int port = srv.port;
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/detokenize", "{\"tokens\": [" + deep + "]}"},
      {"/detokenize", "{\"tokens\": " + deep + "}"},
      {"/tokenize", "{\"content\": " + deep + "}"},
      {"/completion", "{\"prompt\": " + deep + "}"},
      {"/completion", "{\"prompt\": \"a\", \"temperature\": " + deep + "}"},
      {"/completion", "{\"prompt\": \"a\", \"stop\": [" + deep + "]}"},
      {"/v1/completions", "{\"prompt\": \"a\", \"logit_bias\": " + deep + "}"},
      {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": " + deep + "}]}"},
      {"/api/generate", "{\"prompt\": \"a\", \"options\": " + deep + "}"},
      {"/slots/0?action=erase", deep},
  };
  for (const auto& [path, body] : cases) {
    CAPTURE(path);
    CAPTURE(body.substr(0, 60));
    expect_400(port, path, body, "");
    REQUIRE(test::post_json(port, "/tokenize", {{"content", "still serving"}})["tokens"].size() > 0);
  }
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_hostile: error messages quote a client's value by its type and a short prefix") {
  const std::string dir = test::scratch_dir("serve_hostile_quote");
  fs::create_directories(dir + "/slots");
  test::serve_child srv({"-np", "1", "-c", "128", "--chat-template", "chatml", "--slot-save-path", dir + "/slots"});
  const int port = srv.port;
  const std::string big(65536, 'q');
  const std::string big_json = json(big).dump();
  expect_400(port, "/completion", "{\"prompt\": \"a\", \"temperature\": " + big_json + "}", "temperature");
  expect_400(port, "/completion", "{\"prompt\": \"a\", \"n_predict\": " + big_json + "}", "n_predict");
  expect_400(port, "/completion", "{\"prompt\": \"a\", \"stream\": " + big_json + "}", "stream");
  expect_400(port, "/detokenize", "{\"tokens\": [" + big_json + "]}", "tokens");
  expect_400(port, "/detokenize", "{\"tokens\": [{\"a\": " + big_json + "}]}", "tokens");
  expect_400(port, "/v1/chat/completions", json{{"messages", json::array({{{"role", big}, {"content", "a"}}})}}.dump(), "");
  expect_400(port, "/api/chat", json{{"messages", json::array({{{"role", big}, {"content", "a"}}})}, {"stream", false}}.dump(), "");
  expect_400(port, "/slots/0?action=save", json{{"filename", big}}.dump(), "");
  expect_400(port, "/slots/0?action=" + std::string(6000, 'a'), "{}", "");
  CHECK(srv.stop() == 0);
}
