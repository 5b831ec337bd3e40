// The HTTP target: capability probe, dialect detection, and one request -> one record.
//
// Capabilities by what the probe reads (GET /props, /api/version, /v1/models, /api/tags,
// /metrics, /health):
//   /props answers JSON           -> a llama.cpp-family server: llama.cpp's extra request fields,
//                                    per-request cache control, log-probs "pre-sampling" (raw
//                                    softmax, as llama.cpp's n_probs and detaudit serve give them)
//   /props or /v1/models names detaudit -> also the logit-hash extension ("logit_hashes": true)
//   otherwise                     -> log-probs taken as "post-sampling" (what the server's sampler
//                                    saw is not documented for OpenAI or ollama)
// Logprob caps: 100 for llama.cpp's /completion n_probs, 20 elsewhere (OpenAI's and ollama's limit).
#include <cmath>
#include <mutex>
#include <optional>

#include "probes/http_client.h"
#include "probes/response_limits.h"
#include "probes/target_http.h"
#include "reports/audit/redact.h"
#include "reports/audit/steps.h"
#include "util/error.h"

namespace detaudit::probes {

// ---- JSON readers shared by the dialects ----

namespace {

std::string field_name(const std::string& where, const char* key) { return where.empty() ? key : where + "." + key; }

[[noreturn]] void type_fail(const std::string& where, const char* key, const char* expected, const json& v) {
  throw response_error("field '" + field_name(where, key) + "': expected " + expected + ", found " + v.type_name());
}

}  // namespace

const json& json_array_at(const json& j, const char* key, const std::string& where) {
  const json* v = json_get(j, key);
  if (!v) throw response_error("field '" + field_name(where, key) + "': missing");
  if (!v->is_array()) type_fail(where, key, "an array", *v);
  return *v;
}

std::string json_string_at(const json& j, const char* key, const std::string& where, const std::string& dflt) {
  const json* v = json_get(j, key);
  if (!v) return dflt;
  if (!v->is_string()) type_fail(where, key, "a string", *v);
  return v->get<std::string>();
}

double json_number_at(const json& j, const char* key, const std::string& where) {
  const json* v = json_get(j, key);
  if (!v) throw response_error("field '" + field_name(where, key) + "': missing");
  if (!v->is_number()) type_fail(where, key, "a number", *v);
  return v->get<double>();
}

std::vector<uint8_t> token_bytes_parse(const json* bytes, const std::string& text, const std::string& where) {
  if (!bytes) return {};
  if (!bytes->is_array()) type_fail(where, "bytes", "an array of byte values", *bytes);
  std::vector<uint8_t> out;
  for (const json& b : *bytes) {
    if (!b.is_number_integer() || b.get<int64_t>() < 0 || b.get<int64_t>() > 255)
      throw response_error("field '" + field_name(where, "bytes") + "': expected byte values 0..255");
    out.push_back(static_cast<uint8_t>(b.get<int>()));
  }
  if (std::string(out.begin(), out.end()) == text) out.clear();
  return out;
}

void hashes_parse(const json& j, reports::record& rec) {
  if (const json* hs = json_get(j, "logit_hashes")) {
    if (!hs->is_array()) type_fail("", "logit_hashes", "an array of hex strings", *hs);
    for (size_t i = 0; i < hs->size(); ++i) {
      const json& h = (*hs)[i];
      const std::string s = h.is_string() ? h.get<std::string>() : "";
      if (s.empty() || s.size() > 16 || s.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
        throw response_error("field 'logit_hashes[" + std::to_string(i) + "]': expected a 64-bit hex string");
      rec.logit_hashes.push_back(std::stoull(s, nullptr, 16));
    }
  }
  rec.chained_hash = json_string_at(j, "chained_hash", "", "");
}

// ---- the dialect table ----

const std::vector<dialect_def>& dialect_table() {
  static const std::vector<dialect_def> table = {
      {API_LLAMACPP, "llamacpp", "llama.cpp's server, detaudit serve: /completion, chats on /v1/chat/completions (by /props)",
       "/completion", "/v1/chat/completions", "/props", llamacpp_request, llamacpp_parse, stream_assemble_llamacpp,
       true, 100},
      {API_OLLAMA, "ollama", "ollama: /api/generate and /api/chat (detected by /api/version)",
       "/api/generate", "/api/chat", "/api/version", ollama_request, ollama_parse, nullptr, false, 20},
      {API_OPENAI_CHAT, "openai-chat", "OpenAI-compatible servers: /v1/chat/completions (detected by /v1/models)",
       nullptr, "/v1/chat/completions", "/v1/models", openai_chat_request, openai_parse, stream_assemble_openai, false, 20},
      {API_OPENAI_COMPLETIONS, "openai-completions", "OpenAI-compatible servers: /v1/completions, raw prompts (only with --api)",
       "/v1/completions", nullptr, nullptr, openai_completions_request, openai_parse, stream_assemble_openai, false, 20},
  };
  return table;
}

const dialect_def& dialect_of(http_api api) {
  for (const dialect_def& d : dialect_table())
    if (d.api == api) return d;
  throw std::logic_error("dialect_of: no row for this dialect");
}

std::string dialect_names_text() {
  std::string out;
  for (const dialect_def& d : dialect_table()) out += (out.empty() ? "" : ", ") + std::string(d.name);
  return out;
}

std::string dialects_help() {
  std::string out;
  for (const dialect_def& d : dialect_table()) {
    std::string name = d.name;
    name.resize(20, ' ');
    out += "  " + name + d.summary + "\n";
  }
  return out;
}

const dialect_def& dialect_parse(const std::string& name) {
  for (const dialect_def& d : dialect_table())
    if (name == d.name) return d;
  throw input_error("--api: expected one of " + dialect_names_text() + ", found '" + name + "'");
}

// ---- capability probe ----

namespace {

// What the probe read; each JSON is null when the route did not answer 200 with JSON.
struct probe_reads {
  json props, version, models, tags;
  int props_status = 0, version_status = 0, models_status = 0, health_status = 0;
  bool metrics = false;
  bool slots = false;               // GET /slots answers a JSON array (llama-server --slots, detaudit serve)
  bool slots_speculative = false;   // a slot says "speculative": true (llama-server started with a draft or --spec-type)
  bool metrics_processing = false;  // /metrics has llama.cpp's requests_processing gauge
};

// A capability route's answer as JSON, parsed within response_limits_get() (values, depth); null
// when it is not JSON or exceeds them.
json json_bounded_parse(const http_response& r) {
  if (!r.ok()) return nullptr;
  try {
    json j = json_parse_bounded(r.body, response_limits_get(), nullptr);
    return j.is_discarded() ? json(nullptr) : j;
  } catch (const response_error&) {
    return nullptr;
  }
}

json json_or_null(const http_response& r) {
  json j = json_bounded_parse(r);
  return j.is_object() ? j : json(nullptr);
}

// The first read retries as configured (it decides reachability); the others are single tries.
probe_reads probe_read(const http_client& c) {
  probe_reads p;
  const double t = std::min(c.options().timeout_s, 10.0);
  const size_t most = response_limits_get().max_body;
  const http_response props = c.get("/props", most);
  p.props_status = props.status;
  p.props = json_or_null(props);
  const http_response version = c.get_once("/api/version", t, most);
  p.version_status = version.status;
  p.version = json_or_null(version);
  if (p.version.is_object() && !p.version.contains("version")) p.version = nullptr;
  const http_response models = c.get_once("/v1/models", t, most);
  p.models_status = models.status;
  p.models = json_or_null(models);
  if (p.models.is_object() && !(p.models.contains("data") && p.models["data"].is_array())) p.models = nullptr;
  if (p.version.is_object()) p.tags = json_or_null(c.get_once("/api/tags", t, most));
  p.health_status = c.get_once("/health", t, most).status;
  const http_response metrics = c.get_once("/metrics", t, most);
  p.metrics = metrics.ok();
  p.metrics_processing = p.metrics && metrics.body.find("requests_processing") != std::string::npos;
  const http_response slots = c.get_once("/slots", t, most);
  const json sl = json_bounded_parse(slots);
  p.slots = sl.is_array();
  if (p.slots)
    for (const json& e : sl)
      if (const json* v = json_get(e, "speculative"); v && v->is_boolean() && v->get<bool>()) p.slots_speculative = true;
  return p;
}

// What a dialect's detection route answered (null: nothing usable).
const json& read_of(const probe_reads& p, const char* route) {
  static const json none;
  if (!route) return none;
  const std::string r = route;
  return r == "/props" ? p.props : r == "/api/version" ? p.version : r == "/v1/models" ? p.models : none;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::string str_at(const json& j, const char* key) {
  const json* v = json_get(j, key);
  return v && v->is_string() ? v->get<std::string>() : "";
}

// A string naming the server (build, fingerprint, model) as stored in run.json and every record.
std::string name_at(const json& j, const char* key) { return text_bounded(str_at(j, key), STORED_NAME); }

std::string first_model(const probe_reads& p) {
  if (p.models.is_object() && !p.models["data"].empty()) {
    const std::string id = name_at(p.models["data"][0], "id");
    if (!id.empty()) return id;
  }
  if (const json* ms = json_get(p.tags, "models"); ms && ms->is_array() && !ms->empty()) {
    const std::string name = name_at((*ms)[0], "name");
    if (!name.empty()) return name;
  }
  const std::string path = str_at(p.props, "model_path");
  return text_bounded(path.substr(path.find_last_of('/') + 1), STORED_NAME);
}

capabilities caps_from(const probe_reads& p, http_api api, const target_options& opt) {
  capabilities c;
  c.reachable = true;
  const bool llamacpp = p.props.is_object() || api == API_LLAMACPP;
  const std::string owner = p.models.is_object() && !p.models["data"].empty() ? str_at(p.models["data"][0], "owned_by") : "";
  const bool detaudit = starts_with(str_at(p.props, "build_info"), "detaudit") ||
                        starts_with(str_at(p.props, "system_fingerprint"), "detaudit") || owner == "detaudit";
  const dialect_def& d = dialect_of(api);
  c.token_ids = d.token_ids;
  c.cache_control = llamacpp && api != API_OLLAMA;
  c.logit_hashes = detaudit;
  c.metrics = p.metrics;
  c.busy_source = p.slots ? "/slots" : p.metrics_processing ? "/metrics" : "";
  c.seed = true;
  c.logprob_cap = d.logprob_cap;
  c.logprobs_kind = llamacpp || detaudit ? "pre-sampling" : "post-sampling";
  c.build = !str_at(p.props, "build_info").empty() ? name_at(p.props, "build_info") : name_at(p.version, "version");
  c.fingerprint = name_at(p.props, "system_fingerprint");
  c.model = !opt.model.empty() ? opt.model : first_model(p);
  c.model_sha256 = name_at(p.props, "model_sha256");
  if (const json* n = json_get(p.props, "total_slots"); n && n->is_number_integer()) c.n_slots = n->get<int>();
  c.chat_template = str_at(p.props, "chat_template");
  c.eos_token = str_at(p.props, "eos_token");
  c.chat_template_fallback = name_at(p.props, "chat_template_fallback");
  // What the server said, as run.json keeps it: each route's answer cut to its share of
  // STORED_RAW and STORED_DEPTH levels (run.json is indented), the key redacted.
  const size_t share = STORED_RAW / 4;
  c.raw = {{"props", json_bounded(p.props, share)}, {"api_version", json_bounded(p.version, share)},
           {"v1_models", json_bounded(p.models, share)}, {"health_status", p.health_status}, {"metrics", p.metrics}};
  if (!p.tags.is_null()) c.raw["api_tags"] = json_bounded(p.tags, share);
  // A llama.cpp server that drafts (its /slots, or detaudit serve's /props, say "speculative":
  // true): the speculation probe
  // asks it for answers without drafting ("speculative.n_max": 0) as its spec-off condition.
  const json* props_spec = json_get(p.props, "speculative");
  const bool drafting = p.slots_speculative || (props_spec && props_spec->is_boolean() && props_spec->get<bool>());
  if (llamacpp && api != API_OLLAMA) c.raw["spec"] = drafting ? "server" : "none";
  return capabilities_redact(c, opt.api_key);
}

// Which dialect answers; input_error when none does (the key is wrong, or no known API).
http_api detect(const probe_reads& p, const std::string& url) {
  for (const dialect_def& d : dialect_table())
    if (read_of(p, d.detect).is_object()) return d.api;
  for (int s : {p.props_status, p.version_status, p.models_status})
    if (s == 401 || s == 403)
      throw input_error("target " + url + " answered " + std::to_string(s) +
                        ": the API key is missing or wrong (pass it with --api-key-env NAME)");
  throw input_error("cannot tell which API " + url + " speaks (GET /props, /api/version and /v1/models answered " +
                    std::to_string(p.props_status) + ", " + std::to_string(p.version_status) + ", " +
                    std::to_string(p.models_status) + "); pass --api NAME, one of " + dialect_names_text());
}

}  // namespace

// ---- the target ----

namespace {

// Fields some servers add to any dialect's answer: detaudit serve's "max_seqs_in_step" (the most
// sequences in one forward step this request took part in) becomes evidence.batch_width.
void extensions_parse(const json& j, reports::record& rec) {
  if (const json* w = json_get(j, "max_seqs_in_step")) {
    if (!w->is_number_integer()) throw response_error("field 'max_seqs_in_step': expected an integer");
    rec.evidence["batch_width"] = *w;
  }
}

// "HTTP 500: <the server's message>" from an OpenAI ({"error": {"message"}}), ollama
// ({"error": "..."}) or plain-text error body.
// The server's message is cut to STORED_MESSAGE bytes.
std::string http_error_message(const http_response& r, const response_limits& l) {
  std::string msg;
  json j;
  try {
    j = json_parse_bounded(r.body, l, nullptr);
  } catch (const response_error&) {
    j = json(json::value_t::discarded);
  }
  if (const json* e = j.is_discarded() ? nullptr : json_get(j, "error")) {
    if (e->is_string()) msg = e->get<std::string>();
    else if (const json* m = json_get(*e, "message"); m && m->is_string()) msg = m->get<std::string>();
  }
  if (msg.empty()) msg = r.body.substr(0, 200);
  return "HTTP " + std::to_string(r.status) + (msg.empty() ? "" : ": " + text_bounded(msg, STORED_MESSAGE));
}

http_client_options client_options(const target_options& opt) {
  http_client_options o;
  o.timeout_s = opt.timeout_s;
  o.retries = opt.retries;
  o.backoff_s = opt.backoff_s;
  o.api_key = opt.api_key;
  return o;
}

class http_target final : public target {
 public:
  http_target(std::string spec, std::string url, http_api api, const target_options& opt, std::optional<capabilities> caps)
      : spec_(std::move(spec)), url_(url), api_(api), opt_(opt), client_(url, client_options(opt)), caps_(std::move(caps)) {}

  std::string spec() const override { return spec_; }
  std::string dialect() const override { return dialect_of(api_).name; }

  capabilities probe() override {
    capabilities c = caps_from(probe_read(client_), api_, opt_);
    std::lock_guard<std::mutex> lk(mu_);
    caps_ = c;
    return c;
  }

  reports::record complete(const gen_request& r) override;

  json metrics() override;
  int busy_now(std::vector<int>* ids = nullptr) override;

  // "spec" "none" on a llama.cpp server: every request also carries "speculative.n_max": 0, which
  // llama-server reads as "draft nothing for this request" where it honours per-request draft
  // settings (b4748 with a draft model; the 2026-08 build ignores it, and its answers' draft_n say
  // so: the condition is then not exercised). nullptr otherwise.
  std::unique_ptr<target> variant(const std::string& key, const std::string& value) const override {
    if (key != "spec" || value != "none" || api_ != API_LLAMACPP) return nullptr;
    auto t = std::make_unique<http_target>(spec_, url_, api_, opt_, caps_);
    t->body_extra_ = body_extra_;
    t->body_extra_["speculative.n_max"] = 0;
    return t;
  }

 private:
  capabilities caps() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (caps_) return *caps_;
    }
    return probe();
  }

  json target_json(const capabilities& c) const {
    json t = {{"spec", spec_}, {"dialect", dialect()}, {"url", url_}, {"build", c.build}, {"fingerprint", c.fingerprint}, {"model", c.model}};
    if (!c.model_sha256.empty()) t["model_sha256"] = c.model_sha256;
    return t;
  }

  void response_read(const http_call& call, const http_response& resp, const response_limits& lim, reports::record& rec) const;

  std::string spec_, url_;
  http_api api_;
  target_options opt_;
  http_client client_;
  std::mutex mu_;
  std::optional<capabilities> caps_;
  json body_extra_ = json::object();  // merged into every request body before gen_request::extra
};

reports::record http_target::complete(const gen_request& r) {
  const capabilities c = caps();
  http_server_info si;
  si.model = c.model;
  si.llamacpp = c.cache_control || api_ == API_LLAMACPP;
  si.detaudit = c.logit_hashes;
  si.logprob_cap = api_ == API_LLAMACPP && !r.messages.empty() ? std::min(c.logprob_cap, 20) : c.logprob_cap;
  http_call call = dialect_of(api_).build(r, si);
  if (opt_.stream) {
    call.body["stream"] = true;
    if (call.path != "/completion") call.body["stream_options"] = {{"include_usage", true}};
  }
  for (const auto& [k, v] : body_extra_.items()) call.body[k] = v;  // keys with dots are not paths
  call.body.merge_patch(r.extra);
  const response_limits lim = response_limits_for(call.body);
  reports::record rec;
  rec.target = target_json(c);
  rec.request = call.body;
  rec.endpoint = call.path;
  const http_response resp = client_.post_json(call.path, call.body.dump(-1, ' ', false, json::error_handler_t::replace), lim.max_body);
  rec.timings = {{"t_start", resp.t_start}, {"t_end", resp.t_end}, {"latency_ms", (resp.t_end - resp.t_start) * 1000.0},
                 {"attempts", resp.attempts}};
  rec.http_status = resp.status;
  response_read(call, resp, lim, rec);
  if (!rec.error.empty()) {
    rec.finish_reason = "error";
  } else if (!rec.top_logprobs.empty() || (!rec.tokens.empty() && rec.tokens[0].logprob)) {
    rec.logprobs_kind = c.logprobs_kind;
  }
  reports::record_normalise(rec);
  reports::record_redact(rec, opt_.api_key);
  return rec;
}

// Clears what a refused answer had filled in: nothing of it reaches the record as an answer.
void answer_clear(reports::record& rec) {
  rec.text.clear();
  rec.tokens.clear();
  rec.top_logprobs.clear();
  rec.logit_hashes.clear();
  rec.chained_hash.clear();
}

void http_target::response_read(const http_call& call, const http_response& resp, const response_limits& lim,
                                 reports::record& rec) const {
  const std::string where = "POST " + url_ + call.path;
  if (!resp.error.empty()) {
    rec.error = where + ": HTTP " + std::to_string(resp.status) + ": " + resp.error + ", more than the request (" + lim.asked +
                ") can need";
    return;
  }
  if (!resp.ok()) {
    rec.error = where + ": " + http_error_message(resp, lim);
    return;
  }
  const dialect_def& d = dialect_of(api_);
  const bool chat = d.chat_path && call.path == d.chat_path;
  const json* stream = json_get(call.body, "stream");
  const bool events = d.stream && stream && stream->is_boolean() && stream->get<bool>() &&
                      resp.content_type.rfind("text/event-stream", 0) == 0;
  answer_read(d, chat, events, resp.body, lim, where, rec);
}

}  // namespace

void answer_read(const dialect_def& d, bool chat, bool events, const std::string& body, const response_limits& lim,
                 const std::string& where, reports::record& rec) {
  json j;
  if (events && d.stream) {
    try {
      j = d.stream(body, chat, lim);
    } catch (const response_error& e) {
      rec.error = where + ": " + e.what();
      return;
    }
  } else {
    try {
      j = json_parse_bounded(body, lim, nullptr);
    } catch (const response_error& e) {
      rec.error = where + ": " + e.what();
      return;
    }
  }
  if (j.is_discarded() || !j.is_object()) {
    // Say why: not JSON at all (with the parser's reason, e.g. an escape that names half a
    // UTF-16 surrogate pair), or JSON of another kind.
    std::string why = "not a JSON object";
    if (j.is_discarded()) {
      why = "not valid JSON";
      try {
        const json again = json::parse(body);  // throws: the reason
        (void)again;
      } catch (const json::exception& e) {  // parse_error, or out_of_range for a number past double's range
        const std::string m = e.what();
        why += " (" + m.substr(0, 200) + ")";
      }
    }
    rec.error = where + ": the answer is " + why + " (" + std::to_string(body.size()) + " bytes: '" + body.substr(0, 80) +
                (body.size() > 80 ? "...'" : "'") + ")";
    return;
  }
  try {
    d.parse(j, chat, rec);
    extensions_parse(j, rec);
    record_limits_check(rec, lim);
  } catch (const response_error& e) {
    rec.error = where + ": unexpected answer: " + e.what();
    answer_clear(rec);
  }
  // Server metadata as the record keeps it: bounded in size and depth.
  if (const auto t = rec.timings.find("server"); t != rec.timings.end()) *t = json_bounded(*t, STORED_TIMINGS);
  rec.usage = json_bounded(rec.usage, STORED_USAGE);
  rec.finish_reason = text_bounded(rec.finish_reason, STORED_NAME);
  rec.chained_hash = text_bounded(rec.chained_hash, STORED_NAME);
  if (const json* fp = json_get(j, "system_fingerprint"); fp && fp->is_string())
    rec.target["fingerprint"] = text_bounded(fp->get<std::string>(), STORED_NAME);
}

namespace {

// Prometheus text format: "name{labels} value [timestamp]" lines; "#" lines are comments.
json metrics_parse(const std::string& text) {
  json out = json::object();
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t brace = line.find('{');
    const size_t key_end = brace != std::string::npos ? line.find('}', brace) + 1 : line.find_first_of(" \t");
    if (key_end == 0 || key_end == std::string::npos || key_end >= line.size()) continue;
    const char* v = line.c_str() + key_end;
    char* stop = nullptr;
    const double value = std::strtod(v, &stop);
    if (stop == v || !std::isfinite(value)) continue;
    out[line.substr(0, key_end)] = value;
  }
  return out;
}

int http_target::busy_now(std::vector<int>* ids) {
  const std::string source = caps().busy_source;
  if (source.empty()) return -1;
  // A server too busy to answer /slots within 2 s gives no reading this time; the request being
  // judged tells whether it is reachable. (Thrown from the poller's thread, an error here would
  // end the process.)
  http_response r;
  try {
    r = client_.get_once(source, 2.0, response_limits_get().max_body);
  } catch (const unreachable_error&) {
    return -1;
  } catch (const interrupted_error&) {
    return -1;
  }
  if (!r.ok()) return -1;
  if (source == "/metrics") {
    const json m = metrics_parse(r.body);
    for (auto it = m.begin(); it != m.end(); ++it) {
      const std::string& name = it.key();
      if (name.size() >= 19 && name.compare(name.size() - 19, 19, "requests_processing") == 0) {
        const double v = it.value().get<double>();
        return v >= 0 && v < 1e6 ? static_cast<int>(v) : -1;  // a count no server has is no reading
      }
    }
    return -1;
  }
  const json slots = json_bounded_parse(r);
  if (!slots.is_array()) return -1;
  int busy = 0;
  for (const json& s : slots) {
    const json* p = json_get(s, "is_processing");
    if (!p || !p->is_boolean() || !p->get<bool>()) continue;
    ++busy;
    const json* id = json_get(s, "id");
    if (ids && id && id->is_number_integer()) ids->push_back(id->get<int>());
  }
  return busy;
}

json http_target::metrics() {
  http_response r;
  try {  // counters are extra evidence: a /metrics that does not answer is none, not an unreachable target
    r = client_.get_once("/metrics", std::min(opt_.timeout_s, 10.0), response_limits_get().max_body);
  } catch (const unreachable_error&) {
    return json::object();
  }
  return r.ok() ? reports::redact_json(json_bounded(metrics_parse(r.body), STORED_RAW), opt_.api_key) : json::object();
}

// "http(s)://host[:port][/prefix]" without a trailing "/" or "/v1" (an OpenAI base URL works).
std::string url_normalise(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos || (url.compare(0, scheme, "http") != 0 && url.compare(0, scheme, "https") != 0))
    throw input_error("target '" + url + "': expected engine:PATH.gguf or an http:// or https:// URL");
  const size_t host = scheme + 3;
  const size_t auth_end = std::min(url.find('/', host), url.size());
  if (url.find('@', host) < auth_end)
    throw input_error("target URL: credentials in the URL (user:password@) are not accepted; pass the key with --api-key-env NAME");
  if (url.find_first_of("?#", host) != std::string::npos)
    throw input_error("target '" + url + "': a query or fragment is not accepted in a target URL");
  if (auth_end == host) throw input_error("target '" + url + "': the URL has no host");
  std::string out = url;
  while (out.size() > auth_end && out.back() == '/') out.pop_back();
  if (out.size() >= auth_end + 3 && out.compare(out.size() - 3, 3, "/v1") == 0) out.resize(out.size() - 3);
  return out;
}

}  // namespace

std::unique_ptr<target> target_make_http(const std::string& spec, const target_options& opt) {
  const std::string url = url_normalise(spec);
  auto stream_check = [&opt](http_api api) {
    if (opt.stream && !dialect_of(api).stream)
      throw input_error(std::string("--stream: ") + dialect_of(api).name +
                        " targets stream a format detaudit does not read; run without --stream");
    return api;
  };
  if (!opt.api.empty()) return std::make_unique<http_target>(spec, url, stream_check(dialect_parse(opt.api).api), opt, std::nullopt);
  const probe_reads p = probe_read(http_client(url, client_options(opt)));
  const http_api api = stream_check(detect(p, url));
  return std::make_unique<http_target>(spec, url, api, opt, caps_from(p, api, opt));
}

}  // namespace detaudit::probes
