// The HTML report's plots as inline SVG: two histograms, a bar per pair and the flip matrix. Counts
// only; every bin and bar is drawn even at zero, so an empty chart still says "nothing here".
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <vector>

#include "reports/audit/utf8.h"
#include "reports/format_html.h"
#include "reports/format_internal.h"

namespace detaudit::reports {
namespace {

constexpr int WIDTH = 480;
constexpr int HEIGHT = 230;
constexpr int LEFT = 44, k_right = 12, k_top = 22, k_bottom = 48;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

struct histogram {
  std::string id, title, x_label, caption;
  std::vector<std::string> labels;
  std::vector<int64_t> counts;
};

void svg_open(std::ostringstream& os, const std::string& id, const std::string& title, int w, int h) {
  os << "<figure class=\"plot\"><figcaption>" << html_escape(title) << "</figcaption>\n"
     << "<svg id=\"" << id << "\" width=\"" << w << "\" height=\"" << h
     << "\" viewBox=\"0 0 " << w << " " << h << "\" role=\"img\" aria-label=\"" << html_escape(title) << "\">\n";
}

void svg_close(std::ostringstream& os, const std::string& caption) {
  os << "</svg>";
  if (!caption.empty()) os << "<p class=\"caption\">" << html_escape(caption) << "</p>";
  os << "</figure>\n";
}

void y_axis(std::ostringstream& os, int64_t y_max, double plot_h) {
  const double x0 = LEFT, y0 = k_top + plot_h;
  os << "<line class=\"axis\" x1=\"" << x0 << "\" y1=\"" << k_top << "\" x2=\"" << x0 << "\" y2=\"" << num(y0) << "\"/>\n"
     << "<line class=\"axis\" x1=\"" << x0 << "\" y1=\"" << num(y0) << "\" x2=\"" << WIDTH - k_right << "\" y2=\""
     << num(y0) << "\"/>\n";
  std::vector<int64_t> ticks = {0, y_max};
  if (y_max >= 4) ticks.push_back(y_max / 2);
  for (int64_t t : ticks) {
    const double y = y0 - plot_h * static_cast<double>(t) / static_cast<double>(y_max);
    os << "<text class=\"tick\" x=\"" << x0 - 4 << "\" y=\"" << num(y + 4) << "\" text-anchor=\"end\">" << t << "</text>\n";
  }
}

// Vertical bars, one per bin, with the count over each bar (0 included) and "no divergence" across
// the plot when every count is zero.
std::string histogram_svg(const histogram& h, const std::string& empty_label) {
  std::ostringstream os;
  svg_open(os, h.id, h.title, WIDTH, HEIGHT);
  const double plot_w = WIDTH - LEFT - k_right, plot_h = HEIGHT - k_top - k_bottom;
  const int64_t peak = h.counts.empty() ? 0 : *std::max_element(h.counts.begin(), h.counts.end());
  const int64_t y_max = std::max<int64_t>(peak, 1);
  y_axis(os, y_max, plot_h);
  const size_t n = std::max<size_t>(h.counts.size(), 1);
  const double slot = plot_w / static_cast<double>(n);
  const size_t label_every = (n + 11) / 12;
  for (size_t i = 0; i < h.counts.size(); ++i) {
    const double bh = plot_h * static_cast<double>(h.counts[i]) / static_cast<double>(y_max);
    const double x = LEFT + slot * static_cast<double>(i) + slot * 0.1, y = k_top + plot_h - bh;
    os << "<rect class=\"bar\" x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"" << num(slot * 0.8)
       << "\" height=\"" << num(bh) << "\"><title>" << html_escape(h.labels[i]) << ": " << h.counts[i]
       << "</title></rect>\n"
       << "<text class=\"count\" x=\"" << num(x + slot * 0.4) << "\" y=\"" << num(y - 3) << "\" text-anchor=\"middle\">"
       << h.counts[i] << "</text>\n";
    if (i % label_every == 0)
      os << "<text class=\"tick\" x=\"" << num(x + slot * 0.4) << "\" y=\"" << num(k_top + plot_h + 14)
         << "\" text-anchor=\"middle\">" << html_escape(h.labels[i]) << "</text>\n";
  }
  os << "<text class=\"axis-label\" x=\"" << num(LEFT + plot_w / 2) << "\" y=\"" << HEIGHT - 8
     << "\" text-anchor=\"middle\">" << html_escape(h.x_label) << "</text>\n";
  if (peak == 0)
    os << "<text class=\"empty\" x=\"" << num(LEFT + plot_w / 2) << "\" y=\"" << num(k_top + plot_h / 2)
       << "\" text-anchor=\"middle\">" << html_escape(empty_label) << "</text>\n";
  svg_close(os, h.caption);
  return os.str();
}

// s cut to n code points, an ellipsis marking the cut.
std::string clip(const std::string& s, size_t n) {
  const size_t end = utf8_forward(s, 0, n);
  return end >= s.size() ? s : s.substr(0, end) + "\xe2\x80\xa6";
}

std::vector<const pair_item*> diverged_rows(const report& r) {
  std::vector<const pair_item*> out;
  for (const pair_summary& s : r.pairs)
    for (const pair_item& row : s.rows)
      if (html_row_diverged(row)) out.push_back(&row);
  return out;
}

}  // namespace

bool html_row_diverged(const pair_item& row) { return row.exercised && !row.error && !row.d.identical; }

std::string html_plot_token_index(const report& r) {
  histogram h{"plot-token-index", "First differing token index", "token index", "", {}, {}};
  int64_t hi = 9, no_token = 0;
  std::vector<int64_t> idx;
  for (const pair_item* row : diverged_rows(r)) {
    if (row->d.token_index < 0) ++no_token;
    else idx.push_back(row->d.token_index), hi = std::max(hi, row->d.token_index);
  }
  const int64_t width = hi < 20 ? 1 : (hi + 20) / 20;
  const int64_t bins = hi / width + 1;
  h.counts.assign(static_cast<size_t>(bins), 0);
  for (int64_t b = 0; b < bins; ++b)
    h.labels.push_back(width == 1 ? std::to_string(b)
                                  : std::to_string(b * width) + "\xe2\x80\x93" + std::to_string(b * width + width - 1));
  for (int64_t k : idx) ++h.counts[static_cast<size_t>(k / width)];
  h.caption = std::to_string(idx.size()) + " divergence(s) across all pairs";
  if (no_token > 0) h.caption += "; " + std::to_string(no_token) + " without a differing token (texts differ only)";
  return histogram_svg(h, "no divergence");
}

std::string html_plot_margin(const report& r) {
  static const double edges[] = {0.001, 0.01, 0.1, 0.5, 1, 2, 5, std::numeric_limits<double>::infinity()};
  histogram h{"plot-margin", "Margin at divergence (top-1 minus top-2 log-prob)", "margin (smaller of the two sides)",
              "", {"<.001", ".001\xe2\x80\x93.01", ".01\xe2\x80\x93.1", ".1\xe2\x80\x93.5", ".5\xe2\x80\x93" "1",
                   "1\xe2\x80\x93" "2", "2\xe2\x80\x93" "5", "\xe2\x89\xa5" "5"},
              std::vector<int64_t>(8, 0)};
  int64_t with = 0, without = 0;
  for (const pair_item* row : diverged_rows(r)) {
    const divergence& d = row->d;
    if (!d.margin_a && !d.margin_b) {
      ++without;
      continue;
    }
    const double m = std::min(d.margin_a.value_or(d.margin_b.value_or(0)), d.margin_b.value_or(d.margin_a.value_or(0)));
    size_t b = 0;
    while (b + 1 < h.counts.size() && !(m < edges[b])) ++b;
    ++h.counts[b];
    ++with;
  }
  h.caption = std::to_string(with) + " divergence(s) with margins";
  if (without > 0) h.caption += "; " + std::to_string(without) + " without two recorded alternatives on either side";
  return histogram_svg(h, "no divergence");
}

std::string html_plot_conditions(const report& r) {
  const int row_h = 22, label_w = 220, count_w = 60;
  const int h = k_top + row_h * static_cast<int>(std::max<size_t>(r.pairs.size(), 1)) + 30;
  std::ostringstream os;
  svg_open(os, "plot-conditions", "Divergent items per pair", WIDTH, h);
  const double bar_w = WIDTH - label_w - count_w - k_right;
  int64_t peak = 1;
  for (const pair_summary& s : r.pairs) peak = std::max(peak, s.differ);
  os << "<line class=\"axis\" x1=\"" << label_w << "\" y1=\"" << k_top - 4 << "\" x2=\"" << label_w << "\" y2=\""
     << k_top + row_h * static_cast<int>(r.pairs.size()) << "\"/>\n";
  for (size_t i = 0; i < r.pairs.size(); ++i) {
    const pair_summary& s = r.pairs[i];
    const int y = k_top + row_h * static_cast<int>(i);
    const double w = std::max(2.0, bar_w * static_cast<double>(s.differ) / static_cast<double>(peak));
    const std::string judged = std::to_string(pair_judged(s));
    os << "<text class=\"tick\" x=\"" << label_w - 6 << "\" y=\"" << y + 14 << "\" text-anchor=\"end\">"
       << html_escape(clip(s.probe + ": " + s.cond_b, 36)) << "</text>\n"
       << "<rect class=\"bar" << (s.differ == 0 ? " zero" : "") << "\" x=\"" << label_w << "\" y=\"" << y + 3
       << "\" width=\"" << num(w) << "\" height=\"" << row_h - 6 << "\"><title>" << html_escape(pair_title(s)) << ": "
       << s.differ << " of " << judged << " differ</title></rect>\n"
       << "<text class=\"count\" x=\"" << num(label_w + w + 5) << "\" y=\"" << y + 14 << "\">" << s.differ << "/"
       << judged << "</text>\n";
  }
  if (r.pairs.empty())
    os << "<text class=\"empty\" x=\"" << WIDTH / 2 << "\" y=\"" << k_top + 14
       << "\" text-anchor=\"middle\">no pairs to compare</text>\n";
  os << "<text class=\"axis-label\" x=\"" << label_w + bar_w / 2 << "\" y=\"" << h - 8
     << "\" text-anchor=\"middle\">items that differ / items judged</text>\n";
  svg_close(os, "");
  return os.str();
}

namespace {

struct flip_counts {
  int64_t right_right = 0, right_wrong = 0, wrong_right = 0, wrong_same = 0, wrong_other = 0;
};

flip_counts flips_count(const report& r) {
  flip_counts c;
  for (const pair_summary& s : r.pairs) {
    if (s.control) continue;
    for (const pair_item& row : s.rows) {
      if (!row.exercised || row.error || !row.correct_a || !row.correct_b) continue;
      if (*row.correct_a) ++(*row.correct_b ? c.right_right : c.right_wrong);
      else if (*row.correct_b) ++c.wrong_right;
      else ++(row.flip == FLIP_WRONG_TO_OTHER_WRONG ? c.wrong_other : c.wrong_same);
    }
  }
  return c;
}

void flip_cell(std::ostringstream& os, int x, int y, int w, int h, int64_t n, const char* name, bool bad) {
  os << "<rect class=\"cell" << (bad && n > 0 ? " bad" : "") << "\" x=\"" << x << "\" y=\"" << y << "\" width=\"" << w
     << "\" height=\"" << h << "\"><title>" << name << ": " << n << "</title></rect>\n"
     << "<text class=\"cell-count\" x=\"" << x + w / 2 << "\" y=\"" << y + h / 2 << "\" text-anchor=\"middle\">" << n
     << "</text>\n"
     << "<text class=\"tick\" x=\"" << x + w / 2 << "\" y=\"" << y + h / 2 + 18 << "\" text-anchor=\"middle\">" << name
     << "</text>\n";
}

}  // namespace

std::string html_plot_flips(const report& r) {
  const flip_counts c = flips_count(r);
  const int x0 = 110, y0 = 40, cw = 180, ch = 80;
  std::ostringstream os;
  svg_open(os, "plot-flips", "Flip matrix (graded items, every pair but the control)", WIDTH, y0 + 2 * ch + 20);
  os << "<text class=\"axis-label\" x=\"" << x0 + cw / 2 << "\" y=\"" << y0 - 10 << "\" text-anchor=\"middle\">B right</text>\n"
     << "<text class=\"axis-label\" x=\"" << x0 + cw + cw / 2 << "\" y=\"" << y0 - 10
     << "\" text-anchor=\"middle\">B wrong</text>\n"
     << "<text class=\"axis-label\" x=\"" << x0 - 10 << "\" y=\"" << y0 + ch / 2 << "\" text-anchor=\"end\">A right</text>\n"
     << "<text class=\"axis-label\" x=\"" << x0 - 10 << "\" y=\"" << y0 + ch + ch / 2
     << "\" text-anchor=\"end\">A wrong</text>\n";
  flip_cell(os, x0, y0, cw, ch, c.right_right, "unchanged right", false);
  flip_cell(os, x0 + cw, y0, cw, ch, c.right_wrong, "right-to-wrong", true);
  flip_cell(os, x0, y0 + ch, cw, ch, c.wrong_right, "wrong-to-right", false);
  flip_cell(os, x0 + cw, y0 + ch, cw / 2, ch, c.wrong_same, "same wrong", false);
  flip_cell(os, x0 + cw + cw / 2, y0 + ch, cw / 2, ch, c.wrong_other, "other wrong", true);
  const int64_t total = c.right_right + c.right_wrong + c.wrong_right + c.wrong_same + c.wrong_other;
  svg_close(os, total == 0 ? "nothing graded" : std::to_string(total) + " graded item pair(s)");
  return os.str();
}

}  // namespace detaudit::reports
