// Redaction of what an HTTP target records. The HTTP targets against the real `detaudit serve`
// (the four dialects, detection and the capability probe, concurrent use, API keys kept out of
// every record): tests/e2e/test_probes_http.cpp.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "reports/audit/redact.h"

using json = nlohmann::json;

TEST_CASE("probes_http: redaction removes the secret and credential fields at any depth") {
  const std::string s = "sk-test-SECRET123";
  const json in = {{"headers", {{"Authorization", "Bearer " + s}, {"Accept", "application/json"}}},
                   {"API_KEY", 5},
                   {"Api-Key", nullptr},
                   {"list", {"plain", "x" + s + "y", s}},
                   {"nested", {{"deeper", {{"value", s}}}}},
                   {"n", 3}};
  const json out = detaudit::reports::redact_json(in, s);
  const json want = {{"headers", {{"Authorization", "[REDACTED]"}, {"Accept", "application/json"}}},
                     {"API_KEY", "[REDACTED]"},
                     {"Api-Key", "[REDACTED]"},
                     {"list", {"plain", "x[REDACTED]y", "[REDACTED]"}},
                     {"nested", {{"deeper", {{"value", "[REDACTED]"}}}}},
                     {"n", 3}};
  CHECK(out == want);
  // no secret: only the credential fields go
  const json plain = detaudit::reports::redact_json({{"prompt", "hello"}, {"authorization", "x"}}, "");
  CHECK(plain == json({{"prompt", "hello"}, {"authorization", "[REDACTED]"}}));
}
