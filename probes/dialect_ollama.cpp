// The ollama dialect: POST /api/generate (raw prompts, sent with "raw": true so no template is
// applied, as on the other dialects) and POST /api/chat, with "stream": false. Sampling settings
// go under "options"; log-probs are top-level "logprobs": true and "top_logprobs": N, answered as
// [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}] without ids.
// Durations in the answer are nanoseconds.
#include <algorithm>

#include "probes/target_http.h"

namespace detaudit::probes {

http_call ollama_request(const gen_request& r, const http_server_info& s) {
  http_call c;
  json& b = c.body;
  b["model"] = s.model;
  if (r.messages.empty()) {
    c.path = "/api/generate";
    b["prompt"] = r.prompt;
    b["raw"] = true;
  } else {
    c.path = "/api/chat";
    json msgs = json::array();
    for (const chat_message& m : r.messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
    b["messages"] = std::move(msgs);
  }
  b["stream"] = false;
  json opt = {{"temperature", r.temperature}, {"num_predict", r.n_predict}};
  if (r.seed) opt["seed"] = *r.seed;
  if (r.top_k) opt["top_k"] = *r.top_k;
  if (r.top_p) opt["top_p"] = *r.top_p;
  if (!r.stop.empty()) opt["stop"] = r.stop;
  b["options"] = std::move(opt);
  const int n_probs = std::max(0, std::min(r.n_probs, s.logprob_cap));
  b["logprobs"] = n_probs > 0;
  if (n_probs > 0) b["top_logprobs"] = n_probs;
  if (s.detaudit) b["logit_hashes"] = true;
  return c;
}

void ollama_parse(const json& j, bool chat, reports::record& rec) {
  if (!j.is_object()) throw response_error("the answer is not a JSON object");
  if (chat) {
    const json* m = json_get(j, "message");
    if (!m || !m->is_object()) throw response_error("field 'message': expected an object");
    rec.text = json_string_at(*m, "content", "message", "");
    rec.reasoning = json_string_at(*m, "thinking", "message", "");
  } else {
    rec.text = json_string_at(j, "response", "", "");
    rec.reasoning = json_string_at(j, "thinking", "", "");
  }
  rec.finish_reason = json_string_at(j, "done_reason", "", "");
  if (json_get(j, "logprobs")) {
    const json& lp = json_array_at(j, "logprobs", "");
    for (size_t i = 0; i < lp.size(); ++i) chat_token_parse(lp[i], "logprobs[" + std::to_string(i) + "]", rec);
  }
  auto count = [&j](const char* k) -> const json* {
    const json* v = json_get(j, k);
    return v && v->is_number_integer() ? v : nullptr;
  };
  if (const json* v = count("prompt_eval_count")) rec.usage["prompt_tokens"] = *v;
  if (const json* v = count("eval_count")) rec.usage["completion_tokens"] = *v;
  json server = json::object();
  for (const char* k : {"total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration"})
    if (const json* v = count(k)) server[k] = *v;
  if (!server.empty()) rec.timings["server"] = std::move(server);
  hashes_parse(j, rec);
}

}  // namespace detaudit::probes
