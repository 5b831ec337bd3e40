// Run identity diffs (see identity.h).
#include "reports/audit/identity.h"

#include <map>

namespace detaudit::reports {
namespace {

// Leaves of j under `path`, arrays of objects with a "label" keyed by that label, other arrays
// kept whole (a probe list is one value).
void flatten(const json& j, const std::string& path, std::map<std::string, json>& out) {
  if (j.is_object()) {
    if (j.empty() && !path.empty()) out[path] = j;
    for (const auto& [k, v] : j.items()) flatten(v, path.empty() ? k : path + "." + k, out);
    return;
  }
  if (j.is_array() && !j.empty()) {
    bool labelled = true;
    for (const json& e : j) labelled = labelled && e.is_object() && e.contains("label") && e["label"].is_string();
    if (labelled) {
      for (const json& e : j) {
        json rest = e;
        rest.erase("label");
        flatten(rest, path + "." + e["label"].get<std::string>(), out);
      }
      return;
    }
  }
  out[path] = j;
}

std::string value_text(const json& v) {
  if (v.is_null()) return "(none)";
  std::string s = v.is_string() ? v.get<std::string>() : v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return v.is_string() ? "'" + s + "'" : s;
}

}  // namespace

std::vector<identity_difference> identity_diff(const json& a, const json& b) {
  std::map<std::string, json> fa, fb;
  flatten(a.is_object() ? a : json::object(), "", fa);
  flatten(b.is_object() ? b : json::object(), "", fb);
  std::map<std::string, std::pair<json, json>> both;
  for (const auto& [k, v] : fa) both[k].first = v;
  for (const auto& [k, v] : fb) both[k].second = v;
  std::vector<identity_difference> out;
  for (const auto& [k, v] : both)
    if (v.first != v.second) out.push_back({k, v.first, v.second});
  return out;
}

std::string identity_difference_text(const identity_difference& d) {
  return d.field + ": " + value_text(d.a) + " vs " + value_text(d.b);
}

json identity_of(const json& manifest) {
  if (!manifest.is_object()) return json::object();
  auto it = manifest.find("identity");
  return it != manifest.end() && it->is_object() ? *it : json::object();
}

bool identity_is_request_setting(const identity_difference& d) { return d.field.rfind("request.", 0) == 0; }

}  // namespace detaudit::reports
