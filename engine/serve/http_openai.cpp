// OpenAI-compatible routes: /v1/completions, /v1/chat/completions (messages rendered with the
// model's chat template family), /v1/models. Every answer carries system_fingerprint; with
// "logit_hashes": true also the per-step logit hashes and the chained hash (an extension).
#include <algorithm>
#include <chrono>
#include <memory>

#include "chat/chat_template.h"
#include "runtime/hashes.h"
#include "serve/http_handlers.h"
#include "tokenizer/vocab.h"

namespace detaudit::serve {
namespace {

enum api_kind { API_COMPLETION, API_CHAT };

struct openai_options {
  api_kind kind = API_COMPLETION;
  bool stream = false;
  bool logit_hashes = false;
  int n_logprobs = -1;  // -1: no logprobs; else top entries shown per token
  std::string id;
  int64_t created = 0;
};

json envelope(const http_state& st, const openai_options& o, bool chunk) {
  const char* object = o.kind == API_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", o.id}, {"object", object}, {"created", o.created}, {"model", st.model_id}, {"system_fingerprint", st.fingerprint}};
}

// Chat: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
// Completions: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}, token
// strings as token_text_openai() writes them (text_offset counts the piece's bytes).
json logprobs_json(const http_state& st, const openai_options& o, const std::vector<runtime::generated_token>& toks,
                   size_t text_offset) {
  if (o.n_logprobs < 0) return nullptr;
  const size_t n_top = static_cast<size_t>(o.n_logprobs);
  if (o.kind == API_CHAT) {
    json content = json::array();
    for (const runtime::generated_token& t : toks) {
      json top = json::array();
      for (size_t i = 0; i < std::min(n_top, t.top.size()); ++i) {
        const std::string piece = token_piece(st, t.top[i].id);
        top.push_back({{"token", piece}, {"logprob", t.top[i].logprob}, {"bytes", token_bytes(piece)}});
      }
      content.push_back({{"token", t.piece}, {"logprob", token_logprob_of(t)}, {"bytes", token_bytes(t.piece)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_lp = json::array(), top_lp = json::array(), offsets = json::array();
  for (const runtime::generated_token& t : toks) {
    tokens.push_back(token_text_openai(t.piece));
    token_lp.push_back(token_logprob_of(t));
    json top = json::object();
    for (size_t i = 0; i < std::min(n_top, t.top.size()); ++i)
      top[token_text_openai(token_piece(st, t.top[i].id))] = t.top[i].logprob;
    top_lp.push_back(top);
    offsets.push_back(text_offset);
    text_offset += t.piece.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lp}, {"top_logprobs", top_lp}, {"text_offset", offsets}};
}

void hashes_add(json& j, const request_result& out) {
  json hs = json::array();
  for (const runtime::generated_token& t : out.gen.tokens) hs.push_back(runtime::hash_hex(t.logit_hash));
  j["logit_hashes"] = hs;
  j["chained_hash"] = runtime::hash_hex(out.gen.chained_hash);
}

json usage_json(const request_result& out) {
  const int64_t n_prompt = static_cast<int64_t>(out.gen.prompt_tokens.size());
  const int64_t n_gen = static_cast<int64_t>(out.gen.tokens.size());
  return {{"prompt_tokens", n_prompt},
          {"completion_tokens", n_gen},
          {"total_tokens", n_prompt + n_gen},
          {"prompt_tokens_details", {{"cached_tokens", out.n_cached}}}};
}

json response_json(const http_state& st, const openai_options& o, const request_result& out) {
  json j = envelope(st, o, false);
  json choice = {{"index", 0}, {"logprobs", logprobs_json(st, o, out.gen.tokens, 0)}, {"finish_reason", finish_reason_openai(out.gen)}};
  if (o.kind == API_CHAT) choice["message"] = {{"role", "assistant"}, {"content", out.gen.text}};
  else choice["text"] = out.gen.text;
  j["choices"] = json::array({choice});
  j["usage"] = usage_json(out);
  j["timings"] = timings_json(out.gen.timings, out.n_cached);
  j["max_seqs_in_step"] = out.max_seqs_in_step;
  if (o.logit_hashes) hashes_add(j, out);
  return j;
}

stream_format stream_format_make(const http_state& st, const openai_options& o) {
  auto first = std::make_shared<bool>(true);  // touched only on the scheduler thread
  auto offset = std::make_shared<size_t>(0);
  stream_format fmt;
  fmt.token = [&st, o, first, offset](const token_event& ev) -> std::string {
    if (ev.text.empty() && o.n_logprobs < 0 && !o.logit_hashes) return "";
    json j = envelope(st, o, true);
    json choice = {{"index", 0}, {"logprobs", logprobs_json(st, o, {ev.token}, *offset)}, {"finish_reason", nullptr}};
    *offset += ev.token.piece.size();
    if (o.kind == API_CHAT) {
      choice["delta"] = {{"content", ev.text}};
      if (*first) choice["delta"]["role"] = "assistant";
      *first = false;
    } else {
      choice["text"] = ev.text;
    }
    j["choices"] = json::array({choice});
    if (o.logit_hashes) j["logit_hash"] = runtime::hash_hex(ev.token.logit_hash);
    return sse_event(j);
  };
  fmt.done = [&st, o](const request_result& out) {
    json j = envelope(st, o, true);
    json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason_openai(out.gen)}};
    if (o.kind == API_CHAT) choice["delta"] = json::object();
    else choice["text"] = "";
    j["choices"] = json::array({choice});
    j["usage"] = usage_json(out);
    j["timings"] = timings_json(out.gen.timings, out.n_cached);
    j["max_seqs_in_step"] = out.max_seqs_in_step;
    if (o.logit_hashes) hashes_add(j, out);
    return sse_event(j) + "data: [DONE]\n\n";
  };
  return fmt;
}

// Fields both OpenAI endpoints share; the prompt is set by the caller.
request common_parse(const http_state& st, const json& b, openai_options& o, const char* max_tokens_key) {
  field_require_n1(b, "n");
  field_require_n1(b, "best_of");
  request r;
  r.n_predict = field_n_predict(st, b, max_tokens_key, -1);
  sampling_parse(b, r.sampling);
  r.stop = field_stop(b, "stop");
  r.cache_prompt = field_bool(b, "cache_prompt", true);
  r.id_slot = static_cast<int>(field_int(b, "id_slot", -1, -1, st.sched.params().n_slots - 1));
  r.logit_hashes = field_bool(b, "logit_hashes", false);
  o.stream = field_bool(b, "stream", false);
  o.logit_hashes = r.logit_hashes;
  o.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return r;
}

void respond(http_state& st, request r, const openai_options& o, httplib::Response& res) {
  if (o.stream) completion_stream(st, std::move(r), stream_format_make(st, o), res);
  else json_send(res, response_json(st, o, completion_run(st, std::move(r))));
}

void handle_completions(http_state& st, const httplib::Request& req, httplib::Response& res) {
  const parsed_body body = body_parse(st, req);
  const json& b = body.j;
  openai_options o;
  o.kind = API_COMPLETION;
  o.id = "cmpl-" + std::to_string(st.next_id++);
  if (field_bool(b, "echo", false)) throw http_error(400, "field 'echo': true is not supported");
  request r = common_parse(st, b, o, "max_tokens");
  r.prompt = field_prompt(st, b, "prompt");
  o.n_logprobs = static_cast<int>(field_int(b, "logprobs", -1, 0, 20));
  r.n_probs = std::max(o.n_logprobs, o.n_logprobs >= 0 ? 1 : 0);
  respond(st, std::move(r), o, res);
}

std::string message_content(const json& m, size_t i) {
  const std::string where = "field 'messages[" + std::to_string(i) + "].content'";
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) throw http_error(400, where + ": expected a string or an array of text parts");
  std::string text;
  for (const json& part : *it) {
    const auto type = part.is_object() ? part.find("type") : part.end();
    if (!part.is_object() || type == part.end() || !type->is_string() || *type != "text" || !part.contains("text") ||
        !part["text"].is_string())
      throw http_error(400, where + ": only {\"type\": \"text\", \"text\": ...} parts are supported");
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<int32_t> chat_prompt(const http_state& st, const json& b) {
  auto it = b.find("messages");
  if (it == b.end() || !it->is_array() || it->empty()) throw http_error(400, "field 'messages': expected a non-empty array");
  std::vector<chat::chat_message> msgs;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw http_error(400, "field 'messages[" + std::to_string(i) + "].role': expected a string");
    std::string role = m["role"].get<std::string>();
    // OpenAI's newer models take their instructions as "developer" messages; as llama-server
    // does, they are system messages to the template.
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant")
      throw http_error(400, "field 'messages[" + std::to_string(i) + "].role': expected system, developer, user or assistant, found " +
                                text_quote(role));
    message_tools_refuse(m, i);
    msgs.push_back({role, message_content(m, i)});
  }
  bool thinking = true;
  std::string effort;
  // gpt-oss's reasoning level, passed to its template as llama-server passes it: from
  // chat_template_kwargs, else OpenAI's own top-level reasoning_effort.
  const auto effort_read = [&effort](const json& v, const char* name) {
    if (!v.is_string() || v.get_ref<const std::string&>().empty() || v.get_ref<const std::string&>().size() > 64 ||
        v.get_ref<const std::string&>().find_first_of("\n\r") != std::string::npos)
      throw http_error(400, std::string("field '") + name + "': expected a one-line string of 1 to 64 bytes (low, medium or high)");
    effort = v.get<std::string>();
  };
  if (auto k = b.find("chat_template_kwargs"); k != b.end() && !k->is_null()) {
    if (!k->is_object()) throw http_error(400, "field 'chat_template_kwargs': expected an object, found " + value_quote(*k));
    if (auto t = k->find("enable_thinking"); t != k->end() && !t->is_null()) {
      if (!t->is_boolean())
        throw http_error(400, "field 'chat_template_kwargs.enable_thinking': expected true or false, found " + value_quote(*t));
      thinking = t->get<bool>();
    }
    if (auto e = k->find("reasoning_effort"); e != k->end()) effort_read(*e, "chat_template_kwargs.reasoning_effort");
  }
  if (auto e = b.find("reasoning_effort"); effort.empty() && e != b.end() && !e->is_null()) effort_read(*e, "reasoning_effort");
  return runtime::generate_chat_tokens(st.sched.model(), msgs, st.params.chat_template, thinking, effort);
}

void handle_chat(http_state& st, const httplib::Request& req, httplib::Response& res) {
  const parsed_body body = body_parse(st, req);
  const json& b = body.j;
  openai_options o;
  o.kind = API_CHAT;
  o.id = "chatcmpl-" + std::to_string(st.next_id++);
  // max_completion_tokens where it is given (not null), else max_tokens; both are checked, and a
  // null is absent (clients that serialise unset fields send one beside the key they set).
  const auto given = [&b](const char* k) { return b.contains(k) && !b[k].is_null(); };
  (void)field_n_predict(st, b, "max_tokens", -1);
  request r = common_parse(st, b, o, given("max_completion_tokens") ? "max_completion_tokens" : "max_tokens");
  const int top_logprobs = static_cast<int>(field_int(b, "top_logprobs", 0, 0, 20));  // checked even unused
  if (field_bool(b, "logprobs", false)) o.n_logprobs = top_logprobs;
  r.n_probs = std::max(o.n_logprobs, o.n_logprobs >= 0 ? 1 : 0);
  r.prompt = chat_prompt(st, b);
  respond(st, std::move(r), o, res);
}

void handle_models(http_state& st, const httplib::Request&, httplib::Response& res) {
  const model::model& m = st.sched.model();
  json meta = {{"sha256", m.sha256()}, {"n_vocab", m.vocab().size()}, {"n_ctx_slot", st.sched.slot_n_ctx()},
               {"numerics", runtime::numerics_name(st.sched.params().ctx.numerics)},
               {"backend", runtime::backend_name(st.sched.params().ctx.backend)}};
  json model = {{"id", st.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "detaudit"}, {"meta", meta}};
  json_send(res, {{"object", "list"}, {"data", json::array({model})}});
}

}  // namespace

void routes_openai(httplib::Server& srv, http_state& st,
                   const std::function<httplib::Server::Handler(httplib::Server::Handler)>& wrap) {
  using H = void (*)(http_state&, const httplib::Request&, httplib::Response&);
  auto bind = [&st, &wrap](H h) { return wrap([&st, h](const httplib::Request& q, httplib::Response& r) { h(st, q, r); }); };
  srv.Post("/v1/completions", bind(handle_completions));
  srv.Post("/v1/chat/completions", bind(handle_chat));
  srv.Post("/chat/completions", bind(handle_chat));
  srv.Get("/v1/models", bind(handle_models));
  srv.Get("/models", bind(handle_models));
}

}  // namespace detaudit::serve
