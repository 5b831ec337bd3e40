// The llama.cpp dialect: POST /completion for raw prompts (n_probs, return_tokens, cache_prompt,
// id_slot), POST /v1/chat/completions with llama.cpp's extra fields for chat messages.
//
// Both shapes of completion_probabilities are read (llama.cpp's server README):
//   newer: [{"id", "token", "bytes", "logprob", "top_logprobs": [{"id", "token", "bytes", "logprob"}]}]
//          (with post_sampling_probs: "prob" and "top_probs" instead, probabilities)
//   older: [{"content", "probs": [{"tok_str", "prob"}]}]   (probabilities, no ids)
// Probabilities become log-probs; a probability of 0 becomes the log of the smallest double.
#include <algorithm>
#include <cmath>
#include <limits>

#include "probes/target_http.h"

namespace detaudit::probes {
namespace {

double prob_to_logprob(double p) { return std::log(std::max(p, std::numeric_limits<double>::denorm_min())); }

int32_t id_at(const json& e, const std::string& where) {
  const json* id = json_get(e, "id");
  if (!id) return -1;
  if (!id->is_number_integer()) throw response_error("field '" + where + ".id': expected an integer token id");
  return id->get<int32_t>();
}

// The log-prob of one entry: "logprob", else log("prob").
double entry_logprob(const json& e, const std::string& where) {
  if (json_get(e, "logprob")) return json_number_at(e, "logprob", where);
  return prob_to_logprob(json_number_at(e, "prob", where));
}

void newer_entry_parse(const json& e, const std::string& where, reports::record& rec) {
  reports::token_rec t;
  t.id = id_at(e, where);
  t.text = json_string_at(e, "token", where, "");
  t.bytes = token_bytes_parse(json_get(e, "bytes"), t.text, where);
  if (json_get(e, "logprob") || json_get(e, "prob")) t.logprob = entry_logprob(e, where);
  const char* top_key = json_get(e, "top_logprobs") ? "top_logprobs" : "top_probs";
  std::vector<reports::alt_rec> alts;
  if (json_get(e, top_key)) {
    const json& top = json_array_at(e, top_key, where);
    for (size_t i = 0; i < top.size(); ++i) {
      const std::string w = where + "." + top_key + "[" + std::to_string(i) + "]";
      if (!top[i].is_object()) throw response_error("field '" + w + "': expected an object");
      alts.push_back({id_at(top[i], w), json_string_at(top[i], "token", w, ""), entry_logprob(top[i], w)});
    }
  }
  rec.tokens.push_back(std::move(t));
  rec.top_logprobs.push_back(std::move(alts));
}

void older_entry_parse(const json& e, const std::string& where, reports::record& rec) {
  reports::token_rec t;
  t.text = json_string_at(e, "content", where, "");
  std::vector<reports::alt_rec> alts;
  const json& probs = json_array_at(e, "probs", where);
  for (size_t i = 0; i < probs.size(); ++i) {
    const std::string w = where + ".probs[" + std::to_string(i) + "]";
    if (!probs[i].is_object()) throw response_error("field '" + w + "': expected an object");
    reports::alt_rec a{-1, json_string_at(probs[i], "tok_str", w, ""), prob_to_logprob(json_number_at(probs[i], "prob", w))};
    if (a.token == t.text && !t.logprob) t.logprob = a.logprob;
    alts.push_back(std::move(a));
  }
  rec.tokens.push_back(std::move(t));
  rec.top_logprobs.push_back(std::move(alts));
}

// Token ids from "tokens" (return_tokens); they also fill entries that came without an id.
void ids_fill(const json& ids, reports::record& rec) {
  // llama.cpp trims completion_probabilities by the stop word's tokens, not "tokens": the two
  // agree on their common prefix.
  for (size_t i = 0; i < std::min(ids.size(), rec.tokens.size()); ++i)
    if (rec.tokens[i].id < 0) rec.tokens[i].id = ids[i].get<int32_t>();
}

// The newer shape with ids: "tokens" is authoritative. llama.cpp sends one probabilities entry per
// text chunk, and a chunk holds several tokens when the first ones end inside a UTF-8 character
// (byte tokens): the entry then carries the chunk's text and the last token's id and log-probs.
// Each entry is matched to the next token with its id; the tokens before it in its chunk get no
// log-probs of their own (evidence.steps_without_logprobs counts them).
void ids_align(const json& ids, reports::record& rec) {
  std::vector<reports::token_rec> toks;
  std::vector<std::vector<reports::alt_rec>> tops;
  size_t k = 0;
  int64_t n_without = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i].get<int32_t>();
    if (k < rec.tokens.size() && rec.tokens[k].id == id) {
      toks.push_back(std::move(rec.tokens[k]));
      tops.push_back(k < rec.top_logprobs.size() ? std::move(rec.top_logprobs[k]) : std::vector<reports::alt_rec>{});
      ++k;
    } else {
      toks.push_back({id, "", {}, std::nullopt});
      tops.emplace_back();
      ++n_without;
    }
  }
  if (k < rec.tokens.size())
    throw response_error("field 'completion_probabilities[" + std::to_string(k) + "]': id " + std::to_string(rec.tokens[k].id) +
                         " matches no remaining id in 'tokens'");
  if (n_without > 0) rec.evidence["steps_without_logprobs"] = n_without;
  rec.tokens = std::move(toks);
  rec.top_logprobs = std::move(tops);
}

void ids_merge(const json& j, reports::record& rec) {
  const json* ids = json_get(j, "tokens");
  if (!ids || !ids->is_array() || ids->empty()) return;
  for (size_t i = 0; i < ids->size(); ++i)
    if (!(*ids)[i].is_number_integer()) throw response_error("field 'tokens[" + std::to_string(i) + "]': expected an integer token id");
  if (rec.tokens.empty()) {
    for (const json& id : *ids) rec.tokens.push_back({id.get<int32_t>(), "", {}, std::nullopt});
    return;
  }
  const bool with_ids = std::all_of(rec.tokens.begin(), rec.tokens.end(), [](const reports::token_rec& t) { return t.id >= 0; });
  if (with_ids) ids_align(*ids, rec);
  else ids_fill(*ids, rec);
}

std::string finish_parse(const json& j) {
  const std::string stop_type = json_string_at(j, "stop_type", "", "");
  if (stop_type == "eos" || stop_type == "word") return "stop";
  if (stop_type == "limit") return "length";
  if (!stop_type.empty()) return stop_type;
  auto flag = [&j](const char* k) { const json* v = json_get(j, k); return v && v->is_boolean() && v->get<bool>(); };
  if (flag("stopped_eos") || flag("stopped_word")) return "stop";
  if (flag("stopped_limit")) return "length";
  return "";
}

void counts_parse(const json& j, reports::record& rec) {
  auto count = [&j](const char* k) -> const json* {
    const json* v = json_get(j, k);
    return v && v->is_number_integer() ? v : nullptr;
  };
  if (const json* v = count("tokens_evaluated")) rec.usage["prompt_tokens"] = *v;
  if (const json* v = count("tokens_predicted")) rec.usage["completion_tokens"] = *v;
  // Prompt tokens reused from the cache: timings.cache_n where the server has it, else the prompt
  // tokens minus those evaluated (timings.prompt_n). llama.cpp's tokens_cached is not that: it is
  // every token in the slot's cache afterwards (n_past), generated ones included.
  if (const json* v = count("draft_accepted")) rec.evidence["draft_accepted"] = *v;
  if (const json* v = count("draft_proposed")) rec.evidence["draft_proposed"] = *v;
  if (const json* v = count("id_slot")) rec.evidence["slot"] = *v;
  if (const json* t = json_get(j, "timings"); t && t->is_object()) {
    rec.timings["server"] = *t;
    const json* cn = json_get(*t, "cache_n");
    const json* pn = json_get(*t, "prompt_n");
    const json* te = count("tokens_evaluated");
    int64_t cached = -1;
    if (cn && cn->is_number_integer()) cached = cn->get<int64_t>();
    else if (pn && pn->is_number_integer() && te) cached = std::max<int64_t>(0, te->get<int64_t>() - pn->get<int64_t>());
    if (cached >= 0) {
      rec.usage["cached_tokens"] = cached;
      rec.evidence["cached_tokens"] = cached;
    }
    if (const json* da = json_get(*t, "draft_n_accepted"); da && da->is_number_integer() && !rec.evidence.contains("draft_accepted"))
      rec.evidence["draft_accepted"] = *da;
    if (const json* dn = json_get(*t, "draft_n"); dn && dn->is_number_integer() && !rec.evidence.contains("draft_proposed"))
      rec.evidence["draft_proposed"] = *dn;
  }
}

}  // namespace

http_call llamacpp_request(const gen_request& r, const http_server_info& s) {
  if (!r.messages.empty()) return openai_chat_request(r, s);
  http_call c;
  c.path = "/completion";
  c.body = llamacpp_settings(r);
  json& b = c.body;
  b["prompt"] = r.prompt;
  b["n_probs"] = std::max(0, std::min(r.n_probs, s.logprob_cap));
  b["return_tokens"] = true;
  b["stream"] = false;
  if (s.detaudit) b["logit_hashes"] = true;
  return c;
}

void llamacpp_parse(const json& j, bool chat, reports::record& rec) {
  if (chat) return openai_parse(j, true, rec);  // llama.cpp's chat route answers in OpenAI's shape
  if (!j.is_object()) throw response_error("the answer is not a JSON object");
  rec.text = json_string_at(j, "content", "", "");
  if (json_get(j, "completion_probabilities")) {
    const json& probs = json_array_at(j, "completion_probabilities", "");
    for (size_t i = 0; i < probs.size(); ++i) {
      const std::string where = "completion_probabilities[" + std::to_string(i) + "]";
      const json& e = probs[i];
      if (!e.is_object()) throw response_error("field '" + where + "': expected an object");
      if (json_get(e, "probs") && !json_get(e, "token")) older_entry_parse(e, where, rec);
      else newer_entry_parse(e, where, rec);
    }
  }
  ids_merge(j, rec);
  rec.finish_reason = finish_parse(j);
  counts_parse(j, rec);
  hashes_parse(j, rec);
}

}  // namespace detaudit::probes
