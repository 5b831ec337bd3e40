// Hostile HTTP answers at the target level: an answer larger than the client keeps is that
// request's error (the server answered), not an unreachable server that stops the whole run.
#include <doctest/doctest.h>

#include "probes/target.h"
#include "test_probes_http_util.h"

using detaudit::probes::gen_request;
using detaudit::probes::target_make;
using detaudit::probes::target_options;
using detaudit::reports::record;
using detaudit::test::responder;

// A 260 MiB answer (more than the client's 256 MiB) used to throw unreachable_error, "the answer is
// larger than 256 MiB": `detaudit run` stopped with exit 3, "target unreachable", and every
// --resume stopped again at the same item. The server answered; the answer is that request's error
// (now at the bound the request sets, far below 256 MiB: docs/probes.md).
TEST_CASE("hostile http: an answer larger than the client keeps is the request's error, not an unreachable target") {
  responder r;
  r.srv.Post("/completion", [](const httplib::Request&, httplib::Response& res) {
    const size_t chunk = 1u << 20, total = 260u * chunk;
    res.set_content_provider(total, "application/json", [chunk](size_t, size_t, httplib::DataSink& sink) {
      static const std::string spaces(1u << 20, ' ');
      return sink.write(spaces.data(), chunk);
    });
  });
  r.start();
  target_options o;
  o.api = "llamacpp";
  o.timeout_s = 30;
  o.retries = 2;
  o.backoff_s = 0.01;
  gen_request q;
  q.prompt = "Hello";
  q.n_predict = 2;
  record rec;
  CHECK_NOTHROW(rec = target_make(r.url(), o)->complete(q));
  CHECK(rec.http_status == 200);
  CHECK(rec.error.find("larger than 1.1 MiB, more than the request (n_predict 2, n_probs 2) can need") != std::string::npos);
  CHECK(rec.error.find(r.url() + "/completion") != std::string::npos);
  CHECK(rec.finish_reason == "error");
  CHECK(rec.timings.value("attempts", 0) == 1);
}

namespace {

target_options llamacpp_opts(bool stream = false) {
  target_options o;
  o.api = "llamacpp";
  o.timeout_s = 30;
  o.retries = 0;
  o.stream = stream;
  return o;
}

gen_request two_tokens() {
  gen_request q;
  q.prompt = "Hello";
  q.n_predict = 2;
  q.n_probs = 2;
  return q;
}

}  // namespace

// A valid answer whose timings carry 600 KB of text and 5000 keys, and usage alike: the answer is
// read (it is within its bounds), but the record keeps the server's metadata cut to its size
// (16 KiB of timings, 4 KiB of usage), not a copy of whatever the server sent on every line.
TEST_CASE("hostile http: a record keeps the server's timings and usage cut to their size") {
  responder r;
  r.srv.Post("/completion", [](const httplib::Request&, httplib::Response& res) {
    nlohmann::json timings = {{"prompt_n", 1}, {"note", std::string(600000, 't')}};
    for (int i = 0; i < 5000; ++i) timings["k" + std::to_string(i)] = i;
    res.set_content(nlohmann::json({{"content", " Hi"}, {"tokens", {17}}, {"stop_type", "limit"}, {"tokens_evaluated", 1},
                                    {"timings", timings}})
                        .dump(),
                    "application/json");
  });
  r.start();
  const record rec = target_make(r.url(), llamacpp_opts())->complete(two_tokens());
  INFO(rec.error);
  CHECK(rec.error.empty());
  CHECK(rec.text == " Hi");
  const std::string server = rec.timings["server"].dump();
  CHECK(server.size() < 17 * 1024);
  CHECK(server.find("more left out: past the size stored") != std::string::npos);  // keys in order: k0... fill it
  CHECK(detaudit::reports::record_to_json(rec).dump().size() < 24 * 1024);
}

// A stream's events are parsed against one budget of values: 60 events of 400 values each pass
// one by one (and are fewer than the events allowed), but not together.
TEST_CASE("hostile http: a stream's events share one budget of JSON values") {
  responder r;
  r.srv.Post("/completion", [](const httplib::Request&, httplib::Response& res) {
    std::string pad = "[0";
    for (int i = 1; i < 400; ++i) pad += ",0";
    pad += "]";
    std::string body;
    for (int i = 0; i < 60; ++i) body += "data: {\"content\": \"x\", \"stop\": false, \"pad\": " + pad + "}\n\n";
    body += "data: {\"content\": \"\", \"stop\": true, \"stop_type\": \"limit\"}\n\n";
    res.set_content(body, "text/event-stream");
  });
  r.start();
  const record rec = target_make(r.url(), llamacpp_opts(true))->complete(two_tokens());
  CHECK(rec.finish_reason == "error");
  CHECK(rec.error.find("JSON values, more than the request (n_predict 2, n_probs 2) can need") != std::string::npos);
  CHECK(rec.error.find("stream event") != std::string::npos);
  CHECK(rec.text.empty());
}
