// JSON in and out of the HTTP layer: the request body's budget and parser, the prompt reader,
// OpenAI error objects, and the token / log-prob shapes llama.cpp's server and OpenAI use (the
// field readers are runtime/request_fields.cpp's).
#include <cmath>
#include <limits>

#include "serve/http_handlers.h"
#include "tokenizer/vocab.h"

namespace detaudit::serve {
namespace {

const char* error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 501: return "not_supported_error";
    case 503: return "unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}


// One pass over a body before the parser (linear, no recursion; brackets and commas inside strings
// do not count): whether its arrays and objects nest deeper than `max_depth`, and how many JSON
// values it holds, at most (each ',', '[', '{' and ':' starts one).
struct body_shape {
  bool too_deep = false;
  int64_t values = 1;
};

body_shape body_scan(std::string_view text, int max_depth) {
  body_shape out;
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      ++out.values;
      if (++depth > max_depth) out.too_deep = true;
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == ',' || c == ':') {
      ++out.values;
    }
  }
  return out;
}

}  // namespace

json error_json(int status, const std::string& message) {
  return {{"error", {{"message", message}, {"type", error_type(status)}, {"code", status}}}};
}

void json_send(httplib::Response& res, const json& j) { res.set_content(json_text(j), "application/json"); }

void error_send(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  json_send(res, error_json(status, message));
}

std::string sse_event(const json& j) { return "data: " + json_text(j) + "\n\n"; }

body_budget::ticket body_budget::take(int64_t bytes, int64_t limit) {
  const auto mib = [](int64_t n) { return std::to_string((n + (1 << 20) - 1) >> 20) + " MiB"; };
  if (bytes > limit)
    throw http_error(413, "request body: parsed, it would take about " + mib(bytes) + " of memory, more than the " + mib(limit) +
                              " the server holds for request bodies (--max-body-memory)");
  std::lock_guard<std::mutex> lock(mu_);
  if (held_ + bytes > limit)
    throw http_error(503, "server busy: the request bodies being handled hold " + mib(held_) + " of the " + mib(limit) +
                              " allowed (--max-body-memory), and this one needs about " + mib(bytes) + "; retry later");
  held_ += bytes;
  return ticket(this, bytes);
}

void body_budget::give_back(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  held_ -= bytes;
}

parsed_body body_parse(body_budget& budget, size_t limit, const httplib::Request& req) {
  const body_shape shape = body_scan(req.body, MAX_BODY_DEPTH);
  if (shape.too_deep)
    throw http_error(400, "request body: arrays and objects nested deeper than " + std::to_string(MAX_BODY_DEPTH) + " levels");
  parsed_body out;
  // Its parsed size, charged before parsing: its bytes twice, and 80 bytes for each JSON value.
  out.t = budget.take(2 * static_cast<int64_t>(req.body.size()) + 80 * shape.values, static_cast<int64_t>(limit));
  out.j = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (out.j.is_discarded())
    throw http_error(400, "request body: not valid JSON (the body is one JSON object, whatever its Content-Type; form fields "
                          "are not accepted)");
  if (!out.j.is_object()) throw http_error(400, std::string("request body: expected a JSON object, found ") + out.j.type_name());
  return out;
}

std::vector<int32_t> field_prompt(const http_state& st, const json& b, const char* key) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) throw http_error(400, std::string("field '") + key + "': missing");
  const json* p = &*it;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  const tokenizer::vocab& v = st.sched.model().vocab();
  std::vector<int32_t> ids;
  if (p->is_string()) {
    ids = runtime::generate_tokenize(v, p->get<std::string>());
  } else if (p->is_array()) {
    for (const json& t : *p) {
      if (!t.is_number_integer()) field_fail(key, "a string or an array of token ids", *it);
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id >= v.size())
        throw http_error(400, std::string("field '") + key + "': token id " + std::to_string(id) +
                                  " outside the vocabulary [0, " + std::to_string(v.size()) + ")");
      ids.push_back(static_cast<int32_t>(id));
    }
  } else {
    field_fail(key, "a string or an array of token ids", *it);
  }
  if (ids.empty()) throw http_error(400, std::string("field '") + key + "': empty prompt");
  return ids;
}

int64_t field_n_predict(const http_state& st, const json& b, const char* key, int64_t lo) {
  return field_n_predict(st.sched.slot_n_ctx(), b, key, lo);
}

std::string token_piece(const http_state& st, int32_t id) {
  return tokenizer::token_to_piece(st.sched.model().vocab(), id, /*special=*/true);
}

json token_bytes(const std::string& piece) {
  json a = json::array();
  for (unsigned char c : piece) a.push_back(static_cast<int>(c));
  return a;
}

bool utf8_is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned char c = b(0);
    size_t n = 1;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) n = 3;
    else if (c >= 0xF0 && c <= 0xF4) n = 4;
    else if (c >= 0x80) return false;  // a continuation byte, an overlong lead (C0, C1) or F5..FF
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c == 0xE0) lo = 0xA0;            // overlong
    if (c == 0xED) hi = 0x9F;            // surrogates
    if (c == 0xF0) lo = 0x90;            // overlong
    if (c == 0xF4) hi = 0x8F;            // past U+10FFFF
    if (n > s.size() - i) return false;
    for (size_t k = 1; k < n; ++k)
      if (b(k) < (k == 1 ? lo : 0x80) || b(k) > (k == 1 ? hi : 0xBF)) return false;
    i += n;
  }
  return true;
}

std::string token_text_openai(const std::string& piece) {
  if (utf8_is_valid(piece)) return piece;
  static const char HEX[] = "0123456789abcdef";
  std::string out = "bytes:";
  for (unsigned char c : piece) {
    out += "\\x";
    out += HEX[c >> 4];
    out += HEX[c & 0x0F];
  }
  return out;
}

json token_probs_llamacpp(const http_state& st, const runtime::generated_token& t) {
  json top = json::array();
  for (const runtime::token_logprob& e : t.top) {
    const std::string piece = token_piece(st, e.id);
    top.push_back({{"id", e.id}, {"token", piece}, {"logprob", e.logprob}, {"bytes", token_bytes(piece)}});
  }
  return {{"id", t.id}, {"token", t.piece}, {"logprob", token_logprob_of(t)}, {"bytes", token_bytes(t.piece)}, {"top_logprobs", top}};
}

json token_logprob_of(const runtime::generated_token& t) {
  for (const runtime::token_logprob& e : t.top)
    if (e.id == t.id) return e.logprob;
  return nullptr;
}

const char* stop_type_llamacpp(runtime::stop_type s) {
  switch (s) {
    case runtime::STOP_EOG: return "eos";
    case runtime::STOP_WORD: return "word";
    default: return "limit";
  }
}

const char* finish_reason_openai(const runtime::generate_result& g) { return runtime::finish_reason_name(g.finish); }

}  // namespace detaudit::serve
