// Rows and counts: how one pair of responses is judged, and the helpers the pair builders share.
#include <cctype>
#include <map>

#include "reports/compare_internal.h"
#include "reports/grade.h"
#include "reports/utf8.h"

namespace detaudit::reports {
namespace {

bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

bool evidence_false(const record& r, const char* key) {
  auto it = r.evidence.find(key);
  return it != r.evidence.end() && it->is_boolean() && !it->get<bool>();
}

flip_kind flip_of(const record& a, const record& b, bool ca, bool cb) {
  if (ca && !cb) return FLIP_RIGHT_TO_WRONG;
  if (!ca && cb) return FLIP_WRONG_TO_RIGHT;
  if (!ca && !cb && grade_answer(a.grader, a.text) != grade_answer(b.grader, b.text)) return FLIP_WRONG_TO_OTHER_WRONG;
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
  auto starts = [&](const char* p) { return c.rfind(p, 0) == 0; };
  if (c == "alone") return "base";
  if (c == "control" || c == "repeat") return c;
  if (starts("concurrent-")) return "concurrency";
  if (starts("cache-")) return "cache";
  if (starts("ubatch-")) return "batch";
  if (starts("spec-")) return "speculation";
  if (starts("seed-")) return "seed";
  return c;
}

int probe_rank(const std::string& probe) {
  static const std::map<std::string, int> ranks = {{"control", 0}, {"repeat", 1}, {"concurrency", 2}, {"cache", 3},
                                                   {"batch", 4},   {"speculation", 5}, {"seed", 6}, {"cross", 7}};
  auto it = ranks.find(probe);
  return it == ranks.end() ? 8 : it->second;
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

std::string not_exercised_reason(const record& r) {
  if (evidence_false(r, "exercised")) {
    auto it = r.evidence.find("reason");
    return (it != r.evidence.end() && it->is_string() && !it->get<std::string>().empty())
               ? it->get<std::string>()
               : "the condition could not be applied";
  }
  if (r.condition.rfind("concurrent-", 0) == 0 && evidence_false(r, "overlap")) return "requests did not overlap in time";
  if (r.condition == "cache-warm") {
    auto it = r.evidence.find("cached_tokens");
    if (it != r.evidence.end() && it->is_number() && it->get<double>() == 0) return "no tokens were served from the cache";
  }
  return "";
}

pair_item row_make(const record& a, const record& b, const std::string& cond_a, const std::string& cond_b) {
  pair_item row;
  row.item_id = a.item_id;
  row.cond_a = cond_a;
  row.cond_b = cond_b;
  row.a = &a;
  row.b = &b;
  row.d = diverge(a, b);
  if (!a.error.empty() || !b.error.empty()) {
    row.error = true;
    return row;
  }
  std::string why = not_exercised_reason(b);
  if (why.empty()) why = not_exercised_reason(a);
  if (!why.empty()) {
    row.exercised = false;
    row.reason = why;
  }
  row.correct_a = grade(a);
  row.correct_b = grade(b);
  if (row.exercised && row.correct_a && row.correct_b) row.flip = flip_of(a, b, *row.correct_a, *row.correct_b);
  return row;
}

void summary_add(pair_summary& s, pair_item row) {
  ++s.items;
  if (row.error) {
    ++s.errors;
  } else if (!row.exercised) {
    ++s.not_exercised;
  } else {
    if (!row.d.identical) ++s.differ;
    if (row.correct_a && row.correct_b) {
      ++s.graded;
      s.correct_a += *row.correct_a;
      s.correct_b += *row.correct_b;
    }
    s.right_to_wrong += row.flip == FLIP_RIGHT_TO_WRONG;
    s.wrong_to_right += row.flip == FLIP_WRONG_TO_RIGHT;
    s.wrong_to_other_wrong += row.flip == FLIP_WRONG_TO_OTHER_WRONG;
  }
  s.rows.push_back(std::move(row));
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
