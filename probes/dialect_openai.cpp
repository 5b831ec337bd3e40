// The OpenAI dialects: /v1/chat/completions and /v1/completions. Token ids are not part of
// OpenAI's shape: they are -1 unless the server adds llama.cpp's "id" fields. llama.cpp's extra
// request fields (top_k, cache_prompt, id_slot) are sent only to llama.cpp-family servers, since
// OpenAI's own API rejects unknown fields.
#include <algorithm>

#include "probes/target_http.h"
#include "util/error.h"

namespace detaudit::probes {
namespace {

void messages_add(json& body, const gen_request& r) {
  json msgs = json::array();
  for (const chat_message& m : r.messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  body["messages"] = std::move(msgs);
}


// choices[0].logprobs of /v1/completions: parallel arrays; top_logprobs are {token: logprob}
// objects, whose order JSON does not keep: sorted best first here.
void completion_tokens_parse(const json& lp, reports::record& rec) {
  const std::string where = "choices[0].logprobs";
  const json& toks = json_array_at(lp, "tokens", where);
  const json* token_lp = json_get(lp, "token_logprobs");
  const json* top_lp = json_get(lp, "top_logprobs");
  for (size_t i = 0; i < toks.size(); ++i) {
    const std::string w = where + ".tokens[" + std::to_string(i) + "]";
    if (!toks[i].is_string()) throw response_error("field '" + w + "': expected a string");
    reports::token_rec t;
    t.text = toks[i].get<std::string>();
    if (token_lp && token_lp->is_array() && i < token_lp->size() && (*token_lp)[i].is_number())
      t.logprob = (*token_lp)[i].get<double>();
    std::vector<reports::alt_rec> alts;
    if (top_lp && top_lp->is_array() && i < top_lp->size() && (*top_lp)[i].is_object()) {
      for (const auto& [tok, v] : (*top_lp)[i].items()) {
        if (!v.is_number()) throw response_error("field '" + where + ".top_logprobs[" + std::to_string(i) + "]': expected numbers");
        alts.push_back({-1, tok, v.get<double>()});
      }
      std::stable_sort(alts.begin(), alts.end(), [](const reports::alt_rec& a, const reports::alt_rec& b) { return a.logprob > b.logprob; });
    }
    rec.tokens.push_back(std::move(t));
    rec.top_logprobs.push_back(std::move(alts));
  }
}

void usage_parse(const json& j, reports::record& rec) {
  const json* u = json_get(j, "usage");
  if (!u || !u->is_object()) return;
  rec.usage = *u;
  if (const json* d = json_get(*u, "completion_tokens_details"); d && d->is_object())
    if (const json* n = json_get(*d, "reasoning_tokens"); n && n->is_number_integer()) rec.usage["reasoning_tokens"] = *n;
  if (const json* d = json_get(*u, "prompt_tokens_details"); d && d->is_object())
    if (const json* c = json_get(*d, "cached_tokens"); c && c->is_number_integer()) {
      rec.usage["cached_tokens"] = *c;
      rec.evidence["cached_tokens"] = *c;
    }
}

}  // namespace

int32_t id_of(const json& e, const std::string& where) {
  const json* id = json_get(e, "id");
  if (!id) return -1;
  if (!id->is_number_integer()) throw response_error("field '" + where + ".id': expected an integer token id");
  return id->get<int32_t>();
}

void chat_token_parse(const json& e, const std::string& where, reports::record& rec) {
  if (!e.is_object()) throw response_error("field '" + where + "': expected an object");
  reports::token_rec t;
  t.text = json_string_at(e, "token", where, "");
  t.id = id_of(e, where);
  t.bytes = token_bytes_parse(json_get(e, "bytes"), t.text, where);
  if (json_get(e, "logprob")) t.logprob = json_number_at(e, "logprob", where);
  std::vector<reports::alt_rec> alts;
  if (json_get(e, "top_logprobs")) {
    const json& top = json_array_at(e, "top_logprobs", where);
    for (size_t i = 0; i < top.size(); ++i) {
      const std::string w = where + ".top_logprobs[" + std::to_string(i) + "]";
      if (!top[i].is_object()) throw response_error("field '" + w + "': expected an object");
      alts.push_back({id_of(top[i], w), json_string_at(top[i], "token", w, ""), json_number_at(top[i], "logprob", w)});
    }
  }
  rec.tokens.push_back(std::move(t));
  rec.top_logprobs.push_back(std::move(alts));
}

namespace {

http_call openai_request(const gen_request& r, const http_server_info& s, bool chat) {
  const bool has_messages = !r.messages.empty();
  if (chat && !has_messages)
    throw input_error("target dialect openai-chat sends chat messages only; use --chat, or --api openai-completions for raw prompts");
  if (!chat && has_messages)
    throw input_error("target dialect openai-completions sends raw prompts only; use --raw, or --api openai-chat for chat messages");
  http_call c;
  c.path = chat ? "/v1/chat/completions" : "/v1/completions";
  json& b = c.body;
  if (!s.model.empty()) b["model"] = s.model;
  if (chat) messages_add(b, r);
  else b["prompt"] = r.prompt;
  if (r.n_predict >= 0) b["max_tokens"] = r.n_predict;
  b["temperature"] = r.temperature;
  if (r.seed) b["seed"] = *r.seed;
  if (r.top_p) b["top_p"] = *r.top_p;
  if (!r.stop.empty()) b["stop"] = r.stop;
  const int n_probs = std::min(r.n_probs, s.logprob_cap);
  if (chat) {
    b["logprobs"] = n_probs > 0;
    if (n_probs > 0) b["top_logprobs"] = n_probs;
  } else if (n_probs > 0) {
    b["logprobs"] = n_probs;
  }
  b["stream"] = false;
  if (s.llamacpp) {
    if (r.top_k) b["top_k"] = *r.top_k;
    if (r.cache_prompt) b["cache_prompt"] = *r.cache_prompt;
    if (r.id_slot >= 0) b["id_slot"] = r.id_slot;
  }
  if (s.detaudit) b["logit_hashes"] = true;
  return c;
}

}  // namespace

http_call openai_chat_request(const gen_request& r, const http_server_info& s) { return openai_request(r, s, true); }
http_call openai_completions_request(const gen_request& r, const http_server_info& s) { return openai_request(r, s, false); }

void openai_parse(const json& j, bool chat, reports::record& rec) {
  const json& choices = json_array_at(j, "choices", "");
  if (choices.empty() || !choices[0].is_object()) throw response_error("field 'choices': expected at least one choice object");
  const json& c = choices[0];
  if (chat) {
    const json* m = json_get(c, "message");
    if (!m || !m->is_object()) throw response_error("field 'choices[0].message': expected an object");
    rec.text = json_string_at(*m, "content", "choices[0].message", "");
    // A reasoning model's thinking, apart from the answer: llama-server, SGLang and vLLM say
    // reasoning_content, newer vLLM reasoning.
    for (const char* k : {"reasoning_content", "reasoning"})
      if (rec.reasoning.empty()) rec.reasoning = json_string_at(*m, k, "choices[0].message", "");
  } else {
    rec.text = json_string_at(c, "text", "choices[0]", "");
  }
  rec.finish_reason = json_string_at(c, "finish_reason", "choices[0]", "");
  if (const json* lp = json_get(c, "logprobs")) {
    if (!lp->is_object()) throw response_error("field 'choices[0].logprobs': expected an object");
    if (chat) {
      if (json_get(*lp, "content")) {
        const json& content = json_array_at(*lp, "content", "choices[0].logprobs");
        for (size_t i = 0; i < content.size(); ++i)
          chat_token_parse(content[i], "choices[0].logprobs.content[" + std::to_string(i) + "]", rec);
      }
    } else if (json_get(*lp, "content") && !json_get(*lp, "tokens")) {
      // llama-server answers /v1/completions with the chat shape of logprobs (ids, bytes, top_logprobs).
      const json& content = json_array_at(*lp, "content", "choices[0].logprobs");
      for (size_t i = 0; i < content.size(); ++i)
        chat_token_parse(content[i], "choices[0].logprobs.content[" + std::to_string(i) + "]", rec);
    } else {
      completion_tokens_parse(*lp, rec);
    }
  }
  usage_parse(j, rec);
  if (const json* t = json_get(j, "timings"); t && t->is_object()) {
    rec.timings["server"] = *t;
    if (const json* cn = json_get(*t, "cache_n"); cn && cn->is_number_integer() && !rec.evidence.contains("cached_tokens"))
      rec.evidence["cached_tokens"] = *cn;
  }
  hashes_parse(j, rec);
}

}  // namespace detaudit::probes
