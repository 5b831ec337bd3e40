// `detaudit run` and `detaudit merge` on the in-process engine target: a --config file with arrays
// for --target and --probe, shards run separately and merged equal the whole run, lint alone
// sends nothing, and bad input exits 2 with one line naming the problem.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "reports/audit/record.h"
#include "synth_util.h"
#include "test_util.h"

using namespace detaudit;
using json = nlohmann::json;

namespace {

std::set<std::string> keys(const std::string& dir) {
  std::set<std::string> out;
  for (const reports::record& r : reports::records_read(dir)) out.insert(reports::record_key(r));
  return out;
}

std::string engine_spec() { return "engine:" + test::fixture("models/stories260K.gguf") + "?threads=1&np=4"; }

}  // namespace

TEST_CASE("audit_e2e_cli: --config arrays, shards merged with detaudit merge equal the whole run") {
  const std::string dir = test::scratch_dir("audit_e2e_cli_shards");
  const std::string prompts = test::write_file(dir + "/p.txt", "Once upon a time\nThe cat sat\nLily liked\nTom ran\nA bird sang\n");
  const json config = {{"target", {engine_spec(), engine_spec()}},
                       {"probe", {"cross", "repeat"}},
                       {"prompts", prompts},
                       {"raw", true},
                       {"n-predict", 6},
                       {"fail-on", "any"}};
  test::write_file(dir + "/audit.json", config.dump());
  const std::string run = test::detaudit_bin() + " run --config " + dir + "/audit.json";
  const test::cmd_result whole = test::run_cmd(run + " --out " + dir + "/whole --format json");
  INFO(whole.err);
  REQUIRE(whole.exit_code == 0);
  const json rep = json::parse(whole.out);
  CHECK(rep["manifest"]["probes"] == json{"cross", "repeat"});
  CHECK(rep["manifest"]["targets"].size() == 2);
  CHECK(keys(dir + "/whole").size() == 5 * 2 * 3);  // items x targets x (alone, control, repeat)

  for (int i = 1; i <= 2; ++i) {
    const test::cmd_result s = test::run_cmd(run + " --shard " + std::to_string(i) + "/2 --out " + dir + "/s" + std::to_string(i));
    INFO(s.err);
    CHECK(s.exit_code == 0);
    CHECK(std::filesystem::exists(dir + "/s" + std::to_string(i) + "/records-" + std::to_string(i) + "-of-2.jsonl"));
  }
  const test::cmd_result merged = test::run_cmd(test::detaudit_bin() + " merge --out " + dir + "/merged " + dir + "/s1 " + dir + "/s2");
  INFO(merged.err);
  CHECK(merged.exit_code == 0);
  CHECK(merged.err.find("merged 30 records") != std::string::npos);
  CHECK(keys(dir + "/merged") == keys(dir + "/whole"));
  const test::cmd_result report = test::run_cmd(test::detaudit_bin() + " report " + dir + "/merged --format json");
  CHECK(report.exit_code == 0);
  const json parsed = json::parse(report.out);
  for (const json& p : parsed["pairs"]) CHECK(p["items"] == 5);
}

TEST_CASE("audit_e2e_cli: lint alone sends nothing and lists the findings") {
  const std::string dir = test::scratch_dir("audit_e2e_cli_lint");
  const std::string prompts = test::write_file(dir + "/p.txt", "Clean prompt\nAt 2025-01-01T12:00:00 the log said\r\n");
  const test::cmd_result r = test::run_cmd(test::detaudit_bin() + " run --target '" + engine_spec() + "' --prompts " + prompts +
                                           " --probe lint --temperature 0 --top-p 0.9 --out " + dir + "/run");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("[temp0-top-p]") != std::string::npos);
  CHECK(r.err.find("[timestamp] item 2") != std::string::npos);
  CHECK(r.err.find("[crlf] item 2") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir + "/run/records.jsonl"));
  std::ifstream in(dir + "/run/run.json");
  CHECK(json::parse(in)["lint"].size() == 3);
}

TEST_CASE("audit_e2e_cli: bad input exits 2 with one line naming the problem") {
  const std::string dir = test::scratch_dir("audit_e2e_cli_bad");
  const std::string prompts = test::write_file(dir + "/p.txt", "Hello\n");
  const std::string base = test::detaudit_bin() + " run --target '" + engine_spec() + "' --out " + dir + "/run";
  const std::pair<std::string, std::string> cases[] = {
      {" --prompts " + prompts + " --probe cross", "--probe cross needs two --target"},
      {" --prompts " + prompts + " --probe jitter", "unknown probe 'jitter'"},
      {" --prompts " + prompts + " --shard 3/2", "--shard: expected I/N"},
      {" --prompts " + prompts + " --dataset gsm8k:" + prompts, "give one of --prompts FILE and --dataset"},
      {" --prompts " + prompts + " --num-fewshot 2", "apply to --dataset gsm8k:FILE"},
      {" --prompts " + prompts + " --repeat 1", "--repeat must be in [2, 100]"},
      {" --prompts " + dir + "/missing.txt", "missing.txt: cannot open"},
      {" --prompts " + prompts + " --fail-on sometimes", "sometimes"},
      {" --prompts " + prompts + " --request '[1]'", "--request: expected a JSON object"},
  };
  for (const auto& [args, message] : cases) {
    const test::cmd_result r = test::run_cmd(base + args);
    INFO(args << " -> " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(message) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  const test::cmd_result m = test::run_cmd(test::detaudit_bin() + " merge --out " + dir + "/m " + dir + "/nope");
  CHECK(m.exit_code == 2);
  CHECK(m.err.find("is not a run folder") != std::string::npos);
}

TEST_CASE("audit_e2e_cli: --dataset gsm8k sends lm-eval's prompt, stop strings and raw completions, both filters reported") {
  const std::string dir = test::scratch_dir("audit_e2e_cli_gsm8k");
  const std::string data = test::fixture("data/test.jsonl");
  // Two exemplars from the test file itself stand in for train.jsonl. The same file as the dataset is
  // lm-eval's few-shot split being the test split: 3 drawn per document, the document itself dropped.
  const std::string cmd = test::detaudit_bin() + " run --target '" + engine_spec() + "' --dataset gsm8k:" + data +
                          ":3 --num-fewshot 2 --fewshot " + data + " --probe repeat -n 8 --fail-on none --format json --out ";
  const test::cmd_result r = test::run_cmd(cmd + dir + "/raw");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::vector<reports::record> recs = reports::records_read(dir + "/raw");
  REQUIRE(!recs.empty());
  for (const reports::record& rec : recs) {
    CHECK(rec.grader == "gsm8k-flex");
    CHECK(rec.request.contains("prompt"));  // raw completions, not chat
    CHECK_FALSE(rec.request.contains("messages"));
  }
  const json req = recs.front().request;
  const std::string prompt = req["prompt"].get<std::string>();
  // CPython's random.Random(1234).sample(range(1319), 3) is [902, 239, 15]: document 0's exemplars are
  // lines 902 and 239 of the 1319-line test.jsonl.
  CHECK(prompt.rfind("Question: The educational shop is selling notebook", 0) == 0);
  CHECK(prompt.find("\n\nQuestion: The number of students in a school hall") != std::string::npos);
  CHECK(prompt.find("\n\nQuestion: Janet") != std::string::npos);  // the document itself, last
  CHECK(prompt.substr(prompt.size() - 8) == "\nAnswer:");
  CHECK(req["stop"] == json::array({"Question:", "</s>", "<|im_end|>"}));
  const json rep = json::parse(r.out);
  CHECK(rep["pairs"][0]["graded"] == 3);
  CHECK(rep["pairs"][0]["strict_match_a"]["n"] == 3);
  // --chat: the same context as one user message (lm-eval's --apply_chat_template).
  const test::cmd_result c = test::run_cmd(cmd + dir + "/chat --chat --grader strict");
  INFO(c.err);
  REQUIRE(c.exit_code == 0);
  const reports::record first = reports::records_read(dir + "/chat").front();
  REQUIRE(first.request["messages"].size() == 1);
  CHECK(first.request["messages"][0]["content"] == prompt);
  CHECK(first.grader == "gsm8k");
}

TEST_CASE("audit_e2e_cli: on a terminal the progress line ends before the report starts") {
  if (test::run_cmd("command -v script").exit_code != 0) {
    FAIL("script (util-linux, Debian's bsdutils) is needed to give the run a terminal");
  }
  const std::string dir = test::scratch_dir("audit_e2e_cli_tty");
  const std::string prompts = test::write_file(dir + "/p.txt", "Once upon a time\nThe dog\n");
  const std::string run = test::detaudit_bin() + " run --target '" + engine_spec() + "' --prompts " + prompts +
                          " --raw -n 4 --probe repeat --out " + dir + "/run";
  // script(1) runs the command on a pseudo-terminal: stdout and stderr are both that terminal.
  const test::cmd_result r = test::run_cmd("script -qec " + test::shell_quote(run) + " /dev/null");
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("diverged so far: 0\x1b[K") != std::string::npos);     // the line drawn in place
  CHECK(r.out.find("\x1b[K\r\ndetaudit report: ") != std::string::npos);  // ended before the report
}

TEST_CASE("audit_e2e_cli: a target that cannot be reached ends with an INCOMPLETE verdict line, exit 3") {
  const std::string dir = test::scratch_dir("audit_e2e_cli_unreachable");
  const std::string prompts = test::write_file(dir + "/p.txt", "Hello\n");
  // Port 1 on the loopback: nothing listens there, the connection is refused at once.
  const test::cmd_result r = test::run_cmd(test::detaudit_bin() + " run --target http://127.0.0.1:1 --prompts " + prompts +
                                           " --retries 0 --timeout 5 --out " + dir + "/run");
  CHECK(r.exit_code == 3);
  CHECK(r.err.size() > 1);
  CHECK(r.err.substr(r.err.rfind('\n', r.err.size() - 2) + 1) ==
        "INCOMPLETE: the target became unreachable, nothing was judged; exit 3\n");
}

// Issue 47.1: a --request penalty that would overflow a logit used to abort the process mid-run.
// It is refused at the first request (exit 2, the field named, nothing half-written); a model whose
// float forward overflows fails each request with its cause recorded, and the run goes on to its
// end (INCOMPLETE, exit 3) with every record line whole.
TEST_CASE("audit_e2e_cli: an overflowing penalty is refused by name, an overflowing model fails its requests and the run goes on") {
  const std::string dir = test::scratch_dir("audit_e2e_cli_overflow");
  const std::string prompts = test::write_file(dir + "/p.txt", "Once upon a time\nThe cat sat\n");
  const std::string run = test::detaudit_bin() + " run --raw -n 4 --prompts " + prompts;
  const test::cmd_result bad = test::run_cmd(run + " --target " + test::shell_quote(engine_spec()) +
                                             " --request '{\"repeat_penalty\":1e-45,\"temperature\":1}' --out " + dir + "/bad");
  INFO(bad.err);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("'repeat_penalty'") != std::string::npos);
  CHECK(bad.err.find("internal error") == std::string::npos);

  const std::string model = test::overflow_model(dir);
  const test::cmd_result nan = test::run_cmd(run + " --target " + test::shell_quote("engine:" + model + "?threads=1&np=2&numerics=float") +
                                             " --out " + dir + "/nan");
  INFO(nan.err);
  CHECK(nan.exit_code == 3);
  const std::vector<reports::record> recs = reports::records_read(dir + "/nan");
  CHECK(recs.size() == 6);  // 2 items x (alone, control, concurrent-8): every request answered, with its error
  for (const reports::record& r : recs) {
    CHECK(r.http_status == 500);
    CHECK(r.error.find("overflowed") != std::string::npos);
  }
}
