// The redaction rule (reports/audit/redact.h): matching by the key's 12-character windows.
#include "reports/audit/redact.h"

#include <algorithm>
#include <cctype>
#include <unordered_set>
#include <utility>
#include <vector>

namespace detaudit::reports {
namespace {

char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

std::string lowered(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), lower);
  return out;
}

bool credential_field(const std::string& key) {
  const std::string k = lowered(key);
  return k == "authorization" || k == "api_key" || k == "api-key" || k == "apikey" || k == "x-api-key";
}

// The byte ranges [begin, end) of `s` that match the secret, merged, in order.
std::vector<std::pair<size_t, size_t>> matches(std::string_view s, const std::string& secret) {
  std::vector<std::pair<size_t, size_t>> out;
  if (secret.empty() || s.size() < std::min(secret.size(), REDACT_MIN_MATCH)) return out;
  const std::string ls = lowered(s), key = lowered(secret);
  auto add = [&out](size_t b, size_t e) {
    if (!out.empty() && b <= out.back().second) out.back().second = std::max(out.back().second, e);
    else out.push_back({b, e});
  };
  if (key.size() < REDACT_MIN_MATCH) {  // a short key: whole matches only
    for (size_t p = ls.find(key); p != std::string::npos; p = ls.find(key, p + 1)) add(p, p + key.size());
    return out;
  }
  // Any stretch of 12 or more characters of the key holds one of its 12-character windows, and
  // overlapping windows of one stretch merge into its whole range.
  std::unordered_set<std::string_view> windows;
  for (size_t i = 0; i + REDACT_MIN_MATCH <= key.size(); ++i) windows.insert(std::string_view(key).substr(i, REDACT_MIN_MATCH));
  const std::string_view v(ls);
  for (size_t i = 0; i + REDACT_MIN_MATCH <= v.size(); ++i)
    if (windows.count(v.substr(i, REDACT_MIN_MATCH))) add(i, i + REDACT_MIN_MATCH);
  return out;
}

}  // namespace

std::string redact_text(std::string_view s, const std::string& secret) {
  const std::vector<std::pair<size_t, size_t>> m = matches(s, secret);
  if (m.empty()) return std::string(s);
  std::string out;
  size_t at = 0;
  for (const auto& [b, e] : m) {
    out.append(s.substr(at, b - at));
    out += REDACTED;
    at = e;
  }
  out.append(s.substr(at));
  return out;
}

bool redact_matches(std::string_view s, const std::string& secret) { return !matches(s, secret).empty(); }

json redact_json(const json& j, const std::string& secret) {
  if (j.is_string()) return redact_text(j.get_ref<const std::string&>(), secret);
  if (j.is_array()) {
    json out = json::array();
    for (const json& e : j) out.push_back(redact_json(e, secret));
    return out;
  }
  if (j.is_object()) {
    json out = json::object();
    for (const auto& [k, v] : j.items()) out[redact_text(k, secret)] = credential_field(k) ? json(REDACTED) : redact_json(v, secret);
    return out;
  }
  return j;
}

void record_redact(record& r, const std::string& secret) {
  if (secret.empty()) {
    r.request = redact_json(r.request, secret);  // credential fields only
    return;
  }
  for (std::string* s : {&r.run_id, &r.item_id, &r.probe, &r.condition, &r.endpoint, &r.prompt_sha256, &r.text, &r.reasoning, &r.logprobs_kind,
                         &r.chained_hash, &r.finish_reason, &r.reference, &r.grader, &r.error})
    *s = redact_text(*s, secret);
  for (json* j : {&r.target, &r.request, &r.usage, &r.timings, &r.evidence}) *j = redact_json(*j, secret);
  for (token_rec& t : r.tokens) {
    t.text = redact_text(t.text, secret);
    if (!t.bytes.empty()) {
      const std::string b(t.bytes.begin(), t.bytes.end());
      if (redact_matches(b, secret)) {
        const std::string red = redact_text(b, secret);
        t.bytes.assign(red.begin(), red.end());
      }
    }
  }
  for (std::vector<alt_rec>& step : r.top_logprobs)
    for (alt_rec& a : step) a.token = redact_text(a.token, secret);
}

}  // namespace detaudit::reports
