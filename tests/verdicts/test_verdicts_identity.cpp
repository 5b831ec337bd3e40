// Known answers for run identity (issue 16, "Run identity"): --resume, merge and compare refuse
// runs that are not the same audit (exit 2, naming each differing field), and accept those that are.
// The identity: targets (spec, model, ...), request (n_predict, temperature, ...), probes,
// probe settings, items {count, sha256 of ids and prompt hashes}, shard {count}.
#include <memory>
#include <thread>

#include "verdict_harness.h"

using namespace detaudit::verdicts_test;

namespace {

const answer SAME = answer({"Same", " answer"});

// One server and a scratch folder; runs of `detaudit run` against it.
struct bench {
  planted p{OPENAI_CHAT};
  std::unique_ptr<verdict_server> srv;
  std::string dir = fresh_dir();

  explicit bench(const std::vector<std::string>& prompts, const std::string& model = "planted-model", int delay_ms = 0) {
    p.server("model", model).server("delay_ms", delay_ms);
    for (const std::string& pr : prompts) p.item(pr, {SAME});
    srv = std::make_unique<verdict_server>(p.cases());
  }
  // `detaudit run` on `prompts_file` into dir/NAME.
  test::cmd_result run(const std::string& name, const std::string& prompts_file, const std::string& extra, int n_predict = 16) {
    return detaudit_cli("run --target " + srv->url() + " " + p.api_flags() + " --prompts " + prompts_file + " " +
                    run_flags(dir + "/" + name, n_predict) + " --probe repeat " + extra);
  }
  std::string prompts(const std::vector<std::string>& lines, const std::string& name) { return prompts_write(dir, lines, name); }
};

// Rule (resume: any identity difference -> exit 2 naming each field): the run was made with
// --n-predict 16; resuming it with --n-predict 8 is another audit. Nothing is sent.
TEST_CASE("verdicts: --resume with another --n-predict exits 2 naming n_predict") {
  bench b({"resume n"});
  const std::string prompts = b.prompts({"resume n"}, "p.txt");
  REQUIRE(b.run("run", prompts, "").exit_code == 0);
  const size_t sent = b.srv->requests().size();
  const test::cmd_result r = b.run("run", prompts, "--resume", 8);
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("n_predict") != std::string::npos);
  CHECK(b.srv->requests().size() == sent);
}

// Rule (resume): the same ids ("1") under another prompt change items.sha256 -> exit 2 naming items.
TEST_CASE("verdicts: --resume with other prompts under the same ids exits 2 naming the items") {
  bench b({"resume first prompt", "resume second prompt"});
  REQUIRE(b.run("run", b.prompts({"resume first prompt"}, "p1.txt"), "").exit_code == 0);
  const test::cmd_result r = b.run("run", b.prompts({"resume second prompt"}, "p2.txt"), "--resume");
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("items") != std::string::npos);
}

// Rule (resume): the target's model (from /v1/models) changed between the run and its resume:
// the server is restarted on the same port (the same spec) naming another model -> exit 2 naming model.
TEST_CASE("verdicts: --resume against a target that now names another model exits 2 naming the model") {
  bench b({"resume model"}, "model-one");
  const std::string prompts = b.prompts({"resume model"}, "p.txt");
  REQUIRE(b.run("run", prompts, "").exit_code == 0);
  const int port = b.srv->port();
  b.srv->stop();
  planted other(OPENAI_CHAT);
  other.server("model", "model-two").item("resume model", {SAME});
  b.srv = std::make_unique<verdict_server>(other.cases(), port);
  const test::cmd_result r = b.run("run", prompts, "--resume");
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("model") != std::string::npos);
  CHECK(b.srv->requests().empty());
}

// Rule (resume, the same audit): every key already answered -> nothing is sent, exit 0.
TEST_CASE("verdicts: --resume of a complete run with the same settings sends nothing") {
  bench b({"resume same"});
  const std::string prompts = b.prompts({"resume same"}, "p.txt");
  REQUIRE(b.run("run", prompts, "").exit_code == 0);
  const size_t sent = b.srv->requests().size();
  const test::cmd_result r = b.run("run", prompts, "--resume");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(b.srv->requests().size() == sent);
}

// Rule (lock: a second process on the same folder exits 2): the first run is slow (each answer
// takes 1 s); a --resume of the same folder started while it runs must not send anything.
TEST_CASE("verdicts: a second run on a folder another run holds exits 2") {
  bench b({"locked"}, "planted-model", 1000);
  const std::string prompts = b.prompts({"locked"}, "p.txt");
  const std::string cmd = test::detaudit_bin() + " run --target " + b.srv->url() + " " + b.p.api_flags() + " --prompts " +
                          prompts + " " + run_flags(b.dir + "/run") + " --probe repeat >/dev/null 2>&1";
  test::child_process first(test::shell_spec(cmd));
  for (int i = 0; i < 200 && b.srv->requests().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  REQUIRE_FALSE(b.srv->requests().empty());
  const test::cmd_result second = b.run("run", prompts, "--resume");
  INFO(second.err);
  CHECK(second.exit_code == 2);
  CHECK(second.err.find("lock") != std::string::npos);
  CHECK(first.wait() == 0);
  CHECK(first.exited_normally());
  CHECK(b.srv->requests().size() == 3);  // the first run's alone, control, repeat only
}

// Rule (merge: identity equal, shard index aside): shard 1/2 ran with --n-predict 16, shard 2/2
// with 8: not shards of one run -> exit 2 naming n_predict.
TEST_CASE("verdicts: merge of shards run with different --n-predict exits 2 naming n_predict") {
  bench b({"shard one", "shard two"});
  const std::string prompts = b.prompts({"shard one", "shard two"}, "p.txt");
  REQUIRE(b.run("s1", prompts, "--shard 1/2").exit_code == 0);
  REQUIRE(b.run("s2", prompts, "--shard 2/2", 8).exit_code == 0);
  const test::cmd_result r = detaudit_cli("merge --out " + b.dir + "/m " + b.dir + "/s1 " + b.dir + "/s2");
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("n_predict") != std::string::npos);
}

// Rule (merge: identity equal): shards 1/2 and 2/2 of two different prompt files (items.sha256
// differs) are not shards of one run -> exit 2 naming items.
TEST_CASE("verdicts: merge of shards of different prompt sets exits 2 naming the items") {
  bench b({"set a one", "set a two", "set b one", "set b two"});
  REQUIRE(b.run("s1", b.prompts({"set a one", "set a two"}, "a.txt"), "--shard 1/2").exit_code == 0);
  REQUIRE(b.run("s2", b.prompts({"set b one", "set b two"}, "b.txt"), "--shard 2/2").exit_code == 0);
  const test::cmd_result r = detaudit_cli("merge --out " + b.dir + "/m " + b.dir + "/s1 " + b.dir + "/s2");
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("items") != std::string::npos);
}

// Rule (merge: distinct shard indices): shard 1/2 given twice -> exit 2 naming the shard.
TEST_CASE("verdicts: merge of the same shard twice exits 2 naming the shard") {
  bench b({"twice one", "twice two"});
  const std::string prompts = b.prompts({"twice one", "twice two"}, "p.txt");
  REQUIRE(b.run("s1", prompts, "--shard 1/2").exit_code == 0);
  REQUIRE(b.run("s1again", prompts, "--shard 1/2").exit_code == 0);
  const test::cmd_result r = detaudit_cli("merge --out " + b.dir + "/m " + b.dir + "/s1 " + b.dir + "/s1again");
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("shard") != std::string::npos);
}

// Rule (merge: a missing shard is refused unless --partial): 1 of 2 shards -> exit 2 naming the
// shard; with --partial the one shard is merged (exit 0).
TEST_CASE("verdicts: merge of 1 of 2 shards exits 2 without --partial, 0 with it") {
  bench b({"partial one", "partial two"});
  REQUIRE(b.run("s1", b.prompts({"partial one", "partial two"}, "p.txt"), "--shard 1/2").exit_code == 0);
  const test::cmd_result r = detaudit_cli("merge --out " + b.dir + "/m " + b.dir + "/s1");
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("shard") != std::string::npos);
  const test::cmd_result partial = detaudit_cli("merge --partial --out " + b.dir + "/m2 " + b.dir + "/s1");
  INFO(partial.err);
  CHECK(partial.exit_code == 0);
}

// Rule (merge of the shards of one run): 1/2 holds item 1, 2/2 item 2; merged, the report pairs
// both items, each identical (the server gives the same answer every time). Exit 0 throughout.
TEST_CASE("verdicts: merge of both shards of one run reports every item") {
  bench b({"whole one", "whole two"});
  const std::string prompts = b.prompts({"whole one", "whole two"}, "p.txt");
  REQUIRE(b.run("s1", prompts, "--shard 1/2").exit_code == 0);
  REQUIRE(b.run("s2", prompts, "--shard 2/2").exit_code == 0);
  const test::cmd_result m = detaudit_cli("merge --out " + b.dir + "/m " + b.dir + "/s1 " + b.dir + "/s2");
  INFO(m.err);
  REQUIRE(m.exit_code == 0);
  const outcome r = outcome_of(detaudit_cli("report " + b.dir + "/m --format json --fail-on any"));
  for (const char* item : {"1", "2"}) {
    CAPTURE(item);
    check_verdict(r.row("alone", "control", item), {.status = "identical"});
  }
  CHECK(r.exit_code == 0);
}

// Rule (compare: request-setting differences make rows not comparable; nothing comparable ->
// exit 2 naming the field): run A with --n-predict 16, run B with 8. With --ignore-settings the
// rows are compared: the same answers -> identical, exit 0.
TEST_CASE("verdicts: compare of runs with different --n-predict exits 2 naming n_predict unless --ignore-settings") {
  bench b({"compare n"});
  const std::string prompts = b.prompts({"compare n"}, "p.txt");
  REQUIRE(b.run("a", prompts, "").exit_code == 0);
  REQUIRE(b.run("b", prompts, "", 8).exit_code == 0);
  const test::cmd_result r = detaudit_cli("compare " + b.dir + "/a " + b.dir + "/b --format json --fail-on any");
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("n_predict") != std::string::npos);
  const outcome ok = outcome_of(detaudit_cli("compare " + b.dir + "/a " + b.dir + "/b --format json --fail-on any --ignore-settings"));
  check_verdict(ok.row("A:alone", "B:alone"), {.status = "identical"});
  CHECK(ok.exit_code == 0);
}

// Rule (compare: items match by id and prompt hash): item "1" is another prompt in B -> nothing
// comparable -> exit 2 naming the prompt.
TEST_CASE("verdicts: compare of runs with other prompts under the same ids exits 2 naming the prompt") {
  bench b({"compare first prompt", "compare second prompt"});
  REQUIRE(b.run("a", b.prompts({"compare first prompt"}, "p1.txt"), "").exit_code == 0);
  REQUIRE(b.run("b", b.prompts({"compare second prompt"}, "p2.txt"), "").exit_code == 0);
  const test::cmd_result r = detaudit_cli("compare " + b.dir + "/a " + b.dir + "/b --format json");
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("prompt") != std::string::npos);
}

// Rule (compare across models is the point of compare, not an identity error): run A against a
// server naming model-one, run B against one naming model-two whose answer is "Same other".
// alone vs alone: token 1 differs (" answer" vs " other"), byte 5. Counted: exit 1 under --fail-on any.
TEST_CASE("verdicts: compare of two models' runs reports their differences") {
  bench a({"compare models"}, "model-one");
  const std::string prompts = a.prompts({"compare models"}, "p.txt");
  REQUIRE(a.run("a", prompts, "").exit_code == 0);
  planted other(OPENAI_CHAT);
  other.server("model", "model-two").item("compare models", {answer({"Same", " other"})});
  verdict_server srv_b(other.cases());
  REQUIRE(detaudit_cli("run --target " + srv_b.url() + " " + other.api_flags() + " --prompts " + prompts + " " +
                   run_flags(a.dir + "/b", 16, "none") + " --probe repeat").exit_code == 0);
  const outcome r = outcome_of(detaudit_cli("compare " + a.dir + "/a " + a.dir + "/b --format json --fail-on any"));
  check_verdict(r.row("A:alone", "B:alone"), {.status = "differs", .token_index = 1, .char_offset = 5});
  CHECK(r.exit_code == 1);
}

}  // namespace
