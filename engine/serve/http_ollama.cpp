// ollama-compatible routes: GET /api/version, GET /api/tags, POST /api/generate, POST /api/chat.
// Field names follow ollama's API documentation; durations are nanoseconds.
//
// Goals: ollama clients (and detaudit's ollama dialect) get ollama's answer shapes, including
// "logprobs": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}].
// Non-goals: model management (pull, create, delete, show), images, tools, "format", "context".
// "stream" (ollama's default: true) answers as a one-line NDJSON stream: the whole answer in one
// object with done: true, sent when generation ends. Errors use the server's one error shape
// (an OpenAI error object), not ollama's {"error": "..."}.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <sys/stat.h>

#include "chat/chat_template.h"
#include "runtime/hashes.h"
#include "serve/http_handlers.h"
#include "tokenizer/vocab.h"

namespace detaudit::serve {
namespace {

enum ollama_kind { OLLAMA_GENERATE, OLLAMA_CHAT };

struct ollama_options {
  ollama_kind kind = OLLAMA_GENERATE;
  bool stream = true;
  bool logit_hashes = false;
  int n_logprobs = -1;  // -1: no logprobs; else top entries per token
};

// RFC 3339 in UTC with microseconds, as ollama's created_at.
std::string rfc3339(std::chrono::system_clock::time_point t) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[48];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%06lldZ", static_cast<long long>(us % 1000000));
  return buf;
}

void reject_if_set(const json& b, const char* key) {
  auto it = b.find(key);
  if (it != b.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()) &&
      !((it->is_array() || it->is_object()) && it->empty()))
    throw http_error(400, std::string("field '") + key + "' is not supported by detaudit serve's ollama routes");
}

// "options": the sampling fields (ollama's names are llama.cpp's), num_predict and stop.
void options_parse(const http_state& st, const json& b, request& r) {
  auto it = b.find("options");
  if (it == b.end() || it->is_null()) return;
  if (!it->is_object()) throw http_error(400, std::string("field 'options': expected an object, found ") + it->type_name());
  const json& o = *it;
  sampling_parse(o, r.sampling);
  const int64_t n = field_n_predict(st, o, "num_predict", -2);
  r.n_predict = n < 0 ? -1 : n;
  r.stop = field_stop(o, "stop");
}

std::vector<int32_t> render(const http_state& st, const std::vector<chat::chat_message>& msgs, bool thinking) {
  return runtime::generate_chat_tokens(st.sched.model(), msgs, st.params.chat_template, thinking);
}

std::vector<chat::chat_message> messages_parse(const json& b) {
  auto it = b.find("messages");
  if (it == b.end() || !it->is_array() || it->empty()) throw http_error(400, "field 'messages': expected a non-empty array");
  std::vector<chat::chat_message> msgs;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw http_error(400, "field '" + where + "': expected an object");
    reject_if_set(m, "images");
    message_tools_refuse(m, i);
    const std::string role = field_string(m, "role", "");
    if (role != "system" && role != "user" && role != "assistant")
      throw http_error(400, "field '" + where + ".role': expected system, user or assistant, found " + text_quote(role));
    msgs.push_back({role, field_string(m, "content", "")});
  }
  return msgs;
}

// The fields both routes share; the prompt is set by the caller.
request common_parse(const http_state& st, const json& b, ollama_options& o) {
  for (const char* k : {"images", "format", "template", "suffix", "context", "tools"}) reject_if_set(b, k);
  request r;
  options_parse(st, b, r);
  o.stream = field_bool(b, "stream", true);
  if (field_bool(b, "logprobs", false)) o.n_logprobs = static_cast<int>(field_int(b, "top_logprobs", 0, 0, 20));
  r.n_probs = std::max(o.n_logprobs, o.n_logprobs >= 0 ? 1 : 0);
  r.logit_hashes = field_bool(b, "logit_hashes", false);
  o.logit_hashes = r.logit_hashes;
  return r;
}

json logprobs_json(const http_state& st, int n_top, const std::vector<runtime::generated_token>& toks) {
  json out = json::array();
  for (const runtime::generated_token& t : toks) {
    json top = json::array();
    for (size_t i = 0; i < std::min(static_cast<size_t>(n_top), t.top.size()); ++i) {
      const std::string piece = token_piece(st, t.top[i].id);
      top.push_back({{"token", piece}, {"logprob", t.top[i].logprob}, {"bytes", token_bytes(piece)}});
    }
    out.push_back({{"token", t.piece}, {"logprob", token_logprob_of(t)}, {"bytes", token_bytes(t.piece)}, {"top_logprobs", top}});
  }
  return out;
}

json answer_json(const http_state& st, const ollama_options& o, const request_result& out, int64_t total_ns) {
  const runtime::generate_result& g = out.gen;
  json j = {{"model", st.model_id}, {"created_at", rfc3339(std::chrono::system_clock::now())}};
  if (o.kind == OLLAMA_CHAT) j["message"] = {{"role", "assistant"}, {"content", g.text}};
  else j["response"] = g.text;
  j["done"] = true;
  j["done_reason"] = finish_reason_openai(g);
  j["total_duration"] = total_ns;
  j["load_duration"] = 0;
  j["prompt_eval_count"] = static_cast<int64_t>(g.prompt_tokens.size());
  j["prompt_eval_duration"] = static_cast<int64_t>(g.timings.prompt_ms * 1e6);
  j["eval_count"] = static_cast<int64_t>(g.tokens.size());
  j["eval_duration"] = static_cast<int64_t>(g.timings.gen_ms * 1e6);
  j["max_seqs_in_step"] = out.max_seqs_in_step;
  if (o.n_logprobs >= 0) j["logprobs"] = logprobs_json(st, o.n_logprobs, g.tokens);
  if (o.logit_hashes) {
    json hs = json::array();
    for (const runtime::generated_token& t : g.tokens) hs.push_back(runtime::hash_hex(t.logit_hash));
    j["logit_hashes"] = hs;
    j["chained_hash"] = runtime::hash_hex(g.chained_hash);
  }
  return j;
}

void respond(http_state& st, request r, const ollama_options& o, httplib::Response& res) {
  const auto t0 = std::chrono::steady_clock::now();
  const request_result out = completion_run(st, std::move(r));
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  const json j = answer_json(st, o, out, ns);
  if (o.stream) res.set_content(json_text(j) + "\n", "application/x-ndjson");
  else json_send(res, j);
}

void handle_generate(http_state& st, const httplib::Request& req, httplib::Response& res) {
  const parsed_body body = body_parse(st, req);
  const json& b = body.j;
  ollama_options o;
  o.kind = OLLAMA_GENERATE;
  request r = common_parse(st, b, o);
  const std::string prompt = field_string(b, "prompt", "");
  if (prompt.empty()) {
    json j = {{"model", st.model_id}, {"created_at", rfc3339(std::chrono::system_clock::now())}, {"response", ""},
              {"done", true}, {"done_reason", "load"}};
    if (o.stream) res.set_content(json_text(j) + "\n", "application/x-ndjson");
    else json_send(res, j);
    return;
  }
  if (field_bool(b, "raw", false)) {
    r.prompt = runtime::generate_tokenize(st.sched.model().vocab(), prompt);
  } else {
    std::vector<chat::chat_message> msgs;
    const std::string system = field_string(b, "system", "");
    if (!system.empty()) msgs.push_back({"system", system});
    msgs.push_back({"user", prompt});
    r.prompt = render(st, msgs, field_bool(b, "think", true));
  }
  respond(st, std::move(r), o, res);
}

void handle_chat(http_state& st, const httplib::Request& req, httplib::Response& res) {
  const parsed_body body = body_parse(st, req);
  const json& b = body.j;
  ollama_options o;
  o.kind = OLLAMA_CHAT;
  request r = common_parse(st, b, o);
  r.prompt = render(st, messages_parse(b), field_bool(b, "think", true));
  respond(st, std::move(r), o, res);
}

void handle_version(http_state&, const httplib::Request&, httplib::Response& res) {
  json_send(res, {{"version", DETAUDIT_VERSION}});
}

void handle_tags(http_state& st, const httplib::Request&, httplib::Response& res) {
  const model::model& m = st.sched.model();
  struct stat sb {};
  const bool known = ::stat(m.path().c_str(), &sb) == 0;
  const auto mtime = std::chrono::system_clock::from_time_t(known ? sb.st_mtime : 0);
  json model = {{"name", st.model_id},
                {"model", st.model_id},
                {"modified_at", rfc3339(mtime)},
                {"size", known ? static_cast<int64_t>(sb.st_size) : 0},
                {"digest", m.sha256()},
                {"details", {{"format", "gguf"}}}};
  json_send(res, {{"models", json::array({model})}});
}

}  // namespace

void routes_ollama(httplib::Server& srv, http_state& st,
                   const std::function<httplib::Server::Handler(httplib::Server::Handler)>& wrap) {
  using H = void (*)(http_state&, const httplib::Request&, httplib::Response&);
  auto bind = [&st, &wrap](H h) { return wrap([&st, h](const httplib::Request& q, httplib::Response& r) { h(st, q, r); }); };
  srv.Get("/api/version", bind(handle_version));
  srv.Get("/api/tags", bind(handle_tags));
  srv.Post("/api/generate", bind(handle_generate));
  srv.Post("/api/chat", bind(handle_chat));
}

}  // namespace detaudit::serve
