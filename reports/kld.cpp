#include "reports/kld.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "util/error.h"

namespace detaudit::reports {
namespace {

// ln(p / q) * p, with p = 0 -> 0 and q floored.
double kl_term(double p, double q) {
  if (p <= 0) return 0;
  return p * std::log(p / std::max(q, KLD_FLOOR));
}

std::map<int32_t, double> known_probs(const kld_step_in& s) {
  std::map<int32_t, double> out;
  for (const auto& [id, lp] : s.top) out[id] = std::exp(lp);
  out[s.id] = std::exp(s.logprob);
  return out;
}

double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * double(sorted.size() - 1);
  const size_t i = static_cast<size_t>(pos);
  const double frac = pos - double(i);
  const size_t j = std::min(i + 1, sorted.size() - 1);
  return (1 - frac) * sorted[i] + frac * sorted[j];
}

struct accum {
  std::vector<double> kld;
  int64_t same_top = 0;
  double dp_sum = 0, dp_sq = 0;

  void add(const kld_step_in& a, const kld_step_in& b) {
    kld.push_back(kld_step(a, b));
    if (!a.top.empty() && !b.top.empty() && a.top[0].first == b.top[0].first) ++same_top;
    const double dp = std::exp(b.logprob) - std::exp(a.logprob);
    dp_sum += dp;
    dp_sq += dp * dp;
  }

  kld_stats stats() const {
    kld_stats s;
    s.n = static_cast<int64_t>(kld.size());
    if (s.n == 0) return s;
    std::vector<double> v = kld;
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double x : v) sum += x;
    s.kld_mean = sum / double(s.n);
    s.kld_median = percentile(v, 0.5);
    s.kld_p99 = percentile(v, 0.99);
    s.kld_p999 = percentile(v, 0.999);
    s.kld_max = v.back();
    s.same_top = double(same_top) / double(s.n);
    s.dp_mean = dp_sum / double(s.n);
    s.dp_rms = std::sqrt(dp_sq / double(s.n));
    return s;
  }
};

kld_step_in step_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw input_error(where + ": expected a step object, found " + std::string(j.type_name()));
  auto id = j.find("id");
  auto lp = j.find("logprob");
  auto top = j.find("top");
  if (id == j.end() || !id->is_number_integer()) throw input_error(where + ".id: expected a token id");
  if (lp == j.end() || !lp->is_number()) throw input_error(where + ".logprob: expected a number");
  if (top == j.end() || !top->is_array()) throw input_error(where + ".top: expected a list of [id, logprob]");
  kld_step_in s;
  s.id = id->get<int32_t>();
  s.logprob = lp->get<double>();
  for (const json& t : *top) {
    if (!t.is_array() || t.size() != 2 || !t[0].is_number_integer() || !t[1].is_number())
      throw input_error(where + ".top: expected [id, logprob] pairs, found " + t.dump());
    s.top.push_back({t[0].get<int32_t>(), t[1].get<double>()});
  }
  return s;
}

json stats_json(const kld_stats& s) {
  return {{"steps", s.n},           {"kld_mean", s.kld_mean}, {"kld_median", s.kld_median},
          {"kld_p99", s.kld_p99},   {"kld_p99_9", s.kld_p999}, {"kld_max", s.kld_max},
          {"same_top", s.same_top}, {"dp_mean", s.dp_mean},   {"dp_rms", s.dp_rms}};
}

std::string stats_row(const std::string& name, const kld_stats& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-8s %6lld %10.6f %10.6f %10.6f %10.6f %10.6f %8.2f%% %8.3f%% %8.3f%%\n",
                name.c_str(), static_cast<long long>(s.n), s.kld_mean, s.kld_median, s.kld_p99, s.kld_p999,
                s.kld_max, 100 * s.same_top, 100 * s.dp_mean, 100 * s.dp_rms);
  return buf;
}

std::string render_text(const kld_report& r) {
  std::string out = "KL divergence of B from A (nats, top-k approximation: see docs/lm-eval.md)\n";
  out += "  A: " + r.path_a + "\n  B: " + r.path_b + "\n\n";
  char head[256];
  std::snprintf(head, sizeof head, "%-8s %6s %10s %10s %10s %10s %10s %9s %9s %9s\n", "item", "steps", "mean KLD",
                "median", "99%", "99.9%", "max", "same top", "mean dp", "RMS dp");
  out += head;
  for (const kld_item& it : r.items) out += stats_row(std::to_string(it.index), it.stats);
  out += stats_row("all", r.overall);
  out += "\nsame top: the top-1 token agrees; dp: p_B - p_A of the scored token, in percentage points\n";
  for (const std::string& n : r.notes) out += "note: " + n + "\n";
  return out;
}

}  // namespace

double kld_step(const kld_step_in& a, const kld_step_in& b) {
  const std::map<int32_t, double> pa = known_probs(a);
  const std::map<int32_t, double> pb = known_probs(b);
  std::vector<int32_t> set;
  for (const auto& [id, lp] : a.top) set.push_back(id);
  if (std::find(set.begin(), set.end(), a.id) == set.end()) set.push_back(a.id);
  double reported_b = 0, p_last = 1;
  for (const auto& [id, p] : pb) reported_b += p;
  for (const auto& [id, lp] : b.top) p_last = std::min(p_last, std::exp(lp));
  const double rest_b = std::max(0.0, 1 - reported_b);
  int64_t missing = 0;
  for (int32_t id : set) missing += pb.count(id) == 0;
  const double estimate = std::min(p_last, rest_b / double(missing + 1));
  double sum_a = 0, sum_b = 0, kld = 0;
  for (int32_t id : set) {
    const double p = pa.at(id);
    auto f = pb.find(id);
    const double q = f != pb.end() ? f->second : estimate;
    sum_a += p;
    sum_b += q;
    kld += kl_term(p, q);
  }
  kld += kl_term(std::max(0.0, 1 - sum_a), std::max(0.0, 1 - sum_b));
  return kld;
}

std::vector<std::vector<kld_step_in>> kld_read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error("cannot open score file '" + path + "'");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw input_error(path + ": not JSON (" + std::string(e.what()) +
                      "); expected the output of 'detaudit score --json'");
  }
  auto items = j.is_object() ? j.find("items") : j.end();
  if (!j.is_object() || items == j.end() || !items->is_array())
    throw input_error(path + ": expected {\"items\": [...]} as 'detaudit score --json' writes it");
  std::vector<std::vector<kld_step_in>> out;
  for (size_t i = 0; i < items->size(); ++i) {
    const std::string where = path + ": items[" + std::to_string(i) + "]";
    const json& it = (*items)[i];
    auto steps = it.is_object() ? it.find("steps") : it.end();
    if (!it.is_object() || steps == it.end() || !steps->is_array())
      throw input_error(where + ".steps: expected a list");
    std::vector<kld_step_in> v;
    for (size_t k = 0; k < steps->size(); ++k)
      v.push_back(step_from_json((*steps)[k], where + ".steps[" + std::to_string(k) + "]"));
    out.push_back(std::move(v));
  }
  return out;
}

kld_report kld_compare(const std::vector<std::vector<kld_step_in>>& a, const std::vector<std::vector<kld_step_in>>& b) {
  if (a.size() != b.size())
    throw input_error("--kld: A has " + std::to_string(a.size()) + " item(s), B has " + std::to_string(b.size()) +
                      " (expected scores of the same items)");
  kld_report r;
  accum all;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size())
      throw input_error("--kld: item " + std::to_string(i) + ": A has " + std::to_string(a[i].size()) +
                        " steps, B has " + std::to_string(b[i].size()) + " (expected the same tokens)");
    accum one;
    for (size_t k = 0; k < a[i].size(); ++k) {
      if (a[i][k].id != b[i][k].id)
        throw input_error("--kld: item " + std::to_string(i) + " step " + std::to_string(k) + ": A scored token " +
                          std::to_string(a[i][k].id) + ", B token " + std::to_string(b[i][k].id) +
                          " (expected the same tokens)");
      one.add(a[i][k], b[i][k]);
      all.add(a[i][k], b[i][k]);
    }
    r.items.push_back({static_cast<int64_t>(i), one.stats()});
  }
  r.overall = all.stats();
  if (r.overall.n > 0 && !a.front().empty() && a.front().front().top.empty())
    r.notes.push_back("A reports no top-k log-probs: KLD covers only the scored token and the rest");
  return r;
}

kld_report kld_compare_files(const std::string& path_a, const std::string& path_b) {
  kld_report r = kld_compare(kld_read(path_a), kld_read(path_b));
  r.path_a = path_a;
  r.path_b = path_b;
  return r;
}

std::string kld_render(const kld_report& r, const std::string& format) {
  if (format == "text") return render_text(r);
  if (format != "json") throw input_error("--kld: --format: expected text or json, found '" + format + "'");
  json items = json::array();
  for (const kld_item& it : r.items) {
    json j = stats_json(it.stats);
    j["item"] = it.index;
    items.push_back(std::move(j));
  }
  json j = {{"a", r.path_a}, {"b", r.path_b}, {"kld_floor", KLD_FLOOR}, {"items", std::move(items)},
            {"overall", stats_json(r.overall)}, {"notes", r.notes}};
  return j.dump(2) + "\n";
}

}  // namespace detaudit::reports
