// kld_summarize and kld_render: the figures llama-perplexity's KL-divergence mode prints, from the
// per-step points of reports/audit/kld.cpp, and their text and JSON forms. Formulas: reports/audit/kld.h.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>
#include <utility>

#include "reports/audit/kld.h"
#include "util/error.h"

namespace detaudit::reports {
namespace {

using ordered_json = nlohmann::ordered_json;

// Linear interpolation between the sorted values at position q * (n - 1). q = 0.5 gives the middle
// value, or the mean of the middle two.
double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * double(sorted.size() - 1);
  const size_t i = static_cast<size_t>(pos);
  const double frac = pos - double(i);
  const size_t j = std::min(i + 1, sorted.size() - 1);
  return (1 - frac) * sorted[i] + frac * sorted[j];
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / double(v.size());
}

// sum (x - mean x)(y - mean y) / (n (n - 1)): the covariance of the two means, 0 unless n > 10
// (llama-perplexity's threshold for every uncertainty). With x = y, the squared standard error.
double mean_cov(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = x.size();
  if (n <= 10) return 0;
  const double mx = mean(x), my = mean(y);
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += (x[i] - mx) * (y[i] - my);
  return s / (double(n) * double(n - 1));
}

double mean_unc(const std::vector<double>& x) { return std::sqrt(std::max(0.0, mean_cov(x, x))); }

// The square root of a variance that rounding may leave a hair below 0.
double sqrt0(double v) { return std::sqrt(std::max(0.0, v)); }

// The percentiles llama-perplexity prints, and where each goes.
struct percentile_field {
  double q;
  double kld_stats::*field;
};
constexpr percentile_field KLD_PERCENTILES[] = {
    {0.999, &kld_stats::kld_p999}, {0.99, &kld_stats::kld_p99}, {0.95, &kld_stats::kld_p95},
    {0.90, &kld_stats::kld_p90},   {0.5, &kld_stats::kld_median}, {0.10, &kld_stats::kld_p10},
    {0.05, &kld_stats::kld_p5},    {0.01, &kld_stats::kld_p1},  {0.001, &kld_stats::kld_p01}};
constexpr percentile_field DP_PERCENTILES[] = {
    {0.999, &kld_stats::dp_p999}, {0.99, &kld_stats::dp_p99}, {0.95, &kld_stats::dp_p95},
    {0.90, &kld_stats::dp_p90},   {0.75, &kld_stats::dp_p75}, {0.5, &kld_stats::dp_median},
    {0.25, &kld_stats::dp_p25},   {0.10, &kld_stats::dp_p10}, {0.05, &kld_stats::dp_p5},
    {0.01, &kld_stats::dp_p1},    {0.001, &kld_stats::dp_p01}};

// Sorts `v` and fills its percentiles; returns (min, max).
template <size_t N>
std::pair<double, double> fill_percentiles(kld_stats& s, std::vector<double>& v, const percentile_field (&fields)[N]) {
  std::sort(v.begin(), v.end());
  for (const percentile_field& f : fields) s.*f.field = percentile(v, f.q);
  return {v.front(), v.back()};
}

void kld_figures(kld_stats& s, std::vector<double> kld) {
  s.kld_mean = mean(kld);
  s.kld_mean_unc = mean_unc(kld);
  std::tie(s.kld_min, s.kld_max) = fill_percentiles(s, kld, KLD_PERCENTILES);
}

void dp_figures(kld_stats& s, std::vector<double> dp) {
  s.dp_mean = mean(dp);
  s.dp_mean_unc = mean_unc(dp);
  std::vector<double> sq;
  for (double x : dp) sq.push_back(x * x);
  s.dp_rms = std::sqrt(mean(sq));
  s.dp_rms_unc = s.dp_rms > 0 ? 0.5 / s.dp_rms * mean_unc(sq) : 0;
  std::tie(s.dp_min, s.dp_max) = fill_percentiles(s, dp, DP_PERCENTILES);
}

void ppl_figures(kld_stats& s, const std::vector<double>& nll_a, const std::vector<double>& nll_b) {
  const double ua = mean_unc(nll_a), ub = mean_unc(nll_b);
  s.ppl_a = std::exp(mean(nll_a));
  s.ppl_a_unc = s.ppl_a * ua;
  s.ppl_b = std::exp(mean(nll_b));
  s.ppl_b_unc = s.ppl_b * ub;
  s.ln_ppl_cov = mean_cov(nll_a, nll_b);
  s.ln_ppl_cor = ua > 0 && ub > 0 ? std::optional<double>(s.ln_ppl_cov / (ua * ub)) : std::nullopt;
  s.ln_ppl_ratio = mean(nll_b) - mean(nll_a);
  s.ln_ppl_ratio_unc = sqrt0(ub * ub + ua * ua - 2 * s.ln_ppl_cov);
  s.ppl_ratio = std::exp(s.ln_ppl_ratio);
  s.ppl_ratio_unc = s.ppl_ratio * s.ln_ppl_ratio_unc;
  s.ppl_diff = s.ppl_b - s.ppl_a;
  s.ppl_diff_unc = sqrt0(s.ppl_b_unc * s.ppl_b_unc + s.ppl_a_unc * s.ppl_a_unc - 2 * s.ppl_b * s.ppl_a * s.ln_ppl_cov);
}

}  // namespace

kld_stats kld_summarize(const std::vector<kld_point>& points) {
  kld_stats s;
  s.n = static_cast<int64_t>(points.size());
  if (s.n == 0) return s;
  std::vector<double> kld, dp, nll_a, nll_b;
  int64_t same = 0;
  for (const kld_point& p : points) {
    kld.push_back(p.kld);
    dp.push_back(p.dp);
    nll_a.push_back(p.nll_a);
    nll_b.push_back(p.nll_b);
    same += p.same_top;
  }
  kld_figures(s, std::move(kld));
  dp_figures(s, std::move(dp));
  ppl_figures(s, nll_a, nll_b);
  s.same_top = double(same) / double(s.n);
  s.same_top_unc = s.n > 1 ? std::sqrt(s.same_top * (1 - s.same_top) / double(s.n - 1)) : 0;
  return s;
}

ordered_json kld_stats_json(const kld_stats& s) {
  ordered_json o;
  o["steps"] = s.n;
  const std::pair<const char*, double> figures[] = {
      {"ppl_b", s.ppl_b}, {"ppl_b_unc", s.ppl_b_unc}, {"ppl_a", s.ppl_a}, {"ppl_a_unc", s.ppl_a_unc},
      {"ln_ppl_cov", s.ln_ppl_cov}};
  for (const auto& [k, v] : figures) o[k] = v;
  o["ln_ppl_cor"] = s.ln_ppl_cor ? ordered_json(*s.ln_ppl_cor) : ordered_json(nullptr);
  const std::pair<const char*, double> rest[] = {
      {"ln_ppl_ratio", s.ln_ppl_ratio}, {"ln_ppl_ratio_unc", s.ln_ppl_ratio_unc}, {"ppl_ratio", s.ppl_ratio},
      {"ppl_ratio_unc", s.ppl_ratio_unc}, {"ppl_diff", s.ppl_diff}, {"ppl_diff_unc", s.ppl_diff_unc},
      {"kld_mean", s.kld_mean}, {"kld_mean_unc", s.kld_mean_unc}, {"kld_max", s.kld_max}, {"kld_p99_9", s.kld_p999},
      {"kld_p99", s.kld_p99}, {"kld_p95", s.kld_p95}, {"kld_p90", s.kld_p90}, {"kld_median", s.kld_median},
      {"kld_p10", s.kld_p10}, {"kld_p5", s.kld_p5}, {"kld_p1", s.kld_p1}, {"kld_p0_1", s.kld_p01},
      {"kld_min", s.kld_min}, {"dp_mean", s.dp_mean}, {"dp_mean_unc", s.dp_mean_unc}, {"dp_max", s.dp_max},
      {"dp_p99_9", s.dp_p999}, {"dp_p99", s.dp_p99}, {"dp_p95", s.dp_p95}, {"dp_p90", s.dp_p90},
      {"dp_p75", s.dp_p75}, {"dp_median", s.dp_median}, {"dp_p25", s.dp_p25}, {"dp_p10", s.dp_p10},
      {"dp_p5", s.dp_p5}, {"dp_p1", s.dp_p1}, {"dp_p0_1", s.dp_p01}, {"dp_min", s.dp_min}, {"dp_rms", s.dp_rms},
      {"dp_rms_unc", s.dp_rms_unc}, {"same_top", s.same_top}, {"same_top_unc", s.same_top_unc}};
  for (const auto& [k, v] : rest) o[k] = v;
  return o;
}

namespace {

std::string fmt(const char* format, double x, double y = 0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, format, x, y);
  return buf;
}

std::string stats_row(const std::string& name, const kld_stats& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-8s %6lld %10.6f %10.6f %10.6f %10.6f %10.6f %8.2f%% %8.3f%% %8.3f%%\n",
                name.c_str(), static_cast<long long>(s.n), s.kld_mean, s.kld_median, s.kld_p99, s.kld_p999,
                s.kld_max, 100 * s.same_top, 100 * s.dp_mean, 100 * s.dp_rms);
  return buf;
}

// llama-perplexity's final block, label for label (B is its Q, A its base), so that the two can be
// read side by side.
std::string llama_block(const kld_stats& s) {
  std::string out = "====== Perplexity statistics ======\n";
  out += "Mean PPL(Q)                   : " + fmt("%10.6f \u00b1 %10.6f\n", s.ppl_b, s.ppl_b_unc);
  out += "Mean PPL(base)                : " + fmt("%10.6f \u00b1 %10.6f\n", s.ppl_a, s.ppl_a_unc);
  out += "Cor(ln(PPL(Q)), ln(PPL(base))): " +
         (s.ln_ppl_cor ? fmt("%6.2f%%\n", 100 * *s.ln_ppl_cor) : std::string("   n/a (an uncertainty is 0)\n"));
  out += "Mean ln(PPL(Q)/PPL(base))     : " + fmt("%10.6f \u00b1 %10.6f\n", s.ln_ppl_ratio, s.ln_ppl_ratio_unc);
  out += "Mean PPL(Q)/PPL(base)         : " + fmt("%10.6f \u00b1 %10.6f\n", s.ppl_ratio, s.ppl_ratio_unc);
  out += "Mean PPL(Q)-PPL(base)         : " + fmt("%10.6f \u00b1 %10.6f\n", s.ppl_diff, s.ppl_diff_unc);
  out += "\n====== KL divergence statistics ======\n";
  out += "Mean    KLD: " + fmt("%10.6f \u00b1 %10.6f\n", s.kld_mean, s.kld_mean_unc);
  const std::pair<const char*, double> kld[] = {
      {"Maximum", s.kld_max}, {"99.9%  ", s.kld_p999}, {"99.0%  ", s.kld_p99}, {"95.0%  ", s.kld_p95},
      {"90.0%  ", s.kld_p90}, {"Median ", s.kld_median}, {"10.0%  ", s.kld_p10}, {" 5.0%  ", s.kld_p5},
      {" 1.0%  ", s.kld_p1}, {" 0.1%  ", s.kld_p01}, {"Minimum", s.kld_min}};
  for (const auto& [label, v] : kld) out += std::string(label) + " KLD: " + fmt("%10.6f\n", v);
  out += "\n====== Token probability statistics ======\n";
  out += "Mean    \u0394p: " + fmt("%6.3f \u00b1 %5.3f %%\n", 100 * s.dp_mean, 100 * s.dp_mean_unc);
  const std::pair<const char*, double> dp[] = {
      {"Maximum", s.dp_max}, {"99.9%  ", s.dp_p999}, {"99.0%  ", s.dp_p99}, {"95.0%  ", s.dp_p95},
      {"90.0%  ", s.dp_p90}, {"75.0%  ", s.dp_p75},  {"Median ", s.dp_median}, {"25.0%  ", s.dp_p25},
      {"10.0%  ", s.dp_p10}, {" 5.0%  ", s.dp_p5},   {" 1.0%  ", s.dp_p1},     {" 0.1%  ", s.dp_p01},
      {"Minimum", s.dp_min}};
  for (const auto& [label, v] : dp) out += std::string(label) + " \u0394p: " + fmt("%6.3f%%\n", 100 * v);
  out += "RMS \u0394p    : " + fmt("%6.3f \u00b1 %5.3f %%\n", 100 * s.dp_rms, 100 * s.dp_rms_unc);
  out += "Same top p: " + fmt("%6.3f \u00b1 %5.3f %%\n", 100 * s.same_top, 100 * s.same_top_unc);
  return out;
}

std::string render_text(const kld_report& r) {
  std::string out = "KL divergence of B from A (nats, top-k approximation: see docs/lm-eval.md)\n";
  out += "  A: " + r.path_a + " (llama-perplexity's base)\n  B: " + r.path_b + " (its Q)\n\n";
  char head[256];
  std::snprintf(head, sizeof head, "%-8s %6s %10s %10s %10s %10s %10s %9s %9s %9s\n", "item", "steps", "mean KLD",
                "median", "99%", "99.9%", "max", "same top", "mean dp", "RMS dp");
  out += head;
  for (const kld_item& it : r.items) out += stats_row(std::to_string(it.index), it.stats);
  out += stats_row("all", r.overall);
  out += "\nsame top: the top-1 token agrees; dp: p_B - p_A of the scored token, in percentage points\n\n";
  out += "over all " + std::to_string(r.overall.n) + " steps, as llama-perplexity's KL-divergence mode prints it:\n\n";
  out += llama_block(r.overall);
  if (!r.notes.empty()) out += "\n";
  for (const std::string& n : r.notes) out += "note: " + n + "\n";
  return out;
}

}  // namespace

std::string kld_render(const kld_report& r, const std::string& format) {
  if (format == "text") return render_text(r);
  if (format != "json") throw input_error("--kld: --format: expected text or json, found '" + format + "'");
  ordered_json items = ordered_json::array();
  for (const kld_item& it : r.items) {
    ordered_json j;
    j["item"] = it.index;
    j.update(kld_stats_json(it.stats));
    items.push_back(std::move(j));
  }
  ordered_json j;
  j["a"] = r.path_a;
  j["b"] = r.path_b;
  j["kld_floor"] = KLD_FLOOR;
  j["items"] = std::move(items);
  j["overall"] = kld_stats_json(r.overall);
  j["notes"] = r.notes;
  return j.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace detaudit::reports
