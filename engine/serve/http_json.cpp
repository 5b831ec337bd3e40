// JSON in and out of the HTTP layer: field readers that name what they reject, OpenAI error
// objects, and the token / log-prob / timing shapes llama.cpp's server and OpenAI use.
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

[[noreturn]] void field_fail(const char* key, const char* expected, const json& v) {
  throw http_error(400, std::string("field '") + key + "': expected " + expected + ", found " + value_quote(v));
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

std::string text_quote(std::string_view s) {
  constexpr size_t SHOWN = 40;
  if (s.size() <= SHOWN) return json_text(json(std::string(s)));
  size_t n = SHOWN;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // not inside a character
  return json_text(json(std::string(s.substr(0, n)))) + "... (" + std::to_string(s.size()) + " bytes)";
}

std::string value_quote(const json& v) {
  if (v.is_string()) return text_quote(v.get_ref<const std::string&>());
  if (v.is_array()) return "an array of " + std::to_string(v.size()) + (v.size() == 1 ? " element" : " elements");
  if (v.is_object()) return "an object of " + std::to_string(v.size()) + (v.size() == 1 ? " member" : " members");
  if (v.is_binary()) return "binary data";
  return json_text(v);  // a number, true, false or null: short
}

json error_json(int status, const std::string& message) {
  return {{"error", {{"message", message}, {"type", error_type(status)}, {"code", status}}}};
}

std::string json_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

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

int64_t field_int(const json& b, const char* key, int64_t dflt, int64_t lo, int64_t hi) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return dflt;
  int64_t v = 0;
  if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    field_fail(key, "a 64-bit signed integer", *it);
  if (it->is_number_integer()) v = it->get<int64_t>();
  else if (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>() && std::fabs(it->get<double>()) < 9e15)
    v = static_cast<int64_t>(it->get<double>());
  else field_fail(key, "an integer", *it);
  if (v < lo || v > hi)
    throw http_error(400, std::string("field '") + key + "': expected an integer in [" + std::to_string(lo) + ", " +
                              std::to_string(hi) + "], found " + value_quote(*it));
  return v;
}

double field_number(const json& b, const char* key, double dflt) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return dflt;
  if (!it->is_number()) field_fail(key, "a number", *it);
  return it->get<double>();
}

bool field_bool(const json& b, const char* key, bool dflt) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) field_fail(key, "true or false", *it);
  return it->get<bool>();
}

std::string field_string(const json& b, const char* key, const std::string& dflt) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return dflt;
  if (!it->is_string()) field_fail(key, "a string", *it);
  return it->get<std::string>();
}

std::vector<std::string> field_stop(const json& b, const char* key) {
  auto it = b.find(key);
  std::vector<std::string> out;
  if (it == b.end() || it->is_null()) return out;
  if (it->is_string()) out.push_back(it->get<std::string>());
  else if (it->is_array()) {
    for (const json& s : *it) {
      if (!s.is_string()) field_fail(key, "a string or an array of strings", *it);
      out.push_back(s.get<std::string>());
    }
  } else {
    field_fail(key, "a string or an array of strings", *it);
  }
  // Every generated token is checked against every stop string on the scheduler thread all
  // requests share: their number and length are bounded (OpenAI takes 4).
  if (out.size() > MAX_STOP_STRINGS)
    throw http_error(400, std::string("field '") + key + "': " + std::to_string(out.size()) + " stop strings, more than the " +
                              std::to_string(MAX_STOP_STRINGS) + " accepted");
  for (const std::string& s : out) {
    if (s.empty()) throw http_error(400, std::string("field '") + key + "': empty stop string");
    if (s.size() > MAX_STOP_BYTES)
      throw http_error(400, std::string("field '") + key + "': a stop string of " + std::to_string(s.size()) + " bytes, more than the " +
                                std::to_string(MAX_STOP_BYTES) + " accepted: " + text_quote(s));
  }
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

void field_require_n1(const json& b, const char* key) {
  const int64_t n = field_int(b, key, 1, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  if (n != 1) throw http_error(400, std::string("field '") + key + "': only 1 choice per request is supported, found " + std::to_string(n));
}

int64_t field_n_predict(const http_state& st, const json& b, const char* key, int64_t lo) {
  return field_n_predict(st.sched.slot_n_ctx(), b, key, lo);
}

int64_t field_n_predict(int64_t n_ctx, const json& b, const char* key, int64_t lo) {
  const int64_t v = field_int(b, key, -1, lo, INT32_MAX);
  if (v > n_ctx)
    throw http_error(400, std::string("field '") + key + "': " + std::to_string(v) + " tokens asked for, more than the slot context of " +
                              std::to_string(n_ctx) + " tokens holds");
  return v;
}

namespace {

// Fields of llama.cpp's server or OpenAI's API that detaudit serve does not implement. Each is
// type-checked as the fields it does implement are (a wrong type is a 400 naming the field, never
// a silent default); one with an `active` test is also a 400 when set to anything but its neutral
// value, since ignoring it would silently answer a different question. Fields without a test
// only matter when another field turns their feature on (mirostat_tau without mirostat).
enum field_kind { KIND_NUMBER, KIND_INTEGER, KIND_BOOL, KIND_STRING, KIND_OBJECT, KIND_ARRAY, KIND_OBJECT_OR_ARRAY };

struct unsupported_field {
  const char* key;
  field_kind kind;
  bool (*active)(const json& v);  // null: type-checked only
};

bool kind_ok(field_kind k, const json& v) {
  switch (k) {
    case KIND_NUMBER: return v.is_number();
    case KIND_INTEGER: return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    case KIND_BOOL: return v.is_boolean();
    case KIND_STRING: return v.is_string();
    case KIND_OBJECT: return v.is_object();
    case KIND_ARRAY: return v.is_array();
    case KIND_OBJECT_OR_ARRAY: return v.is_object() || v.is_array();
  }
  return false;
}

const char* kind_name(field_kind k) {
  switch (k) {
    case KIND_NUMBER: return "a number";
    case KIND_INTEGER: return "an integer";
    case KIND_BOOL: return "true or false";
    case KIND_STRING: return "a string";
    case KIND_OBJECT: return "an object";
    case KIND_ARRAY: return "an array";
    case KIND_OBJECT_OR_ARRAY: return "an object or an array";
  }
  return "";
}

bool nonempty(const json& v) {
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  return (v.is_array() || v.is_object()) && !v.empty();
}
bool is_true(const json& v) { return v.is_boolean() && v.get<bool>(); }
bool positive(const json& v) { return v.is_number() && v.get<double>() > 0; }
bool nonzero(const json& v) { return v.is_number() && v.get<double>() != 0; }
bool below_one(const json& v) { return v.is_number() && v.get<double>() < 1; }
bool above_one(const json& v) { return v.is_number() && v.get<double>() > 1; }
bool not_text_format(const json& v) {
  return v.is_object() && v.contains("type") && !(v["type"].is_string() && v["type"].get<std::string>() == "text");
}

const unsupported_field UNSUPPORTED[] = {
    {"grammar", KIND_STRING, nonempty},
    {"json_schema", KIND_OBJECT, nonempty},
    {"response_format", KIND_OBJECT, not_text_format},
    {"logit_bias", KIND_OBJECT_OR_ARRAY, nonempty},
    {"ignore_eos", KIND_BOOL, is_true},
    {"mirostat", KIND_INTEGER, nonzero},
    {"mirostat_tau", KIND_NUMBER, nullptr},
    {"mirostat_eta", KIND_NUMBER, nullptr},
    {"typical_p", KIND_NUMBER, below_one},
    {"dry_multiplier", KIND_NUMBER, positive},
    {"dry_base", KIND_NUMBER, nullptr},
    {"dry_allowed_length", KIND_INTEGER, nullptr},
    {"dry_penalty_last_n", KIND_INTEGER, nullptr},
    {"dry_sequence_breakers", KIND_ARRAY, nullptr},
    {"xtc_probability", KIND_NUMBER, positive},
    {"xtc_threshold", KIND_NUMBER, nullptr},
    {"dynatemp_range", KIND_NUMBER, positive},
    {"dynatemp_exponent", KIND_NUMBER, nullptr},
    {"top_n_sigma", KIND_NUMBER, positive},
    {"min_keep", KIND_INTEGER, above_one},  // 0 and 1 keep what the samplers keep anyway
    {"n_keep", KIND_INTEGER, nullptr},      // a full slot ends generation: nothing is shifted out
    {"n_discard", KIND_INTEGER, nullptr},
    {"n_indent", KIND_INTEGER, positive},
    {"t_max_predict_ms", KIND_INTEGER, positive},
    {"t_max_prompt_ms", KIND_INTEGER, positive},
    {"post_sampling_probs", KIND_BOOL, is_true},
    {"timings_per_token", KIND_BOOL, nullptr},
    {"lora", KIND_ARRAY, nonempty},
    {"image_data", KIND_ARRAY, nonempty},
    {"tools", KIND_ARRAY, nonempty},
    {"functions", KIND_ARRAY, nonempty},
};

// llama.cpp's sampler names (common/sampling.cpp) as the letters of its one-letter form.
char sampler_letter(const std::string& name) {
  static const std::pair<const char*, char> NAMES[] = {{"penalties", 'e'}, {"dry", 'd'},   {"top_k", 'k'},
                                                         {"typ_p", 'y'},     {"top_p", 'p'}, {"min_p", 'm'},
                                                         {"xtc", 'x'},       {"temperature", 't'}, {"infill", 'i'}};
  for (const auto& [n, c] : NAMES)
    if (name == n) return c;
  return '?';
}

// "samplers" (an array of names or a string of letters) is neutral when, without the samplers
// that are off here (dry, typ_p, xtc), it is this server's order: penalties, top_k, top_p, min_p,
// temperature (penalties may be left out while they are neutral).
void samplers_check(const json& b) {
  auto it = b.find("samplers");
  if (it == b.end() || it->is_null()) return;
  std::string letters;
  if (it->is_string()) {
    letters = it->get<std::string>();
  } else if (it->is_array()) {
    for (const json& n : *it) {
      if (!n.is_string()) field_fail("samplers", "a string or an array of sampler names", *it);
      letters += sampler_letter(n.get<std::string>());
    }
  } else {
    field_fail("samplers", "a string or an array of sampler names", *it);
  }
  std::string kept;
  for (const char c : letters)
    if (c != 'd' && c != 'y' && c != 'x') kept += c;
  const bool penalties_neutral = field_number(b, "repeat_penalty", 1.0) == 1.0 && field_number(b, "presence_penalty", 0.0) == 0.0 &&
                                 field_number(b, "frequency_penalty", 0.0) == 0.0;
  if (kept == "ekpmt" || (penalties_neutral && kept == "kpmt")) return;
  throw http_error(400, "field 'samplers': detaudit serve samples in one order (penalties, top_k, top_p, min_p, temperature); "
                        "another order or subset would change the tokens");
}

}  // namespace

void message_tools_refuse(const json& m, size_t i) {
  for (const char* key : {"tool_calls", "function_call", "tool_call_id"}) {
    auto it = m.find(key);
    const bool empty = it == m.end() || it->is_null() || ((it->is_array() || it->is_object()) && it->empty()) ||
                       (it->is_string() && it->get_ref<const std::string&>().empty());
    if (empty) continue;
    throw http_error(400, "field 'messages[" + std::to_string(i) + "]." + key +
                              "' is not supported: detaudit serve renders no tool calls (the message would be sent without it)");
  }
}

void fields_reject_unsupported(const json& b) {
  for (const unsupported_field& f : UNSUPPORTED) {
    auto it = b.find(f.key);
    if (it == b.end() || it->is_null()) continue;
    if (!kind_ok(f.kind, *it)) field_fail(f.key, kind_name(f.kind), *it);
    if (f.active && f.active(*it))
      throw http_error(400, std::string("field '") + f.key +
                                "' is not supported by detaudit serve (it would change the generated tokens or their "
                                "log-probs); leave it out or at its neutral value");
  }
  samplers_check(b);
}

void sampling_parse(const json& b, runtime::sampling_params& s) {
  fields_reject_unsupported(b);
  s.temp = static_cast<float>(field_number(b, "temperature", s.temp));
  s.top_k = static_cast<int32_t>(field_int(b, "top_k", s.top_k, 0, INT32_MAX));
  s.top_p = static_cast<float>(field_number(b, "top_p", s.top_p));
  s.min_p = static_cast<float>(field_number(b, "min_p", s.min_p));
  const int64_t seed = field_int(b, "seed", static_cast<int64_t>(s.seed), -1, INT64_MAX);
  s.seed = runtime::seed_from_signed(seed);
  s.repeat_penalty = static_cast<float>(field_number(b, "repeat_penalty", s.repeat_penalty));
  s.penalty_last_n = static_cast<int32_t>(field_int(b, "repeat_last_n", s.penalty_last_n, -1, INT32_MAX));
  s.presence_penalty = static_cast<float>(field_number(b, "presence_penalty", s.presence_penalty));
  s.frequency_penalty = static_cast<float>(field_number(b, "frequency_penalty", s.frequency_penalty));
  runtime::sampling_check_params(s);
}

json sampling_to_json(const runtime::sampling_params& s) {
  return {{"temperature", s.temp},         {"top_k", s.top_k},
          {"top_p", s.top_p},              {"min_p", s.min_p},
          {"seed", s.seed},                {"repeat_penalty", s.repeat_penalty},
          {"repeat_last_n", s.penalty_last_n}, {"presence_penalty", s.presence_penalty},
          {"frequency_penalty", s.frequency_penalty}};
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

json timings_json(const runtime::run_timings& t, int64_t n_cached) {
  const int64_t n_eval = t.n_prompt - n_cached;
  return {{"cache_n", n_cached},
          {"prompt_n", n_eval},
          {"prompt_ms", t.prompt_ms},
          {"prompt_per_token_ms", n_eval > 0 ? t.prompt_ms / static_cast<double>(n_eval) : 0.0},
          {"prompt_per_second", t.prompt_ms > 0 ? 1e3 * static_cast<double>(n_eval) / t.prompt_ms : 0.0},
          {"predicted_n", t.n_gen},
          {"predicted_ms", t.gen_ms},
          {"predicted_per_token_ms", t.n_gen > 0 ? t.gen_ms / static_cast<double>(t.n_gen) : 0.0},
          {"predicted_per_second", t.gen_tokens_per_s()}};
}

}  // namespace detaudit::serve
