// Streamed answers (`detaudit run --stream`): the server-sent events of one response, read after
// the transfer is complete, assembled into the JSON the same request answers without streaming,
// so that the dialects' response readers and the records are the same either way.
//
// Goals: a stream that ends early is an error that says so (no final event, an event cut in the
// middle), as is an error event; nothing of a partial stream reaches a record as if it were an
// answer. A stream costs what the request can justify (probes/response_limits.h): at most
// max_events events, and its events' JSON values count against one budget together. Non-goals: incremental reading (the whole answer is buffered by the HTTP client),
// event ids and reconnection, ollama's newline-delimited JSON stream.
#include <string>
#include <vector>

#include "probes/response_limits.h"
#include "probes/target_http.h"

namespace detaudit::probes {
namespace {

// One event's data: its "data:" lines joined by "\n".
struct sse_parse_result {
  std::vector<std::string> data;
  bool cut = false;  // the body ended inside an event (no blank line after its last field)
};

// Splits a text/event-stream body into events (lines end with \n, \r\n or \r; a blank line ends
// an event; ':' lines are comments; fields other than data are ignored). Throws response_error
// past max_events events.
sse_parse_result sse_parse(const std::string& body, size_t max_events) {
  sse_parse_result out;
  std::string data;
  bool has_data = false, open = false;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find_first_of("\r\n", pos);
    if (end == std::string::npos) {
      out.cut = true;  // a last line without its end of line
      break;
    }
    const std::string line = body.substr(pos, end - pos);
    pos = end + 1;
    if (body[end] == '\r' && pos < body.size() && body[pos] == '\n') ++pos;
    if (line.empty()) {
      if (has_data && out.data.size() >= max_events)
        throw response_error("the event stream holds more than " + std::to_string(max_events) +
                             " events, more than the request can need");
      if (has_data) out.data.push_back(data);
      data.clear();
      has_data = open = false;
      continue;
    }
    open = true;
    if (line[0] == ':') continue;
    const size_t colon = line.find(':');
    const std::string field = line.substr(0, colon);
    if (field != "data") continue;
    std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.erase(0, 1);
    if (has_data) data += '\n';
    data += value;
    has_data = true;
  }
  if (open) out.cut = true;
  return out;
}

// One event's JSON; its values count into *used, the stream's budget.
json event_json(const std::string& data, size_t index, const response_limits& l, size_t* used) {
  json j;
  try {
    j = json_parse_bounded(data, l, used);
  } catch (const response_error& e) {
    throw response_error("stream event " + std::to_string(index) + ": " + e.what());
  }
  if (j.is_discarded() || !j.is_object())
    throw response_error("stream event " + std::to_string(index) + " is not a JSON object ('" + data.substr(0, 80) +
                         (data.size() > 80 ? "...'" : "'") + ")");
  if (const json* e = json_get(j, "error")) {
    std::string msg = e->is_string() ? e->get<std::string>() : "";
    if (const json* m = json_get(*e, "message"); m && m->is_string()) msg = m->get<std::string>();
    throw response_error("the stream ended with an error event: " + (msg.empty() ? e->dump() : msg));
  }
  return j;
}

[[noreturn]] void ended_early(const sse_parse_result& p, const char* missing) {
  throw response_error("the event stream ended early: " + std::to_string(p.data.size()) + " complete event(s), " +
                       (p.cut ? "the last one cut off, " : "") + "no " + missing);
}

void append_all(json& to, const json* from) {
  if (!from || !from->is_array()) return;
  for (const json& e : *from) to.push_back(e);
}

// Legacy completions logprobs: parallel arrays, appended key by key.
void completion_logprobs_append(json& acc, const json& lp) {
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
    if (!acc.contains(key)) acc[key] = json::array();
    append_all(acc[key], json_get(lp, key));
  }
}

}  // namespace

json stream_assemble_openai(const std::string& body, bool chat, const response_limits& l) {
  const sse_parse_result p = sse_parse(body, l.max_events);
  size_t used = 0;
  json out = json::object(), text_logprobs = json::object(), chat_logprobs = json::array(), hashes = json::array();
  std::string text, reasoning;
  json finish = nullptr;
  bool done = false, any_logprobs = false;
  for (size_t i = 0; i < p.data.size(); ++i) {
    if (p.data[i] == "[DONE]") {
      done = true;
      break;
    }
    const json j = event_json(p.data[i], i, l, &used);
    for (const char* key : {"id", "model", "system_fingerprint", "created", "usage", "timings", "logit_hashes", "chained_hash",
                            "max_seqs_in_step"})
      if (const json* v = json_get(j, key)) out[key] = *v;
    if (const json* h = json_get(j, "logit_hash")) hashes.push_back(*h);
    const json* choices = json_get(j, "choices");
    if (!choices || !choices->is_array() || choices->empty() || !(*choices)[0].is_object()) continue;
    const json& c = (*choices)[0];
    const json* delta = json_get(c, "delta");
    const json* piece = !chat ? json_get(c, "text") : delta ? json_get(*delta, "content") : nullptr;
    if (piece && !piece->is_string()) throw response_error("stream event " + std::to_string(i) + ": the text is not a string");
    if (piece) text += piece->get<std::string>();
    for (const char* k : {"reasoning_content", "reasoning"}) {
      const json* r = chat && delta ? json_get(*delta, k) : nullptr;
      if (r && r->is_string()) reasoning += r->get<std::string>();
    }
    if (const json* lp = json_get(c, "logprobs"); lp && lp->is_object()) {
      any_logprobs = true;
      if (chat) append_all(chat_logprobs, json_get(*lp, "content"));
      else completion_logprobs_append(text_logprobs, *lp);
    }
    if (const json* fr = json_get(c, "finish_reason")) finish = *fr;
  }
  if (!done) ended_early(p, "[DONE] event");
  if (!out.contains("logit_hashes") && !hashes.empty()) out["logit_hashes"] = hashes;
  json choice = {{"index", 0}, {"finish_reason", finish}};
  if (chat) choice["message"] = {{"role", "assistant"}, {"content", text}};
  if (chat && !reasoning.empty()) choice["message"]["reasoning_content"] = reasoning;
  else choice["text"] = text;
  choice["logprobs"] = !any_logprobs ? json(nullptr) : chat ? json{{"content", chat_logprobs}} : text_logprobs;
  out["choices"] = json::array({choice});
  return out;
}

json stream_assemble_llamacpp(const std::string& body, bool chat, const response_limits& l) {
  if (chat) return stream_assemble_openai(body, true, l);  // llama.cpp's chat route speaks OpenAI's stream
  const sse_parse_result p = sse_parse(body, l.max_events);
  size_t used = 0;
  json out = json::object(), probs = json::array(), tokens = json::array(), hashes = json::array();
  std::string text;
  bool done = false;
  for (size_t i = 0; i < p.data.size() && !done; ++i) {
    if (p.data[i] == "[DONE]") continue;
    const json j = event_json(p.data[i], i, l, &used);
    const json* stop = json_get(j, "stop");
    done = stop && stop->is_boolean() && stop->get<bool>();
    const json* piece = json_get(j, "content");
    if (piece && !piece->is_string()) throw response_error("stream event " + std::to_string(i) + ": 'content' is not a string");
    if (piece) text += piece->get<std::string>();
    if (const json* h = json_get(j, "logit_hash")) hashes.push_back(*h);
    if (!done) {
      append_all(probs, json_get(j, "completion_probabilities"));
      append_all(tokens, json_get(j, "tokens"));
      continue;
    }
    out = j;  // the final event: its fields, and the per-token arrays when no chunk carried them
    if (probs.empty()) append_all(probs, json_get(j, "completion_probabilities"));
    if (tokens.empty()) append_all(tokens, json_get(j, "tokens"));
  }
  if (!done) ended_early(p, "final event (\"stop\": true)");
  out["content"] = text;
  if (!probs.empty()) out["completion_probabilities"] = probs;
  if (!tokens.empty()) out["tokens"] = tokens;
  if (!out.contains("logit_hashes") && !hashes.empty()) out["logit_hashes"] = hashes;
  out.erase("stop");
  return out;
}

}  // namespace detaudit::probes
