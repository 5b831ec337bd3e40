// Streamed answers (`detaudit run --stream`) against the real `detaudit serve`: a streamed answer
// makes the same record as the whole answer. Scripted servers that end streams early, send error
// events or cut the connection: tests/unit/test_probes_http_stream.cpp.
#include <doctest/doctest.h>

#include "probes/target.h"
#include "test_probes_http_util.h"

using detaudit::probes::target_make;
using detaudit::reports::record;
using detaudit::test::stream_test::opts;
using detaudit::test::stream_test::request;
using json = nlohmann::json;

namespace {

// A record's content: everything but when it ran, what was sent and the target's description.
json content_of(const record& r) {
  json j = detaudit::reports::record_to_json(r);
  for (const char* k : {"timings", "request", "target"}) j.erase(k);
  return j;
}

}  // namespace

TEST_CASE("probes_http_stream: a streamed answer makes the same record as the whole answer in every SSE dialect") {
  detaudit::test::serve_proc srv({"-np", "2", "-c", "512", "--chat-template", "chatml"});
  struct route {
    const char* api;
    bool chat;
  };
  for (const route& rt : {route{"llamacpp", false}, route{"llamacpp", true}, route{"openai-completions", false},
                          route{"openai-chat", true}}) {
    CAPTURE(rt.api);
    CAPTURE(rt.chat);
    const record whole = target_make(srv.url(), opts(rt.api, false))->complete(request(rt.chat));
    const record streamed = target_make(srv.url(), opts(rt.api, true))->complete(request(rt.chat));
    INFO("whole: " << content_of(whole).dump());
    INFO("streamed: " << content_of(streamed).dump());
    REQUIRE(whole.error.empty());
    REQUIRE(streamed.error.empty());
    CHECK(streamed.request["stream"] == true);
    CHECK(whole.request["stream"] == false);
    CHECK(streamed.request.contains("stream_options") == (std::string(rt.api) != "llamacpp" || rt.chat));
    CHECK(streamed.tokens.size() == 12);
    CHECK(streamed.logit_hashes.size() == 12);
    CHECK(content_of(streamed) == content_of(whole));
  }
}

