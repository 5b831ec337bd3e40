// The HTML report as `detaudit report --format html` and `detaudit compare --format html` write
// it. The page itself on hand-built reports: tests/unit/test_reports_html.cpp.
#include <doctest/doctest.h>

#include <fstream>

#include "test_reports_util.h"
#include "test_util.h"

using namespace detaudit::reports;
using detaudit::test::check_plots_present;
using detaudit::test::contains;
using detaudit::test::rec;
using detaudit::test::words;

TEST_CASE("reports_html: detaudit report --format html writes the page") {
  const std::string dir = detaudit::test::scratch_dir("reports_html_cli");
  {
    record_writer w(dir + "/records.jsonl");
    w.write(rec("q1", "alone", words("one two")));
    w.write(rec("q1", "control", words("one two")));
    w.write(rec("q1", "concurrent-8", words("one three"), "concurrency"));
  }
  const std::string out = dir + "/report.html";
  const auto r = detaudit::test::run_cmd(detaudit::test::detaudit_bin() + " report " + detaudit::test::shell_quote(dir) +
                                         " --format html -o " + detaudit::test::shell_quote(out));
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  std::ifstream f(out, std::ios::binary);
  const std::string h((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(h.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(contains(h, "<span class=\"before\"><span>one</span></span><span class=\"rest\"><mark> three</mark></span>"));
  check_plots_present(h);

  const auto c = detaudit::test::run_cmd(detaudit::test::detaudit_bin() + " compare " + detaudit::test::shell_quote(dir) +
                                         " " + detaudit::test::shell_quote(dir) + " --format html");
  CAPTURE(c.err);
  REQUIRE(c.exit_code == 0);
  CHECK(contains(c.out, "<dt>run A</dt><dd>" + dir + "</dd>"));
  CHECK(contains(c.out, "<p>No divergence: every pair of responses is identical.</p>"));
}

