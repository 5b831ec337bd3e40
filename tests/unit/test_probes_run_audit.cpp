// run_audit and runs_merge (probes/runner.cpp, conditions.cpp, merge.cpp): the conditions each
// probe writes per item on the engine target and on a target without cache control or variants;
// --resume after lost and half-written lines; shards merged; an unreachable target stops the run
// with every line written complete.
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "kernels/cpu/cpu.h"
#include "probes/runner.h"
#include "probes/target_engine.h"
#include "reports/compare.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit;
using probes::item;
using reports::record;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::vector<item> ITEMS = {
    {"i1", "Once upon a time, there was a little dog", "", "", ""},
    {"i2", "Lily liked to play in the park with her ball", "", "", ""},
    {"i3", "The sun was hot and the boy wanted", "", "", ""},
};

std::vector<item> many_items(int n) {
  std::vector<item> out;
  for (int i = 0; i < n; ++i) out.push_back({"m" + std::to_string(i), "Tell me about the number " + std::to_string(i), "", "", ""});
  return out;
}

// A target that answers from the request alone ("echo: " + prompt), with no cache control and no
// variants, as an OpenAI server looks to the runner. Fails with unreachable_error from call
// `fail_from` on (0: never); answers prompts containing `error_word` with an error record.
class echo_target : public probes::target {
 public:
  explicit echo_target(std::string name = "http://127.0.0.1:1/v1") : name_(std::move(name)) {}
  std::string spec() const override { return name_; }
  std::string dialect() const override { return "openai-completions"; }
  probes::capabilities probe() override {
    probes::capabilities c;
    c.reachable = true;
    c.seed = true;
    c.build = "echo 1";
    return c;
  }
  record complete(const probes::gen_request& r) override {
    const int n = ++calls;
    if (fail_from > 0 && n >= fail_from) throw probes::unreachable_error("connection refused");
    record out;
    const std::string prompt = r.messages.empty() ? r.prompt : r.messages[0].content;
    out.request = {{"prompt", prompt}};
    if (!error_word.empty() && prompt.find(error_word) != std::string::npos) {
      out.error = "HTTP 500: server error";
      out.http_status = 500;
      return out;
    }
    out.text = "echo: " + prompt;
    out.finish_reason = "stop";
    out.timings = {{"t_start", 0.0}, {"t_end", 0.0}};
    return out;
  }
  std::atomic<int> calls{0};
  int fail_from = 0;
  std::string error_word;

 private:
  std::string name_;
};

probes::run_options options(const std::string& dir, std::vector<std::string> probes) {
  probes::run_options o;
  o.probes = std::move(probes);
  o.out_dir = dir;
  o.concurrency = 4;
  o.seed_k = 2;
  o.chat = false;
  o.base.n_predict = 8;
  o.base.n_probs = 2;
  return o;
}

std::map<std::string, int> count_by_condition(const std::vector<record>& rs) {
  std::map<std::string, int> out;
  for (const record& r : rs) out[r.condition + (r.repetition ? "#" + std::to_string(r.repetition) : "")]++;
  return out;
}

std::multiset<std::string> keys_of(const std::vector<record>& rs) {
  std::multiset<std::string> out;
  for (const record& r : rs) out.insert(reports::record_key(r));
  return out;
}

std::vector<std::string> file_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

json manifest(const std::string& dir) { return json::parse(test::file_text(dir + "/run.json")); }

}  // namespace

TEST_CASE("probes_run: every probe on the engine target writes its conditions per item") {
  const std::string dir = test::scratch_dir("probes_run_engine");
  probes::target_options topt;
  auto t = probes::target_make_engine("engine:" + test::fixture("models/stories260K.gguf") + "?threads=1&np=4", topt);
  probes::run_options o = options(dir, {"repeat", "concurrency", "cache", "batch", "speculation", "seed"});
  std::vector<std::string> log;
  o.log = [&log](const std::string& s) { log.push_back(s); };
  const probes::run_result res = probes::run_audit({t.get()}, ITEMS, o);
  CHECK_FALSE(res.unreachable);
  CHECK(res.errors == 0);
  CHECK(res.records_written == 42);
  CHECK(res.records_path == dir + "/records.jsonl");
  const std::vector<record> rs = reports::records_read(dir);
  const std::map<std::string, int> expect = {
      {"alone", 3},      {"control", 3},     {"repeat", 3},      {"concurrent-4", 3}, {"cache-off", 3},
      {"cache-on", 3},   {"cache-warm", 3},  {"ubatch-1", 3},    {"ubatch-8192", 3},  {"spec-ngram", 3},
      {"seed-fixed", 3}, {"seed-fixed#1", 3}, {"seed-none", 3}, {"seed-none#1", 3}};
  CHECK(count_by_condition(rs) == expect);
  const std::multiset<std::string> keys = keys_of(rs);
  CHECK(std::set<std::string>(keys.begin(), keys.end()).size() == keys.size());

  const json m = manifest(dir);
  CHECK(m["schema"] == 1);
  CHECK(m["tool_version"] == DETAUDIT_VERSION);
  CHECK(m["precision_contract"] == "1");
  CHECK(m["items"] == 3);
  CHECK(m["records"] == "records.jsonl");
  CHECK(m["targets"][0]["label"] == "A");
  CHECK(m["targets"][0]["dialect"] == "engine");
  CHECK(m["targets"][0]["capabilities"]["token_ids"] == true);
  CHECK(m["targets"][0]["variants"].size() == 3);
  CHECK(m["environment"]["simd"] == detaudit::kernels::cpu::isa_name(detaudit::kernels::cpu::isa_default()));
  CHECK(m["lint"].is_array());
  const std::string run_id = m["run_id"];
  CHECK(run_id.size() == 16);

  std::map<std::string, std::string> alone;
  for (const record& r : rs)
    if (r.condition == "alone") alone[r.item_id] = r.text;
  int cold = 0;
  for (const record& r : rs) {
    INFO(r.item_id << " " << r.condition << " #" << r.repetition);
    CHECK(r.run_id == run_id);
    CHECK(r.error.empty());
    CHECK(r.target["label"] == "A");
    CHECK(r.prompt_sha256.size() == 64);
    CHECK(r.tokens.size() == 8);
    CHECK(r.logit_hashes.size() == 8);
    cold += r.evidence.value("cold", false) ? 1 : 0;
    if (r.condition.rfind("seed-", 0) != 0) CHECK(r.text == alone[r.item_id]);  // exact numerics: no divergence
    if (r.condition == "concurrent-4") {
      CHECK(r.evidence["overlap"] == true);
      CHECK(r.evidence["batch_width"].get<int>() > 1);
      CHECK(r.probe == "concurrency");
    }
    if (r.condition == "cache-warm") CHECK(r.evidence["cached_tokens"].get<int>() > 0);
    if (r.condition == "cache-off") CHECK(r.request["cache_prompt"] == false);
    if (r.condition == "alone") CHECK(r.request["cache_prompt"] == false);
    if (r.condition == "ubatch-1") CHECK(r.request["engine"]["ubatch"] == 1);
    if (r.condition == "spec-ngram") CHECK(r.request["engine"]["spec"] == "ngram");
    if (r.condition == "seed-fixed") CHECK(r.request["seed"] == 42);
    if (r.condition == "seed-none") CHECK_FALSE(r.request.contains("seed"));
  }
  CHECK(cold == 4);  // the first request to the target and to each of its three variants
  REQUIRE_FALSE(log.empty());
  CHECK(log.back().find("item 3/3") == 0);
  CHECK(log.back().find("diverged so far: 0") != std::string::npos);
}

TEST_CASE("probes_run: a target without cache control or variants gets not-exercised records") {
  const std::string dir = test::scratch_dir("probes_run_echo");
  echo_target t;
  const probes::run_result res = probes::run_audit({&t}, ITEMS, options(dir, {"cache", "batch", "speculation"}));
  const std::vector<record> rs = reports::records_read(dir);
  CHECK(count_by_condition(rs) == std::map<std::string, int>{{"alone", 3}, {"control", 3}, {"cache-off", 3}, {"cache-on", 3},
                                                             {"cache-warm", 3}, {"ubatch-1", 3}, {"ubatch-8192", 3}, {"spec-ngram", 3}});
  CHECK(t.calls == 9);  // alone, control and the warm repeat per item
  for (const record& r : rs) {
    INFO(r.condition);
    const bool sent = r.condition == "alone" || r.condition == "control" || r.condition == "cache-warm";
    CHECK(r.error.empty());
    if (sent) {
      CHECK(r.text == "echo: " + std::string(r.item_id == "i1" ? ITEMS[0].prompt : r.item_id == "i2" ? ITEMS[1].prompt : ITEMS[2].prompt));
      continue;
    }
    CHECK(r.evidence["exercised"] == false);
    CHECK(r.evidence["reason"].get<std::string>().rfind("not supported by this target", 0) == 0);
    CHECK(r.text.empty());
    CHECK(r.request.empty());
  }
  CHECK(res.records_written == 24);
}

namespace {

// A server with per-request cache control whose slots rotate (llama.cpp's least recently used
// slot): it names the slot that served each request, and serves the prompt from its cache only
// on the slot that computed it.
class rotating_slots_target : public echo_target {
 public:
  probes::capabilities probe() override {
    probes::capabilities c = echo_target::probe();
    c.cache_control = true;
    return c;
  }
  record complete(const probes::gen_request& r) override {
    record out = echo_target::complete(r);
    const int slot = r.id_slot >= 0 ? r.id_slot : next_++ % 4;
    const std::string prompt = r.messages.empty() ? r.prompt : r.messages[0].content;
    const bool hit = r.cache_prompt.value_or(true) && cached_[slot] == prompt;
    cached_[slot] = prompt;
    out.evidence = {{"slot", slot}, {"cached_tokens", hit ? 5 : 0}};
    id_slots.push_back(r.id_slot);
    return out;
  }
  std::vector<int> id_slots;

 private:
  int next_ = 0;
  std::map<int, std::string> cached_;
};

}  // namespace

TEST_CASE("probes_run: cache-on and cache-warm go to the slot that served cache-off") {
  const std::string dir = test::scratch_dir("probes_run_slots");
  rotating_slots_target t;
  probes::run_audit({&t}, {ITEMS[0]}, options(dir, {"cache"}));
  REQUIRE(t.id_slots.size() == 5);  // alone, control, cache-off, cache-on, cache-warm
  CHECK(t.id_slots[2] == -1);
  CHECK(t.id_slots[3] == 2);  // cache-off was the third request: slot 2
  CHECK(t.id_slots[4] == 2);
  const reports::report rep = reports::compare_run(reports::records_read(dir), manifest(dir));
  for (const reports::pair_summary& p : rep.pairs)
    if (p.cond_b == "cache-warm") CHECK(p.not_exercised == 0);  // the prompt came from slot 2's cache
}

TEST_CASE("probes_run: after the seed check's requests, a server's first recorded request is not cold") {
  const std::string dir = test::scratch_dir("probes_run_seed_cold");
  echo_target t;  // an HTTP dialect: the seed check sends its requests before the items
  probes::run_audit({&t}, {ITEMS[0]}, options(dir, {"seed"}));
  for (const record& r : reports::records_read(dir)) {
    INFO(r.condition);
    CHECK_FALSE(r.evidence.contains("cold"));
  }
  CHECK(manifest(dir)["targets"][0]["seed_check"]["answers"].size() == 4);  // S, S, S+1 alike, then S+2
}

TEST_CASE("probes_run: option errors, lint alone and cross") {
  const std::string dir = test::scratch_dir("probes_run_options");
  echo_target a, b("http://127.0.0.1:2/v1");
  CHECK_THROWS_WITH_AS(probes::run_audit({&a}, ITEMS, options(dir + "/x", {"cross"})), doctest::Contains("--probe cross needs two --target"),
                       input_error);
  CHECK_THROWS_WITH_AS(probes::run_audit({&a}, ITEMS, options(dir + "/x", {"jitter"})), doctest::Contains("unknown probe 'jitter'"),
                       input_error);
  probes::run_options shard = options(dir + "/x", {});
  shard.shard_index = 2;
  shard.shard_count = 2;
  CHECK_THROWS_WITH_AS(probes::run_audit({&a}, ITEMS, shard), doctest::Contains("--shard"), input_error);

  std::vector<item> pitfalls = ITEMS;
  pitfalls.push_back({"i4", "Now is 2025-01-01T12:00:00", "", "", ""});
  std::vector<std::string> log;
  probes::run_options lint_only = options(dir + "/lint", {"lint"});
  lint_only.log = [&log](const std::string& s) { log.push_back(s); };
  const probes::run_result lr = probes::run_audit({&a}, pitfalls, lint_only);
  CHECK(a.calls == 0);
  CHECK(lr.records_written == 0);
  const json m = manifest(dir + "/lint");
  REQUIRE(m["lint"].size() == 1);
  CHECK(m["lint"][0]["code"] == "timestamp");
  CHECK(m["lint"][0]["item_id"] == "i4");
  REQUIRE(log.size() == 1);
  CHECK(log[0].find("[timestamp] item i4") != std::string::npos);

  const probes::run_result cr = probes::run_audit({&a, &b}, ITEMS, options(dir + "/cross", {"cross"}));
  CHECK(cr.records_written == 12);
  std::map<std::string, int> by_label;
  for (const record& r : reports::records_read(dir + "/cross")) by_label[r.target["label"].get<std::string>() + ":" + r.condition]++;
  CHECK(by_label == std::map<std::string, int>{{"A:alone", 3}, {"A:control", 3}, {"B:alone", 3}, {"B:control", 3}});
  CHECK(manifest(dir + "/cross")["targets"][1]["spec"] == "http://127.0.0.1:2/v1");
  CHECK_THROWS_WITH_AS(probes::run_audit({&a, &b}, ITEMS, options(dir + "/cross", {"cross"})), doctest::Contains("--resume"), input_error);
}

TEST_CASE("probes_run: --resume after lost and half-written lines completes every key once") {
  const std::string full = test::scratch_dir("probes_run_resume_full");
  const std::string part = test::scratch_dir("probes_run_resume_part");
  probes::target_options topt;
  auto t = probes::target_make_engine("engine:" + test::fixture("models/stories260K.gguf") + "?threads=1&np=4", topt);
  const std::vector<item> items = many_items(4);
  probes::run_audit({t.get()}, items, options(full, {"repeat", "concurrency"}));
  const std::vector<record> want = reports::records_read(full);
  REQUIRE(want.size() == 16);

  // The same run interrupted: lines 3 and 8 lost, the last three lost and the next one half written.
  fs::copy_file(full + "/run.json", part + "/run.json");
  const std::vector<std::string> lines = file_lines(full + "/records.jsonl");
  std::string kept;
  for (size_t i = 0; i < lines.size() - 3; ++i)
    if (i != 2 && i != 7) kept += lines[i] + "\n";
  kept += lines[lines.size() - 3].substr(0, lines[lines.size() - 3].size() / 2);
  std::ofstream(part + "/records.jsonl", std::ios::binary) << kept;

  probes::run_options o = options(part, {"repeat", "concurrency"});
  o.resume = true;
  const probes::run_result res = probes::run_audit({t.get()}, items, o);
  CHECK(res.records_skipped == 11);
  CHECK(res.records_written == 5);
  const std::vector<record> got = reports::records_read(part);
  CHECK(keys_of(got) == keys_of(want));
  const std::string text = test::file_text(part + "/records.jsonl");
  CHECK(text.back() == '\n');
  const json m = manifest(part);
  CHECK(m["run_id"] == manifest(full)["run_id"]);
  CHECK(m["resumed"].size() == 1);
  for (const record& r : got) CHECK(r.run_id == m["run_id"]);

  probes::run_options again = o;
  const probes::run_result nothing = probes::run_audit({t.get()}, items, again);
  CHECK(nothing.records_written == 0);
  CHECK(nothing.records_skipped == 16);
  CHECK_THROWS_WITH_AS(probes::run_audit({t.get()}, items, options(part, {"repeat"})), doctest::Contains("already holds records"),
                       input_error);
  probes::run_options no_run = options(test::scratch_dir("probes_run_resume_none"), {});
  no_run.resume = true;
  CHECK_THROWS_WITH_AS(probes::run_audit({t.get()}, items, no_run), doctest::Contains("nothing to resume"), input_error);
}

TEST_CASE("probes_run: --resume sends again the keys that only have error records") {
  const std::string dir = test::scratch_dir("probes_run_resume_errors");
  echo_target t;
  t.error_word = "little dog";
  const probes::run_result first = probes::run_audit({&t}, ITEMS, options(dir, {}));
  CHECK(first.errors == 2);
  t.error_word.clear();
  probes::run_options o = options(dir, {});
  o.resume = true;
  const probes::run_result second = probes::run_audit({&t}, ITEMS, o);
  CHECK(second.records_written == 2);
  CHECK(second.errors == 0);
  const std::vector<record> rs = reports::records_read(dir);
  REQUIRE(rs.size() == 8);
  CHECK(rs[6].item_id == "i1");
  CHECK(rs[6].condition == "alone");
  CHECK(rs[6].error.empty());
  CHECK(rs[7].condition == "control");
}

TEST_CASE("probes_run: shards 1/2 and 2/2 merged hold every key of the full run once") {
  const std::string root = test::scratch_dir("probes_run_shards");
  const std::vector<item> items = many_items(5);
  echo_target t;
  probes::run_audit({&t}, items, options(root + "/full", {"repeat", "seed"}));
  for (int i = 0; i < 2; ++i) {
    probes::run_options o = options(root + "/s" + std::to_string(i + 1), {"repeat", "seed"});
    o.shard_index = i;
    o.shard_count = 2;
    const probes::run_result r = probes::run_audit({&t}, items, o);
    CHECK(r.records_path == root + "/s" + std::to_string(i + 1) + "/records-" + std::to_string(i + 1) + "-of-2.jsonl");
  }
  std::set<std::string> shard1_items;
  for (const record& r : reports::records_read(root + "/s1")) shard1_items.insert(r.item_id);
  CHECK(shard1_items == std::set<std::string>{"m0", "m2", "m4"});
  CHECK(manifest(root + "/s2")["shard"] == json{{"index", 2}, {"count", 2}});
  CHECK(manifest(root + "/s2")["items_in_shard"] == 2);

  const size_t n = probes::runs_merge({root + "/s1", root + "/s2"}, root + "/merged");
  const std::vector<record> merged = reports::records_read(root + "/merged");
  CHECK(n == merged.size());
  CHECK(keys_of(merged) == keys_of(reports::records_read(root + "/full")));
  const json m = manifest(root + "/merged");
  CHECK_FALSE(m.contains("shard"));
  CHECK(m["merged_from"].size() == 2);
  CHECK(m["shards"] == json{{"count", 2}, {"merged", {1, 2}}, {"missing", json::array()}});
  CHECK(m["run_ids"].size() == 2);
  CHECK_THROWS_WITH_AS(probes::runs_merge({root + "/s1"}, root + "/merged"), doctest::Contains("already exists"), input_error);
  CHECK_THROWS_WITH_AS(probes::runs_merge({root + "/nope"}, root + "/m2"), doctest::Contains("is not a run folder"), input_error);
}

TEST_CASE("probes_run: an unreachable target stops the run and keeps complete lines") {
  const std::string dir = test::scratch_dir("probes_run_unreachable");
  echo_target t;
  t.fail_from = 6;
  const probes::run_result res = probes::run_audit({&t}, many_items(4), options(dir, {"repeat"}));
  CHECK(res.unreachable);
  CHECK(res.unreachable_message.find("connection refused") != std::string::npos);
  CHECK(res.records_written == 5);
  const std::string text = test::file_text(dir + "/records.jsonl");
  CHECK(text.back() == '\n');
  reports::read_stats st;
  CHECK(reports::records_read(dir, &st).size() == 5);
  CHECK(st.truncated == 0);
}
