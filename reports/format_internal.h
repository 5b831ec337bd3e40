// Shared pieces of the report renderers (format_*.cpp); not part of the reports interface.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reports/compare.h"

namespace detaudit::reports {

std::string render_text(const report& r);
std::string render_json(const report& r);
std::string render_md(const report& r);
std::string render_junit(const report& r);
std::string render_html(const report& r);

// "concurrency: alone vs concurrent-8"
std::string pair_title(const pair_summary& s);
// "14/20 -> 13/20", or "-" when nothing was graded.
std::string score_text(const pair_summary& s);
// "-2/+1" and "-1" (wrong-to-right minus right-to-wrong, signed), or "-" when nothing was graded.
std::string flips_text(const pair_summary& s);
std::string net_text(const pair_summary& s);
// Against the noise model: rows differing on items whose alone answers agree ("-" when the pair
// has no noise model), p_vs_noise and McNemar's p ("-" when not computed).
std::string beyond_noise_text(const pair_summary& s);
// Rows of differ that may be run-to-run noise: the control pair's all, else differ minus beyond
// noise, else the answers to a request alone's own; "-" when none of these applies.
std::string noise_count_text(const pair_summary& s);
// "2/20" retokenized of judged; "(2/20)" across targets, where a retokenized row is no failure.
std::string retokenized_text(const pair_summary& s);
std::string p_noise_text(const pair_summary& s);
std::string p_mcnemar_text(const pair_summary& s);
// "13/20 = 65.0% [43.3, 81.9] +- 10.9": accuracy, Wilson 95% interval, lm-eval's stderr (points).
std::string accuracy_text(int64_t k, int64_t n);
// Per distinct graded condition (first pair it appears in): its name and accuracy_text.
std::vector<std::pair<std::string, std::string>> accuracy_lines(const report& r);
// "noise: 3 alone answers per item; 2 of 20 items noisy (their alone answers disagree)", "" when
// the run has no control.
std::string noise_text(const report& r);
// "noisy: alone answers agree 2 of 3" for a noisy row, "" otherwise.
std::string noisy_text(const pair_item& row);
// Three significant digits ("0.0123", "0.0002", "1.25"), or "n/a" when the step has fewer than two
// recorded alternatives.
std::string margin_text(const std::optional<double>& m);
// Whether a row gets its own entry under its pair: it differs, failed, its logits drifted, or a
// greedy side sampled below its top alternative.
bool row_listed(const pair_item& row);
// "logits drifted at step 7" (identical tokens) or "logit hash differs from step 7", "" when none.
std::string hash_text(const pair_item& row);
// A row as the text report lists it: "  item ID (A vs B): token k, byte c: 'x' vs 'y'", margins, hash
// step, grades and flip, then both contexts; one line for errors, drift and rows not comparable.
// Ends with a newline.
// `also`: other pairs ("alone vs cache-warm") where the item parts the same way, named in the header.
std::string row_text(const pair_item& row, const std::vector<std::string>& also = {});
// One line about the run from its manifest: the compared paths (compare), run id, tool version,
// targets ("" when none of these is there).
std::string manifest_line(const json& manifest);
// "greedy side A sampled below its top alternative at step 3" for the sides that did, "" otherwise.
std::string not_argmax_text(const pair_item& row);

// Markdown, for every string a record, run.json or an audited server supplied (report --format md,
// a bundle's README.md): such a string is data, never markup.
// md_escape: text for a paragraph, list item or table cell: on one line (escape_line), with every
// character Markdown or HTML would read as markup backslash-escaped (\ ` * _ [ ] < > | # ! & ~),
// and a leading -, +, = or the '.' / ')' after leading digits escaped, so that the text cannot
// start a list or underline a heading.
std::string md_escape(const std::string& s);
// md_code: a code span showing s exactly on one line (escape_line), fenced with more backticks
// than s holds in a row; "*(empty)*" for "". md_code_line: the same for text already on one line.
std::string md_code(const std::string& raw);
std::string md_code_line(const std::string& line);
// md_cell: a table cell's text with each '|' not already escaped written as "\|" (GFM splits cells
// on a '|' even inside a code span).
std::string md_cell(const std::string& cell_text);
// md_fence: the fence for a fenced code block holding `text`: three backticks, or more than the
// longest run of backticks in it.
std::string md_fence(const std::string& text);

// --oracle: the run-level lines ("oracle: exact engine on FILE; tie bound ...", fidelity overall
// and per condition, classes, cost), empty without an oracle.
std::vector<std::string> oracle_lines(const report& r);
// ", oracle: 2 near-tie, 1 server-error" for a pair with judged rows, "" otherwise.
std::string oracle_pair_text(const pair_summary& s);
// "1.2e-03" style, three significant digits.
std::string nats_text(double v);

}  // namespace detaudit::reports
