#include "reports/audit/kld.h"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>

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

// A token id of the vocabulary: an integer 0 .. 2^31 - 1 (a larger one would wrap when stored).
int32_t id_from_json(const json& v, const std::string& where) {
  const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= INT32_MAX
                    : v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX;
  if (!fits)
    throw input_error(where + ": expected a token id (an integer 0 to 2147483647), found " + v.dump());
  return static_cast<int32_t>(v.get<int64_t>());
}

// A log-prob: finite and not above 0 (a probability above 1 is no distribution), beyond rounding.
double logprob_from_json(const json& v, const std::string& where) {
  const double x = v.is_number() ? v.get<double>() : std::nan("");
  if (!std::isfinite(x) || x > KLD_LOGPROB_SLACK)
    throw input_error(where + ": expected a log-prob (a finite number <= 0), found " + v.dump());
  return std::min(x, 0.0);
}

kld_step_in step_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw input_error(where + ": expected a step object, found " + std::string(j.type_name()));
  auto id = j.find("id");
  auto lp = j.find("logprob");
  auto top = j.find("top");
  if (id == j.end()) throw input_error(where + ".id: expected a token id");
  if (lp == j.end()) throw input_error(where + ".logprob: expected a number");
  if (top == j.end() || !top->is_array()) throw input_error(where + ".top: expected a list of [id, logprob]");
  kld_step_in s;
  s.id = id_from_json(*id, where + ".id");
  s.logprob = logprob_from_json(*lp, where + ".logprob");
  for (const json& t : *top) {
    if (!t.is_array() || t.size() != 2) throw input_error(where + ".top: expected [id, logprob] pairs, found " + t.dump());
    s.top.push_back({id_from_json(t[0], where + ".top"), logprob_from_json(t[1], where + ".top")});
  }
  return s;
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

kld_point kld_point_of(const kld_step_in& a, const kld_step_in& b) {
  kld_point p;
  p.kld = kld_step(a, b);
  p.nll_a = -a.logprob;
  p.nll_b = -b.logprob;
  p.dp = std::exp(b.logprob) - std::exp(a.logprob);
  p.same_top = !a.top.empty() && !b.top.empty() && a.top[0].first == b.top[0].first;
  return p;
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
  size_t n_steps = 0;
  for (size_t i = 0; i < items->size(); ++i) {
    const std::string where = path + ": items[" + std::to_string(i) + "]";
    const json& it = (*items)[i];
    auto steps = it.is_object() ? it.find("steps") : it.end();
    if (!it.is_object() || steps == it.end() || !steps->is_array())
      throw input_error(where + ".steps: expected a list");
    std::vector<kld_step_in> v;
    for (size_t k = 0; k < steps->size(); ++k)
      v.push_back(step_from_json((*steps)[k], where + ".steps[" + std::to_string(k) + "]"));
    n_steps += v.size();
    out.push_back(std::move(v));
  }
  if (n_steps == 0)
    throw input_error(path + ": no scored step (an empty 'items' list, or items without steps): nothing to compare");
  return out;
}

namespace {

void compare_notes(kld_report& r, const std::vector<std::vector<kld_step_in>>& a) {
  const int64_t n = r.overall.n;
  if (n > 0 && !a.front().empty() && a.front().front().top.empty())
    r.notes.push_back("A reports no top-k log-probs: KLD covers only the scored token and the rest");
  if (n < KLD_MIN_STEPS_LLAMA)
    r.notes.push_back(std::to_string(n) + " step(s): llama-perplexity prints this summary only from " +
                      std::to_string(KLD_MIN_STEPS_LLAMA) + " positions on; these figures rest on few steps");
  if (n <= 10)
    r.notes.push_back("10 steps or fewer: the +- of the means, of RMS dp and of the perplexities are 0, as "
                      "llama-perplexity's uncertainty gives them (it needs 11 positions)");
  r.notes.push_back("no item-level flips or McNemar p: a score file holds scored tokens and log-probs, no answer "
                    "or reference to grade; compare two graded runs or two lm-eval sample files for flips");
}

}  // namespace

kld_report kld_compare(const std::vector<std::vector<kld_step_in>>& a, const std::vector<std::vector<kld_step_in>>& b) {
  if (a.size() != b.size())
    throw input_error("--kld: A has " + std::to_string(a.size()) + " item(s), B has " + std::to_string(b.size()) +
                      " (expected scores of the same items)");
  kld_report r;
  std::vector<kld_point> all;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size())
      throw input_error("--kld: item " + std::to_string(i) + ": A has " + std::to_string(a[i].size()) +
                        " steps, B has " + std::to_string(b[i].size()) + " (expected the same tokens)");
    std::vector<kld_point> one;
    for (size_t k = 0; k < a[i].size(); ++k) {
      if (a[i][k].id != b[i][k].id)
        throw input_error("--kld: item " + std::to_string(i) + " step " + std::to_string(k) + ": A scored token " +
                          std::to_string(a[i][k].id) + ", B token " + std::to_string(b[i][k].id) +
                          " (expected the same tokens)");
      one.push_back(kld_point_of(a[i][k], b[i][k]));
    }
    all.insert(all.end(), one.begin(), one.end());
    r.items.push_back({static_cast<int64_t>(i), kld_summarize(one)});
  }
  r.overall = kld_summarize(all);
  compare_notes(r, a);
  return r;
}

kld_report kld_compare_files(const std::string& path_a, const std::string& path_b) {
  kld_report r = kld_compare(kld_read(path_a), kld_read(path_b));
  r.path_a = path_a;
  r.path_b = path_b;
  return r;
}

namespace {

// Step k of a generated response as a scored step: the sampled token, its log-prob (its own, else
// its entry in the top list) and the top list; nullopt when a token id or that log-prob is missing.
std::optional<kld_step_in> generated_step(const record& r, size_t k) {
  if (k >= r.tokens.size() || k >= r.top_logprobs.size() || r.top_logprobs[k].empty()) return std::nullopt;
  const token_rec& t = r.tokens[k];
  if (t.id < 0) return std::nullopt;
  kld_step_in s;
  s.id = t.id;
  std::optional<double> lp = t.logprob;
  for (const alt_rec& e : r.top_logprobs[k]) {
    if (e.id < 0) return std::nullopt;
    s.top.push_back({e.id, e.logprob});
    if (!lp && e.id == t.id) lp = e.logprob;
  }
  if (!lp) return std::nullopt;
  s.logprob = *lp;
  return s;
}

bool presampling_with_ids(const record& r) {
  return r.error.empty() && r.logprobs_kind == "pre-sampling" && !r.tokens.empty() && r.tokens[0].id >= 0 &&
         !r.top_logprobs.empty() && !r.top_logprobs[0].empty() && r.top_logprobs[0][0].id >= 0;
}

}  // namespace

bool kld_points_shared(const record& a, const record& b, std::vector<kld_point>& out) {
  if (!presampling_with_ids(a) || !presampling_with_ids(b)) return false;
  for (size_t k = 0; k < a.tokens.size() && k < b.tokens.size(); ++k) {
    const token_rec &ta = a.tokens[k], &tb = b.tokens[k];
    // Where the sampled tokens part there is no common scored token, and no common context after.
    if (ta.id != tb.id || ta.text != tb.text || ta.bytes != tb.bytes) break;
    const std::optional<kld_step_in> sa = generated_step(a, k), sb = generated_step(b, k);
    if (!sa || !sb) break;
    out.push_back(kld_point_of(*sa, *sb));
  }
  return true;
}

}  // namespace detaudit::reports
