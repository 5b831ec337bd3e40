// Reads a cases file (schema in verdict_plant.h) into plant_server. Every mistake in the file is
// an exception naming the field, so a test with a typo fails at the server's start, not later as
// a wrong verdict.
#include <set>
#include <stdexcept>

#include "verdict_plant.h"

namespace detaudit::verdicts {
namespace {

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw std::runtime_error("cases file: " + where + ": " + what);
}

void keys_check(const json& j, const std::string& where, const std::set<std::string>& known) {
  if (!j.is_object()) fail(where, "expected an object");
  for (const auto& [k, v] : j.items())
    if (!known.count(k)) fail(where, "unknown field '" + k + "'");
}

template <typename T>
void get_if(const json& j, const char* key, T& out, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return;
  try {
    out = it->get<T>();
  } catch (const json::exception&) {
    fail(where + "." + key, std::string("wrong type (") + it->type_name() + ")");
  }
}

template <typename T>
void get_opt(const json& j, const char* key, std::optional<T>& out, const std::string& where) {
  if (!j.contains(key)) return;
  T v{};
  get_if(j, key, v, where);
  out = v;
}

std::string one_of(const json& j, const char* key, const std::string& dflt, const std::set<std::string>& allowed,
                   const std::string& where) {
  std::string v = dflt;
  get_if(j, key, v, where);
  if (!allowed.count(v)) fail(where + "." + key, "unexpected value '" + v + "'");
  return v;
}

plant_token token_load(const json& j, const std::string& where) {
  keys_check(j, where, {"text", "bytes", "form", "id", "logprob", "prob", "top"});
  plant_token t;
  if (j.contains("text") == j.contains("bytes")) fail(where, "give exactly one of 'text' and 'bytes'");
  if (j.contains("text")) {
    get_if(j, "text", t.bytes, where);
  } else {
    std::vector<int> bytes;
    get_if(j, "bytes", bytes, where);
    for (int b : bytes) {
      if (b < 0 || b > 255) fail(where + ".bytes", "a byte value is outside 0..255");
      t.bytes.push_back(static_cast<char>(b));
    }
    t.form = "replacement";
  }
  t.form = one_of(j, "form", t.form, {"text", "replacement", "openai", "escape", "sentencepiece"}, where);
  get_opt(j, "id", t.id, where);
  get_opt(j, "logprob", t.logprob, where);
  get_opt(j, "prob", t.prob, where);
  if (j.contains("top")) {
    if (!j["top"].is_array()) fail(where + ".top", "expected an array");
    for (size_t i = 0; i < j["top"].size(); ++i)
      t.top.push_back(token_load(j["top"][i], where + ".top[" + std::to_string(i) + "]"));
  }
  return t;
}

void omit_load(const json& j, plant_answer& a, const std::string& where) {
  std::vector<std::string> omit;
  get_if(j, "omit", omit, where);
  for (const std::string& o : omit) {
    if (o == "logprobs") a.omit_logprobs = true;
    else if (o == "bytes") a.omit_bytes = true;
    else if (o == "ids") a.omit_ids = true;
    else if (o == "top") a.omit_top = true;
    else if (o == "token_logprob") a.omit_token_logprob = true;
    else fail(where + ".omit", "unknown switch '" + o + "'");
  }
}

plant_answer answer_load(const json& j, const std::string& where) {
  keys_check(j, where, {"tokens", "text", "finish", "error", "delay_ms", "cached_tokens", "max_seqs_in_step",
                        "draft_proposed", "draft_accepted", "logit_hashes", "omit"});
  plant_answer a;
  if (j.contains("tokens")) {
    if (!j["tokens"].is_array()) fail(where + ".tokens", "expected an array");
    for (size_t i = 0; i < j["tokens"].size(); ++i)
      a.tokens.push_back(token_load(j["tokens"][i], where + ".tokens[" + std::to_string(i) + "]"));
  }
  get_opt(j, "text", a.text, where);
  a.finish = one_of(j, "finish", "stop", {"stop", "length"}, where);
  if (j.contains("error")) {
    keys_check(j["error"], where + ".error", {"status", "message"});
    get_if(j["error"], "status", a.error_status, where + ".error");
    get_if(j["error"], "message", a.error_message, where + ".error");
    if (a.error_status < 400 || a.error_status > 599) fail(where + ".error.status", "expected 400..599");
  }
  get_if(j, "delay_ms", a.delay_ms, where);
  get_opt(j, "cached_tokens", a.cached_tokens, where);
  get_opt(j, "max_seqs_in_step", a.max_seqs_in_step, where);
  get_opt(j, "draft_proposed", a.draft_proposed, where);
  get_opt(j, "draft_accepted", a.draft_accepted, where);
  get_if(j, "logit_hashes", a.logit_hashes, where);
  omit_load(j, a, where);
  return a;
}

plant_case case_load(const json& j, const std::string& where) {
  keys_check(j, where, {"answers", "seed", "seed_answer", "shape", "auto_ids", "cache_report", "cache_n",
                        "prompt_tokens", "delay_ms"});
  plant_case c;
  if (!j.contains("answers") || !j["answers"].is_array() || j["answers"].empty())
    fail(where + ".answers", "expected a non-empty array");
  for (size_t i = 0; i < j["answers"].size(); ++i)
    c.answers.push_back(answer_load(j["answers"][i], where + ".answers[" + std::to_string(i) + "]"));
  c.seed_honour = one_of(j, "seed", "honour", {"honour", "ignore"}, where) == "honour";
  if (j.contains("seed_answer")) c.seed_answer = answer_load(j["seed_answer"], where + ".seed_answer");
  c.older_shape = one_of(j, "shape", "newer", {"newer", "older"}, where) == "older";
  get_if(j, "auto_ids", c.auto_ids, where);
  c.cache_report = one_of(j, "cache_report", "auto", {"auto", "usage", "timings", "none"}, where);
  get_if(j, "cache_n", c.cache_n, where);
  get_if(j, "prompt_tokens", c.prompt_tokens, where);
  get_if(j, "delay_ms", c.delay_ms, where);
  return c;
}

// The answer to a prompt no case names: " ok" and one alternative.
plant_case default_case() {
  plant_case c;
  plant_token ok;
  ok.bytes = " ok";
  ok.logprob = -0.5;
  c.answers.push_back(plant_answer{});
  c.answers[0].tokens.push_back(ok);
  return c;
}

}  // namespace

std::string plant_answer::text_or_bytes() const {
  if (text) return *text;
  std::string s;
  for (const plant_token& t : tokens) s += t.bytes;
  return s;
}

plant_server plant_load(const json& j) {
  keys_check(j, "(top)", {"server", "cases"});
  plant_server s;
  s.default_case = default_case();
  const json server = j.value("server", json::object());
  keys_check(server, "server",
             {"model", "props", "api_version", "slots", "metrics", "concurrency", "delay_ms", "n_slots", "get_delay_ms", "deep_json",
              "flood", "flood_count", "props_name_bytes", "props_depth", "props_width"});
  get_if(server, "model", s.model, "server");
  get_if(server, "props", s.props, "server");
  get_if(server, "api_version", s.api_version, "server");
  s.slots = one_of(server, "slots", "off", {"off", "real", "one", "all"}, "server");
  s.metrics = one_of(server, "metrics", "off", {"off", "real", "one", "all"}, "server");
  s.serial = one_of(server, "concurrency", "parallel", {"parallel", "serial"}, "server") == "serial";
  get_if(server, "delay_ms", s.delay_ms, "server");
  get_if(server, "n_slots", s.n_slots, "server");
  get_if(server, "get_delay_ms", s.get_delay_ms, "server");
  get_if(server, "deep_json", s.deep_json, "server");
  s.flood = one_of(server, "flood", "", {"", "tokens", "alts", "values", "events"}, "server");
  get_if(server, "flood_count", s.flood_count, "server");
  get_if(server, "props_name_bytes", s.props_name_bytes, "server");
  get_if(server, "props_depth", s.props_depth, "server");
  get_if(server, "props_width", s.props_width, "server");
  if (s.props_name_bytes > 0 || s.props_width > 0) s.props = true;
  const json cases = j.value("cases", json::object());
  if (!cases.is_object()) fail("cases", "expected an object keyed by prompt text");
  for (const auto& [prompt, c] : cases.items()) s.cases[prompt] = case_load(c, "cases[\"" + prompt + "\"]");
  return s;
}

}  // namespace detaudit::verdicts
