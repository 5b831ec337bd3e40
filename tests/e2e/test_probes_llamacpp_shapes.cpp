// The speculation probe against `detaudit serve --spec ngram` over HTTP as a llama.cpp server that
// drafts: drafting is turned off per request with llama.cpp's "speculative.n_max": 0. The llama.cpp
// dialect on answers recorded from real llama-servers: tests/unit/test_probes_llamacpp_shapes.cpp.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "reports/audit/record.h"
#include "serve_util.h"
#include "test_util.h"

using namespace detaudit;
using json = nlohmann::json;

TEST_CASE("llama.cpp shapes: the speculation probe turns drafting off per request on a llama.cpp server that drafts") {
  test::serve_child srv({"-np", "2", "-c", "2048", "--spec", "ngram"});
  const std::string dir = test::scratch_dir("llamacpp_spec_probe");
  // Stories repeat themselves: n-gram drafting finds something to propose in 96 tokens.
  const std::string prompts = test::write_file(dir + "/p.txt", "Once upon a time, there was a little girl named Lily. She\n");
  const test::cmd_result r = test::run_cmd(test::detaudit_bin() + " run --target " + srv.url() + " --api llamacpp --prompts " +
                                           prompts + " --raw -n 96 --probe speculation --format json --fail-on none --out " +
                                           dir + "/run");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  bool off_seen = false;
  for (const reports::record& rec : reports::records_read(dir + "/run")) {
    INFO(rec.condition << " " << rec.evidence.dump());
    if (rec.condition == "alone") CHECK(rec.evidence.value("draft_proposed", 0) > 0);
    if (rec.condition == "spec-off") {
      off_seen = true;
      CHECK(rec.request["speculative.n_max"] == 0);
      CHECK(rec.evidence["draft_proposed"] == 0);
    }
  }
  CHECK(off_seen);
  const json rep = json::parse(r.out);
  bool judged = false;
  for (const json& p : rep["pairs"])
    if (p["cond_b"] == "spec-off") {
      judged = true;
      CHECK(p["not_exercised"] == 0);
      CHECK(p["differ"] == 0);  // exact numerics: drafting changes nothing
    }
  CHECK(judged);
  CHECK(srv.stop() == 0);
}
