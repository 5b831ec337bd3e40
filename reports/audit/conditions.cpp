// The probe and condition tables, and each condition's judge of its evidence (see conditions.h).
#include "reports/audit/conditions.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

namespace detaudit::reports {
namespace {

std::optional<double> num(const json& o, const char* key) {
  if (!o.is_object()) return std::nullopt;
  auto it = o.find(key);
  if (it == o.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

bool is_false(const json& o, const char* key) {
  if (!o.is_object()) return false;
  auto it = o.find(key);
  return it != o.end() && it->is_boolean() && !it->get<bool>();
}

std::string json_text(const json& o, const char* key) {
  if (!o.is_object()) return "";
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string count_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

const char* NO_CACHE_REPORT = "the target does not report cached tokens (how many prompt tokens came from its cache)";

// Each request's end and its time alone: the item's first (single_ms, else alone's latency), then
// the fillers' (filler_single_ms, where known).
void burst_of(const record& base, const json& e, std::vector<double>& ends, std::vector<double>& singles) {
  if (auto it = e.find("end_ms"); it != e.end() && it->is_array())
    for (const json& v : *it) ends.push_back(v.is_number() ? v.get<double>() : std::nan(""));
  std::optional<double> alone_ms = num(e, "single_ms");  // min(alone, control), when the runner knew it
  if (!alone_ms) alone_ms = num(base.timings, "latency_ms");
  singles.assign(ends.size(), 0.0);
  if (!singles.empty() && alone_ms) singles[0] = *alone_ms;
  if (auto it = e.find("filler_single_ms"); it != e.end() && it->is_array())
    for (size_t k = 0; k < it->size() && k + 1 < singles.size(); ++k)
      if ((*it)[k].is_number()) singles[k + 1] = (*it)[k].get<double>();
}

// The end times decide where they can be read (the timing test, conditions.h): a server's word that
// slots were busy cannot overrule end times that do not show two requests processed together, and a
// slot count below 2 is evidence of its own. Busy slots decide only where there are no end times to read.
std::string judge_concurrent(const record& base, const record& r) {
  const json& e = r.evidence;
  if (is_false(e, "overlap")) return "the requests did not overlap in time";
  if (std::optional<double> w = num(e, "batch_width"))
    return *w >= 2 ? "" : "the request never shared a forward step (batch width 1)";
  std::vector<double> ends, singles;
  burst_of(base, e, ends, singles);
  const bool timed = ends.size() >= 2 && singles[0] > 0;
  const burst_timing timing = timed ? concurrency_timing(ends, singles) : TIMING_UNKNOWN;
  const std::optional<double> slots = num(e, "slots_busy_max");
  const std::string source = e.value("slots_source", std::string("the server"));
  if (slots && *slots < 2) return "at most one slot was busy at a time while the requests ran (" + source + ")";
  if (timing == TIMING_OVERLAP) return "";
  if (!timed) return slots ? "" : "no evidence that the requests shared forward steps (no batch width, busy slots or end times)";
  const std::string overruled = slots ? " although " + source + " showed " + count_text(*slots) + " slots busy: the end times decide" : "";
  if (timing == TIMING_QUEUE)
    return (slots ? "the end times form a queue (no request ended within another's time alone)"
                  : "the server may have answered the requests one after another (a queue): no request ended within "
                    "half another's time alone before that one's end") +
           overruled;
  const auto unknown = std::count_if(singles.begin(), singles.end(), [](double l) { return !(l > 0) || !std::isfinite(l); });
  return "the end times do not show two requests processed together (no request ended within half another's time "
         "alone; the time alone of " + std::to_string(unknown) + " request(s) is unknown, so a queue is not ruled out either)" +
         overruled;
}

std::string judge_cache_off(const record&, const record& r) {
  const std::optional<double> cached = num(r.evidence, "cached_tokens");
  if (!cached) return NO_CACHE_REPORT;
  if (*cached > 0) return count_text(*cached) + " prompt tokens came from the cache although cache_prompt was false";
  return "";
}

std::string judge_cache_on(const record&, const record& r) {
  const std::optional<double> cached = num(r.evidence, "cached_tokens");
  if (!cached) return NO_CACHE_REPORT;
  if (*cached <= 0) return "no tokens were served from the cache";
  return "";
}

std::string judge_ubatch(const record&, const record& r) {
  const std::optional<double> ub = num(r.evidence, "ubatch"), ua = num(r.evidence, "ubatch_alone");
  if (!ub || !ua) return "the micro-batch sizes compared are not recorded";
  std::optional<double> p = num(r.evidence, "prompt_tokens");
  if (!p) p = num(r.usage, "prompt_tokens");
  if (!p) return "the prompt's length in tokens is unknown";
  const double m = std::min(*ub, *ua);
  if (*p <= m) return "the prompt fits in one micro-batch of " + count_text(m) + " tokens: the same schedule as alone";
  return "";
}

std::string judge_spec_on(const record&, const record& r) {
  const std::optional<double> proposed = num(r.evidence, "draft_proposed");
  if (!proposed) return "the target does not report draft tokens";
  if (*proposed <= 0) return "no draft tokens were proposed for this request";
  return "";
}

std::string judge_spec_off(const record& base, const record& r) {
  const std::optional<double> on = num(base.evidence, "draft_proposed"), off = num(r.evidence, "draft_proposed");
  if (!on || !off) return "the target does not report draft tokens";
  if (*on <= 0) return "alone proposed no draft tokens: speculation was not on to begin with";
  if (*off > 0) return "draft tokens were still proposed with speculation off";
  return "";
}

}  // namespace

const std::vector<condition_def>& condition_table() {
  static const std::vector<condition_def> table = {
      {"alone", false, "base", "the item's request, alone", "-", PAIR_BASE, nullptr},
      {"control", false, "control", "the same request again, alone",
       "nothing to show: the pair measures run-to-run noise", PAIR_ALONE, nullptr},
      {"repeat", false, "repeat", "a third request alone", "nothing to show", PAIR_ALONE, nullptr},
      {"concurrent-", true, "concurrency", "the item beside N-1 filler requests released together from N threads",
       "the request shared a forward step with another: its own batch width >= 2 (engine, detaudit serve), else two "
       "or more slots busy together during the burst (llama.cpp /slots or /metrics), else end times unlike a queue's",
       PAIR_ALONE, judge_concurrent},
      {"cache-off", false, "cache", "cache_prompt: false", "cached tokens reported, and 0", PAIR_ALONE, judge_cache_off},
      {"cache-on", false, "cache", "cache_prompt: true", "cached tokens reported, more than 0", PAIR_ALONE, judge_cache_on},
      {"cache-warm", false, "cache", "cache_prompt: true, again right after cache-on",
       "cached tokens reported, more than 0", PAIR_ALONE, judge_cache_on},
      {"ubatch-", true, "batch", "engine targets: the same model with micro-batch N",
       "the prompt is longer than the smaller of the two micro-batches compared", PAIR_ALONE, judge_ubatch},
      {"spec-ngram", false, "speculation", "engine targets: n-gram speculative decoding on",
       "draft tokens proposed for this request", PAIR_ALONE, judge_spec_on},
      {"spec-off", false, "speculation", "engine targets: speculative decoding off (the spec has it on)",
       "alone proposed draft tokens, this request none", PAIR_ALONE, judge_spec_off},
      {"seed-fixed", false, "seed", "--seed-temperature with --seed, --seed-k times",
       "the target passed the seed check: the same seed twice gave the same answer, another seed another",
       PAIR_REP0, nullptr},
      {"seed-none", false, "seed", "--seed-temperature without a seed, --seed-k times",
       "nothing: answers may differ (the notes count distinct answers)", PAIR_NONE, nullptr},
  };
  return table;
}

const std::vector<probe_def>& probe_table() {
  static const std::vector<probe_def> table = {
      {"repeat", "a third request alone; the first request a target serves is marked cold"},
      {"concurrency", "the item beside N-1 other requests sent at the same moment (--concurrency N)"},
      {"cache", "prompt cache off, on, and warm (the same request again), where the target allows it"},
      {"batch", "engine targets: micro-batch 1 and 8192 against the target's own; servers: compare two --target"},
      {"speculation", "engine targets: n-gram speculative decoding on (or off when the spec has it on)"},
      {"seed", "--seed-k requests at --seed-temperature with --seed (must agree) and without (may differ)"},
      {"cross", "needs two --target: every condition is also compared target A against target B"},
      {"lint", "request and prompt pitfalls, listed before anything is sent; alone it sends nothing"},
  };
  return table;
}

const condition_def* condition_find(const std::string& condition) {
  for (const condition_def& c : condition_table()) {
    if (!c.numbered && condition == c.name) return &c;
    if (c.numbered && condition.size() > c.name.size() && condition.compare(0, c.name.size(), c.name) == 0 &&
        condition.find_first_not_of("0123456789", c.name.size()) == std::string::npos)
      return &c;
  }
  return nullptr;
}

bool probe_known(const std::string& probe) {
  const auto& t = probe_table();
  return std::any_of(t.begin(), t.end(), [&probe](const probe_def& p) { return p.name == probe; });
}

std::string probe_names_text() {
  std::string out;
  for (const probe_def& p : probe_table()) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

int probe_rank(const std::string& probe) {
  if (probe == "control") return 0;
  const auto& t = probe_table();
  for (size_t i = 0; i < t.size(); ++i)
    if (t[i].name == probe) return static_cast<int>(i) + 1;
  return static_cast<int>(t.size()) + 1;
}

std::string condition_not_exercised(const record& base, const record& r) {
  for (const record* x : {&r, &base})
    if (is_false(x->evidence, "exercised")) {
      auto it = x->evidence.find("reason");
      return it != x->evidence.end() && it->is_string() && !it->get<std::string>().empty()
                 ? it->get<std::string>()
                 : "the condition could not be applied";
    }
  const condition_def* c = condition_find(r.condition);
  return c && c->judge ? c->judge(base, r) : "";
}

burst_timing concurrency_timing(const std::vector<double>& end_ms, const std::vector<double>& single_ms) {
  bool all_known = end_ms.size() >= 2 && single_ms.size() == end_ms.size();
  for (size_t j = 0; j < end_ms.size(); ++j) {
    const double l = j < single_ms.size() ? single_ms[j] : 0;
    if (!std::isfinite(end_ms[j]) || !(l > 0) || !std::isfinite(l)) {
      all_known = false;
      continue;
    }
    const double from = end_ms[j] - QUEUE_SERVICE_SHARE * l;
    for (size_t k = 0; k < end_ms.size(); ++k)
      if (k != j && std::isfinite(end_ms[k]) && end_ms[k] > from && end_ms[k] <= end_ms[j]) return TIMING_OVERLAP;
  }
  return all_known ? TIMING_QUEUE : TIMING_UNKNOWN;
}

void evidence_fill_filler_latency(std::vector<record>& records) {
  std::map<std::pair<std::string, std::string>, double> single;  // (label, item) -> min(alone, control) latency
  for (const record& r : records) {
    if (!r.error.empty() || (r.condition != "alone" && r.condition != "control")) continue;
    const std::optional<double> l = num(r.timings, "latency_ms");
    if (!l || *l <= 0) continue;
    auto [it, fresh] = single.emplace(std::make_pair(json_text(r.target, "label"), r.item_id), *l);
    if (!fresh) it->second = std::min(it->second, *l);
  }
  for (record& r : records) {
    auto items = r.evidence.find("filler_items");
    if (items == r.evidence.end() || !items->is_array()) continue;
    json& ms = r.evidence["filler_single_ms"];
    if (!ms.is_array()) ms = json::array();
    while (ms.size() < items->size()) ms.push_back(nullptr);
    for (size_t k = 0; k < items->size(); ++k) {
      if (ms[k].is_number() || !(*items)[k].is_string()) continue;
      auto f = single.find({json_text(r.target, "label"), (*items)[k].get<std::string>()});
      if (f != single.end()) ms[k] = f->second;
    }
  }
}

}  // namespace detaudit::reports
