// The record reader refuses numbers out of range, naming the line or the field. `detaudit report`
// and `detaudit compare` as a user runs them: tests/e2e/test_reports_cli.cpp.
#include <doctest/doctest.h>

#include <fstream>
#include <utility>
#include <vector>

#include "reports/audit/record.h"
#include "test_util.h"
#include "util/error.h"

using detaudit::reports::record;

TEST_CASE("records read: a number too large for a double is an input_error naming the line") {
  const std::string dir = detaudit::test::scratch_dir("records_number_overflow");
  std::ofstream(dir + "/records.jsonl") << "{\"schema\":1,\"item_id\":\"q\",\"condition\":\"alone\"}\n"
                                        << "{\"schema\":1,\"item_id\":\"q\",\"repetition\":1e999}\n";
  CHECK_THROWS_WITH_AS(detaudit::reports::records_read_file(dir + "/records.jsonl"),
                       doctest::Contains("records.jsonl:2: not a JSON line"), detaudit::input_error);
  std::ofstream(dir + "/run.json") << "{\"schema\": 1e999}";
  CHECK_THROWS_WITH_AS(detaudit::reports::run_manifest_read(dir), doctest::Contains("run.json: not valid JSON"),
                       detaudit::input_error);
}

TEST_CASE("records read: integers out of range are an input_error naming the field") {
  const std::string dir = detaudit::test::scratch_dir("records_int_range");
  const std::string head = "{\"schema\":1,\"item_id\":\"q\",\"condition\":\"alone\",";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\"tokens\":[{\"id\":4.4e42,\"text\":\"so\"}]}", "field 'id'"},
      {"\"tokens\":[{\"id\":3000000000,\"text\":\"so\"}]}", "field 'id'"},
      {"\"tokens\":[{\"id\":1,\"text\":\"so\",\"bytes\":[300]}]}", "field 'bytes'"},
      {"\"tokens\":[{\"id\":1,\"text\":\"so\",\"bytes\":[1e300]}]}", "field 'bytes'"},
      {"\"repetition\":-1e300}", "field 'repetition'"},
      {"\"repetition\":1.5}", "field 'repetition'"},
      {"\"http_status\":1e19}", "field 'http_status'"},
      {"\"top_logprobs\":[[[5000000000,\"so\",-0.5]]]}", "a 'top_logprobs' id"},
  };
  for (const auto& [fields, message] : cases) {
    CAPTURE(fields);
    const std::string path = dir + "/records.jsonl";
    std::ofstream(path) << head << fields << "\n";
    CHECK_THROWS_WITH_AS(detaudit::reports::records_read_file(path), doctest::Contains(("records.jsonl:1: " + message).c_str()),
                         detaudit::input_error);
  }
  std::ofstream(dir + "/whole.jsonl") << head << "\"repetition\":2.0,\"tokens\":[{\"id\":7,\"bytes\":[0,255]}]}\n";
  const std::vector<record> recs = detaudit::reports::records_read_file(dir + "/whole.jsonl");
  REQUIRE(recs.size() == 1);
  CHECK(recs[0].repetition == 2);
  REQUIRE(recs[0].tokens.size() == 1);
  CHECK(recs[0].tokens[0].id == 7);
  CHECK(recs[0].tokens[0].bytes == std::vector<uint8_t>{0, 255});
}

