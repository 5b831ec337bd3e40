// detaudit serve against crafted requests (issue 17): values nested 100,000 deep, error messages
// that would quote megabytes of a client's value, sampling fields of the wrong type or not
// implemented, n_predict 0, slot file names at the length limit, onto a directory or naming a
// damaged file, the Bearer scheme in any case and form-encoded bodies.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <unistd.h>
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

json user_chat(const std::string& text) { return json::array({{{"role", "user"}, {"content", text}}}); }

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

TEST_CASE("serve_hostile: sampling fields of the wrong type, and fields not implemented, are 400 naming the field") {
  test::serve_child srv({"-np", "1", "-c", "128"});
  const int port = srv.port;
  struct field_case {
    const char* key;
    json value;
  };
  const std::vector<field_case> bad = {
      // wrong types: each was read as its default
      {"typical_p", "0.5"}, {"mirostat", "2"}, {"ignore_eos", "true"}, {"post_sampling_probs", 1},
      {"dry_multiplier", "0.5"}, {"xtc_probability", "0.5"}, {"grammar", 5}, {"json_schema", "{}"},
      {"logit_bias", "x"}, {"mirostat_tau", "5"}, {"dry_base", "1.75"}, {"xtc_threshold", true},
      {"n_keep", "4"}, {"min_keep", 1.5}, {"dynatemp_exponent", "1"}, {"samplers", 3},
      // not implemented, and not neutral
      {"dynatemp_range", 0.5}, {"top_n_sigma", 1.0}, {"n_indent", 2}, {"t_max_predict_ms", 100},
      {"min_keep", 5}, {"lora", json::array({{{"id", 0}, {"scale", 1.0}}})},
      {"samplers", json::array({"temperature", "top_k"})}, {"samplers", "tk"},
  };
  for (const field_case& f : bad) {
    CAPTURE(f.key);
    CAPTURE(f.value.dump());
    json b = {{"prompt", "a"}, {"n_predict", 1}};
    b[f.key] = f.value;
    expect_400(port, "/completion", b.dump(), f.key);
    json o = {{"prompt", "a"}, {"max_tokens", 1}};
    o[f.key] = f.value;
    expect_400(port, "/v1/completions", o.dump(), f.key);
    json g = {{"prompt", "a"}, {"raw", true}, {"stream", false}, {"options", {{"num_predict", 1}}}};
    g["options"][f.key] = f.value;
    expect_400(port, "/api/generate", g.dump(), f.key);
  }
  // Neutral values stay accepted.
  const json neutral = {{"prompt", "a"},          {"n_predict", 1},       {"typical_p", 1.0},    {"mirostat", 0},
                        {"ignore_eos", false},    {"post_sampling_probs", false}, {"dry_multiplier", 0.0},
                        {"xtc_probability", 0.0}, {"dynatemp_range", 0.0}, {"top_n_sigma", -1.0}, {"n_indent", 0},
                        {"t_max_predict_ms", 0},  {"min_keep", 0},        {"lora", json::array()}, {"n_keep", 4},
                        {"samplers", json::array({"dry", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"})},
                        {"mirostat_tau", 5.0},    {"dry_base", 1.75}};
  CHECK(test::post_json(port, "/completion", neutral)["tokens_predicted"] == 1);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_hostile: n_predict, max_tokens and num_predict 0 generate nothing") {
  test::serve_child srv({"-np", "1", "-c", "128", "--chat-template", "chatml"});
  const int port = srv.port;
  const json c = test::post_json(port, "/completion", {{"prompt", "Once upon a time"}, {"n_predict", 0}, {"n_probs", 2}});
  CHECK(c["tokens_predicted"] == 0);
  CHECK(c["content"] == "");
  CHECK(c["stop_type"] == "limit");
  CHECK(c["completion_probabilities"].empty());
  CHECK(c["tokens_evaluated"].get<int64_t>() > 0);
  {
    auto cl = test::http_client(port);
    auto r = cl.Post("/completion", json{{"prompt", "Once"}, {"n_predict", 0}, {"stream", true}}.dump(), "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
    INFO(r->body);
    CHECK(r->body.find("\"stop\":false") == std::string::npos);  // no token event
    CHECK(r->body.find("\"tokens_predicted\":0") != std::string::npos);
  }
  const json o = test::post_json(port, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 0}});
  CHECK(o["usage"]["completion_tokens"] == 0);
  CHECK(o["choices"][0]["text"] == "");
  CHECK(o["choices"][0]["finish_reason"] == "length");
  const json ch = test::post_json(port, "/v1/chat/completions", {{"messages", user_chat("Hi")}, {"max_tokens", 0}});
  CHECK(ch["usage"]["completion_tokens"] == 0);
  CHECK(ch["choices"][0]["message"]["content"] == "");
  const json g = test::post_json(port, "/api/generate", {{"prompt", "Once"}, {"raw", true}, {"stream", false}, {"options", {{"num_predict", 0}}}});
  CHECK(g["eval_count"] == 0);
  CHECK(g["response"] == "");
  CHECK(test::metric_of(port, "generated_tokens_total") == 0);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_hostile: the Bearer scheme is accepted in any case (RFC 7235)") {
  const std::string key = "k3y-hostile-0123456789";
  test::serve_child srv({"-np", "1", "-c", "128", "--api-key-env", "DETAUDIT_HOSTILE_KEY"}, "", {{"DETAUDIT_HOSTILE_KEY", key}});
  const std::string body = R"({"prompt": "a", "n_predict": 1})";
  for (const char* scheme : {"Bearer ", "bearer ", "BEARER ", "bEaReR "}) {
    CAPTURE(scheme);
    CHECK(post_raw(srv.port, "/completion", body, "application/json", {{"Authorization", scheme + key}}).first == 200);
  }
  for (const std::string& wrong : {"Basic " + key, "Bearer" + key, "Bearer " + key + "x", "bearer  " + key})
    CHECK(post_raw(srv.port, "/completion", body, "application/json", {{"Authorization", wrong}}).first == 401);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_hostile: a form-encoded Content-Type is read as JSON at any size, and a real form is a clear 400") {
  test::serve_child srv({"-np", "1", "-c", "128"});
  const int port = srv.port;
  const char* form = "application/x-www-form-urlencoded";
  // `curl -d '{...}'` labels JSON as a form; past 8 KiB httplib answered 413 "too large".
  for (const size_t size : {size_t{200}, size_t{9000}, size_t{100000}}) {
    CAPTURE(size);
    std::string b = R"({"prompt": "Once", "n_predict": 1})";
    b += std::string(size - b.size(), ' ');
    const auto [status, j] = post_raw(port, "/completion", b, form);
    INFO(j.dump().substr(0, 300));
    CHECK(status == 200);
    CHECK(j["tokens_predicted"] == 1);
  }
  std::string real = "prompt=Once&n_predict=1&pad=" + std::string(9000, 'x');
  const auto [status, j] = post_raw(port, "/completion", real, form);
  INFO(j.dump());
  CHECK(status == 400);
  REQUIRE(test::is_error_object(j, 400));
  CHECK(j["error"]["message"].get<std::string>().find("JSON") != std::string::npos);
  const auto [mstatus, mj] = post_raw(port, "/completion", "--b\r\n\r\n--b--\r\n", "multipart/form-data; boundary=b");
  CHECK(mstatus == 400);
  CHECK(test::is_error_object(mj, 400));
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_hostile: slot files at the name length limit, onto a directory, or damaged, with no server path in errors") {
  const std::string dir = fs::absolute(test::scratch_dir("serve_hostile_slots")).string();
  const std::string slots = dir + "/slot-folder-of-the-server";
  fs::create_directories(slots + "/a-directory");
  test::serve_child srv({"-np", "1", "-c", "128", "--slot-save-path", slots});
  const int port = srv.port;
  test::post_json(port, "/completion", {{"prompt", "Once upon a time"}, {"n_predict", 2}});
  for (const size_t n : {size_t{250}, size_t{251}, size_t{252}, size_t{254}, size_t{255}}) {
    CAPTURE(n);
    const std::string name(n, 'n');
    const json s = test::post_json(port, "/slots/0?action=save", {{"filename", name}});
    CHECK(s["filename"] == name);
    CHECK(fs::is_regular_file(slots + "/" + name));
    CHECK(test::post_json(port, "/slots/0?action=restore", {{"filename", name}})["id_slot"] == 0);
  }
  auto error_of = [&](const std::string& action, const std::string& file) {
    auto c = test::http_client(port);
    auto r = c.Post(("/slots/0?action=" + action).c_str(), json{{"filename", file}}.dump(), "application/json");
    REQUIRE(r);
    INFO(action << " " << file << " -> " << r->status << " " << r->body);
    CHECK(r->status >= 400);
    CHECK(r->status < 500);
    CHECK(r->body.find("slot-folder-of-the-server") == std::string::npos);
    CHECK(r->body.find(dir) == std::string::npos);
    return r->status;
  };
  error_of("save", "a-directory");
  error_of("restore", "a-directory");
  test::write_file(slots + "/damaged.bin", "not a saved sequence");
  CHECK(error_of("restore", "damaged.bin") == 400);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(slots))
    if (e.path().filename().string().find(".tmp") != std::string::npos || e.path().filename().string()[0] == '.')
      left.push_back(e.path().filename().string());
  CHECK(left.empty());
  CHECK(fs::is_directory(slots + "/a-directory"));
  CHECK(srv.stop() == 0);
}

// Issue 47.1: a penalty that would turn a logit into inf used to throw on the scheduler thread and
// end the process. Each route refuses it with a 400 naming the field, and the server lives on.
TEST_CASE("serve_hostile: penalties that could overflow a logit are a 400 naming the field on every route") {
  test::serve_child srv({"-np", "2", "-c", "256", "--chat-template", "chatml"});
  const int port = srv.port;
  const std::vector<std::pair<const char*, double>> cases = {
      {"repeat_penalty", 1e-45}, {"presence_penalty", -3e38}, {"frequency_penalty", -3e38}, {"repeat_penalty", 1e30}};
  for (const auto& [field, value] : cases) {
    CAPTURE(field);
    CAPTURE(value);
    json b = {{"prompt", "Once upon a time"}, {"n_predict", 4}, {"temperature", 1}};
    b[field] = value;
    expect_400(port, "/completion", b.dump(), field);
    json c = {{"messages", user_chat("Once upon a time")}, {"max_tokens", 4}, {"temperature", 1}};
    c[field] = value;
    expect_400(port, "/v1/chat/completions", c.dump(), field);
    json g = {{"prompt", "Once upon a time"}, {"raw", true}, {"stream", false}, {"options", {{"num_predict", 4}, {"temperature", 1}}}};
    g["options"][field] = value;
    expect_400(port, "/api/generate", g.dump(), field);
    // Streamed, the refusal comes before any event.
    b["stream"] = true;
    expect_400(port, "/completion", b.dump(), field);
  }
  // The server still answers, with penalties at their range's ends.
  const json ok = test::post_json(port, "/completion", {{"prompt", "Once upon a time"}, {"n_predict", 4}, {"temperature", 1},
                                                       {"repeat_penalty", 1024.0}, {"presence_penalty", -1e6}, {"seed", 3}});
  CHECK(ok["tokens_predicted"] == 4);
  CHECK(srv.stop() == 0);
}

// Issue 47.7: a message's tool_calls was dropped without a word by /v1/chat/completions (the turn
// rendered as if it had none) while /api/chat refused it. One rule on every chat route: a message
// carrying a tool field is a 400 naming messages[i].FIELD; empty or null ones change nothing.
TEST_CASE("serve_hostile: a message's tool_calls, function_call or tool_call_id is a 400 naming it on every chat route") {
  test::serve_child srv({"-np", "1", "-c", "256", "--chat-template", "chatml"});
  const int port = srv.port;
  const json call = json::array({{{"id", "c1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}}});
  const std::vector<std::pair<const char*, json>> fields = {
      {"tool_calls", call}, {"function_call", {{"name", "f"}, {"arguments", "{}"}}}, {"tool_call_id", "c1"}};
  for (const auto& [field, value] : fields) {
    CAPTURE(field);
    json msgs = json::array({{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", ""}}, {{"role", "user"}, {"content", "Go"}}});
    msgs[1][field] = value;
    const std::string named = std::string("messages[1].") + field;
    expect_400(port, "/v1/chat/completions", json{{"messages", msgs}, {"max_tokens", 2}}.dump(), named);
    expect_400(port, "/api/chat", json{{"messages", msgs}, {"stream", false}, {"options", {{"num_predict", 2}}}}.dump(), named);
  }
  // Empty or null tool fields, as clients send them, render the conversation as before.
  json msgs = json::array({{{"role", "user"}, {"content", "Hi"}},
                           {{"role", "assistant"}, {"content", "Hello"}, {"tool_calls", json::array()}, {"function_call", nullptr},
                            {"tool_call_id", ""}},
                           {{"role", "user"}, {"content", "Go"}}});
  const json a = test::post_json(port, "/v1/chat/completions", {{"messages", msgs}, {"max_tokens", 2}, {"temperature", 0}});
  msgs[1].erase("tool_calls");
  msgs[1].erase("function_call");
  msgs[1].erase("tool_call_id");
  const json b = test::post_json(port, "/v1/chat/completions", {{"messages", msgs}, {"max_tokens", 2}, {"temperature", 0}});
  CHECK(a["usage"]["prompt_tokens"] == b["usage"]["prompt_tokens"]);
  CHECK(a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]);
  CHECK(srv.stop() == 0);
}

// The hostile review of issue 47: max_tokens was ignored beside "max_completion_tokens": null (471
// tokens for 3), fields went unchecked when another one made them unused, a content part's
// numeric type gave a parser message naming no field, and a million stop strings held the
// scheduler thread every request shares for 25 s.
TEST_CASE("serve_hostile: max_tokens beside a null max_completion_tokens, unused fields checked, stop strings bounded") {
  test::serve_child srv({"-np", "1", "-c", "512", "--chat-template", "chatml"});
  const int port = srv.port;
  const json msgs = user_chat("Once upon a time");
  const json a = test::post_json(port, "/v1/chat/completions",
                                 {{"messages", msgs}, {"max_tokens", 3}, {"max_completion_tokens", nullptr}, {"temperature", 0}});
  CHECK(a["usage"]["completion_tokens"] == 3);
  const json c = test::post_json(port, "/v1/chat/completions",
                                 {{"messages", msgs}, {"max_tokens", 9}, {"max_completion_tokens", 2}, {"temperature", 0}});
  CHECK(c["usage"]["completion_tokens"] == 2);
  expect_400(port, "/v1/chat/completions", json{{"messages", msgs}, {"max_tokens", "x"}, {"max_completion_tokens", 2}}.dump(), "max_tokens");
  expect_400(port, "/v1/chat/completions", json{{"messages", msgs}, {"top_logprobs", "x"}, {"max_tokens", 2}}.dump(), "top_logprobs");
  expect_400(port, "/v1/chat/completions", json{{"messages", msgs}, {"top_logprobs", 500}, {"max_tokens", 2}}.dump(), "top_logprobs");
  expect_400(port, "/v1/chat/completions", json{{"messages", msgs}, {"chat_template_kwargs", "x"}, {"max_tokens", 2}}.dump(),
             "chat_template_kwargs");
  expect_400(port, "/v1/chat/completions",
             json{{"messages", msgs}, {"chat_template_kwargs", {{"enable_thinking", "no"}}}, {"max_tokens", 2}}.dump(),
             "chat_template_kwargs.enable_thinking");
  expect_400(port, "/v1/chat/completions", json{{"messages", msgs}, {"reasoning_effort", 5}, {"max_tokens", 2}}.dump(), "reasoning_effort");
  const json part = json::array({{{"role", "user"}, {"content", json::array({{{"type", 5}, {"text", "a"}}})}}});
  expect_400(port, "/v1/chat/completions", json{{"messages", part}, {"max_tokens", 2}}.dump(), "messages[0].content");

  json many = json::array();
  for (int i = 0; i < 65; ++i) many.push_back("s" + std::to_string(i));
  for (const char* path : {"/completion", "/v1/completions"}) {
    CAPTURE(path);
    expect_400(port, path, json{{"prompt", "a"}, {"stop", many}, {"max_tokens", 2}, {"n_predict", 2}}.dump(), "stop");
    expect_400(port, path, json{{"prompt", "a"}, {"stop", std::string(129, 'x')}, {"max_tokens", 2}, {"n_predict", 2}}.dump(), "stop");
  }
  many.erase(many.size() - 1);  // 64: accepted
  const json ok = test::post_json(port, "/completion", {{"prompt", "Once"}, {"stop", many}, {"n_predict", 3}});
  CHECK(ok.contains("content"));
  CHECK(srv.stop() == 0);
}

// The hostile review of issue 47: a legal 8 MiB body of [{},{},...] takes about 180 MB parsed, and
// a handler holds it until it answers; 48 of them at once took 8.8 GB. Parsed bodies share
// --max-body-memory: one larger than all of it is 413, one that does not fit beside those being
// handled is 503, and the server goes on.
TEST_CASE("serve_hostile: parsed request bodies share --max-body-memory: 413 alone, 503 beside others") {
  test::serve_child srv({"-np", "1", "--queue", "1", "-c", "65536", "--max-body-memory", "16"});
  const int port = srv.port;
  const auto padded = [](size_t n_values, int n_predict) {
    std::string pad = "[";
    for (size_t i = 0; i < n_values; ++i) pad += i ? ",{}" : "{}";
    pad += "]";
    return "{\"prompt\": \"Once upon a time\", \"n_predict\": " + std::to_string(n_predict) + ", \"x\": " + pad + "}";
  };
  // 300,000 values: charged about 46 MiB (each "{}" and its comma), more than all 16.
  {
    const auto [status, j] = post_raw(port, "/completion", padded(300000, 2));
    CHECK(status == 413);
    REQUIRE(test::is_error_object(j, 413));
    CHECK(j["error"]["message"].get<std::string>().find("--max-body-memory") != std::string::npos);
  }
  // 60,000 values (about 9.5 MiB) fit alone. A streamed generation that would run for hours holds
  // the one slot; a padded body then waits in the queue, its handler holding its share; a second
  // padded body does not fit beside it (503). When the stream's client leaves, the queued one runs.
  const int holder = test::connect_loopback(port);
  const std::string long_body = json{{"prompt", "Once upon a time"}, {"n_predict", -1}, {"stream", true}}.dump();
  REQUIRE(test::raw_send(holder, "POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
                                     std::to_string(long_body.size()) + "\r\n\r\n" + long_body));
  REQUIRE(test::wait_until(30, [&] { return test::metric_of(port, "requests_active") == 1; }));
  int queued_status = 0;  // set by the thread (no doctest assertion off the main thread)
  const std::string queued_body = padded(60000, 2);
  std::thread t([&] {
    auto c = test::http_client(port);
    const auto r = c.Post("/completion", queued_body, "application/json");
    queued_status = r ? r->status : -1;
  });
  struct joiner {  // a failed REQUIRE below must not leave the thread unjoined (std::terminate)
    std::thread& t;
    int fd;
    ~joiner() {
      if (t.joinable()) {
        ::close(fd);
        t.join();
      }
    }
  } join_guard{t, holder};
  REQUIRE(test::wait_until(30, [&] { return test::metric_of(port, "requests_waiting") == 1; }));
  const auto [status2, j2] = post_raw(port, "/completion", padded(60000, 2));
  CHECK(status2 == 503);
  if (status2 == 503) CHECK(j2["error"]["message"].get<std::string>().find("server busy") != std::string::npos);
  ::close(holder);  // the stream's client leaves: its generation is cancelled, the queued request runs
  t.join();
  CHECK(queued_status == 200);
  // With both answered, the same body fits again.
  CHECK(post_raw(port, "/completion", padded(60000, 2)).first == 200);
  CHECK(srv.stop() == 0);
}
