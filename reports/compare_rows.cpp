// Rows and counts: how one pair of responses is judged, and the helpers the pair builders share.
#include <algorithm>
#include <cctype>
#include <map>

#include "reports/audit/grade.h"
#include "reports/audit/steps.h"
#include "reports/audit/utf8.h"
#include "reports/compare_internal.h"

namespace detaudit::reports {
namespace {

bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

bool evidence_false(const record& r, const char* key) {
  auto it = r.evidence.find(key);
  return it != r.evidence.end() && it->is_boolean() && !it->get<bool>();
}

// Both answers as `grader` reads them: the final answer, after any thinking block.
flip_kind flip_of(const std::string& grader, const record& a, const record& b, bool ca, bool cb) {
  if (ca && !cb) return FLIP_RIGHT_TO_WRONG;
  if (!ca && cb) return FLIP_WRONG_TO_RIGHT;
  if (!ca && !cb && grade_answer(grader, final_answer(a.text)) != grade_answer(grader, final_answer(b.text)))
    return FLIP_WRONG_TO_OTHER_WRONG;
  return FLIP_NONE;
}

}  // namespace

bool natural_less(const std::string& x, const std::string& y) {
  size_t i = 0, j = 0;
  while (i < x.size() && j < y.size()) {
    if (is_digit(x[i]) && is_digit(y[j])) {
      size_t ie = i, je = j;
      while (ie < x.size() && is_digit(x[ie])) ++ie;
      while (je < y.size() && is_digit(y[je])) ++je;
      size_t iz = i, jz = j;
      while (iz + 1 < ie && x[iz] == '0') ++iz;
      while (jz + 1 < je && y[jz] == '0') ++jz;
      if (ie - iz != je - jz) return ie - iz < je - jz;
      const int c = x.compare(iz, ie - iz, y, jz, je - jz);
      if (c != 0) return c < 0;
      i = ie, j = je;
      continue;
    }
    if (x[i] != y[j]) return static_cast<unsigned char>(x[i]) < static_cast<unsigned char>(y[j]);
    ++i, ++j;
  }
  if ((i < x.size()) != (j < y.size())) return j < y.size();
  return x < y;
}

std::string probe_from_condition(const std::string& c) {
  const condition_def* d = condition_find(c);
  return d ? std::string(d->probe) : c;
}

std::vector<record> records_dedupe(std::vector<record> in, const std::function<std::string(const record&)>& key,
                                   size_t* dropped) {
  std::vector<record> out;
  out.reserve(in.size());
  std::map<std::string, size_t> at;
  size_t n_dropped = 0;
  for (record& r : in) {
    auto [it, fresh] = at.emplace(key(r), out.size());
    if (fresh) {
      out.push_back(std::move(r));
    } else {
      out[it->second] = std::move(r);
      ++n_dropped;
    }
  }
  if (dropped) *dropped = n_dropped;
  return out;
}

namespace {

// Only the records' own flags: a condition a target could not apply (cross and compare pairs set
// two targets or two runs side by side; the condition's evidence is its own target's business).
std::string flagged_not_exercised(const record& a, const record& b) {
  for (const record* x : {&b, &a})
    if (evidence_false(*x, "exercised")) {
      auto it = x->evidence.find("reason");
      return (it != x->evidence.end() && it->is_string() && !it->get<std::string>().empty())
                 ? it->get<std::string>()
                 : "the condition could not be applied";
    }
  return "";
}

row_status status_of(const pair_item& row) {
  if (row.error) return STATUS_ERROR;
  if (!row.exercised && !row.same_request) return STATUS_NOT_EXERCISED;
  if (row.d.identical) return row.d.hash_step >= 0 || row.d.drift_step >= 0 ? STATUS_DRIFTED : STATUS_IDENTICAL;
  return row.d.retokenized ? STATUS_RETOKENIZED : STATUS_DIFFERS;
}

pair_item row_head(const record& a, const record& b, const std::string& cond_a, const std::string& cond_b) {
  pair_item row;
  row.item_id = a.item_id;
  row.cond_a = cond_a;
  row.cond_b = cond_b;
  row.a = &a;
  row.b = &b;
  return row;
}

}  // namespace

pair_item row_not_comparable(const record& a, const record& b, const std::string& cond_a, const std::string& cond_b,
                             const std::string& why) {
  pair_item row = row_head(a, b, cond_a, cond_b);
  row.d.identical = false;
  row.status = STATUS_NOT_COMPARABLE;
  row.reason = why;
  return row;
}

namespace {

// Whether b's request was a's, byte for byte: the same body to the same endpoint of one target.
bool request_same(const record& a, const record& b) {
  return !a.request.empty() && a.request == b.request && a.endpoint == b.endpoint && record_label(a) == record_label(b);
}

// Both sides graded by one grader and one answer key, A's: B's record is graded by A's grader
// against A's reference whenever its own grader or reference is another (a resumed or compared run
// graded otherwise). A flip is a flip of one reading, never of two.
void row_grade(pair_item& row) {
  const record& a = *row.a;
  const record& b = *row.b;
  row.correct_a = grade(a);
  if (b.grader == a.grader && b.reference == a.reference) row.correct_b = grade(b);
  else if (!a.grader.empty()) row.correct_b = grade(a.grader, final_answer(b.text), a.reference);
  if ((row.exercised || row.same_request) && row.correct_a && row.correct_b)
    row.flip = flip_of(a.grader, a, b, *row.correct_a, *row.correct_b);
}

}  // namespace

std::map<const record*, const record*> requests_answered_twice(const std::vector<record>& records) {
  std::map<std::string, std::vector<const record*>> groups;
  for (const record& r : records) {
    if (!r.error.empty() || r.request.empty() || !r.temperature || *r.temperature > 0) continue;
    const std::string key = record_label(r) + '\x1f' + r.item_id + '\x1f' + r.endpoint + '\x1f' +
                            r.request.dump(-1, ' ', false, json::error_handler_t::replace);
    groups[key].push_back(&r);
  }
  std::map<const record*, const record*> out;
  for (const auto& [key, rs] : groups)
    for (const record* x : rs)
      for (const record* y : rs)
        if (x != y && !out.count(x) && !diverge(*x, *y, /*one_vocab=*/true).identical) out[x] = y;
  return out;
}

pair_item row_make(const record& a, const record& b, const std::string& cond_a, const std::string& cond_b,
                   const row_rules& rules) {
  pair_item row = row_head(a, b, cond_a, cond_b);
  row.d = diverge(a, b, rules.one_vocab);
  row.not_argmax_a = first_not_argmax(a);
  row.not_argmax_b = first_not_argmax(b);
  if (!a.error.empty() || !b.error.empty()) {
    row.error = true;
    row.status = STATUS_ERROR;
    return row;
  }
  const std::string why = rules.judge ? condition_not_exercised(a, b) : flagged_not_exercised(a, b);
  if (!why.empty()) {
    row.exercised = false;
    row.reason = why;
    const record* twin = nullptr;
    if (rules.twins)
      if (const auto it = rules.twins->find(&b); it != rules.twins->end()) twin = it->second;
    if (rules.judge && !row.d.identical && request_same(a, b)) {
      row.same_request = true;
      row.reason += "; but the request was alone's own, byte for byte: two answers to one request are run-to-run noise";
    } else if (rules.judge && !row.d.identical && twin) {
      row.same_request = true;
      row.reason += "; but the same request, byte for byte, was answered otherwise under " + twin->condition +
                    ": two answers to one request are run-to-run noise";
    }
  }
  row.status = status_of(row);
  row_grade(row);
  return row;
}

void summary_add(pair_summary& s, pair_item row) {
  ++s.items;
  s.not_argmax += row.not_argmax_a >= 0 || row.not_argmax_b >= 0;
  if (row.status == STATUS_ERROR) {
    ++s.errors;
  } else if (row.status == STATUS_NOT_COMPARABLE) {
    ++s.not_comparable;
  } else if (row.status == STATUS_NOT_EXERCISED) {
    ++s.not_exercised;
  } else {
    s.differ += row.status == STATUS_DIFFERS;
    s.retokenized += row.status == STATUS_RETOKENIZED;
    s.same_request += row.same_request && row.status == STATUS_DIFFERS;
    s.drifted += row.status == STATUS_DRIFTED;
    if (row.correct_a && row.correct_b) {
      ++s.graded;
      s.correct_a += *row.correct_a;
      s.correct_b += *row.correct_b;
      if (row.a->grader == "gsm8k-flex" && row.b->grader == "gsm8k-flex") {
        const auto sa = grade("gsm8k", final_answer(row.a->text), row.a->reference);
        const auto sb = grade("gsm8k", final_answer(row.b->text), row.b->reference);
        if (sa && sb) ++s.strict_graded, s.strict_a += *sa, s.strict_b += *sb;
      }
    }
    s.right_to_wrong += row.flip == FLIP_RIGHT_TO_WRONG;
    s.wrong_to_right += row.flip == FLIP_WRONG_TO_RIGHT;
    s.wrong_to_other_wrong += row.flip == FLIP_WRONG_TO_OTHER_WRONG;
  }
  s.rows.push_back(std::move(row));
}

void notes_tokenization(report& r) {
  for (const pair_summary& s : r.pairs) {
    const auto n = std::count_if(s.rows.begin(), s.rows.end(), [](const pair_item& row) { return row.d.tokenized_differently; });
    if (n == 0) continue;
    r.notes.push_back(s.probe + " " + s.cond_a + " vs " + s.cond_b + ": the two sides tokenize differently (" + std::to_string(n) +
                      " row(s)): their token indices do not correspond, so each difference is located by byte offset, "
                      "with each side's own token index there");
  }
}

void notes_not_exercised(report& r) {
  for (const pair_summary& s : r.pairs) {
    std::map<std::string, int64_t> reasons;
    for (const pair_item& row : s.rows)
      if (!row.error && !row.exercised) ++reasons[row.reason];
    for (const auto& [why, n] : reasons)
      r.notes.push_back(s.probe + " " + s.cond_a + " vs " + s.cond_b + ": " + std::to_string(n) + " of " +
                        std::to_string(s.items) + " not exercised: " + why);
  }
}

std::string json_str(const json& o, const char* key, const std::string& dflt) {
  if (!o.is_object()) return dflt;
  auto it = o.find(key);
  return (it != o.end() && it->is_string()) ? it->get<std::string>() : dflt;
}

std::string divergence_where(const divergence& d) {
  if (d.identical) return "identical";
  if (!d.note.empty() && d.token_index < 0 && d.char_offset < 0) return d.note;
  if (d.token_index >= 0)
    return "first difference at token " + std::to_string(d.token_index) + ": '" + escape_line(d.token_a, '\'') +
           "' vs '" + escape_line(d.token_b, '\'') + "'";
  return "first difference at byte " + std::to_string(d.char_offset);
}

const char* status_name(row_status s) {
  switch (s) {
    case STATUS_IDENTICAL: return "identical";
    case STATUS_DRIFTED: return "drifted";
    case STATUS_DIFFERS: return "differs";
    case STATUS_RETOKENIZED: return "retokenized";
    case STATUS_ERROR: return "error";
    case STATUS_NOT_EXERCISED: return "not_exercised";
    case STATUS_NOT_COMPARABLE: return "not_comparable";
  }
  return "?";
}

const char* flip_name(flip_kind f) {
  switch (f) {
    case FLIP_RIGHT_TO_WRONG: return "right-to-wrong";
    case FLIP_WRONG_TO_RIGHT: return "wrong-to-right";
    case FLIP_WRONG_TO_OTHER_WRONG: return "wrong-to-other-wrong";
    case FLIP_NONE: break;
  }
  return "none";
}

}  // namespace detaudit::reports
