// The JSON fields of a generation request, read one way for every route of detaudit serve and
// for the engine target: readers that name the field they reject, the sampling fields, the fields
// detaudit does not implement (refused unless neutral), and llama.cpp's /completion generation
// fields onto a scheduler request. Every refusal is request_error 400 naming the field.
#include "runtime/request_fields.h"

#include <cmath>
#include <limits>

namespace detaudit::runtime {

[[noreturn]] void field_fail(const char* key, const char* expected, const json& v) {
  throw request_error(400, std::string("field '") + key + "': expected " + expected + ", found " + value_quote(v));
}

std::string json_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

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
    throw request_error(400, std::string("field '") + key + "': expected an integer in [" + std::to_string(lo) + ", " +
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
    throw request_error(400, std::string("field '") + key + "': " + std::to_string(out.size()) + " stop strings, more than the " +
                              std::to_string(MAX_STOP_STRINGS) + " accepted");
  for (const std::string& s : out) {
    if (s.empty()) throw request_error(400, std::string("field '") + key + "': empty stop string");
    if (s.size() > MAX_STOP_BYTES)
      throw request_error(400, std::string("field '") + key + "': a stop string of " + std::to_string(s.size()) + " bytes, more than the " +
                                std::to_string(MAX_STOP_BYTES) + " accepted: " + text_quote(s));
  }
  return out;
}

void field_require_n1(const json& b, const char* key) {
  const int64_t n = field_int(b, key, 1, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  if (n != 1) throw request_error(400, std::string("field '") + key + "': only 1 choice per request is supported, found " + std::to_string(n));
}

int64_t field_n_predict(int64_t n_ctx, const json& b, const char* key, int64_t lo) {
  const int64_t v = field_int(b, key, -1, lo, INT32_MAX);
  if (v > n_ctx)
    throw request_error(400, std::string("field '") + key + "': " + std::to_string(v) + " tokens asked for, more than the slot context of " +
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
  throw request_error(400, "field 'samplers': detaudit serve samples in one order (penalties, top_k, top_p, min_p, temperature); "
                        "another order or subset would change the tokens");
}

}  // namespace

void message_tools_refuse(const json& m, size_t i) {
  for (const char* key : {"tool_calls", "function_call", "tool_call_id"}) {
    auto it = m.find(key);
    const bool empty = it == m.end() || it->is_null() || ((it->is_array() || it->is_object()) && it->empty()) ||
                       (it->is_string() && it->get_ref<const std::string&>().empty());
    if (empty) continue;
    throw request_error(400, "field 'messages[" + std::to_string(i) + "]." + key +
                              "' is not supported: detaudit serve renders no tool calls (the message would be sent without it)");
  }
}

void fields_reject_unsupported(const json& b) {
  for (const unsupported_field& f : UNSUPPORTED) {
    auto it = b.find(f.key);
    if (it == b.end() || it->is_null()) continue;
    if (!kind_ok(f.kind, *it)) field_fail(f.key, kind_name(f.kind), *it);
    if (f.active && f.active(*it))
      throw request_error(400, std::string("field '") + f.key +
                                "' is not supported by detaudit serve (it would change the generated tokens or their "
                                "log-probs); leave it out or at its neutral value");
  }
  samplers_check(b);
}

void sampling_parse(const json& b, sampling_params& s) {
  fields_reject_unsupported(b);
  s.temp = static_cast<float>(field_number(b, "temperature", s.temp));
  s.top_k = static_cast<int32_t>(field_int(b, "top_k", s.top_k, 0, INT32_MAX));
  s.top_p = static_cast<float>(field_number(b, "top_p", s.top_p));
  s.min_p = static_cast<float>(field_number(b, "min_p", s.min_p));
  const int64_t seed = field_int(b, "seed", static_cast<int64_t>(s.seed), -1, INT64_MAX);
  s.seed = seed_from_signed(seed);
  s.repeat_penalty = static_cast<float>(field_number(b, "repeat_penalty", s.repeat_penalty));
  s.penalty_last_n = static_cast<int32_t>(field_int(b, "repeat_last_n", s.penalty_last_n, -1, INT32_MAX));
  s.presence_penalty = static_cast<float>(field_number(b, "presence_penalty", s.presence_penalty));
  s.frequency_penalty = static_cast<float>(field_number(b, "frequency_penalty", s.frequency_penalty));
  sampling_check_params(s);
}

json sampling_to_json(const sampling_params& s) {
  return {{"temperature", s.temp},         {"top_k", s.top_k},
          {"top_p", s.top_p},              {"min_p", s.min_p},
          {"seed", s.seed},                {"repeat_penalty", s.repeat_penalty},
          {"repeat_last_n", s.penalty_last_n}, {"presence_penalty", s.presence_penalty},
          {"frequency_penalty", s.frequency_penalty}};
}

void completion_fields_parse(const json& b, const scheduler& sched, request& r) {
  r.n_predict = field_n_predict(sched.slot_n_ctx(), b, "n_predict", -1);
  sampling_parse(b, r.sampling);
  r.stop = field_stop(b, "stop");
  r.n_probs = static_cast<int>(field_int(b, "n_probs", 0, 0, MAX_N_PROBS));
  r.cache_prompt = field_bool(b, "cache_prompt", true);
  r.id_slot = static_cast<int>(field_int(b, "id_slot", -1, -1, sched.params().n_slots - 1));
  r.speculative = field_bool(b, "speculative", true);
  // llama.cpp's per-request draft limit: 0 drafts nothing for this request (larger values keep the
  // server's --draft-max; detaudit has one limit per server).
  if (field_int(b, "speculative.n_max", -1, -1, INT32_MAX) == 0) r.speculative = false;
  r.logit_hashes = field_bool(b, "logit_hashes", false);
}

json timings_json(const run_timings& t, int64_t n_cached) {
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

}  // namespace detaudit::runtime
