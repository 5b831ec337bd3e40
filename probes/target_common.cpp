// What every target shares: target_make()'s dispatch, the capabilities' JSON form and their
// redaction (by reports/audit/redact.h's rule).
#include <algorithm>
#include <atomic>
#include <cctype>

#include "probes/target.h"
#include "probes/target_engine.h"
#include "probes/target_http.h"
#include "reports/audit/redact.h"
#include "util/error.h"

namespace detaudit::probes {
namespace {

std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "run_interrupt() is called from a signal handler");

}  // namespace

void run_interrupt() noexcept { g_interrupted.store(true, std::memory_order_relaxed); }
bool run_interrupted() noexcept { return g_interrupted.load(std::memory_order_relaxed); }
void run_interrupt_reset() noexcept { g_interrupted.store(false, std::memory_order_relaxed); }

json llamacpp_settings(const gen_request& r) {
  json b = json::object();
  b["n_predict"] = r.n_predict;
  b["temperature"] = r.temperature;
  if (r.seed) b["seed"] = *r.seed;
  if (r.top_p) b["top_p"] = *r.top_p;
  if (r.top_k) b["top_k"] = *r.top_k;
  if (r.cache_prompt) b["cache_prompt"] = *r.cache_prompt;
  if (r.speculative) b["speculative"] = *r.speculative;
  if (r.id_slot >= 0) b["id_slot"] = r.id_slot;
  if (!r.stop.empty()) b["stop"] = r.stop;
  return b;
}

json capabilities_to_json(const capabilities& c) {
  return {{"reachable", c.reachable},
          {"token_ids", c.token_ids},
          {"cache_control", c.cache_control},
          {"logit_hashes", c.logit_hashes},
          {"metrics", c.metrics},
          {"seed", c.seed},
          {"logprob_cap", c.logprob_cap},
          {"logprobs_kind", c.logprobs_kind},
          {"build", c.build},
          {"fingerprint", c.fingerprint},
          {"model", c.model},
          {"model_sha256", c.model_sha256},
          {"n_slots", c.n_slots},
          {"busy_source", c.busy_source},
          {"chat_template_fallback", c.chat_template_fallback},
          {"eos_token", c.eos_token},
          {"raw", c.raw}};
}

capabilities capabilities_redact(capabilities c, const std::string& secret) {
  for (std::string* s : {&c.logprobs_kind, &c.build, &c.fingerprint, &c.model, &c.model_sha256, &c.busy_source, &c.chat_template,
                         &c.chat_template_fallback, &c.eos_token})
    *s = reports::redact_text(*s, secret);
  c.raw = reports::redact_json(c.raw, secret);
  return c;
}

std::unique_ptr<target> target_make(const std::string& spec, const target_options& opt) {
  for (unsigned char c : opt.api_key)
    if (c < 0x20 || c == 0x7f)  // would end the Authorization header and start another; the key is not shown
      throw input_error("--api-key-env: the key holds a control character (a line break?); it cannot be sent in a header");
  if (spec.rfind("engine:", 0) == 0) return target_make_engine(spec, opt);
  if (spec.rfind("http://", 0) == 0 || spec.rfind("https://", 0) == 0) return target_make_http(spec, opt);
  throw input_error("--target '" + spec + "': expected engine:PATH.gguf[?key=value&...] or an http:// or https:// URL");
}

}  // namespace detaudit::probes
