// Bounds on answers: derived from the request, applied while parsing and after reading.
#include "probes/response_limits.h"

#include <algorithm>

namespace detaudit::probes {

const json* json_get(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

namespace {

// What an answer may cost per token, far above what llama.cpp, OpenAI or ollama send (a
// llama.cpp entry with 16-byte tokens and its "bytes" arrays is about 150 bytes and 30 values per
// alternative; a streamed event adds about 400 bytes and 15 values).
constexpr size_t BODY_BASE = size_t(1) << 20;           // headers of the answer, ids, timings, settings
constexpr size_t BODY_PER_TOKEN = 2048;                 // the token's text, its entry, a stream event
constexpr size_t BODY_PER_ALT = 1024;                   // one alternative with its bytes
constexpr size_t BODY_MAX = size_t(256) << 20;          // the most any answer may take
constexpr size_t VALUES_BASE = 8192;
constexpr size_t VALUES_PER_TOKEN = 64;
constexpr size_t VALUES_PER_ALT = 48;
constexpr size_t GET_BODY = size_t(8) << 20;            // /props, /v1/models, /slots, /metrics
constexpr size_t GET_VALUES = size_t(1) << 19;

// The first integer among body[keys] (and body.options[keys]): what the request asked.
std::optional<int64_t> asked_int(const json& body, std::initializer_list<const char*> keys) {
  const json* options = json_get(body, "options");
  for (const json* o : {&body, options})
    for (const char* k : keys)
      if (const json* v = o ? json_get(*o, k) : nullptr; v && v->is_number_integer()) return v->get<int64_t>();
  return std::nullopt;
}

// The prompt's bytes as sent (a server may echo it), escaped at worst 6 bytes per byte.
size_t prompt_bytes(const json& body) {
  size_t n = 0;
  for (const char* k : {"prompt", "messages"})
    if (const json* v = json_get(body, k)) n += v->is_string() ? v->get_ref<const std::string&>().size() : v->dump().size();
  return n;
}

// Counts values while nlohmann's own DOM builder builds the document, and stops it at the budget
// or at the depth bound: a refused answer never grows past either.
class bounded_dom {
 public:
  bounded_dom(json& out, size_t budget, size_t max_depth, size_t* used)
      : dom_(out, /*allow_exceptions=*/false), budget_(budget), max_depth_(max_depth), used_(used) {}

  bool null() { return value() && dom_.null(); }
  bool boolean(bool v) { return value() && dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return value() && dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return value() && dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return value() && dom_.number_float(v, s); }
  bool string(json::string_t& v) { return value() && dom_.string(v); }
  bool binary(json::binary_t& v) { return value() && dom_.binary(v); }
  bool start_object(size_t n) { return value() && open() && dom_.start_object(n); }
  bool key(json::string_t& k) { return value() && dom_.key(k); }  // a member costs as much as a value
  bool end_object() { --depth_; return dom_.end_object(); }
  bool start_array(size_t n) { return value() && open() && dom_.start_array(n); }
  bool end_array() { --depth_; return dom_.end_array(); }
  template <class E>
  bool parse_error(size_t pos, const std::string& token, const E& e) {
    syntax_ = true;
    return dom_.parse_error(pos, token, e);
  }

  bool too_many = false, too_deep = false;
  bool syntax() const { return syntax_; }

 private:
  bool value() {
    if (++*used_ > budget_) too_many = true;
    if (depth_ >= max_depth_) too_deep = true;  // a value inside containers that deep
    return !too_many && !too_deep;
  }
  bool open() {
    ++depth_;
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  size_t budget_;
  size_t max_depth_;
  size_t* used_;
  size_t depth_ = 0;
  bool syntax_ = false;
};

size_t utf8_cut(const std::string& s, size_t n) {
  if (n >= s.size()) return s.size();
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

json bounded_copy(const json& j, size_t& budget, int depth, int max_depth) {
  auto spend = [&budget](size_t n) { budget -= std::min(n, budget); };
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (s.size() + 2 <= budget) {
      spend(s.size() + 2);
      return j;
    }
    const std::string cut = text_bounded(s, budget > 48 ? budget - 48 : 0);
    budget = 0;
    return cut;
  }
  if (!j.is_structured()) {
    spend(j.dump().size());
    return j;
  }
  if (depth >= max_depth) {
    const std::string note = "[nested more than " + std::to_string(max_depth) + " levels: left out]";
    spend(note.size() + 2);
    return note;
  }
  spend(2);
  json out = j.is_array() ? json::array() : json::object();
  size_t left = j.size();
  for (auto it = j.begin(); it != j.end(); ++it, --left) {
    if (budget == 0) {
      const std::string note = "[" + std::to_string(left) + " more left out: past the size stored]";
      if (out.is_array()) out.push_back(note);
      else out["..."] = note;
      break;
    }
    if (out.is_array()) {
      out.push_back(bounded_copy(*it, budget, depth + 1, max_depth));
    } else {
      spend(it.key().size() + 3);
      out[text_bounded(it.key(), 256)] = bounded_copy(it.value(), budget, depth + 1, max_depth);
    }
    spend(1);
  }
  return out;
}

}  // namespace

response_limits response_limits_for(const json& body) {
  response_limits l;
  const std::optional<int64_t> n_predict = asked_int(body, {"n_predict", "max_tokens", "max_completion_tokens", "num_predict"});
  const std::optional<int64_t> n_probs = asked_int(body, {"n_probs", "top_logprobs", "logprobs"});
  const size_t tokens = n_predict && *n_predict >= 0 ? static_cast<size_t>(std::min<int64_t>(*n_predict, 1 << 24)) : TOKENS_UNLIMITED;
  const size_t alts = n_probs && *n_probs > 0 ? static_cast<size_t>(std::min<int64_t>(*n_probs, 1 << 16)) : 0;
  l.max_tokens = tokens + TOKEN_MARGIN;
  l.max_alts = alts + ALT_MARGIN;
  l.max_events = l.max_tokens + 64;  // a role event, the final events, usage, [DONE]
  const size_t prompt = prompt_bytes(body);
  l.max_body = std::min(BODY_MAX, BODY_BASE + 6 * prompt + l.max_tokens * (BODY_PER_TOKEN + (alts + 1) * BODY_PER_ALT));
  // A server may echo the prompt's tokens (ollama's "context"): at most one value per byte.
  l.max_values = VALUES_BASE + prompt + l.max_tokens * (VALUES_PER_TOKEN + (alts + 1) * VALUES_PER_ALT);
  l.max_text = prompt + l.max_tokens * TEXT_PER_TOKEN;  // prompt: an "echo" the request may ask for
  l.max_depth = ANSWER_MAX_DEPTH;
  l.asked = std::string("n_predict ") + (n_predict && *n_predict >= 0 ? std::to_string(*n_predict) : "unlimited") + ", n_probs " +
            std::to_string(alts);
  return l;
}

response_limits response_limits_get() {
  response_limits l;
  l.max_body = GET_BODY;
  l.max_values = GET_VALUES;
  l.max_events = 0;
  l.max_depth = ANSWER_MAX_DEPTH;
  l.asked = "a capability probe";
  return l;
}

json json_parse_bounded(const std::string& text, const response_limits& l, size_t* used) {
  json out;
  size_t own = 0;
  bounded_dom sax(out, l.max_values, l.max_depth, used ? used : &own);
  if (json::sax_parse(text, &sax) && !sax.syntax()) return out;
  if (sax.too_many)
    throw response_error("the answer holds more than " + std::to_string(l.max_values) + " JSON values, more than the request (" +
                         l.asked + ") can need");
  if (sax.too_deep)
    throw response_error("the answer nests JSON more than " + std::to_string(l.max_depth) + " levels deep");
  return json(json::value_t::discarded);
}

void record_limits_check(const reports::record& rec, const response_limits& l) {
  if (rec.tokens.size() > l.max_tokens || rec.top_logprobs.size() > l.max_tokens)
    throw response_error("the answer holds " + std::to_string(std::max(rec.tokens.size(), rec.top_logprobs.size())) +
                         " tokens, more than the " + std::to_string(l.max_tokens - TOKEN_MARGIN) + " asked (" + l.asked + ") + " +
                         std::to_string(TOKEN_MARGIN));
  if (rec.text.size() > l.max_text)
    throw response_error("the answer's text holds " + std::to_string(rec.text.size()) + " bytes, more than " +
                         std::to_string(TEXT_PER_TOKEN) + " a token for what was asked (" + l.asked + ")");
  for (size_t i = 0; i < rec.top_logprobs.size(); ++i)
    if (rec.top_logprobs[i].size() > l.max_alts)
      throw response_error("step " + std::to_string(i) + " holds " + std::to_string(rec.top_logprobs[i].size()) +
                           " alternatives, more than the " + std::to_string(l.max_alts - ALT_MARGIN) + " asked (" + l.asked + ") + " +
                           std::to_string(ALT_MARGIN));
}

json json_bounded(const json& j, size_t max_bytes, int max_depth) {
  size_t budget = max_bytes;
  return bounded_copy(j, budget, 0, max_depth);
}

std::string text_bounded(const std::string& s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  return s.substr(0, utf8_cut(s, max_bytes)) + "...[" + std::to_string(s.size()) + " bytes, cut]";
}

}  // namespace detaudit::probes
