// Pieces of the HTML report (format_html.cpp: the page; format_html_svg.cpp: its plots); not part
// of the reports interface.
//
// Goals: one self-contained file (inline CSS, inline SVG, one small inline script), readable with
// scripts off, every text escaped. Non-goals: interactivity beyond sorting the item table, charts
// with more than counts.
#pragma once

#include <string>

#include "reports/compare.h"

namespace detaudit::reports {

// s as HTML text or attribute value, on one line: backslash and control bytes as escape_line shows
// them (\\, \n, \t, \xHH), bytes that are not valid UTF-8 as \xHH, C1 controls as \u00HH, and
// & < > " ' as character references.
std::string html_escape(const std::string& s);

// The four plots, each one <figure> holding an inline <svg> with the id named here. Drawn with
// their axes and zero bars when nothing diverged or nothing was graded.
//   plot-token-index   histogram of the first differing token index over the differing rows
//   plot-margin        histogram of the margin at divergence (the smaller of the two sides' margins)
//   plot-conditions    divergent items per pair, one bar per pair, zero bars drawn and labelled
//   plot-flips         the flip matrix over the graded rows of every pair but the control
std::string html_plot_token_index(const report& r);
std::string html_plot_margin(const report& r);
std::string html_plot_conditions(const report& r);
std::string html_plot_flips(const report& r);

// Whether a row counts as a divergence in the plots and the item table: exercised, no error, and
// the responses differ.
bool html_row_diverged(const pair_item& row);

}  // namespace detaudit::reports
