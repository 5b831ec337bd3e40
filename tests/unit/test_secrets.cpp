// The search for API keys that tests/e2e/test_secrets.cpp runs over every artefact and every line
// printed (test_util.h, detaudit::test::secrets): it finds a key whole, after "Bearer", cut short,
// lower-cased, or as any 12 characters of it.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

using detaudit::test::secrets::leaks;
using detaudit::test::secrets::lowered;
using detaudit::test::secrets::random_key;

TEST_CASE("secrets: the search finds a key wherever one is written") {
  const std::string key = random_key("probe");
  const std::vector<std::pair<std::string, std::string>> texts = {
      {"clean", "nothing here"}, {"header", "Authorization: Bearer " + key}, {"truncated", key.substr(0, 20) + "..."},
      {"lower, cut", lowered(key).substr(0, key.size() - 4)}, {"middle", "<" + key.substr(9, 12) + ">"}};
  const std::vector<std::string> found = leaks(texts, {key});
  for (const char* name : {"header", "truncated", "lower, cut", "middle"}) {
    CAPTURE(name);
    CHECK(std::any_of(found.begin(), found.end(), [name](const std::string& f) { return f.rfind(name, 0) == 0; }));
  }
  for (const std::string& f : found) CHECK(f.rfind("clean", 0) != 0);
}
