// The one redaction rule (reports/audit/redact.h): a key echoed by a server lower-cased, cut short or
// inside other text is found in every field of a record, as a credential field is by its name.
// Before, an exact-match search let "SK-...key" lower-cased or without its last characters through.
#include <doctest/doctest.h>

#include <string>

#include "reports/audit/redact.h"

using namespace detaudit::reports;

namespace {

const std::string KEY = "sk-Live-0123456789AbCdEfGhIjKlMnOp";

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

TEST_CASE("redact: the key, lower-cased, cut short or as any 12 characters of it, is replaced") {
  CHECK(redact_text("Bearer " + KEY, KEY) == "Bearer [REDACTED]");
  CHECK(redact_text("x" + lower(KEY) + "y", KEY) == "x[REDACTED]y");
  CHECK(redact_text(KEY.substr(0, KEY.size() - 5) + "!", KEY) == "[REDACTED]!");
  CHECK(redact_text("[" + KEY.substr(7, 12) + "]", KEY) == "[[REDACTED]]");          // 12 from the middle
  CHECK(redact_text("[" + KEY.substr(7, 11) + "]", KEY) == "[" + KEY.substr(7, 11) + "]");  // 11: kept
  CHECK(redact_text(KEY + " and " + KEY, KEY) == "[REDACTED] and [REDACTED]");
  CHECK(redact_text("nothing here", KEY) == "nothing here");
  CHECK(redact_text("anything", "") == "anything");
  // A key shorter than 12 characters is matched whole, in any case.
  CHECK(redact_text("a SHORTkey1 b shortkey c", "shortKey1") == "a [REDACTED] b shortkey c");
}

TEST_CASE("redact: JSON values and keys at any depth, and credential fields by name") {
  const json in = {{"a", {{"deep", {lower(KEY), 1, "plain"}}}},
                   {KEY.substr(3, 20), "a key named after the secret"},
                   {"X-Api-Key", "whatever"},
                   {"apikey", 7}};
  const json out = redact_json(in, KEY);
  const std::string text = out.dump();
  CHECK(text.find(lower(KEY).substr(0, 12)) == std::string::npos);
  CHECK(out["a"]["deep"][0] == "[REDACTED]");
  CHECK(out["a"]["deep"][2] == "plain");
  CHECK(out["X-Api-Key"] == "[REDACTED]");
  CHECK(out["apikey"] == "[REDACTED]");
  CHECK(out.contains("[REDACTED]"));
}

TEST_CASE("redact: every field of a record, token bytes and alternatives included") {
  const std::string echoed = lower(KEY).substr(0, KEY.size() - 3);
  record r;
  r.target = {{"build", echoed}, {"model", "m " + echoed}};
  r.request = {{"prompt", "p"}, {"authorization", "Bearer x"}};
  r.endpoint = "/completion/" + echoed;
  r.text = "The key is " + echoed + ".";
  token_rec t;
  t.text = echoed;
  t.bytes.assign(echoed.begin(), echoed.end());
  r.tokens = {t};
  r.top_logprobs = {{{-1, echoed, -0.5}}};
  r.finish_reason = echoed;
  r.chained_hash = echoed;
  r.usage = {{"note", echoed}};
  r.timings = {{"server", {{echoed, {{"x", echoed}}}}}};
  r.evidence = {{"reason", echoed}};
  r.error = "HTTP 500: " + echoed;
  record_redact(r, KEY);
  const std::string all = record_to_json(r).dump();
  CHECK(all.find(echoed.substr(0, 12)) == std::string::npos);
  CHECK(all.find(echoed.substr(echoed.size() - 12)) == std::string::npos);
  CHECK(r.text == "The key is [REDACTED].");
  CHECK(r.request["authorization"] == "[REDACTED]");
  CHECK(std::string(r.tokens[0].bytes.begin(), r.tokens[0].bytes.end()) == "[REDACTED]");
  CHECK(r.top_logprobs[0][0].token == "[REDACTED]");
}
