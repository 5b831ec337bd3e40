// What every target shares: target_make()'s dispatch, the capabilities' JSON form, and secret
// redaction of what gets recorded.
#include <algorithm>
#include <atomic>
#include <cctype>

#include "probes/target.h"
#include "probes/target_engine.h"
#include "probes/target_http.h"
#include "util/error.h"

namespace detaudit::probes {
namespace {

std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "run_interrupt() is called from a signal handler");

const char* k_redacted = "[REDACTED]";

bool secret_key(const std::string& key) {
  std::string k = key;
  std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return k == "authorization" || k == "api_key" || k == "api-key" || k == "x-api-key";
}

}  // namespace

void run_interrupt() noexcept { g_interrupted.store(true, std::memory_order_relaxed); }
bool run_interrupted() noexcept { return g_interrupted.load(std::memory_order_relaxed); }
void run_interrupt_reset() noexcept { g_interrupted.store(false, std::memory_order_relaxed); }

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
          {"raw", c.raw}};
}

json redact(const json& j, const std::string& secret) {
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    return !secret.empty() && s.find(secret) != std::string::npos ? json(k_redacted) : j;
  }
  if (j.is_array()) {
    json out = json::array();
    for (const json& e : j) out.push_back(redact(e, secret));
    return out;
  }
  if (j.is_object()) {
    json out = json::object();
    for (const auto& [k, v] : j.items()) out[k] = secret_key(k) ? json(k_redacted) : redact(v, secret);
    return out;
  }
  return j;
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
