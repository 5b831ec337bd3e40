// The engine target: the built-in engine in process, behind the same serving scheduler that
// `detaudit serve` runs, so concurrent complete() calls share forward steps exactly as concurrent
// HTTP requests to the server do.
//
// Goals: a request is prepared as the server prepares it (a raw prompt tokenized as /completion
// does for a string, a chat rendered as /v1/chat/completions renders it, sampling fields read by
// the server's own field readers), and answered with everything an audit compares: token ids,
// pre-sampling top log-probs, per-step logit hashes, cache and draft counters.
// Non-goals: HTTP; a model other than the one file in the spec (variants share the loaded model).
#include "probes/target_engine.h"

#include "reports/audit/redact.h"
#include "reports/audit/steps.h"

#include <charconv>
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>
#include <utility>

#include "chat/chat_template.h"
#include "model/model.h"
#include "runtime/generate.h"
#include "runtime/hashes.h"
#include "runtime/request_fields.h"
#include "runtime/scheduler.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace detaudit::probes {
namespace {

constexpr int64_t SLOT_CTX_MAX = 2048;  // default context per slot: min(trained, this)

// The settings of one engine spec, in the order they were given (a variant rewrites one).
struct engine_settings {
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;
  runtime::numerics_mode numerics = runtime::NUMERICS_EXACT;
  runtime::backend_kind backend = runtime::BACKEND_CPU;
  int device = 0;
  int threads = 1;
  int64_t ubatch = 512;
  bool spec_ngram = false;
  int64_t ctx = 0;  // total context; 0: np * min(trained, SLOT_CTX_MAX)
  int np = 8;
  std::string chat_template;  // "" = detected from the model
};


void setting_apply(engine_settings& s, const std::string& spec, const std::string& key, const std::string& v) {
  if (key == "numerics") s.numerics = runtime::numerics_from_name(v);
  else if (key == "backend") s.backend = runtime::backend_from_name(v);
  else if (key == "device") s.device = static_cast<int>(engine_setting_int("target '" + spec + "'", key, v, 0, 255));
  else if (key == "threads") s.threads = static_cast<int>(engine_setting_int("target '" + spec + "'", key, v, 1, 1024));
  else if (key == "ubatch") s.ubatch = engine_setting_int("target '" + spec + "'", key, v, 1, 1 << 20);
  else if (key == "ctx") s.ctx = engine_setting_int("target '" + spec + "'", key, v, 0, int64_t{1} << 24);
  else if (key == "np") s.np = static_cast<int>(engine_setting_int("target '" + spec + "'", key, v, 1, 256));
  else if (key == "chat_template") s.chat_template = v;
  else if (key == "spec") {
    if (v != "ngram" && v != "none") throw input_error("target '" + spec + "': spec must be ngram or none, found '" + v + "'");
    s.spec_ngram = v == "ngram";
  } else {
    throw input_error("target '" + spec + "': unknown engine setting '" + key +
                      "' (expected numerics, backend, device, threads, ubatch, spec, ctx, np, chat_template)");
  }
}

engine_settings settings_parse(const std::string& spec, const target_options& opt) {
  engine_settings s;
  s.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  s.np = std::max(opt.n_parallel, 8);
  const engine_spec_parts parts = engine_spec_split(spec, "target '" + spec + "'");
  s.path = parts.path;
  for (const auto& [k, v] : parts.query) {
    setting_apply(s, spec, k, v);
    s.query.emplace_back(k, v);
  }
  return s;
}

std::string settings_spec(const engine_settings& s) {
  std::string out = "engine:" + s.path;
  for (size_t i = 0; i < s.query.size(); ++i) out += (i == 0 ? "?" : "&") + s.query[i].first + "=" + s.query[i].second;
  return out;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

uint64_t random_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32 | rd()) & 0x7fffffffffffffffull;
}

class engine_target : public target {
 public:
  engine_target(engine_settings s, std::shared_ptr<const model::model> m) : s_(std::move(s)), m_(std::move(m)) {
    runtime::scheduler_params p;
    p.ctx.numerics = s_.numerics;
    p.ctx.backend = s_.backend;
    p.ctx.device = s_.device;
    p.ctx.n_threads = s_.threads;
    p.ctx.n_ubatch = s_.ubatch;
    const int64_t trained = m_->hp().n_ctx_train > 0 ? m_->hp().n_ctx_train : SLOT_CTX_MAX;
    p.ctx.n_ctx = s_.ctx > 0 ? s_.ctx : s_.np * std::min(trained, SLOT_CTX_MAX);
    p.n_slots = s_.np;
    p.n_queue = 64 * s_.np;
    p.spec = s_.spec_ngram ? runtime::SPEC_NGRAM : runtime::SPEC_NONE;
    sched_ = std::make_unique<runtime::scheduler>(m_, p);
    spec_ = settings_spec(s_);
  }

  std::string spec() const override { return spec_; }
  std::string dialect() const override { return "engine"; }
  capabilities probe() override;
  reports::record complete(const gen_request& r) override;
  json metrics() override;
  std::unique_ptr<target> variant(const std::string& key, const std::string& value) const override;

 private:
  json settings_json() const;
  std::string fingerprint() const;
  json body_make(const gen_request& r) const;
  runtime::request request_make(const json& body, reports::record& rec) const;
  std::vector<int32_t> chat_tokens(const json& messages) const;
  void result_fill(const runtime::request_result& res, int n_probs, reports::record& rec) const;

  engine_settings s_;
  std::shared_ptr<const model::model> m_;
  std::unique_ptr<runtime::scheduler> sched_;
  std::string spec_;
};

json engine_target::settings_json() const {
  const runtime::scheduler_params& p = sched_->params();
  return {{"numerics", runtime::numerics_name(s_.numerics)},
          {"backend", runtime::backend_name(s_.backend)},
          {"device", sched_->device_description()},
          {"threads", s_.threads},
          {"ubatch", s_.ubatch},
          {"spec", s_.spec_ngram ? "ngram" : "none"},
          {"np", s_.np},
          {"ctx", p.ctx.n_ctx}};
}

std::string engine_target::fingerprint() const {
  return std::string("detaudit-") + DETAUDIT_VERSION + "-" + runtime::numerics_name(s_.numerics) + "-" +
         m_->sha256().substr(0, 16);
}

capabilities engine_target::probe() {
  capabilities c;
  c.reachable = true;
  c.token_ids = true;
  c.cache_control = true;
  c.logit_hashes = true;
  c.metrics = true;
  c.seed = true;
  c.logprob_cap = static_cast<int>(m_->vocab().size());
  c.logprobs_kind = "pre-sampling";
  c.build = std::string("detaudit ") + DETAUDIT_VERSION;
  c.fingerprint = fingerprint();
  c.model = std::filesystem::path(s_.path).filename().string();
  c.model_sha256 = m_->sha256();
  c.n_slots = s_.np;
  if (chat::chat_fallback_family(s_.chat_template, m_->chat_template())) c.chat_template_fallback = "chatml";
  c.chat_template = std::string(m_->vocab().chat_template());
  if (const int32_t eos = m_->vocab().ids().eos; eos >= 0 && eos < m_->vocab().size()) c.eos_token = m_->vocab().token_text(eos);
  c.raw = settings_json();
  c.raw["path"] = s_.path;
  c.raw["slot_ctx"] = sched_->slot_n_ctx();
  return c;
}

// The request as the engine takes it: llama.cpp /completion field names, plus "messages" for a
// chat and the engine's settings; gen_request::extra merged last.
json engine_target::body_make(const gen_request& r) const {
  json b = llamacpp_settings(r);
  if (!r.messages.empty()) {
    json msgs = json::array();
    for (const chat_message& m : r.messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
    b["messages"] = std::move(msgs);
  } else {
    b["prompt"] = r.prompt;
  }
  b["n_probs"] = r.n_probs;
  if (r.extra.is_object()) b.update(r.extra);
  b["engine"] = settings_json();
  return b;
}

// Rendered as serve's /v1/chat/completions renders messages.
std::vector<int32_t> engine_target::chat_tokens(const json& messages) const {
  if (!messages.is_array() || messages.empty()) throw runtime::request_error(400, "field 'messages': expected a non-empty array");
  std::vector<chat::chat_message> msgs;
  for (const json& m : messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") || !m["content"].is_string())
      throw runtime::request_error(400, "field 'messages': expected {\"role\", \"content\"} strings");
    msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  try {
    return runtime::generate_chat_tokens(*m_, msgs, s_.chat_template);
  } catch (const input_error& e) {
    throw input_error(std::string(e.what()) + " (engine target: add chat_template=NAME to the spec, or send raw prompts with --raw)");
  }
}

// Throws runtime::request_error or input_error for a field the server would reject.
runtime::request engine_target::request_make(const json& body, reports::record& rec) const {
  runtime::request q;
  if (body.contains("messages")) q.prompt = chat_tokens(body["messages"]);
  else q.prompt = runtime::generate_tokenize(m_->vocab(), runtime::field_string(body, "prompt", ""));
  if (q.prompt.empty()) throw runtime::request_error(400, "field 'prompt': empty prompt");
  if (!body.contains("seed") || body["seed"].is_null()) {
    q.sampling.seed = random_seed();
    rec.evidence["seed_drawn"] = q.sampling.seed;
  }
  runtime::completion_fields_parse(body, *sched_, q);  // as detaudit serve's /completion reads them
  q.logit_hashes = true;
  return q;
}

void engine_target::result_fill(const runtime::request_result& res, int n_probs, reports::record& rec) const {
  const runtime::generate_result& g = res.gen;
  const tokenizer::vocab& v = m_->vocab();
  rec.text = g.text;
  for (const runtime::generated_token& t : g.tokens) {
    reports::token_rec tr;
    tr.id = t.id;
    tr.text = t.piece;
    if (tokenizer::utf8_sanitize(t.piece) != t.piece) tr.bytes.assign(t.piece.begin(), t.piece.end());
    std::vector<reports::alt_rec> alts;
    for (const runtime::token_logprob& e : t.top) {
      if (e.id == t.id) tr.logprob = e.logprob;
      alts.push_back({e.id, tokenizer::token_to_piece(v, e.id, true), e.logprob});
    }
    if (n_probs > 0) rec.top_logprobs.push_back(std::move(alts));
    rec.tokens.push_back(std::move(tr));
    rec.logit_hashes.push_back(t.logit_hash);
  }
  rec.logprobs_kind = n_probs > 0 ? "pre-sampling" : "";
  rec.chained_hash = runtime::hash_hex(g.chained_hash);
  rec.finish_reason = runtime::finish_reason_name(g.finish);
  rec.usage = {{"prompt_tokens", static_cast<int64_t>(g.prompt_tokens.size())},
               {"completion_tokens", static_cast<int64_t>(g.tokens.size())},
               {"cached_tokens", res.n_cached}};
  rec.evidence["cached_tokens"] = res.n_cached;
  rec.evidence["draft_proposed"] = res.n_draft_proposed;
  rec.evidence["draft_accepted"] = res.n_draft_accepted;
  rec.evidence["batch_width"] = res.max_seqs_in_step;
  rec.evidence["slot"] = res.slot;
  rec.timings["engine"] = runtime::timings_json(g.timings, res.n_cached);
}

reports::record engine_target::complete(const gen_request& r) {
  reports::record rec;
  rec.request = body_make(r);
  const double t_start = unix_now();
  rec.timings = {{"t_start", t_start}};
  auto finish = [&rec, t_start]() {
    // A credential field of --request (api_key, Authorization, ...) is never recorded, here as on
    // an HTTP target (docs/records.md, "Secrets"); the engine has no key of its own to look for.
    rec.request = reports::redact_json(rec.request, "");
    const double t_end = unix_now();
    rec.timings["t_end"] = t_end;
    rec.timings["latency_ms"] = (t_end - t_start) * 1000.0;
    return rec;
  };
  runtime::request q;
  try {
    q = request_make(rec.request, rec);
  } catch (const runtime::request_error& e) {
    rec.error = e.what();
    rec.http_status = e.status();
  } catch (const input_error& e) {
    rec.error = e.what();
    rec.http_status = 400;
  }
  if (!rec.error.empty()) {
    rec.finish_reason = "error";
    return finish();
  }
  const int n_probs = q.n_probs;
  const std::optional<runtime::request_result> out =
      sched_->run(std::move(q), [](const runtime::token_event&) { return !run_interrupted(); });  // Ctrl-C cancels
  if (!out) {
    rec.error = "engine busy: request queue full";
    rec.http_status = 503;
    rec.finish_reason = "error";
    return finish();
  }
  const runtime::request_result& res = *out;
  rec.http_status = res.http_status;
  if (!res.error.empty()) {
    rec.error = res.error;
    rec.finish_reason = "error";
    return finish();
  }
  result_fill(res, n_probs, rec);
  reports::record_normalise(rec);
  return finish();
}

json engine_target::metrics() {
  const runtime::metrics_snapshot s = sched_->metrics();
  return {{"requests_total", s.requests_total},
          {"requests_rejected", s.requests_rejected},
          {"requests_cancelled", s.requests_cancelled},
          {"requests_active", s.requests_active},
          {"requests_waiting", s.requests_waiting},
          {"prompt_tokens_total", s.prompt_tokens_total},
          {"prompt_tokens_cached", s.prompt_tokens_cached},
          {"generated_tokens_total", s.generated_tokens_total},
          {"max_seqs_in_step", s.max_seqs_in_step},
          {"max_tokens_in_step", s.max_tokens_in_step},
          {"steps_total", s.steps_total},
          {"draft_proposed_total", s.draft_proposed_total},
          {"draft_accepted_total", s.draft_accepted_total}};
}

std::unique_ptr<target> engine_target::variant(const std::string& key, const std::string& value) const {
  if (key != "ubatch" && key != "spec" && key != "numerics" && key != "threads") return nullptr;
  engine_settings s = s_;
  setting_apply(s, spec_, key, value);
  bool replaced = false;
  for (auto& kv : s.query)
    if (kv.first == key) {
      kv.second = value;
      replaced = true;
    }
  if (!replaced) s.query.emplace_back(key, value);
  return std::make_unique<engine_target>(std::move(s), m_);
}

}  // namespace

int64_t engine_setting_int(const std::string& what, const std::string& key, const std::string& v, int64_t lo, int64_t hi) {
  int64_t out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size() || out < lo || out > hi)
    throw input_error(what + ": " + key + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                      "], found '" + v + "'");
  return out;
}

engine_spec_parts engine_spec_split(const std::string& spec, const std::string& what) {
  const std::string prefix = "engine:";
  if (spec.rfind(prefix, 0) != 0) throw input_error(what + ": an engine spec starts with 'engine:'");
  engine_spec_parts out;
  const std::string rest = spec.substr(prefix.size());
  const size_t q = rest.find('?');
  out.path = rest.substr(0, q);
  if (out.path.empty()) throw input_error(what + ": expected engine:PATH.gguf");
  if (q == std::string::npos) return out;
  const std::string query = rest.substr(q + 1);
  size_t pos = 0;
  while (pos <= query.size()) {
    const size_t amp = std::min(query.find('&', pos), query.size());
    const std::string kv = query.substr(pos, amp - pos);
    pos = amp + 1;
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) throw input_error(what + ": expected KEY=VALUE, found '" + kv + "'");
    out.query.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return out;
}

std::unique_ptr<target> target_make_engine(const std::string& spec, const target_options& opt) {
  engine_settings s = settings_parse(spec, opt);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(s.path, ec))
    throw input_error("target '" + spec + "': model file '" + s.path + "' not found");
  std::shared_ptr<const model::model> m = model::model::load(s.path);
  return std::make_unique<engine_target>(std::move(s), std::move(m));
}

}  // namespace detaudit::probes
