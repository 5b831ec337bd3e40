// The terminal report: one table row per pair, then each differing, failed or drifted item with
// where it parted, then the notes. Plain text, readable without color.
//
//   PROBE        PAIR                   DIFFER  NOISE  BEYOND-NOISE  P-VS-NOISE  RETOKENIZED  DRIFTED  ...  MCNEMAR-P
//   control      alone vs control       0/20    0      -             -           0            3/20     ...  -
//   concurrency  alone vs concurrent-8  2/20    0      2             0.24        0            5/20     ...  0.62
// DIFFER: the tokens or text part; NOISE: of those, the ones that may be run-to-run noise (the
// control pair's, rows on noisy items, and answers to a request alone's own); BEYOND-NOISE: the
// rest; P-VS-NOISE: Fisher's one-sided p of DIFFER against the control pair's rate; RETOKENIZED: the
// same text from other tokens (one target's pairs: a changed token; "(x/y)" across targets, where
// it does not fail); DRIFTED: the same tokens, but logits (hash) or log-probs moved; MCNEMAR-P:
// two-sided, on the flips.
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <vector>

#include "reports/audit/utf8.h"
#include "reports/compare_internal.h"
#include "reports/format_internal.h"

namespace detaudit::reports {
namespace {

using table_row = std::vector<std::string>;

std::string table(const std::vector<table_row>& rows) {
  std::vector<size_t> width;
  for (const table_row& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  std::string out;
  for (const table_row& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string summary_table(const report& r) {
  std::vector<table_row> rows = {{"PROBE", "PAIR", "DIFFER", "NOISE", "BEYOND-NOISE", "P-VS-NOISE", "RETOKENIZED", "DRIFTED",
                                  "ERRORS", "NOT-EXERCISED", "SCORE A -> B", "FLIPS -R/+W", "NET", "MCNEMAR-P"}};
  for (const pair_summary& s : r.pairs) {
    const std::string judged = std::to_string(pair_judged(s));
    rows.push_back({escape_line(s.probe), escape_line(s.cond_a + " vs " + s.cond_b), std::to_string(s.differ) + "/" + judged,
                    noise_count_text(s), beyond_noise_text(s), p_noise_text(s), retokenized_text(s),
                    std::to_string(s.drifted) + "/" + judged, std::to_string(s.errors), std::to_string(s.not_exercised),
                    score_text(s), flips_text(s), net_text(s), p_mcnemar_text(s)});
  }
  return table(rows);
}

// One line per cross pair with a KLD summary (B from A, before the tokens part).
std::string kld_lines(const report& r) {
  std::string out;
  for (const pair_summary& s : r.pairs) {
    if (!s.kld) continue;
    const kld_stats& k = *s.kld;
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  ": %lld step(s) of %lld row(s) before the tokens part: mean KLD %.6f +- %.6f, 99%% %.6f, max %.6f; "
                  "same top %.2f%%; RMS dp %.3f%%; PPL(B)/PPL(A) %.6f +- %.6f\n",
                  static_cast<long long>(k.n), static_cast<long long>(s.kld_rows), k.kld_mean, k.kld_mean_unc, k.kld_p99,
                  k.kld_max, 100 * k.same_top, 100 * k.dp_rms, k.ppl_ratio, k.ppl_ratio_unc);
    out += "kld " + escape_line(s.cond_a + " vs " + s.cond_b) + buf;
  }
  return out;
}

// Accuracy per graded condition, the noise model and the cross pairs' KLD, under the summary table.
std::string summary_extras(const report& r) {
  std::string out;
  const std::string noise = noise_text(r);
  if (!noise.empty()) out += noise + "\n";
  for (const std::string& l : oracle_lines(r)) out += escape_line(l) + "\n";
  out += kld_lines(r);
  const auto acc = accuracy_lines(r);
  if (acc.empty()) return out;
  out += "accuracy (Wilson 95% interval, +- lm-eval's stderr, in points):\n";
  size_t w = 0;
  for (const auto& e : acc) w = std::max(w, escape_line(e.first).size());
  for (const auto& [name, text] : acc) {
    const std::string n = escape_line(name);
    out += "  " + n + std::string(w - n.size(), ' ') + "  " + text + "\n";
  }
  return out;
}

std::string token_text(const std::string& tok, int32_t id) {
  return "'" + escape_line(tok, '\'') + "'" + (id >= 0 ? " (id " + std::to_string(id) + ")" : "");
}

std::string context_line(const std::string& before, const std::string& after) {
  return "\"" + escape_line(before, '"') + "\" | \"" + escape_line(after, '"') + "\"";
}

}  // namespace

std::string row_text(const pair_item& row, const std::vector<std::string>& also) {
  std::ostringstream os;
  const divergence& d = row.d;
  os << "  item " << escape_line(row.item_id) << " (" << escape_line(row.cond_a + " vs " + row.cond_b);
  for (const std::string& c : also) os << "; also " << escape_line(c);
  os << ")";
  const std::string argmax = not_argmax_text(row);
  if (row.error) {
    os << ": error: " << escape_line(d.note) << "\n";
    return os.str();
  }
  if (row.status == STATUS_NOT_COMPARABLE) {
    os << ": not comparable: " << escape_line(row.reason) << "\n";
    return os.str();
  }
  if (d.identical) {
    os << ": identical tokens";
    if (!hash_text(row).empty()) os << "; " << hash_text(row);
    if (row.noisy) os << "; " << noisy_text(row);
    if (!argmax.empty()) os << "; " << argmax;
    os << "\n";
    return os.str();
  }
  os << ": " << (d.retokenized ? "retokenized (same text), " : "");
  if (d.token_index < 0 && d.char_offset < 0 && d.reasoning_offset >= 0) os << "reasoning, byte " << d.reasoning_offset;
  if (d.token_index >= 0) os << "token " << d.token_index;
  if (d.char_offset >= 0) os << (d.token_index >= 0 ? ", " : "") << "byte " << d.char_offset;
  if (d.token_index >= 0) os << ": " << token_text(d.token_a, d.id_a) << " vs " << token_text(d.token_b, d.id_b);
  if (!row.exercised) os << " [not exercised: " << escape_line(row.reason) << "]";
  if (row.noisy) os << " [" << noisy_text(row) << "]";
  os << "\n    margins " << margin_text(d.margin_a) << " vs " << margin_text(d.margin_b);
  if (!hash_text(row).empty()) os << "; " << hash_text(row);
  if (row.correct_a && row.correct_b)
    os << "; graded " << (*row.correct_a ? "right" : "wrong") << " -> " << (*row.correct_b ? "right" : "wrong")
       << (row.flip != FLIP_NONE ? std::string(" (") + flip_name(row.flip) + ")" : "");
  if (!argmax.empty()) os << "; " << argmax;
  if (!d.note.empty()) os << "; " << escape_line(d.note);
  os << "\n";
  if (row.oracle) os << "    oracle: " << (row.oracle->cls.empty() ? "" : row.oracle->cls + ": ") << oracle_sentence(row, sentence_terminal()) << "\n";
  if (d.token_index < 0 && d.char_offset < 0) return os.str();  // the answers agree (the reasoning parted): no context
  const std::string cond_a = escape_line(row.cond_a), cond_b = escape_line(row.cond_b);
  const size_t w = std::max(cond_a.size(), cond_b.size());
  for (int side = 0; side < 2; ++side) {
    const std::string& c = side ? cond_b : cond_a;
    os << "    " << c << std::string(w - c.size(), ' ') << " : "
       << (side ? context_line(d.before_b, d.after_b) : context_line(d.before_a, d.after_a)) << "\n";
  }
  return os.str();
}

namespace {

// "  error on 3 item(s) (q1, q2, q3): MESSAGE", one line per distinct message: a target that
// refuses every request does not print the same message once per item.
void errors_text(std::ostringstream& os, const pair_summary& s) {
  std::vector<std::pair<std::string, std::vector<const pair_item*>>> groups;
  for (const pair_item& row : s.rows) {
    if (!row.error) continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&row](const auto& g) { return g.first == row.d.note; });
    if (it == groups.end()) groups.push_back({row.d.note, {&row}});
    else it->second.push_back(&row);
  }
  for (const auto& [note, items] : groups) {
    if (items.size() == 1) {
      os << row_text(*items[0]);
      continue;
    }
    std::string ids;
    for (size_t i = 0; i < items.size() && i < 8; ++i) ids += (i ? ", " : "") + escape_line(items[i]->item_id);
    if (items.size() > 8) ids += ", ...";
    os << "  error on " << items.size() << " items (" << ids << "): " << escape_line(note) << "\n";
  }
}

// The same divergence of one item under several conditions (cache-on and cache-warm, or the
// alone and control pairs of a cross audit, often part at the same token in the same way): one
// entry, listing them all; the later pairs refer back to it. Keyed by item, status and where and
// how both sides part.
std::string divergence_key(const pair_item& row) {
  const divergence& d = row.d;
  return row.item_id + '\x1f' + status_name(row.status) + '\x1f' + std::to_string(d.token_index) + '\x1f' +
         std::to_string(d.char_offset) + '\x1f' + d.token_a + '\x1f' + d.token_b + '\x1f' + d.before_a + '\x1f' + d.after_a +
         '\x1f' + d.before_b + '\x1f' + d.after_b;
}

bool shareable(const pair_item& row) {
  return !row.error && (row.status == STATUS_DIFFERS || row.status == STATUS_RETOKENIZED);
}

std::string pair_counts_text(const pair_summary& s) {
  std::string out = std::to_string(s.differ) + " of " + std::to_string(pair_judged(s)) + " differ";
  if (s.retokenized) out += ", " + std::to_string(s.retokenized) + " retokenized";
  if (s.not_comparable) out += ", " + std::to_string(s.not_comparable) + " not comparable";
  return out + ", " + std::to_string(s.errors) + " error(s)" + oracle_pair_text(s);
}

}  // namespace

std::string render_text(const report& r) {
  std::ostringstream os;
  const std::string m = manifest_line(r.manifest);
  os << "detaudit report" << (m.empty() ? "" : ": " + escape_line(m)) << "\n\n";
  if (!r.differences.empty()) {
    os << "the two runs differ in:\n";
    for (const identity_difference& d : r.differences) os << "  " << escape_line(identity_difference_text(d)) << "\n";
    os << "\n";
  }
  if (r.pairs.empty()) os << "no pairs of responses to compare\n";
  else os << summary_table(r) << summary_extras(r);
  // Which pairs share each divergence, in report order; the first entry names them all.
  std::map<std::string, std::vector<std::string>> sharing;
  for (const pair_summary& s : r.pairs)
    for (const pair_item& row : s.rows)
      if (shareable(row)) sharing[divergence_key(row)].push_back(row.cond_a + " vs " + row.cond_b);
  std::map<std::string, std::string> shown;  // key -> the pair it was shown under
  for (const pair_summary& s : r.pairs) {
    if (std::none_of(s.rows.begin(), s.rows.end(), row_listed)) continue;
    os << "\n" << escape_line(pair_title(s)) << (s.control ? " (control: run-to-run noise)" : "") << ": " << pair_counts_text(s) << "\n";
    for (const pair_item& row : s.rows) {
      if (!row_listed(row) || row.error) continue;
      if (!shareable(row)) {
        os << row_text(row);
        continue;
      }
      const std::string key = divergence_key(row), here = row.cond_a + " vs " + row.cond_b;
      auto first = shown.find(key);
      if (first != shown.end()) {
        os << "  item " << escape_line(row.item_id) << " (" << escape_line(here) << "): the same divergence as under "
           << escape_line(first->second) << ", above\n";
        continue;
      }
      std::vector<std::string> also;
      for (const std::string& c : sharing[key])
        if (c != here) also.push_back(c);
      os << row_text(row, also);
      shown[key] = here;
    }
    errors_text(os, s);
  }
  if (!r.notes.empty()) {
    os << "\nnotes:\n";
    for (const std::string& n : r.notes) os << "  - " << escape_line(n) << "\n";
  }
  return os.str();
}

}  // namespace detaudit::reports
