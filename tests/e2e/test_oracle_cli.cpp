// `--oracle` end to end: `detaudit run` against `detaudit serve --numerics exact` judged by the
// exact engine on the same file (every reported log-prob equal bit for bit, fidelity 0), the
// figures kept in oracle.json and reused by report, a divergence planted in the records judged a
// server error by report, bundle and the server-error gate, compare of two runs, and bad flags.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "reports/audit/record.h"
#include "serve_util.h"
#include "test_util.h"
#include "tokenizer/vocab.h"

using namespace detaudit;
using json = nlohmann::json;

namespace {

std::string stories() { return test::fixture("models/stories260K.gguf"); }

// Rewrites the records file of `dir`: item `item`'s concurrent-4 answer takes another token at
// step `k` (the text follows), as a server that broke under load would answer.
void plant_divergence(const std::string& dir, const std::string& item, size_t k, int32_t new_id) {
  const std::string path = dir + "/records.jsonl";
  std::ifstream in(path);
  std::string line, out;
  const std::shared_ptr<const model::model> m = model::model::load(stories());
  bool planted = false;
  while (std::getline(in, line)) {
    json j = json::parse(line);
    if (j["item_id"] == item && j["condition"] == "concurrent-4") {
      json& toks = j["tokens"];
      REQUIRE(toks.size() > k);
      toks[k]["id"] = new_id;
      toks[k]["text"] = tokenizer::token_to_piece(m->vocab(), new_id, true);
      std::string text;
      for (const json& t : toks) text += t["text"].get<std::string>();
      j["text"] = text;
      planted = true;
    }
    out += j.dump() + "\n";
  }
  REQUIRE(planted);
  test::write_file(path, out);
}

// Rewrites the records of `dir` as a server whose every log-prob is exact + `offset` would send
// them, with item `item`'s control answer taking, at the first step k >= 1 that has one, the
// alternative its alone answer lists 0.1 to 1.6 nats below the best (the answer cut after it: the
// tokens after it were generated after another token). Returns that exact gap.
double plant_offset_pick(const std::string& dir, const std::string& item, double offset) {
  const std::string path = dir + "/records.jsonl";
  std::vector<json> recs;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) recs.push_back(json::parse(line));
  auto find = [&](const char* cond) -> json& {
    for (json& j : recs)
      if (j["item_id"] == item && j["condition"] == cond) return j;
    FAIL("no " << cond << " answer for item " << item);
    return recs.front();
  };
  const json& alone = find("alone");
  json& control = find("control");
  const std::shared_ptr<const model::model> m = model::model::load(stories());
  double gap = -1;
  for (size_t k = 1; k < alone["top_logprobs"].size() && gap < 0; ++k) {
    const json& alts = alone["top_logprobs"][k];  // [id, token, log-prob], best first
    for (size_t a = 1; a < alts.size() && gap < 0; ++a) {
      const double g = alts[0][2].get<double>() - alts[a][2].get<double>();
      if (g <= 0.1 || g >= 1.6) continue;
      gap = g;
      json& toks = control["tokens"];
      toks[k] = {{"id", alts[a][0]}, {"text", tokenizer::token_to_piece(m->vocab(), alts[a][0].get<int32_t>(), true)},
                 {"logprob", alts[a][2]}};
      for (const char* f : {"tokens", "top_logprobs", "logit_hashes"})
        if (control.contains(f) && control[f].is_array() && control[f].size() > k + 1)
          control[f].get_ref<json::array_t&>().resize(k + 1);
      std::string text;
      for (const json& t : toks) text += t["text"].get<std::string>();
      control["text"] = text;
    }
  }
  REQUIRE(gap > 0);
  std::string out;
  for (json& j : recs) {
    for (json& t : j["tokens"])
      if (t.contains("logprob")) t["logprob"] = t["logprob"].get<double>() + offset;
    for (json& step : j["top_logprobs"])
      for (json& a : step) a[2] = a[2].get<double>() + offset;
    out += j.dump() + "\n";
  }
  test::write_file(path, out);
  return gap;
}

}  // namespace

TEST_CASE("oracle cli: run --oracle against serve --numerics exact, then report, bundle, the gate and compare") {
  test::serve_child srv({"-np", "4", "-c", "4096", "--numerics", "exact"});
  const std::string dir = test::scratch_dir("oracle_cli");
  const std::string prompts = test::write_file(dir + "/p.txt", "Once upon a time\nThe cat sat on\nLily liked to play\n");
  const std::string oracle = "engine:" + stories() + "?threads=1";
  const test::cmd_result r = test::run_cmd(test::detaudit_bin() + " run --target " + srv.url() + " --prompts " + prompts +
                                           " --raw -n 24 --n-probs 4 --concurrency 4 --oracle '" + oracle +
                                           "' --format json --fail-on none --out " + dir + "/run");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("oracle: 9 response(s)") != std::string::npos);
  const json rep = json::parse(r.out);
  const json& o = rep["oracle"];
  REQUIRE(o.is_object());
  CHECK(o["fidelity"]["values"].get<int64_t>() > 0);
  CHECK(o["fidelity"]["equal"] == o["fidelity"]["values"]);  // the server is the same math: bit for bit
  CHECK(o["fidelity"]["max"] == 0.0);
  CHECK(o["cost"]["prefills"] == 3);
  CHECK(std::filesystem::exists(dir + "/run/oracle.json"));
  for (const json& p : rep["pairs"]) CHECK(p["fidelity_max"] == 0.0);

  // report reads the kept figures; --near-tie sets the bound.
  const test::cmd_result again = test::run_cmd(test::detaudit_bin() + " report " + dir + "/run --format json --near-tie 0.5");
  INFO(again.err);
  REQUIRE(again.exit_code == 0);
  CHECK(json::parse(again.out)["oracle"]["bound"] == 0.5);

  // A divergence planted in item 2 under concurrency: a token exact math puts far below its best.
  plant_divergence(dir + "/run", "2", 3, 400);
  const test::cmd_result judged = test::run_cmd(test::detaudit_bin() + " report " + dir + "/run --oracle '" + oracle +
                                                "' --format json --fail-on server-error");
  INFO(judged.err);
  CHECK(judged.exit_code == 1);
  CHECK(judged.err.find("--fail-on server-error: concurrency alone vs concurrent-4: 1 divergence(s)") != std::string::npos);
  const json jr = json::parse(judged.out);
  bool found = false;
  for (const json& p : jr["pairs"])
    for (const json& row : p["rows"])
      if (row["item_id"] == "2" && row["status"] == "differs") {
        found = true;
        CHECK(row["oracle"]["class"] == "server-error");
        CHECK(row["oracle"]["step"] == 3);
        CHECK(row["oracle"]["argmax_side"] == "a");
        CHECK(row["oracle"]["rank_b"].get<int>() > 0);
      }
  CHECK(found);
  const test::cmd_result text = test::run_cmd(test::detaudit_bin() + " report " + dir + "/run");
  CHECK(text.out.find("oracle: server-error: at token 3 the server under concurrent-4") != std::string::npos);

  const test::cmd_result b = test::run_cmd(test::detaudit_bin() + " bundle " + dir + "/run --item 2 --no-tar -o " + dir + "/bug");
  INFO(b.err);
  REQUIRE(b.exit_code == 0);
  const std::string readme = test::file_text(dir + "/bug/README.md");
  CHECK(readme.find("Exact math (`detaudit --oracle`") != std::string::npos);
  CHECK(readme.find("**server-error**: at token 3") != std::string::npos);
  CHECK(readme.find("not a near-tie") != std::string::npos);
  std::ifstream bj(dir + "/bug/bundle.json");
  CHECK(json::parse(bj)["oracle"]["class"] == "server-error");
  // The bundle believes the figures only as the reports do: from another model file, no verdict.
  json forged = json::parse(test::file_text(dir + "/run/oracle.json"));
  forged["model"]["sha256"] = std::string(64, 'f');
  std::filesystem::create_directories(dir + "/forged");
  for (const char* f : {"records.jsonl", "run.json"}) std::filesystem::copy_file(dir + "/run/" + f, dir + "/forged/" + f);
  test::write_file(dir + "/forged/oracle.json", forged.dump());
  const test::cmd_result fb = test::run_cmd(test::detaudit_bin() + " bundle " + dir + "/forged --item 2 --no-tar -o " + dir + "/bug2");
  INFO(fb.err);
  REQUIRE(fb.exit_code == 0);
  CHECK(test::file_text(dir + "/bug2/README.md").find("is not the file this target serves") != std::string::npos);

  const test::cmd_result cmp =
      test::run_cmd(test::detaudit_bin() + " compare " + dir + "/run " + dir + "/run --format json --fail-on none");
  INFO(cmp.err);
  REQUIRE(cmp.exit_code == 0);
  const json cj = json::parse(cmp.out);
  const json& co = cj["oracle"];
  REQUIRE(co.is_object());  // each side's oracle.json, run A's and run B's
  CHECK(co["fidelity"]["values"].get<int64_t>() == 2 * jr["oracle"]["fidelity"]["values"].get<int64_t>());
  CHECK(co["cost"].contains("a"));
  CHECK(srv.stop() == 0);
}

TEST_CASE("oracle cli: a bad --oracle or a lone --near-tie exits 2 with one line naming it") {
  const std::string dir = test::scratch_dir("oracle_cli_bad");
  const std::string prompts = test::write_file(dir + "/p.txt", "Hello\n");
  reports::record one;
  one.item_id = "1";
  one.condition = "alone";
  one.text = "x";
  std::filesystem::create_directories(dir + "/run");
  test::write_file(dir + "/run/records.jsonl", reports::record_to_json(one).dump() + "\n");
  // Two lm-eval sample files (recognised by their first line), and a records file nested too deep.
  const std::string lm = R"({"doc_id": 0, "filter": "none", "resps": [["x"]], "filtered_resps": ["x"], "doc_hash": "h", "exact_match": 1.0})";
  test::write_file(dir + "/lm_a.jsonl", lm + "\n");
  test::write_file(dir + "/lm_b.jsonl", lm + "\n");
  test::write_file(dir + "/deep.jsonl", std::string(300, '[') + std::string(300, ']') + "\n");
  const std::pair<std::string, std::string> cases[] = {
      {" run --target engine:" + stories() + " --prompts " + prompts + " --oracle http://x", "expected engine:MODEL.gguf"},
      {" run --target engine:" + stories() + " --prompts " + prompts + " --oracle engine:" + dir + "/none.gguf", "not found"},
      {" report " + dir + "/run --near-tie 0.1", "holds no oracle.json"},
      {" report " + dir + "/run --oracle engine:" + stories() + "?numerics=float", "numerics must be exact"},
      {" report " + dir + "/run --oracle ''", "--oracle: expected engine:MODEL.gguf, found nothing"},
      {" report " + dir + "/run --oracle engine:" + stories() + " --near-tie nan", "--near-tie: expected a number"},
      {" report " + dir + "/run --oracle engine:" + stories() + " --near-tie 0x10", "--near-tie: expected a number"},
      {" report " + dir + "/run --oracle engine:" + stories() + " --near-tie -1", "--near-tie: expected a number"},
      {" report " + dir + "/run --oracle 'engine:" + stories() + "?chat_template=bogus'", "unknown chat_template 'bogus'"},
      {" report " + dir + "/run --oracle 'engine:" + stories() + "?threads=2&threads=3'", "threads is given twice"},
      {" report " + dir + "/run --oracle 'engine:" + stories() + "?device=3'", "device applies to backend=vulkan"},
      // A model file that is not one is found before the audit sends anything.
      {" run --target engine:" + stories() + " --prompts " + prompts + " --oracle engine:" + dir + "/p.txt --out " + dir + "/r2",
       "--oracle 'engine:"},
      // A report that could not be written is found before the oracle runs or a request is sent.
      {" report " + dir + "/run --oracle engine:" + stories() + " -o " + dir + "/nodir/r.md",
       "-o: cannot write '" + dir + "/nodir/r.md': the folder '" + dir + "/nodir' does not exist"},
      {" run --target engine:" + stories() + " --prompts " + prompts + " --out " + dir + "/r2 --report " + dir + "/nodir/r.json",
       "--report: cannot write"},
      {" run --target engine:" + stories() + " --prompts " + prompts + " --out " + dir + "/r2 --junit " + dir + "/nodir/j.xml",
       "--junit: cannot write"},
      // The oracle's flags on inputs they cannot apply to.
      {" compare " + dir + "/lm_a.jsonl " + dir + "/lm_b.jsonl --near-tie 0.1", "apply to two runs, not to lm-eval sample files"},
      {" compare " + dir + "/lm_a.jsonl " + dir + "/deep.jsonl --oracle engine:" + stories(),
       "apply to two runs, not to lm-eval sample files"},
      {" compare --kld " + dir + "/none_a " + dir + "/none_b --near-tie abc", "--kld: --oracle and --near-tie apply"},
  };
  for (const auto& [args, message] : cases) {
    const test::cmd_result r = test::run_cmd(test::detaudit_bin() + args);
    INFO(args << " -> " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(message) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  CHECK_FALSE(std::filesystem::exists(dir + "/r2/records.jsonl"));  // nothing was sent
  CHECK_FALSE(std::filesystem::exists(dir + "/run/oracle.json"));    // the oracle did not run
}

TEST_CASE("oracle cli: an unreadable oracle.json does not hide the report, and the gate fails without figures") {
  const std::string dir = test::scratch_dir("oracle_cli_corrupt");
  const std::string prompts = test::write_file(dir + "/p.txt", "Once upon a time\n");
  const test::cmd_result r = test::run_cmd(test::detaudit_bin() + " run --target 'engine:" + stories() +
                                           "?threads=1' --prompts " + prompts + " --raw -n 8 --fail-on none --out " +
                                           dir + "/run");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  // No oracle: the server-error gate has tested nothing.
  const test::cmd_result gate = test::run_cmd(test::detaudit_bin() + " report " + dir + "/run --fail-on server-error");
  CHECK(gate.exit_code == 1);
  CHECK(gate.err.find("--fail-on server-error: no oracle figures") != std::string::npos);
  test::write_file(dir + "/run/oracle.json", "{\"schema\": 2, \"responses\": [{\"key\": 5}]}");
  const test::cmd_result rep = test::run_cmd(test::detaudit_bin() + " report " + dir + "/run");
  INFO(rep.err);
  CHECK(rep.exit_code == 0);
  CHECK(rep.err.find("reporting without the oracle") != std::string::npos);
  CHECK(rep.out.find("alone vs control") != std::string::npos);
  // An explicit --near-tie needs the figures: then it is an error.
  CHECK(test::run_cmd(test::detaudit_bin() + " report " + dir + "/run --near-tie 0.1").exit_code == 2);
}

TEST_CASE("oracle cli: a server whose log-probs carry an offset gets the floor for a bound, and a pick 0.1 to 1.6 "
          "below the best is a server error") {
  const std::string dir = test::scratch_dir("oracle_cli_offset");
  const std::string prompts = test::write_file(dir + "/p.txt", "Once upon a time\nThe cat sat on\nLily liked to play\n");
  const std::string oracle = "engine:" + stories() + "?threads=1";
  const test::cmd_result r = test::run_cmd(test::detaudit_bin() + " run --target '" + oracle + "' --prompts " + prompts +
                                           " --raw -n 16 --n-probs 8 --fail-on none --out " + dir + "/run");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const double gap = plant_offset_pick(dir + "/run", "1", 0.875);
  const test::cmd_result rep = test::run_cmd(test::detaudit_bin() + " report " + dir + "/run --oracle '" + oracle +
                                             "' --format json --fail-on none");
  INFO(rep.err);
  REQUIRE(rep.exit_code == 0);
  const json j = json::parse(rep.out);
  // Every step's values are exact + 0.875: the spread is 0 (within a few 2^-53: the exact
  // log-probs are floats), the precision with it; the bound is the floor, 0.05, not 2 x 0.875.
  CHECK(j["oracle"]["precision"]["A"].get<double>() < 1e-12);
  CHECK(j["oracle"]["bound"] == 0.05);
  CHECK(j["oracle"]["fidelity"]["max"].get<double>() == doctest::Approx(0.875));  // the absolute figure stays
  bool found = false;
  for (const json& p : j["pairs"])
    for (const json& row : p["rows"])
      if (row["item_id"] == "1" && row["status"] == "differs") {
        found = true;
        CHECK(row["oracle"]["class"] == "server-error");  // gap > 0.05, greedy (a bound of 2 x 0.875 would call it a near-tie)
        CHECK(row["oracle"]["bound"] == 0.05);
        CHECK(row["oracle"]["argmax_side"] == "a");
        CHECK(row["oracle"]["argmax_logprob"].get<double>() - row["oracle"]["logprob_b"].get<double>() ==
              doctest::Approx(gap));
        CHECK(row["oracle"]["own_gap_b"].get<double>() == doctest::Approx(gap));  // its own numbers say so too
      }
  CHECK(found);
}
