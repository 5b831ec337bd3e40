// Hand-built oracle figures for the oracle's tests (tests/unit/test_oracle*.cpp): an exact step,
// a response of such steps with its fidelity figures set outright, a greedy record, and the lookup
// of a pair and a row of a report.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "reports/audit/record.h"
#include "reports/compare.h"
#include "reports/oracle.h"

namespace detaudit::oracle_test {

// An exact step: the chosen token's log-prob and rank, the best token's, the runner-up's.
inline reports::oracle_step st(int32_t id, double lp, int rank, int32_t best, double best_lp, double second_lp) {
  reports::oracle_step s;
  s.id = id;
  s.token = "t" + std::to_string(id);
  s.logprob = lp;
  s.rank = rank;
  s.best_id = best;
  s.best_token = "t" + std::to_string(best);
  s.best_logprob = best_lp;
  s.second_logprob = second_lp;
  return s;
}

// A response of these steps whose largest |server - exact| is fid_max and whose precision (half
// its largest spread) is fid_max too: two values, one fid_max above exact, one below.
inline reports::oracle_response resp(std::vector<reports::oracle_step> steps, double fid_max = 0.01,
                                     const std::string& prompt = "p1") {
  reports::oracle_response o;
  o.alignment = "ids";
  o.prompt_hash = prompt;
  o.prompt_tokens = 4;
  o.steps = std::move(steps);
  o.fid_n = 2;
  o.fid_sum = fid_max;
  o.fid_max = fid_max;
  o.spread_n = 1;
  o.spread_max = 2 * fid_max;
  return o;
}

inline reports::record greedy(reports::record r) {
  r.temperature = 0.0;
  if (r.condition == "concurrent-8") r.evidence = {{"overlap", true}, {"batch_width", 8}};
  return r;
}

inline const reports::pair_summary& pair_of(const reports::report& r, const std::string& cond_b) {
  for (const reports::pair_summary& p : r.pairs)
    if (p.cond_b == cond_b) return p;
  FAIL("no pair with " << cond_b);
  return r.pairs.front();
}

inline const reports::pair_item& row_of(const reports::pair_summary& p, const std::string& item) {
  for (const reports::pair_item& row : p.rows)
    if (row.item_id == item) return row;
  FAIL("no row " << item);
  return p.rows.front();
}

}  // namespace detaudit::oracle_test
