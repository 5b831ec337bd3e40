// The verdict server itself: a known-answer suite is only as good as the answers it plants. These
// check what the other cases rely on: the arrival order, the seed modes, the shapes' main fields,
// and that bad input is refused (a 400, or a cases file stopped at start naming the field).
#include <httplib.h>

#include "verdict_harness.h"

using namespace detaudit::verdicts_test;

namespace {

json post(int port, const std::string& path, const json& body, int expect = 200) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(20, 0);
  const auto r = c.Post(path.c_str(), body.dump(), "application/json");
  REQUIRE(r);
  INFO(path << " " << body.dump() << " -> " << r->body);
  CHECK(r->status == expect);
  return json::parse(r->body);
}

TEST_CASE("verdicts server: temperature-0 answers come in arrival order, then the first again") {
  planted p(LLAMACPP);
  p.item("order", {answer({"first"}), answer({"second"})});
  verdict_server srv(p.cases());
  const json ask = {{"prompt", "order"}, {"temperature", 0}, {"return_tokens", true}};
  CHECK(post(srv.port(), "/completion", ask)["content"] == "first");
  CHECK(post(srv.port(), "/completion", ask)["content"] == "second");
  CHECK(post(srv.port(), "/completion", ask)["content"] == "first");
  const json other = post(srv.port(), "/completion", {{"prompt", "no such case"}, {"temperature", 0}});
  CHECK(other["content"] == " ok");
  const std::vector<json> log = srv.requests();
  REQUIRE(log.size() == 4);
  CHECK(log[2]["index"] == 2);
  CHECK(log[3]["case"] == false);
}

TEST_CASE("verdicts server: honoured seeds repeat, ignored seeds and missing seeds do not") {
  planted p(OPENAI_CHAT);
  p.item("honour", {answer({"x"})}).seeded("honour", answer({"Roll"}), true);
  p.item("ignore", {answer({"x"})}).seeded("ignore", answer({"Roll"}), false);
  verdict_server srv(p.cases());
  auto text = [&](const std::string& prompt, std::optional<int> seed) {
    json body = {{"messages", {{{"role", "user"}, {"content", prompt}}}}, {"temperature", 0.7}};
    if (seed) body["seed"] = *seed;
    return post(srv.port(), "/v1/chat/completions", body)["choices"][0]["message"]["content"].get<std::string>();
  };
  CHECK(text("honour", 42) == "Roll s42");
  CHECK(text("honour", 42) == "Roll s42");
  CHECK(text("honour", 43) == "Roll s43");
  CHECK(text("honour", std::nullopt) != text("honour", std::nullopt));
  CHECK(text("ignore", 42) != text("ignore", 42));
}

TEST_CASE("verdicts server: each route carries the planted text, tokens and cache count in its own shape") {
  planted p(LLAMACPP);
  p.item("shape", {answer({"Hi", "\xE2", "\x82", "\xAC"}).top(1, {{"\xE2", -0.25}}).set("cached_tokens", 3)});
  verdict_server srv(p.cases());
  const json raw = {{"prompt", "shape"}, {"temperature", 0}, {"return_tokens", true}};
  const json chat = {{"messages", {{{"role", "user"}, {"content", "shape"}}}}, {"temperature", 0}};
  const json l = post(srv.port(), "/completion", raw);
  CHECK(l["content"] == "Hi\xE2\x82\xAC");
  REQUIRE(l["tokens"].size() == 4);  // auto ids: a byte b is 3 + b
  CHECK(l["tokens"][1] == 3 + 0xE2);
  CHECK(l["tokens"][3] == 3 + 0xAC);
  CHECK(l["completion_probabilities"][1]["bytes"] == json({0xE2}));
  CHECK(l["completion_probabilities"][1]["token"] == "\xEF\xBF\xBD");
  CHECK(l["timings"]["cache_n"] == 3);
  const json c = post(srv.port(), "/v1/chat/completions", chat);
  CHECK(c["choices"][0]["logprobs"]["content"].size() == 4);
  CHECK(c["usage"]["prompt_tokens_details"]["cached_tokens"] == 3);
  const json t = post(srv.port(), "/v1/completions", raw);
  CHECK(t["choices"][0]["logprobs"]["tokens"].size() == 4);
  const json o = post(srv.port(), "/api/chat", chat);
  CHECK(o["message"]["content"] == "Hi\xE2\x82\xAC");
  CHECK_FALSE(o.contains("usage"));
}

TEST_CASE("verdicts server: a body that is not JSON and a stream request are refused with 400") {
  planted p(OPENAI_CHAT);
  verdict_server srv(p.cases());
  httplib::Client c("127.0.0.1", srv.port());
  const auto bad = c.Post("/v1/chat/completions", "{not json", "application/json");
  REQUIRE(bad);
  CHECK(bad->status == 400);
  CHECK(json::parse(bad->body)["error"]["message"] == "the body is not a JSON object");
  const json s = post(srv.port(), "/v1/completions", {{"prompt", "x"}, {"stream", true}}, 400);
  CHECK(s["error"]["code"] == 400);
  CHECK(c.Get("/props")->status == 404);  // not a llama.cpp-family server unless the cases say so
}

TEST_CASE("verdicts server: a cases file with an unknown field stops it at start, naming the field") {
  const std::string dir = fresh_dir();
  const std::string path = file_write(dir, "cases.json", R"({"cases": {"x": {"answers": [{"tokenz": []}]}}})");
  const test::cmd_result r =
      test::run_cmd(test::setting("DETAUDIT_VERDICT_SERVER", DETAUDIT_VERDICT_SERVER_DEFAULT) + std::string(" --cases ") + path);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("cases[\"x\"].answers[0]: unknown field 'tokenz'") != std::string::npos);
}

}  // namespace
