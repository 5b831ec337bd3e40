// reports/stats: every function against values worked out by hand (exact fractions) or published
// (Fisher's tea-tasting table; Newcombe 1998, Table I, for Wilson intervals).
#include <doctest/doctest.h>

#include <cmath>
#include <initializer_list>

#include "reports/audit/stats.h"

using namespace detaudit::reports;

TEST_CASE("stats: binomial tails are exact fractions") {
  CHECK(binomial_cdf(2, 10, 0.5) == doctest::Approx(56.0 / 1024).epsilon(1e-12));      // (1 + 10 + 45) / 2^10
  CHECK(binomial_cdf(0, 3, 0.25) == doctest::Approx(27.0 / 64).epsilon(1e-12));        // (3/4)^3
  CHECK(binomial_cdf(1, 3, 0.25) == doctest::Approx(54.0 / 64).epsilon(1e-12));        // + 3 (1/4)(3/4)^2
  CHECK(binomial_cdf(-1, 5, 0.5) == 0.0);
  CHECK(binomial_cdf(5, 5, 0.5) == 1.0);
  CHECK(binomial_cdf(0, 5, 0.0) == 1.0);
  CHECK(binomial_cdf(4, 5, 1.0) == 0.0);
  // Large n stays finite and exact where the terms underflow: P(X <= 0) for n = 2000 is 2^-2000.
  CHECK(binomial_cdf(1000, 2000, 0.5) > 0.5);
  CHECK(binomial_cdf(1000, 2000, 0.5) < 0.51);
}

TEST_CASE("stats: McNemar's exact test, two-sided") {
  CHECK(mcnemar_exact_p(0, 0) == 1.0);
  CHECK(mcnemar_exact_p(1, 0) == 1.0);  // one discordant pair proves nothing
  CHECK(mcnemar_exact_p(0, 1) == 1.0);
  CHECK(mcnemar_exact_p(10, 2) == doctest::Approx(158.0 / 4096).epsilon(1e-12));  // 2 (1 + 12 + 66) / 2^12
  CHECK(mcnemar_exact_p(2, 10) == mcnemar_exact_p(10, 2));
  CHECK(mcnemar_exact_p(5, 0) == doctest::Approx(2.0 / 32).epsilon(1e-12));
  CHECK(mcnemar_exact_p(3, 3) == 1.0);  // 2 * P(X <= 3 | n = 6) = 2 * 42/64 > 1
}

TEST_CASE("stats: Fisher's exact test, one-sided, on the tea-tasting table and its edges") {
  // Fisher's lady tasting tea: 3 of 4 milk-first cups named right. P = (16 + 1) / 70.
  CHECK(fisher_exact_greater_p(3, 1, 1, 3) == doctest::Approx(17.0 / 70).epsilon(1e-12));
  CHECK(fisher_exact_greater_p(4, 0, 0, 4) == doctest::Approx(1.0 / 70).epsilon(1e-12));
  CHECK(fisher_exact_greater_p(0, 4, 4, 0) == doctest::Approx(1.0).epsilon(1e-12));
  // 8 of 64 items differ under a condition, 0 of 64 between repetitions: C(120,56) / C(128,64).
  CHECK(fisher_exact_greater_p(8, 56, 0, 64) == doctest::Approx(0.0030958642767920487).epsilon(1e-10));
  CHECK(fisher_exact_greater_p(0, 10, 0, 10) == 1.0);  // nothing differs anywhere
  CHECK(fisher_exact_greater_p(0, 0, 0, 0) == 1.0);
}

TEST_CASE("stats: Wilson 95% intervals match Newcombe's published table") {
  // Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I, method 3.
  struct row {
    int64_t k, n;
    double lo, hi;
  };
  for (row r : {row{81, 263, 0.2553, 0.3662}, row{15, 148, 0.0624, 0.1605}, row{0, 20, 0.0, 0.1611},
                row{1, 29, 0.0061, 0.1718}}) {
    CAPTURE(r.k);
    CAPTURE(r.n);
    interval w = wilson_95(r.k, r.n);
    CHECK(std::fabs(w.lo - r.lo) < 6e-5);
    CHECK(std::fabs(w.hi - r.hi) < 6e-5);
  }
  interval none = wilson_95(0, 0);
  CHECK(none.lo == 0.0);
  CHECK(none.hi == 1.0);
  interval all = wilson_95(10, 10);
  CHECK(all.hi == 1.0);
  CHECK(std::fabs(all.lo - 0.7225) < 1e-4);  // the mirror of 0/10's upper limit, 0.2775
}

TEST_CASE("stats: lm-eval's standard error is the sample standard deviation over sqrt(n)") {
  CHECK(lmeval_stderr(1, 2) == doctest::Approx(0.5).epsilon(1e-12));   // scores 1, 0: sd 0.7071, / sqrt 2
  CHECK(lmeval_stderr(3, 4) == doctest::Approx(0.25).epsilon(1e-12));  // sd sqrt(0.25), / 2
  CHECK(lmeval_stderr(0, 10) == 0.0);
  CHECK(lmeval_stderr(1, 1) == 0.0);
}
