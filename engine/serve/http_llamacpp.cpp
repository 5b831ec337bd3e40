// llama.cpp server routes: /health, /completion, /tokenize, /detokenize, /props, /slots,
// /slots/{id}?action=save|restore|erase, /metrics. Field names follow llama.cpp's server README.
#include <chrono>
#include <sstream>

#include "chat/chat_template.h"
#include "runtime/hashes.h"
#include "serve/http_handlers.h"
#include "tokenizer/vocab.h"

namespace detaudit::serve {
namespace {

struct llamacpp_options {
  bool stream = false;
  bool return_tokens = false;
  bool logit_hashes = false;
  int n_probs = 0;
};

request completion_parse(const http_state& st, const json& b, llamacpp_options& o) {
  request r;
  r.prompt = field_prompt(st, b, "prompt");
  completion_fields_parse(b, st.sched, r);
  o.stream = field_bool(b, "stream", false);
  o.return_tokens = field_bool(b, "return_tokens", false);
  o.logit_hashes = r.logit_hashes;
  o.n_probs = r.n_probs;
  return r;
}

}  // namespace

namespace {

// The per-token fields shared by a streamed chunk and the final answer.
void token_fields(const http_state& st, const llamacpp_options& o, const std::vector<runtime::generated_token>& toks,
                  json& j) {
  if (o.return_tokens) {
    json ids = json::array();
    for (const runtime::generated_token& t : toks) ids.push_back(t.id);
    j["tokens"] = ids;
  }
  if (o.n_probs > 0) {
    json probs = json::array();
    for (const runtime::generated_token& t : toks) probs.push_back(token_probs_llamacpp(st, t));
    j["completion_probabilities"] = probs;
  }
  if (o.logit_hashes) {
    json hs = json::array();
    for (const runtime::generated_token& t : toks) hs.push_back(runtime::hash_hex(t.logit_hash));
    j["logit_hashes"] = hs;
  }
}

json completion_json(const http_state& st, const llamacpp_options& o, const request_result& out, bool streamed) {
  const runtime::generate_result& g = out.gen;
  json j = {{"content", streamed ? std::string() : g.text},
            {"id_slot", out.slot},
            {"stop", true},
            {"model", st.model_id},
            {"system_fingerprint", st.fingerprint},
            {"tokens_predicted", static_cast<int64_t>(g.tokens.size())},
            {"tokens_evaluated", static_cast<int64_t>(g.prompt_tokens.size())},
            {"tokens_cached", out.n_past},
            {"stop_type", stop_type_llamacpp(g.stop)},
            {"stopped_eos", g.stop == runtime::STOP_EOG},
            {"stopped_word", g.stop == runtime::STOP_WORD},
            {"stopped_limit", g.stop == runtime::STOP_LIMIT || g.stop == runtime::STOP_CONTEXT},
            {"stopping_word", g.stop_word},
            {"truncated", false},
            {"timings", timings_json(g.timings, out.n_cached)},
            {"draft_proposed", out.n_draft_proposed},
            {"draft_accepted", out.n_draft_accepted},
            {"max_seqs_in_step", out.max_seqs_in_step}};
  if (!streamed) token_fields(st, o, g.tokens, j);
  else j["tokens"] = json::array();
  if (o.logit_hashes) {
    if (streamed) {
      json hs = json::array();
      for (const runtime::generated_token& t : g.tokens) hs.push_back(runtime::hash_hex(t.logit_hash));
      j["logit_hashes"] = hs;
    }
    j["chained_hash"] = runtime::hash_hex(g.chained_hash);
  }
  return j;
}

void handle_completion(http_state& st, const httplib::Request& req, httplib::Response& res) {
  const parsed_body body = body_parse(st, req);
  const json& b = body.j;
  llamacpp_options o;
  request r = completion_parse(st, b, o);
  if (!o.stream) {
    json_send(res, completion_json(st, o, completion_run(st, std::move(r)), false));
    return;
  }
  stream_format fmt;
  fmt.token = [&st, o](const token_event& ev) {
    json j = {{"content", ev.text}, {"stop", false}};
    token_fields(st, o, {ev.token}, j);
    if (o.logit_hashes) {
      j["logit_hash"] = runtime::hash_hex(ev.token.logit_hash);
      j.erase("logit_hashes");
    }
    return sse_event(j);
  };
  fmt.done = [&st, o](const request_result& out) { return sse_event(completion_json(st, o, out, true)); };
  completion_stream(st, std::move(r), std::move(fmt), res);
}

void handle_tokenize(http_state& st, const httplib::Request& req, httplib::Response& res) {
  const parsed_body body = body_parse(st, req);
  const json& b = body.j;
  const std::string content = field_string(b, "content", "");
  const bool add_special = field_bool(b, "add_special", false);
  const bool with_pieces = field_bool(b, "with_pieces", false);
  const std::vector<int32_t> ids = tokenizer::encode(st.sched.model().vocab(), content, add_special, /*parse_special=*/true);
  json toks = json::array();
  for (int32_t id : ids) {
    if (!with_pieces) {
      toks.push_back(id);
      continue;
    }
    const std::string piece = tokenizer::token_to_piece(st.sched.model().vocab(), id, true);
    // not UTF-8: given as its bytes, as llama.cpp does
    toks.push_back({{"id", id}, {"piece", utf8_is_valid(piece) ? json(piece) : token_bytes(piece)}});
  }
  json_send(res, {{"tokens", toks}});
}

void handle_detokenize(http_state& st, const httplib::Request& req, httplib::Response& res) {
  const parsed_body body = body_parse(st, req);
  const json& b = body.j;
  auto it = b.find("tokens");
  std::vector<int32_t> ids;
  if (it != b.end() && !it->is_null()) {
    if (!it->is_array()) throw http_error(400, "field 'tokens': expected an array of token ids");
    const int32_t n_vocab = st.sched.model().vocab().size();
    for (const json& t : *it) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab)
        throw http_error(400, "field 'tokens': expected token ids in [0, " + std::to_string(n_vocab) + "), found " + value_quote(t));
      ids.push_back(t.get<int32_t>());
    }
  }
  json_send(res, {{"content", tokenizer::decode(st.sched.model().vocab(), ids)}});
}

// A special token's text as /props gives it ("" when the vocabulary has none).
std::string special_text(const tokenizer::vocab& v, int32_t id) { return id >= 0 && id < v.size() ? v.token_text(id) : ""; }

void handle_props(http_state& st, const httplib::Request&, httplib::Response& res) {
  const scheduler& s = st.sched;
  const runtime::sampling_params dflt;
  json gen = {{"n_ctx", s.slot_n_ctx()}, {"n_predict", -1}, {"params", sampling_to_json(dflt)}, {"n_probs", 0},
              {"cache_prompt", true}};
  json j = {{"default_generation_settings", gen},
            {"total_slots", s.params().n_slots},
            {"model_path", s.model().path()},
            {"model_sha256", s.model().sha256()},
            {"numerics", runtime::numerics_name(s.params().ctx.numerics)},
            {"backend", runtime::backend_name(s.params().ctx.backend)},
            {"device", s.device_description()},
            {"build_info", std::string("detaudit ") + DETAUDIT_VERSION},
            {"system_fingerprint", st.fingerprint},
            {"chat_template", s.model().vocab().chat_template()},
            {"bos_token", special_text(s.model().vocab(), s.model().vocab().ids().bos)},
            {"eos_token", special_text(s.model().vocab(), s.model().vocab().ids().eos)},
            {"speculative", s.params().spec != SPEC_NONE}};
  if (auto f = chat::chat_fallback_family(st.params.chat_template, s.model().chat_template()))
    j["chat_template_fallback"] = chat::template_family_name(*f);
  json_send(res, j);
}

void handle_slots(http_state& st, const httplib::Request&, httplib::Response& res) {
  json a = json::array();
  for (const slot_info& si : st.sched.slots())
    a.push_back({{"id", si.id},
                 {"n_ctx", si.n_ctx},
                 {"is_processing", si.busy},
                 {"n_cached", si.n_cached},
                 {"speculative", st.sched.params().spec != SPEC_NONE}});  // as llama-server's slots say
  json_send(res, a);
}

void handle_slot_action(http_state& st, const httplib::Request& req, httplib::Response& res) {
  const std::string id_text = req.matches[1].str();
  const int64_t id = id_text.size() > 9 ? INT64_MAX : std::stoll(id_text);
  if (id >= st.sched.params().n_slots) throw http_error(404, "slot " + std::to_string(id) + " does not exist");
  const std::string action = req.get_param_value("action");
  const parsed_body body = req.body.empty() ? parsed_body{json::object(), {}} : body_parse(st, req);
  const json& b = body.j;
  const int slot = static_cast<int>(id);
  const auto t0 = std::chrono::steady_clock::now();
  json out = {{"id_slot", slot}};
  if (action == "save" || action == "restore") {
    const std::string file = field_string(b, "filename", "");
    if (file.empty()) throw http_error(400, "field 'filename': missing");
    if (action == "save") st.sched.slot_save(slot, file);
    else st.sched.slot_restore(slot, file);
    out["filename"] = file;
  } else if (action == "erase") {
    st.sched.slot_erase(slot);
  } else {
    throw http_error(400, "query 'action': expected save, restore or erase, found " + text_quote(action));
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (const slot_info& si : st.sched.slots())
    if (si.id == slot) out[action == "save" ? "n_saved" : action == "restore" ? "n_restored" : "n_erased"] = si.n_cached;
  if (action != "erase") out["timings"] = {{action + "_ms", ms}};
  json_send(res, out);
}

void metric(std::ostringstream& os, const char* name, const char* type, const char* help, int64_t v) {
  os << "# HELP detaudit_" << name << " " << help << "\n# TYPE detaudit_" << name << " " << type << "\ndetaudit_" << name
     << " " << v << "\n";
}

void handle_metrics(http_state& st, const httplib::Request&, httplib::Response& res) {
  const metrics_snapshot m = st.sched.metrics();
  std::ostringstream os;
  metric(os, "requests_total", "counter", "Requests admitted.", m.requests_total);
  metric(os, "requests_rejected_total", "counter", "Requests rejected with 503 (queue full).", m.requests_rejected);
  metric(os, "requests_cancelled_total", "counter", "Requests stopped because the client went away.", m.requests_cancelled);
  metric(os, "requests_active", "gauge", "Requests in a slot now.", m.requests_active);
  metric(os, "requests_waiting", "gauge", "Requests queued now.", m.requests_waiting);
  metric(os, "prompt_tokens_total", "counter", "Prompt tokens evaluated (not from a cache).", m.prompt_tokens_total);
  metric(os, "prompt_tokens_cached_total", "counter", "Prompt tokens served from a slot's cache.", m.prompt_tokens_cached);
  metric(os, "generated_tokens_total", "counter", "Tokens generated.", m.generated_tokens_total);
  metric(os, "steps_total", "counter", "Forward steps run.", m.steps_total);
  metric(os, "max_seqs_in_step", "gauge", "Most sequences evaluated in one forward step.", m.max_seqs_in_step);
  metric(os, "max_tokens_in_step", "gauge", "Most tokens evaluated in one forward step.", m.max_tokens_in_step);
  metric(os, "draft_proposed_total", "counter", "Draft tokens proposed.", m.draft_proposed_total);
  metric(os, "draft_accepted_total", "counter", "Draft tokens accepted.", m.draft_accepted_total);
  res.set_content(os.str(), "text/plain; version=0.0.4");
}

}  // namespace

void routes_llamacpp(httplib::Server& srv, http_state& st,
                     const std::function<httplib::Server::Handler(httplib::Server::Handler)>& wrap) {
  using H = void (*)(http_state&, const httplib::Request&, httplib::Response&);
  auto bind = [&st, &wrap](H h) { return wrap([&st, h](const httplib::Request& q, httplib::Response& r) { h(st, q, r); }); };
  auto health = wrap([](const httplib::Request&, httplib::Response& r) { json_send(r, {{"status", "ok"}}); });
  srv.Get("/health", health);
  srv.Get("/v1/health", health);
  srv.Post("/completion", bind(handle_completion));
  srv.Post("/completions", bind(handle_completion));
  srv.Post("/tokenize", bind(handle_tokenize));
  srv.Post("/detokenize", bind(handle_detokenize));
  srv.Get("/props", bind(handle_props));
  srv.Get("/slots", bind(handle_slots));
  srv.Post(R"(/slots/(\d+))", bind(handle_slot_action));
  srv.Get("/metrics", bind(handle_metrics));
}

}  // namespace detaudit::serve
