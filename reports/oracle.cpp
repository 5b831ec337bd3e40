// What the reports make of the oracle's figures: verdicts per divergent row, fidelity per condition,
// pair and run (reports/oracle.h states the rules; reports/audit/oracle_data.h owns the file).
#include "reports/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "reports/audit/file_write.h"
#include "reports/audit/steps.h"
#include "reports/audit/utf8.h"
#include "reports/compare.h"
#include "reports/compare_internal.h"
#include "util/error.h"

namespace detaudit::reports {
namespace {

// Per-condition accumulation of fidelity.
struct fid_acc {
  int64_t n = 0, equal = 0, kl_n = 0, responses = 0, off_argmax = 0, spread_n = 0;
  double sum = 0, max = 0, kl_sum = 0, spread_max = 0;
  void add(const oracle_response& o) {
    if (!o.skipped.empty()) return;
    ++responses;
    n += o.fid_n;
    sum += o.fid_sum;
    max = std::max(max, o.fid_max);
    spread_n += o.spread_n;
    spread_max = std::max(spread_max, o.spread_max);
    equal += o.fid_equal;
    kl_n += o.kl_n;
    kl_sum += o.kl_sum;
  }
  oracle_fidelity get() const {
    oracle_fidelity f;
    f.n = n;
    f.mean = n > 0 ? sum / static_cast<double>(n) : 0;
    f.max = max;
    f.equal = equal;
    f.kl_n = kl_n;
    f.kl_mean = kl_n > 0 ? kl_sum / static_cast<double>(kl_n) : 0;
    f.responses = responses;
    f.off_argmax = off_argmax;
    return f;
  }
};

json fidelity_json(const oracle_fidelity& f) {
  json j = {{"values", f.n}, {"equal", f.equal}, {"responses", f.responses}, {"off_argmax", f.off_argmax}};
  j["mean"] = f.n > 0 ? json(f.mean) : json(nullptr);
  j["max"] = f.n > 0 ? json(f.max) : json(nullptr);
  j["kl_mean"] = f.kl_n > 0 ? json(f.kl_mean) : json(nullptr);
  return j;
}

bool greedy(const record& r) { return r.temperature && *r.temperature <= 0; }

// Whether a greedy response has a step whose token is below the exact best by more than `bound`.
bool response_off_argmax(const record& r, const oracle_response& o, double bound) {
  if (!greedy(r) || !o.skipped.empty()) return false;
  for (const oracle_step& s : o.steps)
    if (s.best_logprob - s.logprob > bound) return true;
  return false;
}

std::string num_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// The server's own numbers at step k of `r`: its best reported alternative's log-prob minus its
// reported log-prob of its token, and that alternative's text (row_oracle::own_gap_a). Its token's
// log-prob is the one it reported, else that of the alternative naming its token (by id, else by
// text); a token it left out of its own list of alternatives is below every one of them, so the gap
// is at least the best minus the last listed (`unlisted`). Only where step k is the server's token k
// (not retokenized) and its log-probs are pre-sampling.
struct own_numbers {
  double gap = 0;
  std::string best;
  bool unlisted = false;
};
std::optional<own_numbers> own_gap(const record& r, const oracle_response& o, size_t k) {
  if (o.alignment == "retokenized" || r.logprobs_kind != "pre-sampling" || k >= r.tokens.size() ||
      k >= r.top_logprobs.size())
    return std::nullopt;
  const token_rec& t = r.tokens[k];
  const alt_rec *best = nullptr, *last = nullptr, *self = nullptr;
  for (const alt_rec& a : r.top_logprobs[k]) {
    if (!oracle_logprob_usable(a.logprob)) continue;
    if (!best || a.logprob > best->logprob) best = &a;
    if (!last || a.logprob < last->logprob) last = &a;
    if (!self && ((t.id >= 0 && a.id >= 0) ? a.id == t.id : a.token == t.text)) self = &a;
  }
  if (!best) return std::nullopt;
  if (t.logprob && oracle_logprob_usable(*t.logprob)) return own_numbers{best->logprob - *t.logprob, best->token, false};
  if (self) return own_numbers{best->logprob - self->logprob, best->token, false};
  return own_numbers{best->logprob - last->logprob, best->token, true};
}

// Each side's exact gap and own gap against the bound, then the class (reports/oracle.h).
void classify(row_oracle& o, const pair_item& row, const oracle_response& oa, const oracle_response& ob) {
  const size_t k = static_cast<size_t>(o.step);
  if (const auto g = own_gap(*row.a, oa, k)) {
    o.own_gap_a = g->gap;
    o.own_best_a = g->best;
    o.own_unlisted_a = g->unlisted;
  }
  if (const auto g = own_gap(*row.b, ob, k)) {
    o.own_gap_b = g->gap;
    o.own_best_b = g->best;
    o.own_unlisted_b = g->unlisted;
  }
  const double gap_a = o.argmax_logprob - *o.logprob_a, gap_b = o.argmax_logprob - *o.logprob_b;
  const bool a_top = gap_a <= ORACLE_EXACT_BOUND, b_top = gap_b <= ORACLE_EXACT_BOUND;
  o.argmax_side = a_top && b_top ? "both" : a_top ? "a" : b_top ? "b" : "neither";
  o.off_a = gap_a > o.bound || (o.own_gap_a && *o.own_gap_a > o.bound);
  o.off_b = gap_b > o.bound || (o.own_gap_b && *o.own_gap_b > o.bound);
  if (!o.off_a && !o.off_b) o.cls = "near-tie";
  else if (o.off_a && o.off_b) o.cls = "both-off";
  else if ((o.off_a && greedy(*row.a)) || (o.off_b && greedy(*row.b))) o.cls = "server-error";
  else o.cls = "sampled";
}

// The verdict at step k, where the two sides' ids first differ.
void judge_step(row_oracle& o, const pair_item& row, const oracle_response& oa, const oracle_response& ob, size_t k) {
  const oracle_step& sa = oa.steps[k];
  const oracle_step& sb = ob.steps[k];
  o.id_a = sa.id;
  o.id_b = sb.id;
  o.token_a = sa.token;
  o.token_b = sb.token;
  o.logprob_a = sa.logprob;
  o.logprob_b = sb.logprob;
  o.rank_a = sa.rank;
  o.rank_b = sb.rank;
  o.argmax_id = sa.best_id;
  o.argmax_token = sa.best_token;
  o.argmax_logprob = sa.best_logprob;
  o.margin = sa.best_logprob - sa.second_logprob;
  if (sa.best_id != sb.best_id || sa.best_logprob != sb.best_logprob) {
    // Same prompt tokens and the same tokens before this step: the exact engine must have given
    // the same distribution. It did not, so nothing it says here can be trusted.
    o.note = "the exact engine gave two distributions for one context at this step (best " +
             std::to_string(sa.best_id) + " vs " + std::to_string(sb.best_id) + "): report this as a detaudit bug";
    o.logprob_a.reset();
    o.logprob_b.reset();
    return;
  }
  for (const oracle_response* x : {&oa, &ob})
    if (!x->note.empty()) o.note += (o.note.empty() ? "" : "; ") + std::string(x == &oa ? "side A: " : "side B: ") + x->note;
  classify(o, row, oa, ob);
}

row_oracle judge(const pair_item& row, const oracle_response* oa, const oracle_response* ob, double bound) {
  row_oracle o;
  o.bound = bound;
  if (!oa || !ob) {
    o.note = "the oracle has no figures for " + std::string(!oa ? "side A" : "side B") + "'s response";
    return o;
  }
  if (!oa->skipped.empty() || !ob->skipped.empty()) {
    o.note = !oa->skipped.empty() ? "side A: " + oa->skipped : "side B: " + ob->skipped;
    return o;
  }
  if (oa->prompt_hash != ob->prompt_hash) {
    o.note = "the two sides' prompts are different tokens (" + std::to_string(oa->prompt_tokens) + " and " +
             std::to_string(ob->prompt_tokens) + "): their steps are not the same distributions";
    return o;
  }
  const size_t n = std::min(oa->steps.size(), ob->steps.size());
  size_t k = 0;
  while (k < n && oa->steps[k].id == ob->steps[k].id) ++k;
  o.step = static_cast<int64_t>(k);
  if (k == n) {
    o.note = oa->steps.size() == ob->steps.size()
                 ? "the two sides' tokens are the same vocabulary ids; they differ only in text the oracle does not see"
                 : "the token ids agree for " + std::to_string(n) + " steps, where side " +
                       std::string(oa->steps.size() < ob->steps.size() ? "A" : "B") +
                       " ends: there is no second token to judge";
    return o;
  }
  judge_step(o, row, *oa, *ob, k);
  return o;
}

std::string side_text(const sentence_style& st, const std::string& cond, const std::string& token,
                      const std::optional<double>& lp, int rank) {
  return "under " + st.text(cond) + " " + st.token(token) + " (exact log-prob " + (lp ? num_text(*lp) : "?") + ", rank " +
         std::to_string(rank) + ")";
}

// Why one side is off, for the sentence: its exact gap when that exceeds the bound, else the
// server's own numbers.
std::string off_text(const row_oracle& o, bool a, const std::string& best, const sentence_style& st) {
  const double gap = o.argmax_logprob - *(a ? o.logprob_a : o.logprob_b);
  if (gap > o.bound) return "a token " + num_text(gap) + " nats below what exact math gives, " + best;
  const std::optional<double>& own = a ? o.own_gap_a : o.own_gap_b;
  const bool unlisted = a ? o.own_unlisted_a : o.own_unlisted_b;
  return std::string(unlisted ? "a token its own list of alternatives leaves out, at least " : "a token its own log-probs put ") +
         num_text(own ? *own : 0) + " nats below its top alternative " +
         st.token(a ? o.own_best_a : o.own_best_b) + " (exact math puts it " + num_text(gap) + " nats below the best, " +
         best + ")";
}

bool quiet_condition(const std::string& c) { return c == "alone" || c == "control" || c.rfind("control#", 0) == 0; }

oracle_bound_info bounds_from(const std::vector<record>& records,
                              const std::function<const oracle_response*(const record*)>& find,
                              const oracle_apply_options& opt) {
  std::map<std::string, fid_acc> quiet, any;
  for (const record& rec : records)
    if (const oracle_response* o = find(&rec)) {
      any[record_label(rec)].add(*o);
      if (quiet_condition(rec.condition)) quiet[record_label(rec)].add(*o);
    }
  oracle_bound_info b;
  b.fixed = opt.near_tie;
  bool all_quiet = true;
  // Half the largest spread (reports/oracle.h): the error left once each step's offset is removed.
  for (const auto& [label, acc] : any) {
    const auto q = quiet.find(label);
    if (q != quiet.end() && q->second.spread_n > 0) b.precision[label] = q->second.spread_max / 2;
    else if (acc.spread_n > 0) {
      b.precision[label] = acc.spread_max / 2;
      all_quiet = false;
    }
  }
  for (const auto& [label, p] : b.precision)
    if (p > ORACLE_MAX_PRECISION) b.implausible.insert(label);
  if (b.fixed) b.source = "--near-tie";
  else if (b.precision.empty())
    b.source = "default: the server reported no step with two log-probs to compare with exact math";
  else
    b.source = std::string("measured: each side's largest error on a log-prob difference within a step (half of "
                           "it: the step's offset removed) ") +
               (all_quiet ? "alone and in control" : "alone and in control where there are such responses, else in all");
  return b;
}

// Whether the oracle's steps are the record's tokens: one per token, the same id where the record
// has one; where a token has no id, all the tokens' bytes joined must be the steps' pieces joined
// (a piece can hold part of a character another token finishes, so they are compared whole).
bool steps_match(const record& rec, const oracle_response& o) {
  if (o.steps.size() != rec.tokens.size()) return false;
  bool ids = true;
  for (size_t k = 0; k < o.steps.size(); ++k) {
    if (rec.tokens[k].id >= 0 && rec.tokens[k].id != o.steps[k].id) return false;
    ids = ids && rec.tokens[k].id >= 0;
  }
  if (ids) return true;
  std::string bytes, pieces;
  for (size_t k = 0; k < o.steps.size(); ++k) {
    const std::optional<std::string> b = token_bytes(rec.tokens[k]);
    if (!b) return true;  // a token whose bytes are lost: nothing more to compare
    bytes += *b;
    pieces += o.steps[k].token;
  }
  return bytes == pieces;
}

// A record's figures, checked against it: the oracle's model must be the one the target says it
// serves, and the steps must be the record's tokens (an oracle.json of another run, or edited by
// hand, is not believed). nullopt when the file has no figures for the record.
std::optional<oracle_response> vet(const record& rec, const oracle_data& d, int64_t* mismatched, int64_t* other_model) {
  const auto it = d.responses.find(record_key(rec));
  if (it == d.responses.end()) return std::nullopt;
  oracle_response o = it->second;
  const std::string want = json_str(rec.target, "model_sha256"), have = json_str(d.model, "sha256");
  if (o.skipped.empty() && !want.empty() && !have.empty() && want != have) {
    o = oracle_response{};
    o.skipped = "the oracle's model (sha256 " + have.substr(0, 12) + "...) is not the file this target serves (" +
                want.substr(0, 12) + "...)";
    if (other_model) ++*other_model;
  } else if (o.skipped.empty() && o.alignment != "retokenized") {
    if (!steps_match(rec, o)) {
      o = oracle_response{};
      o.skipped = "the oracle's figures do not match this response's tokens (oracle.json of another run?): "
                  "recompute them with --oracle";
      if (mismatched) ++*mismatched;
    }
  }
  return o;
}

// The verdict on a differing row, with the sides' figures already vetted: judge(), unless a side's
// target is too far from exact to be judged at all.
row_oracle verdict(const pair_item& row, const oracle_response* oa, const oracle_response* ob, const oracle_bound_info& bi) {
  row_oracle o = judge(row, oa, ob, bi.for_labels(record_label(*row.a), record_label(*row.b)));
  for (const record* side : {row.a, row.b})
    if (bi.implausible.count(record_label(*side)) && !o.cls.empty()) {
      row_oracle no;
      no.bound = o.bound;
      no.note = "the server's log-probs are up to " + num_text(bi.precision.at(record_label(*side))) +
                " nats from exact math even alone, once each step's offset is removed: --oracle is not the model it "
                "serves, or its log-probs are of another kind; no verdict";
      return no;
    }
  return o;
}

}  // namespace

double oracle_bound_info::for_labels(const std::string& a, const std::string& b) const {
  if (fixed) return *fixed;
  auto one = [this](const std::string& l) {
    const auto it = precision.find(l);
    return it == precision.end() ? ORACLE_DEFAULT_TIE / 2 : it->second;
  };
  return std::max(ORACLE_EXACT_BOUND, one(a) + one(b));
}

double oracle_bound_info::headline() const {
  if (fixed) return *fixed;
  if (precision.empty()) return ORACLE_DEFAULT_TIE;
  double m = 0;
  for (const auto& [l, p] : precision) m = std::max(m, p);
  return std::max(ORACLE_EXACT_BOUND, 2 * m);
}

oracle_bound_info oracle_bound(const std::vector<record>& records, const oracle_data& d, const oracle_apply_options& opt) {
  std::map<const record*, oracle_response> vetted;
  for (const record& rec : records)
    if (std::optional<oracle_response> o = vet(rec, d, nullptr, nullptr)) vetted.emplace(&rec, std::move(*o));
  auto find = [&vetted](const record* rec) -> const oracle_response* {
    const auto it = vetted.find(rec);
    return it == vetted.end() ? nullptr : &it->second;
  };
  return bounds_from(records, find, opt);
}

row_oracle oracle_judge(const pair_item& row, const oracle_data& d, const oracle_bound_info& bounds) {
  const std::optional<oracle_response> a = vet(*row.a, d, nullptr, nullptr), b = vet(*row.b, d, nullptr, nullptr);
  return verdict(row, a ? &*a : nullptr, b ? &*b : nullptr, bounds);
}

void oracle_apply(report& r, const oracle_data& d, const oracle_apply_options& opt, const oracle_data* d_b, size_t n_a) {
  const record* first = r.records.data();
  std::map<const record*, oracle_response> vetted;
  int64_t mismatched = 0, other_model = 0;
  for (const record& rec : r.records) {
    const oracle_data& src = d_b && static_cast<size_t>(&rec - first) >= n_a ? *d_b : d;
    if (std::optional<oracle_response> o = vet(rec, src, &mismatched, &other_model)) vetted.emplace(&rec, std::move(*o));
  }
  auto find = [&vetted](const record* rec) -> const oracle_response* {
    if (!rec) return nullptr;
    const auto it = vetted.find(rec);
    return it == vetted.end() ? nullptr : &it->second;
  };
  std::set<std::string> labels;
  for (const record& rec : r.records) labels.insert(record_label(rec));
  auto cond_key = [&labels](const record& rec) {
    return labels.size() > 1 ? record_label(rec) + ":" + rec.condition : rec.condition;
  };
  fid_acc all;
  std::map<std::string, fid_acc> by_cond;
  int64_t missing = 0;
  for (const record& rec : r.records) {
    const oracle_response* o = find(&rec);
    if (!o) {
      if (rec.error.empty()) ++missing;
      continue;
    }
    all.add(*o);
    by_cond[cond_key(rec)].add(*o);
  }
  const oracle_bound_info bi = bounds_from(r.records, find, opt);
  const std::string& source = bi.source;
  auto bound_of = [&bi](const record& rec) { return bi.for_labels(record_label(rec), record_label(rec)); };
  for (const record& rec : r.records)
    if (const oracle_response* o = find(&rec); o && response_off_argmax(rec, *o, bound_of(rec))) {
      ++all.off_argmax;
      ++by_cond[cond_key(rec)].off_argmax;
    }
  json classes = {{"near-tie", 0}, {"server-error", 0}, {"both-off", 0}, {"sampled", 0}, {"unjudged", 0}};
  for (pair_summary& p : r.pairs) {
    fid_acc fa, fb;
    std::set<const record*> seen_a, seen_b;
    for (pair_item& row : p.rows) {
      if (const oracle_response* o = find(row.a); o && seen_a.insert(row.a).second) {
        fa.add(*o);
        if (response_off_argmax(*row.a, *o, bound_of(*row.a))) ++fa.off_argmax;
      }
      if (const oracle_response* o = find(row.b); o && seen_b.insert(row.b).second) {
        fb.add(*o);
        if (response_off_argmax(*row.b, *o, bound_of(*row.b))) ++fb.off_argmax;
      }
      if (row.status != STATUS_DIFFERS || row.error) continue;
      row.oracle = verdict(row, find(row.a), find(row.b), bi);
      const std::string& c = row.oracle->cls;
      if (c == "near-tie") ++p.near_tie;
      else if (c == "server-error") ++p.server_error;
      else if (c == "both-off") ++p.both_off;
      else if (c == "sampled") ++p.sampled;
      else ++p.unjudged;
      classes[c.empty() ? "unjudged" : c] = classes[c.empty() ? "unjudged" : c].get<int64_t>() + 1;
    }
    if (fa.responses > 0) p.fidelity_a = fa.get();
    if (fb.responses > 0) p.fidelity = fb.get();
    // Only a condition against its own target's alone: across targets (cross, compare) the two
    // sides are other servers, perhaps judged by other oracles.
    if (p.vs_alone && p.fidelity && p.fidelity_a && p.fidelity->n > 0 && p.fidelity_a->n > 0 &&
        p.fidelity->mean > ORACLE_WORSE_RATIO * p.fidelity_a->mean && p.fidelity->mean - p.fidelity_a->mean >= ORACLE_WORSE_ABS) {
      p.fidelity_worse = true;
      r.notes.push_back("oracle: the server is further from exact math under " + p.cond_b + " than " + p.cond_a +
                        ": mean |Δ log-prob| " + num_text(p.fidelity->mean) + " vs " + num_text(p.fidelity_a->mean) +
                        " (max " + num_text(p.fidelity->max) + " vs " + num_text(p.fidelity_a->max) + ")");
    }
  }
  json by = json::object();
  for (const auto& [c, acc] : by_cond) by[c] = fidelity_json(acc.get());
  json notes = json::array();
  if (other_model > 0)
    notes.push_back(std::to_string(other_model) + " response(s) come from a target whose model file is not the oracle's "
                    "(model_sha256 differs): not judged");
  if (mismatched > 0)
    notes.push_back(std::to_string(mismatched) + " response(s) have oracle figures that do not match their tokens: not "
                    "judged (recompute with --oracle)");
  for (const auto& [label, p] : bi.precision)
    if (bi.implausible.count(label))
      notes.push_back("target " + label + ": its log-probs are up to " + num_text(p) + " nats from exact math alone, "
                      "each step's offset removed (more than " + num_text(ORACLE_MAX_PRECISION) +
                      "): is --oracle the model file it serves? Its rows get no verdict");
  if (d_b && json_str(d.model, "sha256") != json_str(d_b->model, "sha256"))
    notes.push_back("runs A and B were judged by different oracle models (" + json_str(d.model, "path") + ", " +
                    json_str(d_b->model, "path") + ")");
  for (const oracle_data* x : {&d, d_b})
    if (x)
      for (const std::string& n : x->notes) notes.push_back(d_b ? std::string(x == &d ? "run A: " : "run B: ") + n : n);
  if (missing > 0)
    notes.push_back(std::to_string(missing) + " response(s) have no oracle figures (the oracle file is from another run?)");
  json cost = d.cost;
  if (d_b) cost = {{"a", d.cost}, {"b", d_b->cost}};
  json precision = json::object();
  for (const auto& [label, p] : bi.precision) precision[label] = p;
  r.oracle = {{"model", d.model},     {"bound", bi.headline()}, {"bound_source", source}, {"precision", std::move(precision)},
              {"exact_bound", ORACLE_EXACT_BOUND},
              {"fidelity", fidelity_json(all.get())}, {"by_condition", std::move(by)}, {"classes", std::move(classes)},
              {"cost", std::move(cost)}, {"notes", std::move(notes)}};
}

sentence_style sentence_plain() {
  return {[](const std::string& t) { return "'" + t + "'"; }, [](const std::string& t) { return t; }};
}

sentence_style sentence_terminal() {
  return {[](const std::string& t) { return "'" + escape_line(t, '\'') + "'"; }, [](const std::string& t) { return escape_line(t); }};
}

std::string oracle_sentence(const pair_item& row, const sentence_style& st) {
  if (!row.oracle) return "";
  const row_oracle& o = *row.oracle;
  if (o.cls.empty()) return "the oracle could not judge this row: " + st.text(o.note);
  const std::string at = "at token " + std::to_string(o.step) + " ";
  const std::string best = st.token(o.argmax_token) + " (" + num_text(o.argmax_logprob) + ")";
  const std::string side_a = side_text(st, row.cond_a, o.token_a, o.logprob_a, o.rank_a);
  const std::string side_b = side_text(st, row.cond_b, o.token_b, o.logprob_b, o.rank_b);
  const std::string bound = "tie bound " + num_text(o.bound) + " nats";
  if (o.cls == "near-tie")
    return at + "the answers part on a near-tie: " + side_a + " and " + side_b + ", " +
           num_text(std::fabs(*o.logprob_a - *o.logprob_b)) + " nats apart, within the " + bound +
           ": a float engine may break it either way";
  const bool exact_a = o.argmax_logprob - *o.logprob_a > o.bound, exact_b = o.argmax_logprob - *o.logprob_b > o.bound;
  if (o.cls == "both-off" && exact_a && exact_b)
    return at + "neither side picked what exact math gives, " + best + ": " + side_a + ", " + side_b + " (" + bound + ")";
  if (o.cls == "both-off")
    return at + "both sides are off (" + bound + "): the server " + side_a + " picked " + off_text(o, true, best, st) +
           "; the server " + side_b + " picked " + off_text(o, false, best, st);
  const std::string off = o.off_a ? side_a : side_b, other = o.off_a ? side_b : side_a;
  if (o.cls == "sampled")
    return at + "the server " + off + " sampled " + off_text(o, o.off_a, best, st) + "; its request was not greedy; " + other;
  return at + "the server " + off + " picked " + off_text(o, o.off_a, best, st) + ": not a near-tie (" + bound + "); " + other;
}

}  // namespace detaudit::reports
