#include "reports/audit/stats.h"

#include <algorithm>
#include <cmath>

namespace detaudit::reports {

namespace {

double log_choose(int64_t n, int64_t k) {
  return std::lgamma(double(n) + 1) - std::lgamma(double(k) + 1) - std::lgamma(double(n - k) + 1);
}

// Sums exp(terms) stably: the largest term factored out.
template <typename F>
double sum_exp(int64_t from, int64_t to, F log_term) {
  if (from > to) return 0.0;
  double m = -HUGE_VAL;
  for (int64_t i = from; i <= to; ++i) m = std::max(m, log_term(i));
  if (m == -HUGE_VAL) return 0.0;
  double s = 0;
  for (int64_t i = from; i <= to; ++i) s += std::exp(log_term(i) - m);
  return std::exp(m) * s;
}

}  // namespace

double binomial_cdf(int64_t k, int64_t n, double p) {
  if (k < 0) return 0.0;
  if (k >= n) return 1.0;
  if (p <= 0) return 1.0;
  if (p >= 1) return 0.0;
  const double lp = std::log(p), lq = std::log1p(-p);
  const double s = sum_exp(0, k, [&](int64_t i) { return log_choose(n, i) + double(i) * lp + double(n - i) * lq; });
  return std::min(1.0, s);
}

double mcnemar_exact_p(int64_t b, int64_t c) {
  const int64_t n = b + c;
  if (n == 0) return 1.0;
  return std::min(1.0, 2.0 * binomial_cdf(std::min(b, c), n, 0.5));
}

double fisher_exact_greater_p(int64_t a, int64_t b, int64_t c, int64_t d) {
  const int64_t r1 = a + b, r2 = c + d, c1 = a + c, n = r1 + r2;
  if (n == 0) return 1.0;
  // X = group 1's "differ" count is hypergeometric: C(c1, x) C(n - c1, r1 - x) / C(n, r1).
  const int64_t hi = std::min(r1, c1);
  const double lden = log_choose(n, r1);
  const double s = sum_exp(a, hi, [&](int64_t x) {
    if (r1 - x > n - c1) return -HUGE_VAL;
    return log_choose(c1, x) + log_choose(n - c1, r1 - x) - lden;
  });
  return std::min(1.0, s);
}

interval wilson_95(int64_t k, int64_t n) {
  if (n <= 0) return {};
  const double z = 1.959963984540054, z2 = z * z, nn = double(n), p = double(k) / nn;
  const double den = 1 + z2 / nn;
  const double centre = (p + z2 / (2 * nn)) / den;
  const double half = z * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / den;
  // At k = 0 and k = n the limits are exactly 0 and 1; rounding would leave 1e-17 and 1 - 1e-16.
  return {k == 0 ? 0.0 : std::max(0.0, centre - half), k == n ? 1.0 : std::min(1.0, centre + half)};
}

double lmeval_stderr(int64_t k, int64_t n) {
  if (n < 2) return 0.0;
  const double p = double(k) / double(n);
  return std::sqrt(p * (1 - p) / double(n - 1));
}

}  // namespace detaudit::reports
