// The top-k KL divergence of hand-made steps against values worked out by hand. `detaudit compare
// --kld` on score files (a hand-made pair, two quantizations of one synthetic model scored by
// `detaudit score`): tests/e2e/test_reports_kld.cpp.
#include <doctest/doctest.h>

#include "reports/kld.h"
#include "test_reports_util.h"

using namespace detaudit;
using test::kld::step;

TEST_CASE("kld step: the top-k KL divergence matches values worked out by hand") {
  // Both sides report tokens 1 and 2. S = {1, 2}, rest = 1 - 0.8 = 0.2 on both sides.
  // KLD = 0.5 ln(0.5/0.4) + 0.3 ln(0.3/0.4) + 0.2 ln(0.2/0.2)
  //     = 0.5 * 0.2231435513 + 0.3 * (-0.2876820725) + 0 = 0.0252671539
  CHECK(reports::kld_step(step(1, {{1, 0.5}, {2, 0.3}}), step(1, {{1, 0.4}, {2, 0.4}})) ==
        doctest::Approx(0.0252671539).epsilon(1e-8));
  // B does not report token 2: p_last = 0.2, rest_B = 1 - 0.9 = 0.1, m = 1, so
  // P_B(2) = min(0.2, 0.1 / 2) = 0.05 and P_B(rest) = 1 - 0.75 = 0.25; P_A(rest) = 0.1.
  // KLD = 0.6 ln(0.6/0.7) + 0.3 ln(0.3/0.05) + 0.1 ln(0.1/0.25)
  //     = -0.0924904079 + 0.5375278408 - 0.0916290732 = 0.3534083597
  CHECK(reports::kld_step(step(1, {{1, 0.6}, {2, 0.3}}), step(1, {{1, 0.7}, {3, 0.2}})) ==
        doctest::Approx(0.3534083597).epsilon(1e-8));
  // The same distribution: exactly zero.
  const reports::kld_step_in s = step(4, {{4, 0.7}, {9, 0.1}});
  CHECK(reports::kld_step(s, s) == 0.0);
}

