// One planted answer in the shape of the route it was asked on. The shapes are those the dialect
// readers in probes/dialect_*.cpp parse (and the servers they were written against produce):
//
//   POST /v1/chat/completions  choices[0].message.content, choices[0].logprobs.content[ENTRY]
//   POST /v1/completions       choices[0].text, choices[0].logprobs {tokens, token_logprobs,
//                              top_logprobs: [{token: logprob}], text_offset}
//   POST /completion (newer)   content, tokens (ids, with return_tokens), completion_probabilities[ENTRY]
//   POST /completion (older)   content, completion_probabilities [{content, probs: [{tok_str, prob}]}]
//   POST /api/generate, /api/chat   response | message.content, logprobs [ENTRY]
//   ENTRY = {id?, token, logprob?, bytes?, top_logprobs: [{id?, token, logprob, bytes?}]}
//
// Cache counts go where the case says: OpenAI usage.prompt_tokens_details.cached_tokens, or
// llama.cpp's timings {prompt_n, cache_n} with tokens_evaluated. max_seqs_in_step and
// logit_hashes are top-level fields of every shape.
#include <cmath>
#include <cstdio>

#include "verdict_plant.h"

namespace detaudit::verdicts {
namespace {

std::string hex_byte(unsigned char b, const char* fmt) {
  char buf[8];
  std::snprintf(buf, sizeof buf, fmt, b);
  return buf;
}

// The token's string as its form spells it.
std::string spell(const plant_token& t) {
  if (t.form == "text") return t.bytes;
  if (t.form == "replacement") return "\xEF\xBF\xBD";
  std::string s = t.form == "openai" ? "bytes:" : "";
  for (char ch : t.bytes) {
    const auto b = static_cast<unsigned char>(ch);
    if (t.form == "sentencepiece") s += hex_byte(b, "<0x%02X>");
    else if (t.form == "openai" || b >= 0x80) s += hex_byte(b, "\\x%02x");
    else s += ch;
  }
  return s;
}

// A planted id, else (auto_ids) one made from the bytes: a single byte b is 3 + b (SentencePiece's
// byte pieces), longer tokens an FNV-1a hash folded into 300..30299.
std::optional<int> id_of(const plant_token& t, const plant_case& c) {
  if (t.id || !c.auto_ids) return t.id;
  if (t.bytes.size() == 1) return 3 + static_cast<unsigned char>(t.bytes[0]);
  uint32_t h = 2166136261u;
  for (char ch : t.bytes) h = (h ^ static_cast<unsigned char>(ch)) * 16777619u;
  return 300 + static_cast<int>(h % 30000u);
}

// The sampled token's log-prob: planted, else that of the first alternative with its bytes.
std::optional<double> sampled_logprob(const plant_token& t) {
  if (t.logprob) return t.logprob;
  for (const plant_token& alt : t.top)
    if (alt.bytes == t.bytes && alt.logprob) return alt.logprob;
  return std::nullopt;
}

json bytes_json(const std::string& bytes) {
  json a = json::array();
  for (char ch : bytes) a.push_back(static_cast<int>(static_cast<unsigned char>(ch)));
  return a;
}

json alt_entry(const plant_token& alt, const plant_answer& a, const plant_case& c) {
  json e = json::object();
  if (const auto id = id_of(alt, c); id && !a.omit_ids) e["id"] = *id;
  e["token"] = spell(alt);
  e["logprob"] = alt.logprob.value_or(0.0);
  if (!a.omit_bytes) e["bytes"] = bytes_json(alt.bytes);
  return e;
}

json entry(const plant_token& t, const plant_answer& a, const plant_case& c) {
  json e = json::object();
  if (const auto id = id_of(t, c); id && !a.omit_ids) e["id"] = *id;
  e["token"] = spell(t);
  if (const auto lp = sampled_logprob(t); lp && !a.omit_token_logprob) e["logprob"] = *lp;
  if (!a.omit_bytes) e["bytes"] = bytes_json(t.bytes);
  json top = json::array();
  if (!a.omit_top)
    for (const plant_token& alt : t.top) top.push_back(alt_entry(alt, a, c));
  e["top_logprobs"] = std::move(top);
  return e;
}

json entries(const plant_answer& a, const plant_case& c) {
  json out = json::array();
  for (const plant_token& t : a.tokens) out.push_back(entry(t, a, c));
  return out;
}

double prob_of(const plant_token& t) { return t.prob ? *t.prob : std::exp(t.logprob.value_or(0.0)); }

json older_entries(const plant_answer& a) {
  json out = json::array();
  for (const plant_token& t : a.tokens) {
    json probs = json::array();
    if (!a.omit_top)
      for (const plant_token& alt : t.top) probs.push_back({{"tok_str", spell(alt)}, {"prob", prob_of(alt)}});
    out.push_back({{"content", spell(t)}, {"probs", std::move(probs)}});
  }
  return out;
}

// /v1/completions: parallel arrays; alternatives as a {token: logprob} object (duplicates collapse).
json completions_logprobs(const plant_answer& a) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = 0;
  for (const plant_token& t : a.tokens) {
    toks.push_back(spell(t));
    const auto lp = sampled_logprob(t);
    lps.push_back(lp && !a.omit_token_logprob ? json(*lp) : json(nullptr));
    json top = json::object();
    if (!a.omit_top)
      for (const plant_token& alt : t.top) top[spell(alt)] = alt.logprob.value_or(0.0);
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += t.bytes.size();
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

std::string cache_place(const route_ask& ask, const plant_case& c) {
  if (c.cache_report != "auto") return c.cache_report;
  if (ask.path == "/completion") return "timings";
  if (ask.path.rfind("/v1/", 0) == 0) return "usage";
  return "none";
}

json timings_json(const plant_answer& a, const plant_case& c) {
  json t = {{"predicted_n", a.tokens.size()}};
  if (a.cached_tokens) {
    t["prompt_n"] = c.prompt_tokens - *a.cached_tokens;
    if (c.cache_n) t["cache_n"] = *a.cached_tokens;
  }
  if (a.draft_proposed) t["draft_n"] = *a.draft_proposed;
  if (a.draft_accepted) t["draft_n_accepted"] = *a.draft_accepted;
  return t;
}

json usage_json(const plant_answer& a, const plant_case& c, bool details) {
  json u = {{"prompt_tokens", c.prompt_tokens},
            {"completion_tokens", a.tokens.size()},
            {"total_tokens", c.prompt_tokens + static_cast<int>(a.tokens.size())}};
  if (details && a.cached_tokens) u["prompt_tokens_details"] = {{"cached_tokens", *a.cached_tokens}};
  return u;
}

// The fields every shape may carry: cache counts, batch width, hashes.
void extras_add(json& body, const route_ask& ask, const plant_answer& a, const plant_case& c) {
  const std::string place = cache_place(ask, c);
  if (ask.path.rfind("/v1/", 0) == 0) body["usage"] = usage_json(a, c, place == "usage");
  if (place == "timings" || a.draft_proposed || a.draft_accepted) body["timings"] = timings_json(a, c);
  if (a.max_seqs_in_step) body["max_seqs_in_step"] = *a.max_seqs_in_step;
  if (!a.logit_hashes.empty()) body["logit_hashes"] = a.logit_hashes;
}

json openai_body(const route_ask& ask, const plant_answer& a, const plant_case& c) {
  const bool chat = ask.path == "/v1/chat/completions";
  json choice = {{"index", 0}, {"finish_reason", a.finish}};
  if (chat) choice["message"] = {{"role", "assistant"}, {"content", a.text_or_bytes()}};
  else choice["text"] = a.text_or_bytes();
  if (a.omit_logprobs) choice["logprobs"] = nullptr;
  else if (chat) choice["logprobs"] = {{"content", entries(a, c)}};
  else choice["logprobs"] = completions_logprobs(a);
  return {{"id", chat ? "chatcmpl-verdict" : "cmpl-verdict"},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", 0},
          {"model", ask.model},
          {"choices", json::array({choice})}};
}

json llamacpp_body(const route_ask& ask, const plant_answer& a, const plant_case& c) {
  const bool limit = a.finish == "length";
  json b = {{"content", a.text_or_bytes()}, {"id_slot", 0}, {"stop", true}, {"model", ask.model},
            {"tokens_predicted", a.tokens.size()}, {"tokens_evaluated", c.prompt_tokens},
            {"stop_type", limit ? "limit" : "eos"}, {"stopped_eos", !limit}, {"stopped_limit", limit}};
  bool all_ids = !a.omit_ids && !c.older_shape;
  for (const plant_token& t : a.tokens) all_ids = all_ids && id_of(t, c).has_value();
  if (ask.return_tokens && all_ids) {
    json ids = json::array();
    for (const plant_token& t : a.tokens) ids.push_back(*id_of(t, c));
    b["tokens"] = std::move(ids);
  }
  if (!a.omit_logprobs) b["completion_probabilities"] = c.older_shape ? older_entries(a) : entries(a, c);
  return b;
}

json ollama_body(const route_ask& ask, const plant_answer& a, const plant_case& c) {
  json b = {{"model", ask.model}, {"created_at", "2026-01-01T00:00:00Z"}, {"done", true}, {"done_reason", a.finish},
            {"prompt_eval_count", c.prompt_tokens}, {"eval_count", a.tokens.size()}};
  if (ask.path == "/api/chat") b["message"] = {{"role", "assistant"}, {"content", a.text_or_bytes()}};
  else b["response"] = a.text_or_bytes();
  if (!a.omit_logprobs) b["logprobs"] = entries(a, c);
  return b;
}

}  // namespace

json render_answer(const route_ask& ask, const plant_answer& a, const plant_case& c) {
  json body;
  if (ask.path == "/completion") body = llamacpp_body(ask, a, c);
  else if (ask.path.rfind("/api/", 0) == 0) body = ollama_body(ask, a, c);
  else body = openai_body(ask, a, c);
  extras_add(body, ask, a, c);
  return body;
}

json render_error(const route_ask& ask, int status, const std::string& message) {
  if (ask.path.rfind("/api/", 0) == 0) return {{"error", message}};
  return {{"error", {{"code", status}, {"message", message}, {"type", status < 500 ? "invalid_request_error" : "server_error"}}}};
}

}  // namespace detaudit::verdicts
