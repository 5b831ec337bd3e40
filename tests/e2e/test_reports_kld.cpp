// `detaudit compare --kld`: the llama-perplexity statistics of hand-made pairs of score files (every
// figure of the crafted pair of test_reports_util.h), and two quantizations of one synthetic model
// scored by `detaudit score` on the same tokens; `detaudit run --probe cross` on engine targets
// carries the same summary per cross pair. In-process: tests/unit/test_reports_kld.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/synth.h"
#include "reports/audit/kld.h"
#include "reports/audit/record.h"
#include "synth_util.h"
#include "test_reports_util.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit;
using json = nlohmann::json;
using test::kld::step;

namespace {

std::string bin() { return test::shell_quote(test::detaudit_bin()); }

json step_json(const reports::kld_step_in& s) {
  json top = json::array();
  for (const auto& [id, lp] : s.top) top.push_back({id, lp});
  return {{"id", s.id}, {"logprob", s.logprob}, {"top", top}, {"logit_hash", "0"}};
}

std::string write_score(const std::string& path, const std::vector<std::vector<reports::kld_step_in>>& items) {
  json arr = json::array();
  for (const auto& steps : items) {
    json st = json::array();
    for (const reports::kld_step_in& s : steps) st.push_back(step_json(s));
    arr.push_back({{"steps", st}, {"chained_hash", "0"}});
  }
  std::ofstream(path, std::ios::binary) << json{{"items", arr}}.dump();
  return path;
}

}  // namespace

TEST_CASE("kld compare cli: a hand-made pair gives the hand-computed statistics") {
  const std::string dir = test::scratch_dir("kld_hand");
  // Item 0: step 0 as in the first hand case above (KLD 0.0252671539, same top, dp = 0.4 - 0.5);
  // step 1 identical (KLD 0, dp 0). Item 1: the second hand case (KLD 0.3534083597, top 1 on both,
  // dp = 0.7 - 0.6).
  const std::string a = write_score(dir + "/a.json", {{step(1, {{1, 0.5}, {2, 0.3}}), step(2, {{2, 0.9}})},
                                                      {step(1, {{1, 0.6}, {2, 0.3}})}});
  const std::string b = write_score(dir + "/b.json", {{step(1, {{1, 0.4}, {2, 0.4}}), step(2, {{2, 0.9}})},
                                                      {step(1, {{1, 0.7}, {3, 0.2}})}});
  const test::cmd_result r = test::run_cmd(bin() + " compare --kld " + a + " " + b + " --format json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  REQUIRE(j["items"].size() == 2);
  CHECK(j["items"][0]["steps"] == 2);
  CHECK(j["items"][0]["kld_mean"].get<double>() == doctest::Approx(0.0252671539 / 2).epsilon(1e-8));
  const json& all = j["overall"];
  CHECK(all["steps"] == 3);
  // Sorted KLDs 0, 0.0252671539, 0.3534083597: mean 0.1262251712, median the middle one,
  // 99%: position 0.99 * 2 = 1.98 -> 0.02 * 0.0252671539 + 0.98 * 0.3534083597 = 0.3468455356.
  CHECK(all["kld_mean"].get<double>() == doctest::Approx(0.1262251712).epsilon(1e-8));
  CHECK(all["kld_median"].get<double>() == doctest::Approx(0.0252671539).epsilon(1e-8));
  CHECK(all["kld_p99"].get<double>() == doctest::Approx(0.3468455356).epsilon(1e-8));
  CHECK(all["kld_max"].get<double>() == doctest::Approx(0.3534083597).epsilon(1e-8));
  // Top token: 1/1, 2/2, 1/1: all the same. dp: -0.1, 0, +0.1: mean 0, RMS sqrt(0.02/3) = 0.0816496581.
  CHECK(all["same_top"].get<double>() == 1.0);
  CHECK(all["dp_rms"].get<double>() == doctest::Approx(0.0816496581).epsilon(1e-8));

  const test::cmd_result t = test::run_cmd(bin() + " compare --kld " + a + " " + b);
  CHECK(t.exit_code == 0);
  CHECK(t.out.find("mean KLD") != std::string::npos);
  CHECK(t.out.find("all") != std::string::npos);
}

TEST_CASE("kld compare: two quantizations of one model scored on the same tokens") {
  const std::string dir = test::scratch_dir("kld_quants");
  for (auto [name, type] : {std::pair{"q8", gguf::DTYPE_Q8_0}, std::pair{"q4", gguf::DTYPE_Q4_0}})
    model::synth_write(test::small_model(model::ARCH_LLAMA, type, 7, 256), dir + "/" + name + ".gguf");
  const std::string tokens = " --prompt-tokens 1,10,20,30 --tokens 40,50,60,70,80,90 --top-k 8 --threads 1 --json";
  for (const char* name : {"q8", "q4"}) {
    const test::cmd_result s = test::run_cmd(bin() + " score -m " + dir + "/" + name + ".gguf" + tokens + " > " + dir + "/" +
                                             name + ".score.json");
    INFO(s.err);
    REQUIRE(s.exit_code == 0);
  }
  const std::string q8 = dir + "/q8.score.json", q4 = dir + "/q4.score.json";
  const reports::kld_report self = reports::kld_compare_files(q8, q8);
  CHECK(self.overall.n == 6);
  CHECK(self.overall.kld_max == 0.0);
  CHECK(self.overall.dp_rms == 0.0);
  CHECK(self.overall.same_top == 1.0);

  const test::cmd_result r = test::run_cmd(bin() + " compare --kld " + q8 + " " + q4 + " --format json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json all = json::parse(r.out)["overall"];
  CHECK(all["steps"] == 6);
  CHECK(all["kld_mean"].get<double>() > 0);  // 4-bit weights move the distribution
  CHECK(all["kld_max"].get<double>() >= all["kld_p99"].get<double>());
  CHECK(all["kld_p99"].get<double>() >= all["kld_median"].get<double>());
  CHECK(all["dp_rms"].get<double>() > 0);
}

TEST_CASE("kld compare: scores of different tokens or a bad file are rejected with the place named") {
  const std::string dir = test::scratch_dir("kld_bad");
  const std::string a = write_score(dir + "/a.json", {{step(1, {{1, 0.5}})}});
  const std::string b = write_score(dir + "/b.json", {{step(2, {{2, 0.5}})}});
  CHECK_THROWS_WITH_AS(reports::kld_compare_files(a, b), doctest::Contains("item 0 step 0: A scored token 1, B token 2"),
                       input_error);
  std::ofstream(dir + "/c.json") << R"({"items": [{"steps": [{"id": 1, "logprob": "x", "top": []}]}]})";
  CHECK_THROWS_WITH_AS(reports::kld_read(dir + "/c.json"), doctest::Contains("c.json: items[0].steps[0].logprob"),
                       input_error);
  const test::cmd_result r = test::run_cmd(bin() + " compare --kld " + a + " " + b + " --format md");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--kld: --format: expected text or json") != std::string::npos);
}

TEST_CASE("kld compare cli: every llama-perplexity figure of the crafted pair of score files, by hand") {
  const std::string dir = test::scratch_dir("kld_crafted");
  const test::kld::crafted c = test::kld::crafted_pair();
  const std::string a = write_score(dir + "/a.json", c.a), b = write_score(dir + "/b.json", c.b);
  const test::cmd_result r = test::run_cmd(bin() + " compare --kld " + a + " " + b + " --format json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  REQUIRE(j["items"].size() == 2);
  CHECK(j["items"][1]["item"] == 1);
  CHECK(j["items"][1]["steps"] == 6);
  CHECK(j["items"][1]["same_top"].get<double>() == doctest::Approx(5.0 / 6).epsilon(1e-12));  // X Y X U X W: all but Y
  test::kld::check_crafted_overall(j["overall"]);
  bool flips_note = false;
  for (const json& n : j["notes"]) flips_note |= n.get<std::string>().find("no item-level flips") != std::string::npos;
  CHECK(flips_note);

  const test::cmd_result t = test::run_cmd(bin() + " compare --kld " + a + " " + b);
  CHECK(t.exit_code == 0);
  for (const char* block : {"====== Perplexity statistics ======", "====== KL divergence statistics ======",
                            "====== Token probability statistics ======", "Mean PPL(Q)/PPL(base)         :   1.059463 \u00b1"})
    CHECK_MESSAGE(t.out.find(block) != std::string::npos, block);
}

TEST_CASE("kld cross: run --probe cross on engine targets carries the summary on every cross pair") {
  const std::string dir = test::scratch_dir("kld_cross");
  for (auto [name, type] : {std::pair{"q8", gguf::DTYPE_Q8_0}, std::pair{"q4", gguf::DTYPE_Q4_0}}) {
    model::synth_options o = test::small_model(model::ARCH_LLAMA, type, 7, 256);
    o.vocab_from = test::fixture("models/stories260K.gguf");
    model::synth_write(o, dir + "/" + name + ".gguf");
  }
  const std::string prompts = test::write_file(dir + "/p.txt", "Once upon a time\nThe cat sat\nLily liked\n");
  auto target = [&](const char* name) { return " --target 'engine:" + dir + "/" + name + ".gguf?threads=1'"; };
  // A and B: the same model (the same distributions); C: its 4-bit quantization.
  const test::cmd_result r = test::run_cmd(bin() + " run" + target("q8") + target("q8") + target("q4") + " --prompts " +
                                           prompts + " --raw --n-predict 6 --n-probs 8 --probe cross --fail-on none --out " +
                                           dir + "/run --format json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json rep = json::parse(r.out);
  std::map<std::string, int64_t> n_tokens;  // "LABEL:condition item" -> tokens generated
  for (const reports::record& x : reports::records_read(dir + "/run"))
    n_tokens[x.target["label"].get<std::string>() + ":" + x.condition + " " + x.item_id] = static_cast<int64_t>(x.tokens.size());
  int cross = 0;
  for (const json& p : rep["pairs"]) {
    if (p["probe"] != "cross") continue;
    ++cross;
    const std::string which = p["cond_a"].get<std::string>() + " vs " + p["cond_b"].get<std::string>();
    INFO(which);
    REQUIRE(p.contains("kld"));
    REQUIRE(p["kld"].is_object());
    CHECK(p["kld"]["rows"] == 3);
    // The steps before the tokens part: each row's own divergence point, or all of its tokens.
    int64_t steps = 0;
    for (const json& row : p["rows"]) {
      const int64_t at = row["token_index"].get<int64_t>();
      steps += at >= 0 ? at : n_tokens.at(row["cond_a"].get<std::string>() + " " + row["item_id"].get<std::string>());
    }
    CHECK(p["kld"]["steps"] == steps);
    const json& k = p["kld"];
    if (p["cond_b"].get<std::string>().rfind("B:", 0) == 0) {  // the same model: nothing moved, to the bit
      CHECK(k["kld_max"].get<double>() == 0.0);
      CHECK(k["dp_rms"].get<double>() == 0.0);
      CHECK(k["same_top"].get<double>() == 1.0);
      CHECK(k["ppl_ratio"].get<double>() == 1.0);
    } else {
      CHECK(k["kld_mean"].get<double>() > 0);  // 4-bit weights move the distribution
      CHECK(k["kld_max"].get<double>() >= k["kld_median"].get<double>());
    }
  }
  CHECK(cross == 4);  // A vs B and A vs C, each on alone and control
  const test::cmd_result t = test::run_cmd(bin() + " report " + dir + "/run");
  CHECK(t.out.find("kld A:alone vs C:alone: ") != std::string::npos);
}
