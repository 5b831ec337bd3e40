// Verdicts end to end against the real `detaudit serve`: the exact engine in process and the same
// model behind serve's OpenAI completions route agree token for token, byte tokens included (the
// route writes them as "bytes:\xHH", the engine as raw bytes); and a chat run on a model without a
// chat template is answered in chatml, which the run's lint says.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "reports/audit/record.h"
#include "serve_util.h"
#include "synth_util.h"
#include "test_util.h"

using namespace detaudit;
using json = nlohmann::json;

TEST_CASE("audit_e2e_verdicts: the engine and serve's /v1/completions agree token for token, byte tokens included") {
  const std::string model = test::byte_token_model();
  test::serve_child srv({"-np", "2", "-c", "1024"}, model);
  const std::string dir = test::scratch_dir("e2e_verdicts_bytes");
  const std::string prompts = test::write_file(dir + "/p.txt", "Once upon a time\nThe little bird\nTom had a red ball\n");
  const test::cmd_result r = test::run_cmd(test::detaudit_bin() + " run --probe cross --target 'engine:" + model +
                                           "?threads=1' --target " + srv.url() + " --api openai-completions --raw --prompts " +
                                           prompts + " --n-predict 20 --n-probs 5 --out " + dir + "/run --format json --fail-on any");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json rep = json::parse(r.out);
  int cross_rows = 0;
  for (const json& p : rep["pairs"]) {
    if (p["probe"] != "cross") continue;
    for (const json& row : p["rows"]) {
      INFO(row.dump());
      CHECK(row["status"] == "identical");
      CHECK(row["compared_on"] == "tokens");
      ++cross_rows;
    }
  }
  CHECK(cross_rows == 6);  // alone and control, three items
  // The comparison met byte tokens: the engine's records carry raw bytes, serve's the escaped form.
  int engine_bytes = 0, escaped = 0;
  for (const reports::record& rec : reports::records_read(dir + "/run"))
    for (const reports::token_rec& t : rec.tokens) {
      engine_bytes += rec.target.value("label", "") == "A" && !t.bytes.empty();
      escaped += rec.target.value("label", "") == "B" && t.text.rfind("bytes:\\x", 0) == 0;
    }
  CHECK(engine_bytes > 0);
  CHECK(escaped > 0);
}

TEST_CASE("audit_e2e_verdicts: a chat run on a model without a template is answered in chatml, and lint says so") {
  test::serve_child srv({"-np", "2"});  // stories260K has no chat template
  const std::string dir = test::scratch_dir("e2e_verdicts_chatml");
  const std::string prompts = test::write_file(dir + "/p.txt", "Once upon a time\n");
  const test::cmd_result r = test::run_cmd(test::detaudit_bin() + " run --target " + srv.url() + " --prompts " + prompts +
                                           " --probe lint,repeat --n-predict 8 --out " + dir + "/run");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("[chat-template-fallback]") != std::string::npos);
  const json m = json::parse(test::file_text(dir + "/run/run.json"));
  bool found = false;
  for (const json& f : m["lint"]) found = found || f["code"] == "chat-template-fallback";
  CHECK(found);
  CHECK(m["identity"]["targets"][0]["chat_template_fallback"] == "chatml");
  for (const reports::record& rec : reports::records_read(dir + "/run")) CHECK(rec.error.empty());
}
