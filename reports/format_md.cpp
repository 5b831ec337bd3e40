// The Markdown report: a summary table of the pairs, then a section per pair with differing,
// failed or drifted items (context in code spans, newlines shown as \n), then the notes.
#include <algorithm>
#include <sstream>

#include "reports/audit/utf8.h"
#include "reports/format_internal.h"

namespace detaudit::reports {
namespace {

void summary(std::ostringstream& os, const report& r) {
  os << "| probe | pair | differ | noise | beyond noise | p vs noise | retokenized | drifted | errors | not exercised | score A -> B "
        "| flips -r/+w | net | McNemar p |\n"
     << "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|\n";
  for (const pair_summary& s : r.pairs)
    os << "| " << md_escape(s.probe) << " | " << md_escape(s.cond_a + " vs " + s.cond_b) << " | " << s.differ << "/"
       << pair_judged(s) << " | " << noise_count_text(s) << " | " << beyond_noise_text(s) << " | " << p_noise_text(s) << " | "
       << retokenized_text(s) << " | " << s.drifted << "/"
       << pair_judged(s) << " | " << s.errors << " | " << s.not_exercised << " | " << score_text(s) << " | " << flips_text(s)
       << " | " << net_text(s) << " | " << p_mcnemar_text(s) << " |\n";
  const std::string noise = noise_text(r);
  if (!noise.empty()) os << "\n" << md_escape(noise) << "\n";
  const std::vector<std::string> oracle = oracle_lines(r);
  if (!oracle.empty()) {
    os << "\n";
    for (const std::string& l : oracle) os << "- " << md_escape(l.substr(l.find_first_not_of(' '))) << "\n";
  }
  const auto acc = accuracy_lines(r);
  if (!acc.empty()) {
    os << "\n| condition | accuracy (Wilson 95% interval, +- lm-eval stderr) |\n|---|---|\n";
    for (const auto& [name, text] : acc) os << "| " << md_escape(name) << " | " << md_escape(text) << " |\n";
  }
}

void row_item(std::ostringstream& os, const pair_item& row) {
  const divergence& d = row.d;
  os << "- **" << md_escape(row.item_id) << "** (" << md_escape(row.cond_a + " vs " + row.cond_b) << "): ";
  if (row.error) {
    os << "error: " << md_escape(d.note) << "\n";
    return;
  }
  if (row.status == STATUS_NOT_COMPARABLE) {
    os << "not comparable: " << md_escape(row.reason) << "\n";
    return;
  }
  const std::string argmax = not_argmax_text(row);
  if (d.identical) {
    os << "identical tokens";
    if (!hash_text(row).empty()) os << "; " << hash_text(row);
    if (row.noisy) os << "; " << noisy_text(row);
    if (!argmax.empty()) os << "; " << md_escape(argmax);
    os << "\n";
    return;
  }
  if (d.retokenized) os << "retokenized (same text); ";
  if (d.token_index >= 0)
    os << "token " << d.token_index << ": " << md_code(d.token_a) << " vs " << md_code(d.token_b) << "; ";
  if (d.char_offset >= 0) os << "byte " << d.char_offset << "; ";
  os << "margins " << margin_text(d.margin_a) << " / " << margin_text(d.margin_b);
  if (!hash_text(row).empty()) os << "; " << hash_text(row);
  if (row.flip != FLIP_NONE) os << "; **" << flip_name(row.flip) << "**";
  if (!row.exercised) os << "; not exercised: " << md_escape(row.reason);
  if (row.noisy) os << "; " << noisy_text(row);
  if (!argmax.empty()) os << "; " << md_escape(argmax);
  if (row.oracle)
    os << "\n  - oracle: " << (row.oracle->cls.empty() ? "" : "**" + row.oracle->cls + "**: ") << oracle_sentence(row, {[](const std::string& t) { return md_code(t); }, md_escape});
  os << "\n  - " << md_escape(row.cond_a) << ": " << md_code(d.before_a) << " | " << md_code(d.after_a) << "\n"
     << "  - " << md_escape(row.cond_b) << ": " << md_code(d.before_b) << " | " << md_code(d.after_b) << "\n";
}

}  // namespace

std::string render_md(const report& r) {
  std::ostringstream os;
  os << "# detaudit report\n\n";
  const std::string m = manifest_line(r.manifest);
  if (!m.empty()) os << md_escape(m) << "\n\n";
  if (r.pairs.empty()) os << "No pairs of responses to compare.\n";
  else summary(os, r);
  for (const pair_summary& s : r.pairs) {
    if (std::none_of(s.rows.begin(), s.rows.end(), row_listed)) continue;
    os << "\n## " << md_escape(pair_title(s)) << "\n\n"
       << s.differ << " of " << pair_judged(s) << " items differ"
       << (s.control ? " (control pair: run-to-run noise)" : "") << ", " << s.errors << " error(s)"
       << md_escape(oracle_pair_text(s)) << ".\n\n";
    for (const pair_item& row : s.rows)
      if (row_listed(row)) row_item(os, row);
  }
  if (!r.notes.empty()) {
    os << "\n## Notes\n\n";
    for (const std::string& n : r.notes) os << "- " << md_escape(n) << "\n";
  }
  return os.str();
}

}  // namespace detaudit::reports
