// Support for detaudit_load (load_test.cpp): the fixed request set, the canonical form of an
// answer, and `detaudit serve` as a child process.
//
// Goals: one canonical string per answer holding exactly what `--numerics exact` promises to keep
// identical whatever else the server does (text, token ids, log-probs, logit hashes, stop
// reason), so that two answers are compared by string equality; a child that never outlives the
// load test (SIGTERM at the end, SIGKILL on every failure path and when the test itself dies).
// Non-goals: checking every field of every route (tests/unit/test_serve_http.cpp does that).
#pragma once

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <poll.h>
#include <stdexcept>
#include <string>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "child_process.h"
#include "test_util.h"

namespace detaudit::load {

using json = nlohmann::json;

// How an answer is read: a plain JSON body, or server-sent events, in either API's shape.
enum answer_kind { ANSWER_LLAMACPP, ANSWER_OPENAI, ANSWER_SSE_LLAMACPP, ANSWER_SSE_OPENAI };

struct gen_request {
  std::string route;  // the row in the report, e.g. "POST /v1/completions (stream)"
  std::string path;
  json body;
  answer_kind kind;
};

inline gen_request gen_make(const std::string& path, json body, answer_kind kind) {
  const bool sse = kind == ANSWER_SSE_LLAMACPP || kind == ANSWER_SSE_OPENAI;
  if (sse) body["stream"] = true;
  return {"POST " + path + (sse ? " (stream)" : ""), path, std::move(body), kind};
}

// The fixed set: both APIs, streamed and not, greedy and seeded sampling, short and long answers
// (n_predict 4..48), log-probs and logit hashes wherever the route offers them.
inline std::vector<gen_request> request_set() {
  const json chat_hi = json::array({{{"role", "user"}, {"content", "Tell me about a cat."}}});
  const json chat_sys = json::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}});
  return {
      gen_make("/completion", {{"prompt", "Once upon a time"}, {"n_predict", 6}, {"n_probs", 3}, {"return_tokens", true},
                               {"logit_hashes", true}}, ANSWER_LLAMACPP),
      gen_make("/completion", {{"prompt", "The little dog ran to the park and"}, {"n_predict", 48}, {"n_probs", 5},
                               {"return_tokens", true}, {"logit_hashes", true}}, ANSWER_LLAMACPP),
      gen_make("/completion", {{"prompt", "Lily and Tom went"}, {"n_predict", 32}, {"temperature", 0.8}, {"seed", 42},
                               {"n_probs", 2}, {"return_tokens", true}, {"logit_hashes", true}}, ANSWER_LLAMACPP),
      gen_make("/completion", {{"prompt", json::array({1, 400, 300, 200})}, {"n_predict", 40}, {"return_tokens", true},
                               {"logit_hashes", true}}, ANSWER_LLAMACPP),
      gen_make("/completion", {{"prompt", "One day, a girl named Sue"}, {"n_predict", 16}, {"n_probs", 2},
                               {"return_tokens", true}, {"logit_hashes", true}}, ANSWER_SSE_LLAMACPP),
      gen_make("/v1/completions", {{"prompt", "The sun was"}, {"max_tokens", 4}, {"logprobs", 3}, {"logit_hashes", true}},
               ANSWER_OPENAI),
      gen_make("/v1/completions", {{"prompt", "Once there was a big tree"}, {"max_tokens", 40}, {"temperature", 0.7},
                                   {"top_k", 20}, {"seed", 3}, {"logprobs", 2}, {"logit_hashes", true}}, ANSWER_OPENAI),
      gen_make("/v1/completions", {{"prompt", "A big red ball"}, {"max_tokens", 36}, {"logprobs", 2}, {"logit_hashes", true}},
               ANSWER_SSE_OPENAI),
      gen_make("/v1/completions", {{"prompt", "The cat"}, {"max_tokens", 24}, {"temperature", 1.0}, {"seed", 7},
                                   {"logit_hashes", true}}, ANSWER_SSE_OPENAI),
      gen_make("/v1/chat/completions", {{"messages", chat_sys}, {"max_tokens", 8}, {"logprobs", true}, {"top_logprobs", 3},
                                        {"logit_hashes", true}}, ANSWER_OPENAI),
      gen_make("/v1/chat/completions", {{"messages", chat_hi}, {"max_tokens", 32}, {"temperature", 0.9}, {"seed", 11},
                                        {"logprobs", true}, {"top_logprobs", 2}, {"logit_hashes", true}}, ANSWER_SSE_OPENAI),
      gen_make("/completion", {{"prompt", "Once upon a time"}, {"n_predict", 40}, {"stop", json::array({"."})},
                               {"n_probs", 1}, {"logit_hashes", true}}, ANSWER_LLAMACPP),
  };
}

// Thrown for an answer that is not of the shape its route promises.
struct malformed_answer : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Removes the fields that legitimately differ between two identical requests: ids and creation
// times (OpenAI), timings, the slot, what the prompt cache held, and how many other requests
// shared its forward steps. Everything else stays.
inline void drop_volatile(json& j) {
  for (const char* key : {"id", "created", "timings", "id_slot", "tokens_cached", "max_seqs_in_step"}) j.erase(key);
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) u->erase("prompt_tokens_details");
}

inline json answer_parse(const std::string& text, const char* what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw malformed_answer(std::string(what) + " is not a JSON object: " + text.substr(0, 200));
  return j;
}

// The text a chunk or answer adds: content (llama.cpp), choices[0].text or .delta.content / .message.content.
inline std::string answer_text(const json& j, bool openai) {
  if (!openai) {
    if (!j.contains("content") || !j["content"].is_string()) throw malformed_answer("no string 'content' in " + j.dump().substr(0, 200));
    return j["content"].get<std::string>();
  }
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].size() != 1)
    throw malformed_answer("no one-element 'choices' in " + j.dump().substr(0, 200));
  const json& c = j["choices"][0];
  for (const char* key : {"text", "delta", "message"}) {
    if (!c.contains(key)) continue;
    const json& v = c[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object()) return v.contains("content") && v["content"].is_string() ? v["content"].get<std::string>() : "";
  }
  throw malformed_answer("choices[0] has no text, delta or message: " + c.dump().substr(0, 200));
}

// The data: payloads of an SSE body, in order. Throws malformed_answer on anything else.
inline std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) throw malformed_answer("SSE body ends inside an event: " + body.substr(pos, 200));
    if (body.compare(pos, 6, "data: ") != 0) throw malformed_answer("SSE event without 'data: ': " + body.substr(pos, 200));
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  if (out.empty()) throw malformed_answer("empty SSE body");
  return out;
}

// Streamed answer: the assembled text, then every event without its volatile fields, one a line.
inline std::string canonical_sse(const std::string& body, bool openai) {
  std::vector<std::string> events = sse_payloads(body);
  if (openai) {
    if (events.back() != "[DONE]") throw malformed_answer("OpenAI stream does not end with data: [DONE]");
    events.pop_back();
  }
  std::string text, lines;
  for (size_t i = 0; i < events.size(); ++i) {
    json e = answer_parse(events[i], "SSE event");
    if (e.contains("error")) throw malformed_answer("error event in stream: " + events[i]);
    text += answer_text(e, openai);
    drop_volatile(e);
    lines += e.dump() + "\n";
  }
  const json last = answer_parse(events.back(), "last SSE event");
  const bool finished = openai ? !last["choices"][0]["finish_reason"].is_null() : last.value("stop", false);
  if (!finished) throw malformed_answer("stream ended without its final event");
  return "text=" + json(text).dump() + "\n" + lines;
}

// The canonical form of a 200 answer of `kind`. Throws malformed_answer.
inline std::string canonical_answer(answer_kind kind, const std::string& body) {
  if (kind == ANSWER_SSE_LLAMACPP || kind == ANSWER_SSE_OPENAI) return canonical_sse(body, kind == ANSWER_SSE_OPENAI);
  json j = answer_parse(body, "answer");
  (void)answer_text(j, kind == ANSWER_OPENAI);
  if (!j.contains("logit_hashes") || !j.contains("chained_hash")) throw malformed_answer("no logit hashes in " + body.substr(0, 200));
  drop_volatile(j);
  return j.dump();
}

// The pid a signal handler must kill before the load test dies (-1: none).
inline volatile sig_atomic_t g_child_pid = -1;

// `detaudit serve -m MODEL --host 127.0.0.1 --port 0 EXTRA...` as a child (child_process.h) with
// stderr in `err_path`; g_child_pid holds its pid while it runs. Throws std::runtime_error when it
// does not start. Not thread-safe.
class serve_child {
 public:
  serve_child(const std::string& bin, const std::string& model, const std::vector<std::string>& extra,
              const std::string& err_path)
      : p_(bin, model, extra, err_path) {
    g_child_pid = p_.proc.pid();
  }
  serve_child(const serve_child&) = delete;
  serve_child& operator=(const serve_child&) = delete;
  ~serve_child() { g_child_pid = -1; }

  int port() const { return p_.port; }
  pid_t pid() const { return p_.proc.pid(); }

  // False once the child has exited (a crash under load); `status()` then says how.
  bool alive() {
    const bool a = p_.proc.alive();
    if (!a) g_child_pid = -1;
    return a;
  }
  std::string status() const { return p_.proc.status(); }

  // SIGTERM, then up to `wait_s` for it to exit (SIGKILL after). Returns the exit status: 0 for a
  // clean shutdown, 128+N when killed by signal N, -1 when it had already gone.
  int stop(int wait_s) {
    const int rc = p_.proc.stop(wait_s);
    g_child_pid = -1;
    return rc;
  }

 private:
  test::serve_process p_;
};

}  // namespace detaudit::load
