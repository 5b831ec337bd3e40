// The HTML report: one self-contained page (no network: inline CSS, inline SVG plots, one small
// inline script, and a Content-Security-Policy that forbids loading anything). In page order: the
// run's manifest basics, the summary table of the pairs, the four plots, the per-item table, each
// divergence as the two texts aligned at the first differing token with the top alternatives
// there, then the notes.
//
// The item table sorts by a click on a header when scripts run (numbers before text, empty cells
// last in either direction) and stays in report order otherwise; `#sort=KEY` or `#sort=KEY-desc` in
// the address sorts it on load (KEY: a header's data-key). The script marks <body data-ready="yes">
// when it has run, and shows any error in #js-error. A filter (differing / drifted / all; `#filter=
// differing` in the address picks one on load) hides the item rows and divergence entries of other
// statuses. Each divergence entry plots |Δ log-prob| per step, the tokens' parting step marked.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>

#include "reports/audit/utf8.h"
#include "reports/compare_internal.h"
#include "reports/format_html.h"
#include "reports/format_internal.h"

namespace detaudit::reports {
namespace {

constexpr size_t BEFORE_CHARS = 40;
constexpr size_t AFTER_CHARS = 60;

const char* const STYLE = R"css(
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:75em;padding:0 1em;color:#1b1b1b}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f2f2f2}td.n{text-align:right;font-variant-numeric:tabular-nums}
th.sort{cursor:pointer}th[aria-sort=ascending]::after{content:" \25B2"}th[aria-sort=descending]::after{content:" \25BC"}
tr.control td{color:#555}tr.bad td.differ{background:#fde2e2;font-weight:bold}
code,.align,.alts{font-family:ui-monospace,monospace;font-size:13px}code{white-space:pre;background:#f4f4f4}
.manifest{display:grid;grid-template-columns:max-content auto;gap:.1em 1em}.manifest dt{font-weight:bold}
.plots{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}.plot{margin:0;border:1px solid #ddd;padding:.5em}
.plot figcaption{font-weight:bold}.caption{margin:.2em 0;color:#555;font-size:12px}
svg .axis{stroke:#333;stroke-width:1}svg .bar{fill:#4a78b5}svg .bar.zero{fill:#999}
svg text{font:11px system-ui,sans-serif;fill:#222}svg .empty{font-size:16px;fill:#888}svg .axis-label{font-size:12px}
svg .cell{fill:#eef3fa;stroke:#333}svg .cell.bad{fill:#fde2e2}svg .cell-count{font-size:20px;font-weight:bold}
.div{border:1px solid #ddd;padding:.5em 1em;margin:1em 0}.div h3{font-size:1em;margin:.2em 0}
.align{display:grid;grid-template-columns:max-content 34ch minmax(0,1fr);gap:.2em .3em;margin:.5em 0}
.align .side{font-family:system-ui,sans-serif;color:#555}
.align .before{display:flex;justify-content:flex-end;overflow:hidden;white-space:pre;color:#555}
.align .rest{white-space:pre;overflow:hidden}mark{background:#ffe066;outline:1px solid #c9a400}
mark.end{background:#eee;outline:1px dashed #888;font-style:italic}
.alts-pair{display:flex;gap:2em;flex-wrap:wrap}.alts tr.chosen td{font-weight:bold;background:#fff6cc}
.js-error{color:#b00;font-weight:bold;border:2px solid #b00;padding:.5em}
#filter{position:sticky;top:0;background:#fff;padding:.3em 0;border-bottom:1px solid #eee}#filter label{margin-right:1em}
.noisy{color:#8a5a00;font-size:12px}svg.drift .bar{fill:#c77d2e}svg.drift .bar.zero{fill:#ccc}svg.drift .cut{stroke:#b00;stroke-dasharray:3 2}
)css";

const char* const SCRIPT = R"js(
(function () {
  var box = document.getElementById('js-error');
  function fail(msg) {
    box.hidden = false;
    box.textContent = 'Script error: ' + msg;
    document.body.setAttribute('data-ready', 'error');
  }
  window.addEventListener('error', function (ev) { fail(ev.message); });
  try {
    var key = function (td) {
      var v = td.getAttribute('data-v');
      return v !== null && v !== '' && !isNaN(v) ? parseFloat(v) : td.textContent;
    };
    var rank = function (k) { return typeof k === 'number' ? 0 : k === '' ? 2 : 1; };
    var cmp = function (x, y) {
      return typeof x === 'number' ? x - y : x.localeCompare(y, undefined, {numeric: true});
    };
    var sort = function (table, col, dir) {
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      var keyed = rows.map(function (r, i) { return {r: r, i: i, k: key(r.cells[col])}; });
      keyed.sort(function (a, b) {
        return rank(a.k) - rank(b.k) || dir * cmp(a.k, b.k) || a.i - b.i;
      });
      keyed.forEach(function (e) { body.appendChild(e.r); });
      var ths = table.tHead.rows[0].cells;
      for (var i = 0; i < ths.length; i++)
        ths[i].setAttribute('aria-sort', i === col ? (dir > 0 ? 'ascending' : 'descending') : 'none');
    };
    var tables = document.querySelectorAll('table.sortable');
    Array.prototype.forEach.call(tables, function (table) {
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
        th.classList.add('sort');
        th.tabIndex = 0;
        var go = function () { sort(table, col, th.getAttribute('aria-sort') === 'ascending' ? -1 : 1); };
        th.addEventListener('click', go);
        th.addEventListener('keydown', function (ev) { if (ev.key === 'Enter') go(); });
      });
    });
    // The filter: which rows and divergence entries show (data-status on each).
    var shows = {
      differing: function (s) { return s === 'differs' || s === 'retokenized'; },
      drifted: function (s) { return s === 'drifted'; },
      all: function () { return true; }
    };
    var filter = function (v) {
      var keep = shows[v] || shows.all;
      Array.prototype.forEach.call(document.querySelectorAll('[data-status]'), function (el) {
        el.hidden = !keep(el.getAttribute('data-status'));
      });
      var radio = document.querySelector('#filter input[value="' + v + '"]');
      if (radio) radio.checked = true;
      document.body.setAttribute('data-filter', shows[v] ? v : 'all');
    };
    Array.prototype.forEach.call(document.querySelectorAll('#filter input'), function (input) {
      input.addEventListener('change', function () { filter(input.value); });
    });
    var f = /^#filter=([a-z]+)$/.exec(location.hash);
    filter(f ? f[1] : 'all');
    var m = /^#sort=([a-z0-9-]+?)(-desc)?$/.exec(location.hash);
    var items = document.getElementById('items');
    if (m && items) {
      var ths = items.tHead.rows[0].cells;
      for (var i = 0; i < ths.length; i++)
        if (ths[i].getAttribute('data-key') === m[1]) sort(items, i, m[2] ? -1 : 1);
    }
    document.body.setAttribute('data-ready', 'yes');
  } catch (e) {
    fail(e && e.message ? e.message : String(e));
  }
})();
)js";

// The length of the valid UTF-8 sequence at s[i] (2 to 4), or 0 when s[i] does not start one.
size_t utf8_valid_len(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if (!utf8_is_cont(s[i + k])) return 0;
  const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
  if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90))
    return 0;
  return n;
}

std::string hex_escape(const char* prefix, unsigned v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%s%0*x", prefix, digits, v);
  return buf;
}

std::string num_text(double v, const char* fmt) {
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string th(const char* key, const char* label) {
  return std::string("<th data-key=\"") + key + "\">" + label + "</th>";
}

// A table cell; `v` (when not empty) is its sort key.
std::string td(const std::string& text_html, const std::string& cls = "", const std::string& v = "") {
  std::string out = "<td";
  if (!cls.empty()) out += " class=\"" + cls + "\"";
  if (!v.empty()) out += " data-v=\"" + v + "\"";
  return out + ">" + text_html + "</td>";
}

std::string td_num(int64_t n) { return n < 0 ? td("", "n") : td(std::to_string(n), "n", std::to_string(n)); }

std::string td_margin(const std::optional<double>& m) {
  return m ? td(margin_text(m), "n", num_text(*m, "%.17g")) : td("n/a", "n");
}

std::string code(const std::string& s) { return "<code>" + html_escape(s) + "</code>"; }

void manifest_section(std::ostringstream& os, const json& m) {
  if (!m.is_object() || m.empty()) return;
  os << "<dl class=\"manifest\">\n";
  auto entry = [&os](const char* dt, const std::string& dd) {
    if (!dd.empty()) os << "<dt>" << dt << "</dt><dd>" << html_escape(dd) << "</dd>\n";
  };
  for (const char* side : {"a", "b"})
    if (auto it = m.find(side); it != m.end() && it->is_object())
      entry(side[0] == 'a' ? "run A" : "run B", json_str(*it, "path"));
  entry("run id", json_str(m, "run_id"));
  entry("detaudit", json_str(m, "tool_version"));
  entry("started", json_str(m, "started"));
  if (auto t = m.find("targets"); t != m.end() && t->is_array())
    for (const json& tg : *t)
      if (tg.is_object()) entry("target", json_str(tg, "label", "?") + " = " + json_str(tg, "spec", "?"));
  os << "</dl>\n";
}

void summary_section(std::ostringstream& os, const report& r) {
  os << "<h2>Summary</h2>\n";
  if (r.pairs.empty()) {
    os << "<p>No pairs of responses to compare.</p>\n";
    return;
  }
  os << "<table id=\"summary\"><thead><tr><th>probe</th><th>A vs B</th><th>differ</th><th>noise</th><th>beyond noise</th>"
     << "<th>p vs noise</th><th>retokenized</th><th>drifted</th><th>errors</th><th>not exercised</th><th>score A \xe2\x86\x92 B</th><th>flips \xe2\x88\x92r/+w</th>"
     << "<th>net</th><th>McNemar p</th></tr></thead><tbody>\n";
  for (const pair_summary& s : r.pairs) {
    const int64_t judged = pair_judged(s);
    const bool bad = s.differ > 0 || (s.one_target && s.retokenized > 0);
    const std::string cls = std::string(s.control ? "control" : "") + (s.control && bad ? " " : "") + (bad ? "bad" : "");
    os << "<tr" << (cls.empty() ? "" : " class=\"" + cls + "\"") << ">"
       << td(html_escape(s.probe)) << td(html_escape(s.cond_a + " vs " + s.cond_b))
       << td(std::to_string(s.differ) + "/" + std::to_string(judged), "n differ") << td(noise_count_text(s), "n")
       << td(beyond_noise_text(s), "n") << td(p_noise_text(s), "n") << td(retokenized_text(s), "n")
       << td(std::to_string(s.drifted) + "/" + std::to_string(judged), "n drifted")
       << td_num(s.errors) << td_num(s.not_exercised) << td(html_escape(score_text(s))) << td(html_escape(flips_text(s)))
       << td(html_escape(net_text(s)), "n") << td(p_mcnemar_text(s), "n") << "</tr>\n";
  }
  os << "</tbody></table>\n";
  const std::string noise = noise_text(r);
  if (!noise.empty()) os << "<p id=\"noise\">" << html_escape(noise) << "</p>\n";
  const std::vector<std::string> oracle = oracle_lines(r);
  if (!oracle.empty()) {
    os << "<ul id=\"oracle\">\n";
    for (const std::string& l : oracle) os << "<li>" << html_escape(l.substr(l.find_first_not_of(' '))) << "</li>\n";
    os << "</ul>\n";
  }
  const auto acc = accuracy_lines(r);
  if (!acc.empty()) {
    os << "<table id=\"accuracy\"><thead><tr><th>condition</th><th>accuracy (Wilson 95% interval, \xc2\xb1 lm-eval "
          "stderr)</th></tr></thead><tbody>\n";
    for (const auto& [name, text] : acc) os << "<tr>" << td(html_escape(name)) << td(html_escape(text)) << "</tr>\n";
    os << "</tbody></table>\n";
  }
}

std::string status_label(const pair_item& row) {
  std::string s = status_name(row.status);
  std::replace(s.begin(), s.end(), '_', ' ');
  return s;
}

std::string grade_text(const pair_item& row) {
  if (!row.correct_a || !row.correct_b) return "";
  return std::string(*row.correct_a ? "right" : "wrong") + " \xe2\x86\x92 " + (*row.correct_b ? "right" : "wrong");
}

void items_row(std::ostringstream& os, const pair_summary& s, const pair_item& row, const std::string& anchor) {
  const divergence& d = row.d;
  const std::string item = anchor.empty() ? html_escape(row.item_id)
                                          : "<a href=\"#" + anchor + "\">" + html_escape(row.item_id) + "</a>";
  os << "<tr data-item=\"" << html_escape(row.item_id) << "\" data-status=\"" << status_name(row.status) << "\">"
     << td(html_escape(s.probe))
     << td(html_escape(row.cond_a + " vs " + row.cond_b)) << td(item)
     << td(status_label(row) + (row.noisy ? " <span class=\"noisy\" title=\"" + html_escape(noisy_text(row)) + "\">(noisy)</span>" : ""))
     << td_num(d.token_index) << td_num(d.char_offset) << td(d.token_index >= 0 ? code(d.token_a) : "")
     << td(d.token_index >= 0 ? code(d.token_b) : "") << td_margin(d.margin_a) << td_margin(d.margin_b)
     << td_num(d.hash_step) << td(grade_text(row)) << td(row.flip == FLIP_NONE ? "" : flip_name(row.flip)) << "</tr>\n";
}

std::string anchor_of(size_t pair, size_t row) { return "d-" + std::to_string(pair) + "-" + std::to_string(row); }

void items_section(std::ostringstream& os, const report& r) {
  os << "<h2>Items</h2>\n<p>Every item of every pair. Click a header to sort.</p>\n"
     << "<p id=\"filter\">Show: <label><input type=\"radio\" name=\"filter\" value=\"differing\"> differing</label>"
     << "<label><input type=\"radio\" name=\"filter\" value=\"drifted\"> drifted</label>"
     << "<label><input type=\"radio\" name=\"filter\" value=\"all\" checked> all</label></p>\n"
     << "<table id=\"items\" class=\"sortable\"><thead><tr>" << th("probe", "probe") << th("pair", "A vs B")
     << th("item", "item") << th("status", "status") << th("token", "token") << th("byte", "byte")
     << th("token-a", "token A") << th("token-b", "token B") << th("margin-a", "margin A") << th("margin-b", "margin B")
     << th("hash-step", "hash step") << th("grade", "grade A \xe2\x86\x92 B") << th("flip", "flip")
     << "</tr></thead><tbody>\n";
  for (size_t p = 0; p < r.pairs.size(); ++p)
    for (size_t i = 0; i < r.pairs[p].rows.size(); ++i) {
      const pair_item& row = r.pairs[p].rows[i];
      items_row(os, r.pairs[p], row, row_listed(row) ? anchor_of(p, i) : "");
    }
  os << "</tbody></table>\n";
}

std::string token_raw(const token_rec& t) { return t.bytes.empty() ? t.text : std::string(t.bytes.begin(), t.bytes.end()); }

// One side's text cut around the divergence: context before, the differing token (or character),
// context after. at_end: the side has no token there (it ended first).
struct cut {
  std::string before, mark, after;
  bool at_end = false;
};

// The cut at token k when the record's text starts with its first k + 1 tokens (it may not: a
// target can report text that is not its tokens' bytes, e.g. invalid UTF-8 replaced).
std::optional<cut> cut_at_token(const record& r, size_t k) {
  std::string prefix;
  for (size_t i = 0; i < k && i < r.tokens.size(); ++i) prefix += token_raw(r.tokens[i]);
  const std::string tok = k < r.tokens.size() ? token_raw(r.tokens[k]) : "";
  const std::string& t = r.text;
  if (t.compare(0, prefix.size(), prefix) != 0 || t.compare(prefix.size(), tok.size(), tok) != 0) return std::nullopt;
  const size_t off = prefix.size(), end = off + tok.size();
  const size_t b = utf8_back(t, off, BEFORE_CHARS), e = utf8_forward(t, end, AFTER_CHARS);
  cut c;
  c.before = t.substr(b, off - b);
  c.mark = tok;
  c.after = t.substr(end, e - end);
  c.at_end = k >= r.tokens.size();
  return c;
}

// At the first differing token when the tokens line up with the text, else at the first
// differing character of the texts (the whole token marked when the text there starts with it).
cut cut_at(const record* r, const divergence& d, bool side_a) {
  if (r && d.token_index >= 0 && r->error.empty())
    if (std::optional<cut> c = cut_at_token(*r, static_cast<size_t>(d.token_index))) return *c;
  cut c;
  c.before = side_a ? d.before_a : d.before_b;
  const std::string& after = side_a ? d.after_a : d.after_b;
  const std::string& tok = side_a ? d.token_a : d.token_b;
  const size_t first = !tok.empty() && after.rfind(tok, 0) == 0 ? tok.size() : utf8_forward(after, 0, 1);
  c.mark = after.substr(0, first);
  c.after = after.substr(first);
  c.at_end = after.empty();
  return c;
}

void align_line(std::ostringstream& os, const std::string& side, const cut& c) {
  os << "<span class=\"side\">" << html_escape(side) << "</span><span class=\"before\"><span>" << html_escape(c.before)
     << "</span></span><span class=\"rest\">";
  if (c.at_end) os << "<mark class=\"end\">(end of text)</mark>";
  else os << "<mark>" << html_escape(c.mark) << "</mark>";
  os << html_escape(c.after) << "</span>\n";
}

bool has_alts(const record* r, const divergence& d) {
  return r && d.token_index >= 0 && static_cast<size_t>(d.token_index) < r->top_logprobs.size() &&
         !r->top_logprobs[static_cast<size_t>(d.token_index)].empty();
}

void alts_table(std::ostringstream& os, const std::string& side, const record* r, const divergence& d, int32_t id,
                const std::string& tok) {
  os << "<div><b>" << html_escape(side) << "</b>";
  if (!has_alts(r, d)) {
    os << "<p>no alternatives recorded at this step</p></div>\n";
    return;
  }
  os << "<table class=\"alts\"><thead><tr><th>#</th><th>token</th><th>id</th><th>log-prob</th></tr></thead><tbody>\n";
  const auto& alts = r->top_logprobs[static_cast<size_t>(d.token_index)];
  for (size_t i = 0; i < alts.size(); ++i) {
    const alt_rec& a = alts[i];
    const bool chosen = (id >= 0 && a.id == id) || (id < 0 && a.token == tok);
    os << "<tr" << (chosen ? " class=\"chosen\"" : "") << ">" << td(std::to_string(i + 1), "n") << td(code(a.token))
       << td(a.id >= 0 ? std::to_string(a.id) : "", "n") << td(num_text(a.logprob, "%.4f"), "n") << "</tr>\n";
  }
  os << "</tbody></table></div>\n";
}

// "first differing token 2 (byte 4): <code> c</code> (id 3) vs <code> X</code> (id 9)"
std::string where_html(const divergence& d) {
  auto tok = [](const std::string& t, int32_t id) {
    return code(t) + (id >= 0 ? " (id " + std::to_string(id) + ")" : "");
  };
  std::string out;
  if (d.token_index >= 0) {
    out = "first differing token " + std::to_string(d.token_index);
    if (d.char_offset >= 0) out += " (byte " + std::to_string(d.char_offset) + ")";
    out += ": " + tok(d.token_a, d.id_a) + " vs " + tok(d.token_b, d.id_b);
  } else if (d.char_offset >= 0) {
    out = "first differing byte " + std::to_string(d.char_offset);
  }
  if (!d.note.empty()) out += (out.empty() ? "" : "; ") + html_escape(d.note);
  return out;
}

// "A alone", but "A:alone" as is: a condition that already names its target keeps one prefix.
std::string side_label(const std::string& side, const std::string& cond) {
  const size_t colon = cond.find(':');
  return colon != std::string::npos && colon > 0 ? cond : side + " " + cond;
}

// Per step, the largest |difference| of an alternative both sides list (by id, else string), over
// the steps both have alternatives for; the step where the tokens part is marked. "" when no step
// has alternatives on both sides.
std::string drift_plot(const pair_item& row) {
  if (!row.a || !row.b || row.error) return "";
  const auto& ta = row.a->top_logprobs;
  const auto& tb = row.b->top_logprobs;
  const size_t total = std::min(ta.size(), tb.size()), n = std::min(total, size_t{512});
  std::vector<double> delta(n, 0.0);
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    if (ta[i].empty() || tb[i].empty()) continue;
    any = true;
    for (const alt_rec& x : ta[i])
      for (const alt_rec& y : tb[i]) {
        const bool same = x.token == y.token && (x.id < 0 || y.id < 0 || x.id == y.id);  // as the report's drift
        if (same) delta[i] = std::max(delta[i], std::abs(x.logprob - y.logprob));
      }
  }
  if (!any) return "";
  const double top = *std::max_element(delta.begin(), delta.end());
  const int w = 6, h = 60, left = 4;
  std::ostringstream os;
  std::string cut;
  if (total > n) {
    cut = "; the first " + std::to_string(n) + " of " + std::to_string(total) + " steps";
    if (row.d.token_index >= static_cast<int64_t>(n)) cut += ", the tokens part at step " + std::to_string(row.d.token_index) + ", past the plot";
  }
  os << "<figure class=\"drift-fig\"><figcaption class=\"caption\">|\xce\x94 log-prob| per step (largest over the "
     << "alternatives both sides list; max " << num_text(top, "%.3g") << cut << ")</figcaption>\n<svg class=\"drift\" data-steps=\"" << n
     << "\" width=\"" << left + w * static_cast<int>(n) + 4 << "\" height=\"" << h + 4 << "\" role=\"img\">";
  for (size_t i = 0; i < n; ++i) {
    const double bar = top > 0 ? delta[i] / top * h : 0;
    const int bh = delta[i] > 0 ? std::max(1, static_cast<int>(bar + 0.5)) : 1;
    os << "<rect class=\"bar" << (delta[i] > 0 ? "" : " zero") << "\" x=\"" << left + w * static_cast<int>(i) << "\" y=\""
       << h - bh << "\" width=\"" << w - 1 << "\" height=\"" << bh << "\"><title>step " << i << ": " << num_text(delta[i], "%.3g")
       << "</title></rect>";
  }
  if (row.d.token_index >= 0 && static_cast<size_t>(row.d.token_index) < n) {
    const int x = left + w * static_cast<int>(row.d.token_index);
    os << "<line class=\"cut\" x1=\"" << x << "\" y1=\"0\" x2=\"" << x << "\" y2=\"" << h << "\"><title>the tokens part at step "
       << row.d.token_index << "</title></line>";
  }
  os << "</svg></figure>\n";
  return os.str();
}

void divergence_entry(std::ostringstream& os, const pair_summary& s, const pair_item& row, const std::string& anchor) {
  const divergence& d = row.d;
  os << "<section class=\"div\" id=\"" << anchor << "\" data-status=\"" << status_name(row.status) << "\"><h3>"
     << html_escape(row.item_id) << " \xe2\x80\x94 "
     << html_escape(pair_title(s)) << " (" << status_label(row) << ")</h3>\n<p>";
  if (row.error) {
    os << "error: " << html_escape(d.note) << "</p></section>\n";
    return;
  }
  if (d.identical) {
    os << "identical tokens; " << html_escape(hash_text(row)) << "</p>\n" << drift_plot(row) << "</section>\n";
    return;
  }
  os << where_html(d) << "; margins " << margin_text(d.margin_a) << " vs " << margin_text(d.margin_b);
  if (!hash_text(row).empty()) os << "; " << html_escape(hash_text(row));
  if (!grade_text(row).empty()) os << "; graded " << grade_text(row);
  if (row.flip != FLIP_NONE) os << " (<b>" << flip_name(row.flip) << "</b>)";
  if (!row.exercised) os << "; not exercised: " << html_escape(row.reason);
  if (row.noisy) os << "; " << html_escape(noisy_text(row));
  os << "</p>\n";
  if (row.oracle)
    os << "<p class=\"oracle\" data-class=\"" << html_escape(row.oracle->cls) << "\">oracle: "
       << (row.oracle->cls.empty() ? "" : "<b>" + html_escape(row.oracle->cls) + "</b>: ") << oracle_sentence(row, {[](const std::string& t) { return "'" + html_escape(t) + "'"; }, [](const std::string& t) { return html_escape(t); }})
       << "</p>\n";
  os << "<div class=\"align\">\n";
  align_line(os, side_label("A", row.cond_a), cut_at(row.a, d, true));
  align_line(os, side_label("B", row.cond_b), cut_at(row.b, d, false));
  os << "</div>\n" << drift_plot(row);
  if (!has_alts(row.a, d) && !has_alts(row.b, d)) {
    os << "<p>No alternatives recorded at token " << d.token_index << " on either side.</p></section>\n";
    return;
  }
  os << "<div class=\"alts-pair\">\n";
  alts_table(os, side_label("A", row.cond_a) + ": top alternatives at token " + std::to_string(d.token_index), row.a, d,
             d.id_a, d.token_a);
  alts_table(os, side_label("B", row.cond_b) + ": top alternatives at token " + std::to_string(d.token_index), row.b, d,
             d.id_b, d.token_b);
  os << "</div></section>\n";
}

void divergences_section(std::ostringstream& os, const report& r) {
  os << "<h2>Divergences</h2>\n";
  bool any = false;
  for (size_t p = 0; p < r.pairs.size(); ++p)
    for (size_t i = 0; i < r.pairs[p].rows.size(); ++i)
      if (row_listed(r.pairs[p].rows[i])) {
        divergence_entry(os, r.pairs[p], r.pairs[p].rows[i], anchor_of(p, i));
        any = true;
      }
  if (!any) os << "<p>No divergence: every pair of responses is identical.</p>\n";
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = utf8_valid_len(s, i);
      const bool c1_control = n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0;
      if (n == 0) out += hex_escape("\\x", c, 2);
      else if (c1_control) out += hex_escape("\\u", static_cast<unsigned char>(s[i + 1]), 4);
      else out.append(s, i, n);
      if (n > 0) i += n - 1;
    } else if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else if (c == '\'') out += "&#39;";
    else out += escape_line(std::string(1, static_cast<char>(c)));
  }
  return out;
}

std::string render_html(const report& r) {
  std::ostringstream os;
  const std::string run_id = r.manifest.is_object() ? json_str(r.manifest, "run_id") : "";
  os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
     << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
     << "script-src 'unsafe-inline'\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
     << "<title>detaudit report" << (run_id.empty() ? "" : " \xe2\x80\x94 " + html_escape(run_id)) << "</title>\n"
     << "<style>" << STYLE << "</style>\n</head>\n<body>\n<h1>detaudit report</h1>\n"
     << "<p id=\"js-error\" class=\"js-error\" hidden></p>\n";
  manifest_section(os, r.manifest);
  summary_section(os, r);
  os << "<h2>Plots</h2>\n<div class=\"plots\">\n"
     << html_plot_token_index(r) << html_plot_margin(r) << html_plot_conditions(r) << html_plot_flips(r) << "</div>\n";
  items_section(os, r);
  divergences_section(os, r);
  if (!r.notes.empty()) {
    os << "<h2>Notes</h2>\n<ul>\n";
    for (const std::string& n : r.notes) os << "<li>" << html_escape(n) << "</li>\n";
    os << "</ul>\n";
  }
  os << "<script>" << SCRIPT << "</script>\n</body>\n</html>\n";
  return os.str();
}

}  // namespace detaudit::reports
