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
// --resume stopped again at the same item. The server answered; the answer is that request's error.
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
  CHECK(rec.error.find("larger than 256 MiB") != std::string::npos);
  CHECK(rec.error.find(r.url() + "/completion") != std::string::npos);
  CHECK(rec.finish_reason == "error");
  CHECK(rec.timings.value("attempts", 0) == 1);
}
