// `detaudit bundle` end to end: runs made by the real `detaudit run` against the real `detaudit
// serve` (127.0.0.1, a free port) and against the in-process engine; bundles of a diverged item and
// of an identical one; their files, README facts checked against the run's own report, the tarball's
// listing, no API key anywhere, and the reproducers run against the server (or `detaudit`) itself.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "model/synth.h"
#include "reports/audit/utf8.h"
#include "serve_util.h"
#include "synth_util.h"
#include "test_util.h"

using namespace detaudit;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string prompts_file(const std::string& dir, int n, const std::string& stem) {
  const std::string path = dir + "/prompts.txt";
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) out << stem << " " << i << "\n";
  return path;
}

const json& pair_of(const json& report, const std::string& cond_b) {
  for (const json& p : report["pairs"])
    if (p["cond_b"] == cond_b) return p;
  FAIL("no pair alone vs " << cond_b);
  static const json none;
  return none;
}

// The first row of `pair` that differs (want_diff) or is identical, or null.
json row_where(const json& pair, bool want_diff) {
  for (const json& row : pair["rows"])
    if (row["identical"] != want_diff && row["error"] == false && row["exercised"] == true) return row;
  return nullptr;
}

test::cmd_result bundle(const std::string& run_dir, const std::string& item, const std::string& out, const std::string& extra = "") {
  return test::run_cmd(test::detaudit_bin() + " bundle " + run_dir + " --item " + item + " -o " + out + extra);
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

const char* const FILES[] = {"README.md",       "bundle.json", "request-A.json", "request-B.json", "response-A.json",
                               "response-B.json", "target.json", "repro.py",       "repro.sh"};

// README facts for a differing row, as the run's own report gives them.
void check_readme_diverged(const std::string& readme, const json& row, const std::string& a, const std::string& b) {
  CHECK(readme.find("differs between `" + a + "` and `" + b + "`") != std::string::npos);
  CHECK(readme.find("First differing token: index " + std::to_string(row["token_index"].get<int>())) != std::string::npos);
  CHECK(readme.find("'" + reports::escape_line(row["token_a"], '\'') + "'` (id " + std::to_string(row["id_a"].get<int>()) + ")") !=
        std::string::npos);
  char margins[96];
  std::snprintf(margins, sizeof margins, "top-2 log-prob): A %.3g, B %.3g", row["margin_a"].get<double>(), row["margin_b"].get<double>());
  CHECK(readme.find(margins) != std::string::npos);
  CHECK(readme.find("A: " + reports::escape_line(row["before_a"]) + "⟦" + reports::escape_line(row["after_a"])) != std::string::npos);
  CHECK(readme.find("B: " + reports::escape_line(row["before_b"]) + "⟦" + reports::escape_line(row["after_b"])) != std::string::npos);
  CHECK(readme.find("1 of 1 comparison(s) differ") != std::string::npos);
}

}  // namespace

TEST_CASE("bundle: float serve with an API key, a diverged and an identical item, files, README, tarball, no key, repro.py") {
  const std::string key = "sk-bundle-7a6b5c4d3e2f-SECRET";
  test::serve_child srv({"-np", "8", "--numerics", "float", "--api-key-env", "DETAUDIT_BUNDLE_SERVER_KEY"}, test::narrow_model(),
                        {{"DETAUDIT_BUNDLE_SERVER_KEY", key}});
  const std::string dir = test::scratch_dir("bundle_float");
  const test::cmd_result run = test::run_cmd(
      "DETAUDIT_BUNDLE_RUN_KEY=" + key + " " + test::detaudit_bin() + " run --target " + srv.url() + " --prompts " +
      prompts_file(dir, 12, "Tell me story number") + " --raw --probe concurrency --n-predict 40 --fail-on none --format json" +
      " --api-key-env DETAUDIT_BUNDLE_RUN_KEY --out " + dir + "/run");
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const json conc = pair_of(json::parse(run.out), "concurrent-8");
  const json diverged = row_where(conc, true);
  const json same = row_where(conc, false);
  REQUIRE(!diverged.is_null());
  REQUIRE(!same.is_null());

  const std::string out = dir + "/bug";
  const test::cmd_result b = bundle(dir + "/run", diverged["item_id"], out);
  INFO(b.err);
  REQUIRE(b.exit_code == 0);
  for (const char* f : FILES) CHECK_MESSAGE(fs::is_regular_file(out + "/" + f), f);
  for (int k = 1; k <= 7; ++k) CHECK(fs::is_regular_file(out + "/fillers/filler-" + std::to_string(k) + ".json"));
  check_readme_diverged(test::file_text(out + "/README.md"), diverged, "alone", "concurrent-8");
  CHECK(test::file_text(out + "/README.md").find("the same request sent with 7 others at once") != std::string::npos);
  CHECK(test::file_text(out + "/README.md").find(srv.url()) != std::string::npos);
  CHECK(test::file_text(out + "/README.md").find("| server settings: numerics | `float` |") != std::string::npos);  // from /props
  const json req_b = json::parse(test::file_text(out + "/request-B.json"));
  CHECK(req_b["prompt"] == "Tell me story number " + std::to_string(std::stoi(diverged["item_id"].get<std::string>()) - 1));
  CHECK(json::parse(test::file_text(out + "/response-B.json"))["condition"] == "concurrent-8");

  const test::cmd_result listing = test::run_cmd("tar tzf " + out + ".tar.gz");
  REQUIRE(listing.exit_code == 0);
  std::set<std::string> listed;
  std::istringstream lines(listing.out);
  for (std::string l; std::getline(lines, l);) listed.insert(l);
  for (const char* f : FILES) CHECK_MESSAGE(listed.count(std::string("bug/") + f), f);
  CHECK(listed.count("bug/fillers/filler-7.json"));
  const test::cmd_result unpacked = test::run_cmd("tar xzOf " + out + ".tar.gz");
  CHECK(unpacked.out.find(key) == std::string::npos);
  for (const auto& e : fs::recursive_directory_iterator(out))
    if (e.is_regular_file()) CHECK_MESSAGE(test::file_text(e.path().string()).find(key) == std::string::npos, e.path().string());

  const test::cmd_result repro = test::run_cmd("DETAUDIT_REPRO_KEY=" + key + " python3 " + out + "/repro.py");
  INFO(repro.out << repro.err);
  CHECK(((repro.exit_code == 0 && first_line(repro.out) == "identical") ||
         (repro.exit_code == 1 && first_line(repro.out).rfind("different: first differing token ", 0) == 0)));
  const test::cmd_result no_key = test::run_cmd("python3 " + out + "/repro.py");
  CHECK(no_key.exit_code == 2);

  const test::cmd_result b2 = bundle(dir + "/run", same["item_id"], dir + "/same");
  INFO(b2.err);
  REQUIRE(b2.exit_code == 0);
  const std::string readme = test::file_text(dir + "/same/README.md");
  CHECK(readme.find("is identical under `alone` and `control`") != std::string::npos);
  CHECK(readme.find("**identical** token for token") != std::string::npos);
  // The result comes first; the server's settings are folded away; the launch command is asked for.
  CHECK(readme.find("## Result") < readme.find("## The pair"));
  CHECK(readme.find("## The pair") < readme.find("## Target"));
  CHECK(readme.find("<details><summary>Server settings (its /props or equivalent") != std::string::npos);
  CHECK(readme.find("How the server was started (fill in before filing") != std::string::npos);
  const test::cmd_result b3 = bundle(dir + "/run", same["item_id"], dir + "/same", " --conditions alone,concurrent-8 --no-tar");
  REQUIRE(b3.exit_code == 0);
  CHECK(test::file_text(dir + "/same/README.md").find("is identical under `alone` and `concurrent-8`") != std::string::npos);
}

TEST_CASE("bundle: exact serve, repro.py and repro.sh replay concurrency and cache-warm pairs as identical") {
  test::serve_child srv({"-np", "4"});
  const std::string dir = test::scratch_dir("bundle_exact");
  const test::cmd_result run =
      test::run_cmd(test::detaudit_bin() + " run --target " + srv.url() + " --prompts " + prompts_file(dir, 3, "Once upon a time a cat named") +
                    " --raw --probe concurrency,cache --concurrency 4 --n-predict 12 --out " + dir + "/run");
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  for (const char* cond : {"concurrent-4", "cache-warm"}) {
    const std::string out = dir + "/" + cond;
    const test::cmd_result b = bundle(dir + "/run", "2", out, std::string(" --conditions alone,") + cond);
    INFO(cond << ": " << b.err);
    REQUIRE(b.exit_code == 0);
    const test::cmd_result py = test::run_cmd("python3 " + out + "/repro.py");
    INFO(py.out << py.err);
    CHECK(py.exit_code == 0);
    CHECK(py.out == "identical\n");
    const test::cmd_result sh = test::run_cmd("sh " + out + "/repro.sh");
    INFO(sh.out << sh.err);
    CHECK(sh.exit_code == 0);
    CHECK(sh.out == "identical\n");
  }
  CHECK(fs::is_regular_file(dir + "/concurrent-4/fillers/filler-3.json"));
  CHECK(json::parse(test::file_text(dir + "/cache-warm/request-B.json"))["cache_prompt"] == true);
}

TEST_CASE("bundle: engine targets, the reproducers run detaudit: float vs exact differs at the recorded token") {
  const std::string dir = test::scratch_dir("bundle_engine");
  const std::string spec = "'engine:" + test::narrow_model() + "?numerics=";
  const test::cmd_result run = test::run_cmd(
      test::detaudit_bin() + " run --target " + spec + "float&threads=1' --target " + spec + "exact&threads=1' --prompts " +
      prompts_file(dir, 8, "Tell me story number") + " --raw --probe concurrency,cross --n-predict 32 --fail-on none --format json --out " +
      dir + "/run");
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const json rep = json::parse(run.out);
  json cross;
  for (const json& p : rep["pairs"])
    if (p["cond_a"] == "A:alone" && p["cond_b"] == "B:alone") cross = p;
  const json diverged = row_where(cross, true);
  REQUIRE(!diverged.is_null());
  const std::string out = dir + "/bug";
  const test::cmd_result b = bundle(dir + "/run", diverged["item_id"], out, " --conditions A:alone,B:alone");
  INFO(b.err);
  REQUIRE(b.exit_code == 0);
  check_readme_diverged(test::file_text(out + "/README.md"), diverged, "A:alone", "B:alone");
  CHECK(test::file_text(out + "/item.jsonl").find(diverged["item_id"].get<std::string>()) != std::string::npos);

  const std::string want = "different: first differing token " + std::to_string(diverged["token_index"].get<int>());
  const test::cmd_result py = test::run_cmd("python3 " + out + "/repro.py --detaudit " + test::detaudit_bin());
  INFO(py.out << py.err);
  CHECK(py.exit_code == 1);
  CHECK(first_line(py.out).rfind(want, 0) == 0);
  const test::cmd_result sh = test::run_cmd("sh " + out + "/repro.sh " + test::detaudit_bin());
  INFO(sh.out << sh.err);
  CHECK(sh.exit_code == 1);
  CHECK(first_line(sh.out) == want);
  // Both texts around the first difference, marked, from the report's own contexts.
  const std::string ctx_a = "A: " + json(diverged["before_a"].get<std::string>() + "\u27e6" + diverged["after_a"].get<std::string>())
                                        .dump(-1, ' ', false, json::error_handler_t::replace);
  CHECK(sh.out.find(ctx_a) != std::string::npos);
  // --tries N replays N times and says how often the pair differed (float vs exact: every time).
  const test::cmd_result tries = test::run_cmd("python3 " + out + "/repro.py --tries 2 --detaudit " + test::detaudit_bin());
  INFO(tries.out << tries.err);
  CHECK(tries.exit_code == 1);
  CHECK(tries.out.find("\ndiffered 2 of 2\nA: ") != std::string::npos);
  CHECK(tries.out.find(ctx_a) != std::string::npos);
  // The README names the model file, never where it lies on this machine.
  const std::string readme = test::file_text(out + "/README.md");
  CHECK(readme.find(fs::path(test::narrow_model()).parent_path().string()) == std::string::npos);
  CHECK(readme.find("engine:" + fs::path(test::narrow_model()).filename().string() + "?numerics=") != std::string::npos);

  // Concurrency on the engine: item.jsonl holds the item and its 7 fillers, run as shard 1/8.
  const test::cmd_result bc = bundle(dir + "/run", "1", dir + "/conc", " --conditions alone,concurrent-8 --no-tar");
  REQUIRE(bc.exit_code == 0);
  CHECK(test::file_text(dir + "/conc/item.jsonl") ==
        "{\"id\":\"1\",\"prompt\":\"Tell me story number 0\"}\n{\"id\":\"2\",\"prompt\":\"Tell me story number 1\"}\n"
        "{\"id\":\"3\",\"prompt\":\"Tell me story number 2\"}\n{\"id\":\"4\",\"prompt\":\"Tell me story number 3\"}\n"
        "{\"id\":\"5\",\"prompt\":\"Tell me story number 4\"}\n{\"id\":\"6\",\"prompt\":\"Tell me story number 5\"}\n"
        "{\"id\":\"7\",\"prompt\":\"Tell me story number 6\"}\n{\"id\":\"8\",\"prompt\":\"Tell me story number 7\"}\n");
  CHECK(test::file_text(dir + "/conc/repro.sh").find("'--shard=1/8'") != std::string::npos);
  const test::cmd_result pc = test::run_cmd("python3 " + dir + "/conc/repro.py --detaudit " + test::detaudit_bin());
  INFO(pc.out << pc.err);
  CHECK(((pc.exit_code == 0 && pc.out == "identical\n") ||
         (pc.exit_code == 1 && first_line(pc.out).rfind("different: first differing token ", 0) == 0)));

  const test::cmd_result missing = bundle(dir + "/run", "no-such-item", dir + "/x");
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("no-such-item") != std::string::npos);
  const test::cmd_result bad_cond = bundle(dir + "/run", "1", dir + "/x", " --conditions alone,cache-warm");
  CHECK(bad_cond.exit_code == 2);
  CHECK(bad_cond.err.find("A:alone, A:control, A:concurrent-8, B:alone") != std::string::npos);
  const test::cmd_result not_bundle = bundle(dir + "/run", "1", dir + "/run");
  CHECK(not_bundle.exit_code == 2);
  CHECK(not_bundle.err.find("without bundle.json") != std::string::npos);
}

namespace {

// Rewrites every record of a run folder with `edit`.
template <class F>
void records_edit(const std::string& run_dir, F&& edit) {
  for (const fs::directory_entry& e : fs::directory_iterator(run_dir)) {
    if (e.path().extension() != ".jsonl") continue;
    std::istringstream in(test::file_text(e.path().string()));
    std::string out, line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      json r = json::parse(line);
      edit(r);
      out += r.dump() + "\n";
    }
    test::write_file(e.path().string(), out);
  }
}

}  // namespace

// Issue 47.2: a run folder whose records say url "-K" and endpoint "README.md" made repro.sh pass
// them to curl as options (curl then read README.md as its config). Bundle refuses any URL that is
// not http(s) and any endpoint that is not a path; the scripts refuse a non-http(s) URL given on
// their command line and pass the URL after "--".
TEST_CASE("bundle: recorded URLs and endpoints never reach curl or urllib as options or local files") {
  test::serve_child srv({"-np", "2"});
  const std::string dir = test::scratch_dir("bundle_hostile_url");
  const test::cmd_result run = test::run_cmd(test::detaudit_bin() + " run --target " + srv.url() + " --prompts " +
                                             prompts_file(dir, 2, "Once upon a time") + " --raw --n-predict 4 --fail-on none --out " + dir + "/run");
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const std::string good = dir + "/good";
  REQUIRE(bundle(dir + "/run", "1", good).exit_code == 0);
  const std::string sh = test::file_text(good + "/repro.sh");
  CHECK(sh.find("-- \"$1$2\"") != std::string::npos);
  CHECK(sh.find("--proto =http,https") != std::string::npos);
  // A URL given to the scripts must be http(s) too: nothing is sent otherwise.
  for (const char* bad : {"-K", "file:///etc/passwd"}) {
    CAPTURE(bad);
    const test::cmd_result s = test::run_cmd("sh " + good + "/repro.sh " + test::shell_quote(bad));
    CHECK(s.exit_code == 2);
    CHECK(s.err.find("not an http(s) URL") != std::string::npos);
    const test::cmd_result p = test::run_cmd("python3 " + good + "/repro.py --url=" + test::shell_quote(bad));
    CHECK(p.exit_code == 2);
    CHECK(p.err.find("http(s)") != std::string::npos);
  }

  struct hostile {
    const char* url;
    const char* endpoint;
    const char* says;
  };
  const hostile cases[] = {{"-K", "/completion", "is not an http(s) URL"},
                           {"file:///etc", "/passwd", "is not an http(s) URL"},
                           {"http://127.0.0.1:1 -K README.md", "/completion", "is not an http(s) URL"},
                           {"http://127.0.0.1:1", "README.md", "is not a path on the server"},
                           {"http://127.0.0.1:1", "/completion -o /tmp/x", "is not a path on the server"}};
  for (const hostile& h : cases) {
    CAPTURE(h.url);
    CAPTURE(h.endpoint);
    const std::string copy = dir + "/run-hostile";
    fs::remove_all(copy);
    fs::copy(dir + "/run", copy, fs::copy_options::recursive);
    records_edit(copy, [&](json& r) {
      r["target"]["url"] = h.url;
      r["endpoint"] = h.endpoint;
    });
    const test::cmd_result b = bundle(copy, "1", dir + "/hostile-out");
    CHECK(b.exit_code == 2);
    CHECK(b.err.find(h.says) != std::string::npos);
    CHECK_FALSE(fs::exists(dir + "/hostile-out/repro.sh"));
  }

  // curl's URL globbing is off: a recorded endpoint "/completio{n}" is that one path (404 here),
  // not the recorded path's expansion (with globbing it was /completion, and a "[1-999999]" was
  // a million requests).
  const std::string glob = dir + "/run-glob";
  fs::remove_all(glob);
  fs::copy(dir + "/run", glob, fs::copy_options::recursive);
  std::string endpoint;
  records_edit(glob, [&](json& r) {
    endpoint = r["endpoint"].get<std::string>();
    r["endpoint"] = endpoint.substr(0, endpoint.size() - 1) + "{" + endpoint.back() + "}";
  });
  REQUIRE(endpoint.size() > 2);
  const test::cmd_result gb = bundle(glob, "1", dir + "/glob-out", " --conditions alone,control");
  INFO(gb.err);
  REQUIRE(gb.exit_code == 0);
  const test::cmd_result gsh = test::run_cmd("sh " + dir + "/glob-out/repro.sh");
  INFO(gsh.out << gsh.err);
  CHECK(gsh.exit_code == 2);
  CHECK(gsh.err.find("404") != std::string::npos);
  const test::cmd_result gpy = test::run_cmd("python3 " + dir + "/glob-out/repro.py");
  CHECK(gpy.exit_code == 2);
}

// Recorded options go to `detaudit run` as one --flag=value argument each, so a system prompt or a
// stop string that looks like an option stays a value.
TEST_CASE("bundle: an engine bundle passes each recorded option as one --flag=value argument") {
  const std::string dir = test::scratch_dir("bundle_engine_args");
  const std::string spec = "'engine:" + test::fixture("models/stories260K.gguf") + "?threads=1'";
  const test::cmd_result run = test::run_cmd(test::detaudit_bin() + " run --target " + spec + " --prompts " + prompts_file(dir, 2, "Once upon a time") +
                                             " --raw --n-predict 6 --stop=--out=/tmp/owned --out " + dir + "/run");
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const test::cmd_result b = bundle(dir + "/run", "1", dir + "/b");
  INFO(b.err);
  REQUIRE(b.exit_code == 0);
  const json meta = json::parse(test::file_text(dir + "/b/bundle.json"));
  bool stop_seen = false;
  for (const json& a : meta["engine_args"]) {
    CHECK(a != "--stop");  // never a flag and its value as two arguments
    if (a == "--stop=--out=/tmp/owned") stop_seen = true;
  }
  CHECK(stop_seen);
  const test::cmd_result sh = test::run_cmd("sh " + dir + "/b/repro.sh " + test::detaudit_bin());
  INFO(sh.out << sh.err);
  CHECK(sh.exit_code == 0);
  CHECK(sh.out == "identical\n");
  CHECK_FALSE(fs::exists("/tmp/owned"));
}

namespace {

// The '|' of a Markdown line that GFM reads as cell separators (not preceded by a backslash).
int table_pipes(const std::string& line) {
  int n = 0;
  for (size_t i = 0; i < line.size(); ++i)
    if (line[i] == '|' && (i == 0 || line[i - 1] != '\\')) ++n;
  return n;
}

// Markup a hostile string would smuggle in (`needle`) appears only inside code spans on its line,
// or with its first character backslash-escaped
// (CommonMark: a span opens with a run of N backticks and closes at the next run of exactly N).
bool only_in_code(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<bool> in_code(line.size(), false);
    size_t open = std::string::npos, open_len = 0;
    for (size_t i = 0; i < line.size();) {
      if (line[i] != '`' || (i > 0 && line[i - 1] == '\\' && open == std::string::npos)) {
        if (open != std::string::npos) in_code[i] = true;
        ++i;
        continue;
      }
      size_t j = i;
      while (j < line.size() && line[j] == '`') ++j;
      if (open == std::string::npos) {
        open = i;
        open_len = j - i;
      } else if (j - i == open_len) {
        open = std::string::npos;
      } else {
        for (size_t k = i; k < j; ++k) in_code[k] = true;
      }
      i = j;
    }
    for (size_t at = line.find(needle); at != std::string::npos; at = line.find(needle, at + 1))
      if (!in_code[at] && !(at > 0 && line[at - 1] == '\\')) return false;  // a code span, or the markup escaped
  }
  return true;
}

}  // namespace

// Issue 47.3: the Target table's model, server build, fingerprint and dialect rows were written
// raw, so a newline in /props injected headings, links, images and HTML into text meant for an
// issue. Every server-supplied string is now a code span on one line (pipes escaped in tables), in
// the bundle README and in report --format md.
TEST_CASE("bundle: what the server says cannot inject Markdown or HTML into README.md or report --format md") {
  test::serve_child srv({"-np", "2"});
  const std::string dir = test::scratch_dir("bundle_md_inject");
  const test::cmd_result run = test::run_cmd(test::detaudit_bin() + " run --target " + srv.url() + " --prompts " +
                                             prompts_file(dir, 2, "Once upon a time") + " --raw --n-predict 4 --fail-on none --out " + dir + "/run");
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const std::string evil = "m\n# Injected heading\n![img](http://evil.example/x.png) <img src=x onerror=alert(1)> "
                           "[link](http://evil.example) | cell ``` fence ```` <script>";
  records_edit(dir + "/run", [&](json& r) {
    for (const char* k : {"model", "build", "fingerprint"}) r["target"][k] = evil;
    r["text"] = evil;
  });
  json manifest = json::parse(test::file_text(dir + "/run/run.json"));
  json& caps = manifest["targets"][0]["capabilities"];
  for (const char* k : {"model", "build", "fingerprint", "logprobs_kind"}) caps[k] = evil;
  caps["raw"]["props"][evil] = evil;
  test::write_file(dir + "/run/run.json", manifest.dump());

  const test::cmd_result b = bundle(dir + "/run", "1", dir + "/b", " --conditions alone,control");
  INFO(b.err);
  REQUIRE(b.exit_code == 0);
  const std::string readme = test::file_text(dir + "/b/README.md");
  const test::cmd_result md = test::run_cmd(test::detaudit_bin() + " report " + dir + "/run --format md --fail-on none");
  REQUIRE(md.exit_code == 0);
  for (const std::string& text : {readme, md.out}) {
    CHECK(text.find("\n# Injected") == std::string::npos);
    for (const std::string needle : {"![img](", "<img", "[link](", "<script>"}) {
      CAPTURE(needle);
      CHECK(only_in_code(text, needle));
    }
  }
  CHECK(readme.find("Injected heading") != std::string::npos);  // shown, as data
  // Every row of README's tables has exactly its own separators: 3 for "| key | value |".
  std::istringstream in(readme);
  std::string line;
  bool in_fence = false;
  int rows = 0;
  while (std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) in_fence = !in_fence;
    if (in_fence || line.rfind("|", 0) != 0) continue;
    CAPTURE(line);
    CHECK((table_pipes(line) == 3 || table_pipes(line) == 4));  // key/value tables, or side/condition/what
    ++rows;
  }
  CHECK(rows > 10);
}

// The hostile review of issue 47: a failed seed check's reason (a server's error body, newlines
// and markup included), run.json's seed options and --request (secrets) reached README.md raw, and
// a side with no response was said to "differ from generated token -1".
TEST_CASE("bundle: a not-exercised side's reason, run options and secrets are data in README.md, and no response is not a difference") {
  test::serve_child srv({"-np", "2"});
  const std::string dir = test::scratch_dir("bundle_reason_inject");
  const test::cmd_result run = test::run_cmd(test::detaudit_bin() + " run --target " + srv.url() + " --prompts " +
                                             prompts_file(dir, 2, "Once upon a time") + " --raw --n-predict 4 --fail-on none --out " + dir + "/run");
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const std::string evil = "HTTP 500: x</details>\n\n# PWNED <img src=https://evil.example/p.png> [click](https://evil.example) | a | b |";
  records_edit(dir + "/run", [&](json& r) {
    if (r["condition"] != "control") return;
    r["condition"] = "seed-fixed";  // what a failed seed check records: no response, and why
    r["evidence"] = {{"exercised", false}, {"reason", "the seed check failed: " + evil}};
    r["tokens"] = json::array();
    r["text"] = "";
  });
  json manifest = json::parse(test::file_text(dir + "/run/run.json"));
  manifest["options"]["seed_temperature"] = "0.7 <img src=https://evil.example/x.png> [click](https://evil.example) | x |";
  manifest["options"]["seed"] = "42\n\n# INJECTED HEADING";
  manifest["options"]["request"] = {{"api_key", "sk-LEAKME-123456"}, {"Authorization", "Bearer sk-LEAKME2-123456"}};
  test::write_file(dir + "/run/run.json", manifest.dump());

  const test::cmd_result b = bundle(dir + "/run", "1", dir + "/b", " --conditions alone,seed-fixed --no-tar");
  INFO(b.err);
  REQUIRE(b.exit_code == 0);
  CHECK(b.out.find("not exercised and has no response") != std::string::npos);
  CHECK(b.out.find("token -1") == std::string::npos);
  const std::string readme = test::file_text(dir + "/b/README.md");
  CHECK(readme.find("\n# PWNED") == std::string::npos);
  CHECK(readme.find("\n# INJECTED") == std::string::npos);
  for (const std::string needle : {"<img", "[click](", "x</details>"}) {
    CAPTURE(needle);
    CHECK(only_in_code(readme, needle));
  }
  CHECK(readme.find("PWNED") != std::string::npos);  // shown, as data
  CHECK(readme.find("LEAKME") == std::string::npos);
  CHECK(readme.find("**differ**") == std::string::npos);
  CHECK(readme.find("token -1") == std::string::npos);
  CHECK(readme.find("A side has no response to compare") != std::string::npos);
}
