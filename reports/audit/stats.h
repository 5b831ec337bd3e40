// The statistics the reports state: exact binomial and hypergeometric tails, McNemar's exact test,
// Fisher's exact test, Wilson score intervals and lm-evaluation-harness's standard error of a mean.
// Each is a plain function of counts, computed in log space so that thousands of items stay exact to
// double precision; tests/unit/test_reports_stats.cpp checks them against published values.
//
// Non-goals: tests beyond the ones the reports state, effect sizes, multiple-comparison corrections
// (docs/reports.md says how to read several p-values at once).
#pragma once

#include <cstdint>

namespace detaudit::reports {

// P(X <= k) for X ~ Binomial(n, p). k < 0 gives 0, k >= n gives 1. Requires 0 <= p <= 1, n >= 0.
double binomial_cdf(int64_t k, int64_t n, double p);

// McNemar's exact test, two-sided, on the discordant pairs of one pair of graded runs: b items went
// right->wrong, c went wrong->right. p = min(1, 2 * P(X <= min(b, c))), X ~ Binomial(b + c, 1/2).
// No discordant pair gives 1; one gives 1.
double mcnemar_exact_p(int64_t b, int64_t c);

// Fisher's exact test, one-sided (greater), on the 2x2 table
//           differ   agree
//   group 1   a        b
//   group 2   c        d
// the probability, with every margin fixed, of a table whose group-1 "differ" count is at least a:
// small when group 1 differs more often than group 2. All counts >= 0.
double fisher_exact_greater_p(int64_t a, int64_t b, int64_t c, int64_t d);

// The Wilson score interval for k successes in n trials at the 95% level (z = 1.959963984540054).
// n = 0 gives [0, 1].
struct interval {
  double lo = 0, hi = 1;
};
interval wilson_95(int64_t k, int64_t n);

// lm-evaluation-harness's standard error of an accuracy: the sample standard deviation of the 0/1
// scores over sqrt(n), i.e. sqrt(p (1 - p) / (n - 1)). n < 2 gives 0.
double lmeval_stderr(int64_t k, int64_t n);

}  // namespace detaudit::reports
