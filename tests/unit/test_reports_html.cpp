// The HTML report on hand-built reports whose divergences are known: self-contained (no network
// reference), the summary, the four plots (also when nothing diverged), the highlighted token and
// its alternatives, escaping; then the page loaded in headless Chromium, its script run. The page
// `detaudit report --format html` writes: tests/e2e/test_reports_html.cpp.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "reports/compare.h"
#include "reports/format_html.h"
#include "test_reports_util.h"
#include "test_util.h"

using namespace detaudit::reports;
using detaudit::test::check_plots_present;
using detaudit::test::contains;
using detaudit::test::graded;
using detaudit::test::rec;
using detaudit::test::words;

namespace {

// Every record of `v` under condition alone, copied as the control.
void add_control(std::vector<record>& v) {
  const std::vector<record> base = v;
  for (const record& r : base)
    if (r.condition == "alone") {
      record c = r;
      c.condition = "control";
      v.push_back(c);
    }
}

report sample_report() {
  return compare_run(detaudit::test::sample_records(), {{"run_id", "run-42"}, {"tool_version", "0.1.0"},
                                                        {"targets", {{{"label", "A"}, {"spec", "engine:test.gguf"}}}}});
}

// Two items, identical under every condition.
report quiet_report() {
  std::vector<record> v;
  for (const char* id : {"q1", "q2"}) {
    v.push_back(rec(id, "alone", words("the same answer")));
    v.push_back(rec(id, "concurrent-8", words("the same answer"), "concurrency"));
    v.back().evidence = {{"overlap", true}, {"batch_width", 8}};
  }
  add_control(v);
  return compare_run(std::move(v), {{"run_id", "run-quiet"}});
}

// The item ids of the item table's rows, in page order.
std::vector<std::string> item_order(const std::string& h) {
  const size_t start = h.find("<table id=\"items\"");
  const size_t end = h.find("</table>", start);
  REQUIRE(start != std::string::npos);
  std::vector<std::string> out;
  const std::string table = h.substr(start, end - start);
  const std::string key = "<tr data-item=\"";
  for (size_t p = table.find(key); p != std::string::npos; p = table.find(key, p)) {
    p += key.size();
    out.push_back(table.substr(p, table.find('"', p) - p));
  }
  return out;
}

}  // namespace

TEST_CASE("reports_html: the page is self-contained and holds the summary, the plots and the highlight") {
  const std::string h = report_render(sample_report(), "html");
  CAPTURE(h);
  CHECK(h.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK_FALSE(contains(h, "http://"));
  CHECK_FALSE(contains(h, "https://"));
  CHECK_FALSE(contains(h, " src="));
  CHECK_FALSE(contains(h, "<link"));
  CHECK(contains(h, "content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'\""));
  CHECK(contains(h, "<dt>run id</dt><dd>run-42</dd>"));
  CHECK(contains(h, "<dt>detaudit</dt><dd>0.1.0</dd>"));
  CHECK(contains(h, "<dt>target</dt><dd>A = engine:test.gguf</dd>"));

  CHECK(contains(h, "<table id=\"summary\">"));
  CHECK(contains(h, "<tr class=\"bad\"><td>concurrency</td><td>alone vs concurrent-8</td><td class=\"n differ\">4/5</td>"
                    "<td class=\"n\">0</td><td class=\"n\">4</td><td class=\"n\">0.01</td><td class=\"n\">0/5</td><td class=\"n drifted\">1/5</td>"
                    "<td class=\"n\" data-v=\"1\">1</td><td class=\"n\" data-v=\"1\">1</td>"
                    "<td>1/1 -&gt; 0/1</td><td>-1/+0</td><td class=\"n\">-1</td><td class=\"n\">1</td></tr>"));
  CHECK(contains(h, "<p id=\"noise\">noise: 2 alone answers per item"));
  CHECK(contains(h, "<table id=\"accuracy\">"));
  CHECK(contains(h, "<tr class=\"control\"><td>control</td><td>alone vs control</td><td class=\"n differ\">0/7</td>"));

  check_plots_present(h);
  CHECK(contains(h, "<title>0: 1</title>"));
  CHECK(contains(h, "<title>1: 1</title>"));
  CHECK(contains(h, "<title>2: 2</title>"));
  CHECK(contains(h, "<title>3: 0</title>"));
  CHECK(contains(h, "4 divergence(s) across all pairs"));
  CHECK(contains(h, "<title>.1\xe2\x80\x93.5: 1</title>"));
  CHECK(contains(h, "<title>&lt;.001: 0</title>"));
  CHECK(contains(h, "1 divergence(s) with margins; 3 without two recorded alternatives on either side"));
  CHECK(contains(h, "<title>concurrency: alone vs concurrent-8: 4 of 5 differ</title>"));
  CHECK(contains(h, "<rect class=\"bar zero\""));
  CHECK(contains(h, ">0/7</text>"));
  CHECK(contains(h, "<title>right-to-wrong: 1</title>"));
  CHECK(contains(h, "<title>unchanged right: 0</title>"));
  CHECK(contains(h, "1 graded item pair(s)"));

  CHECK(contains(h, "<span class=\"before\"><span>a b</span></span><span class=\"rest\"><mark> c</mark> d</span>"));
  CHECK(contains(h, "<span class=\"before\"><span>a b</span></span><span class=\"rest\"><mark> X</mark> d</span>"));
  CHECK(contains(h, "<tr class=\"chosen\"><td class=\"n\">1</td><td><code> c</code></td><td class=\"n\">3</td>"
                    "<td class=\"n\">-0.2500</td></tr>"));
  CHECK(contains(h, "<tr><td class=\"n\">2</td><td><code> c</code></td><td class=\"n\">3</td><td class=\"n\">-0.6250</td></tr>"));
  CHECK(contains(h, "<span></span></span><span class=\"rest\"><mark>line one\\nline two</mark></span>"));
  CHECK(contains(h, "<span>x&lt;&amp;&gt;&quot;y</span></span><span class=\"rest\"><mark>\\x01\\xffz</mark></span>"));
  CHECK(contains(h, "error: side B failed: HTTP 500: &lt;oops&gt; &amp; &quot;boom&quot;"));
  CHECK(contains(h, "first differing token 2 (byte 4): <code> c</code> (id 3) vs <code> X</code> (id 9); "
                    "margins 0.5 vs 0.125; logit hash differs from step 2</p>"));
  CHECK(contains(h, "first differing token 0 (byte 14): <code>line one\\nline two</code> vs <code>line one\\nline 2</code>; "
                    "margins n/a vs n/a</p>"));
  CHECK(contains(h, "<p>No alternatives recorded at token 2 on either side.</p>"));
  CHECK_FALSE(contains(h, "<oops>"));

  CHECK(contains(h, "<table id=\"items\" class=\"sortable\">"));
  CHECK(contains(h, "<th data-key=\"token\">token</th>"));
  CHECK(contains(h, "<a href=\"#d-1-0\">q1</a>"));
  CHECK(contains(h, "<section class=\"div\" id=\"d-1-0\" data-status=\"differs\">"));
  CHECK(item_order(h).size() == 14);
}

TEST_CASE("reports_html: with no divergence the plots are still drawn") {
  const std::string h = report_render(quiet_report(), "html");
  CAPTURE(h);
  check_plots_present(h);
  CHECK(contains(h, "<text class=\"empty\""));
  CHECK(contains(h, ">no divergence</text>"));
  CHECK(contains(h, "0 divergence(s) across all pairs"));
  CHECK(contains(h, "<title>concurrency: alone vs concurrent-8: 0 of 2 differ</title>"));
  CHECK(contains(h, ">0/2</text>"));
  CHECK(contains(h, "nothing graded"));
  CHECK(contains(h, "<p>No divergence: every pair of responses is identical.</p>"));
  CHECK_FALSE(contains(h, "<mark>"));
}

// The tokens' bytes (a lone 0xE2) are not the text (U+FFFD there): q8 parts inside a token, q9 where one starts.
TEST_CASE("reports_html: a text that is not its tokens' bytes is cut at the first differing character") {
  std::vector<record> v;
  record a = rec("q8", "alone", {{1, "ab"}, {2, "\xef\xbf\xbd"}, {3, " x"}});
  record b = rec("q8", "concurrent-8", {{1, "ab"}, {2, "\xef\xbf\xbd"}, {4, " yz"}}, "concurrency");
  record c = rec("q9", "alone", {{1, "ab"}, {2, "\xef\xbf\xbd"}, {5, "cd"}});
  record d = rec("q9", "concurrent-8", {{1, "ab"}, {2, "\xef\xbf\xbd"}, {6, "ef"}}, "concurrency");
  for (record* r : {&a, &b, &c, &d}) {
    r->tokens[1].bytes = {0xE2};
    v.push_back(*r);
  }
  add_control(v);
  const std::string h = report_render(compare_run(std::move(v)), "html");
  CAPTURE(h);
  CHECK(contains(h, "first differing token 2 (byte 6): <code> x</code> (id 3) vs <code> yz</code> (id 4)"));
  CHECK(contains(h, "<span>ab\xef\xbf\xbd </span></span><span class=\"rest\"><mark>x</mark></span>"));
  CHECK(contains(h, "<span>ab\xef\xbf\xbd </span></span><span class=\"rest\"><mark>y</mark>z</span>"));
  CHECK(contains(h, "<span>ab\xef\xbf\xbd</span></span><span class=\"rest\"><mark>cd</mark></span>"));
  CHECK(contains(h, "<span>ab\xef\xbf\xbd</span></span><span class=\"rest\"><mark>ef</mark></span>"));
}

TEST_CASE("reports_html: html_escape shows control characters and bad bytes") {
  CHECK(html_escape("a\nb\t\\<\x01" "\xc3\xa9" "\xff" "\xc2\x85" "'&") ==
        "a\\nb\\t\\\\&lt;\\x01\xc3\xa9\\xff\\u0085&#39;&amp;");
  CHECK(html_escape("\xed\xa0\x80") == "\\xed\\xa0\\x80");
  CHECK(html_escape("\xf0\x9f\x98\x80") == "\xf0\x9f\x98\x80");
}

TEST_CASE("reports_html: the page loads in headless Chromium and shows the summary") {
  const auto which = detaudit::test::run_cmd("command -v chromium");
  INFO("chromium is not installed: run scripts/setup.sh (Debian package chromium) to get it");
  REQUIRE(which.exit_code == 0);
  const std::string dir = detaudit::test::scratch_dir("reports_html_chromium");
  const std::string page = dir + "/report.html";
  {
    std::ofstream f(page, std::ios::binary);
    f << report_render(sample_report(), "html");
  }
  const std::string cmd = "timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run "
                          "--user-data-dir=" + detaudit::test::shell_quote(dir + "/profile") +
                          " --enable-logging=stderr --v=0 --dump-dom " +
                          detaudit::test::shell_quote("file://" + page + "#sort=token-desc");
  const auto r = detaudit::test::run_cmd(cmd);
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  const std::string& dom = r.out;
  CHECK(contains(dom, "data-ready=\"yes\""));
  CHECK(contains(dom, "<p id=\"js-error\" class=\"js-error\" hidden=\"\"></p>"));
  CHECK_FALSE(contains(r.err, "Uncaught"));
  CHECK_FALSE(contains(r.err, "Refused to"));
  CHECK(contains(dom, "<table id=\"summary\">"));
  CHECK(contains(dom, "<td class=\"n differ\">4/5</td>"));
  CHECK(contains(dom, "<svg id=\"plot-flips\""));
  CHECK(contains(dom, "aria-sort=\"descending\""));
  const std::vector<std::string> order = item_order(dom);
  REQUIRE(order.size() == 14);
  CHECK(std::vector<std::string>(order.begin(), order.begin() + 5) == std::vector<std::string>{"q1", "q2", "q5", "q7", "q3"});
}

TEST_CASE("reports_html: the filter shows differing, drifted or all rows in headless Chromium, and entries plot drift") {
  const auto which = detaudit::test::run_cmd("command -v chromium");
  INFO("chromium is not installed: run scripts/setup.sh (Debian package chromium) to get it");
  REQUIRE(which.exit_code == 0);
  const std::string dir = detaudit::test::scratch_dir("reports_html_filter");
  const std::string page = dir + "/report.html";
  const std::string html = report_render(sample_report(), "html");
  {
    std::ofstream f(page, std::ios::binary);
    f << html;
  }
  // Every divergence entry with alternatives on both sides has its drift plot; q1 parts at token 2.
  CHECK(contains(html, "<svg class=\"drift\" data-steps=\""));
  CHECK(contains(html, "<title>the tokens part at step 2</title>"));
  // A label keeps one target prefix: no "A A:" anywhere.
  CHECK_FALSE(contains(html, "A A:"));
  auto dump = [&](const std::string& hash) {
    const std::string cmd = "timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run "
                            "--user-data-dir=" + detaudit::test::shell_quote(dir + "/profile-" + hash) +
                            " --dump-dom " + detaudit::test::shell_quote("file://" + page + "#filter=" + hash);
    const auto r = detaudit::test::run_cmd(cmd);
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    return r.out;
  };
  // Counts the item rows of a status, and of those the hidden ones.
  auto rows = [](const std::string& dom, const std::string& status, bool hidden) {
    size_t n = 0;
    const std::string key = "data-status=\"" + status + "\"";
    for (size_t at = dom.find("<tr data-item="); at != std::string::npos; at = dom.find("<tr data-item=", at + 1)) {
      const std::string tag = dom.substr(at, dom.find('>', at) - at);
      if (tag.find(key) != std::string::npos && (tag.find(" hidden=") != std::string::npos) == hidden) ++n;
    }
    return n;
  };
  const std::string differing = dump("differing");
  CHECK(contains(differing, "data-filter=\"differing\""));
  CHECK(contains(differing, "data-ready=\"yes\""));
  CHECK(rows(differing, "differs", false) == 4);  // q1, q2, q3, q7
  CHECK(rows(differing, "differs", true) == 0);
  CHECK(rows(differing, "identical", false) == 0);
  CHECK(rows(differing, "drifted", true) == 1);
  CHECK(rows(differing, "error", true) == 1);
  // The diff view as the browser shows it: each shown entry aligns both sides at the divergence,
  // marked, with both sides' alternatives at that step; the drifted entry is hidden.
  CHECK(contains(differing, "<section class=\"div\" id=\"d-1-0\" data-status=\"differs\"><h3>"));
  CHECK(contains(differing, "<mark> c</mark>"));
  CHECK(contains(differing, "<mark> X</mark>"));
  CHECK(contains(differing, "<table class=\"alts\">"));
  CHECK(contains(differing, "data-status=\"drifted\" hidden=\"\""));
  const std::string drifted = dump("drifted");
  CHECK(rows(drifted, "drifted", false) == 1);
  CHECK(rows(drifted, "differs", true) == 4);
  const std::string all = dump("all");
  CHECK(rows(all, "identical", true) == 0);
  CHECK(rows(all, "differs", false) == 4);
}
