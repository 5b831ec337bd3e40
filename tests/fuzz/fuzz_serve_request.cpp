// libFuzzer target for the server's request parsing: the input is a request body, parsed as the
// handlers parse it (body_parse), then read by every field reader for every key it holds, and by
// sampling_parse for the body and for an "options" object (Ollama's shape).
//
// Properties: the only exceptions are http_error with a 4xx status and input_error (both answered
// as 4xx by the server's error adapter); any other exception, a crash or UB is a finding. Every
// error message renders as an OpenAI error object (error_json + json_text).
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <string>

#include "runtime/sampling.h"
#include "serve/http_handlers.h"
#include "util/error.h"

namespace sv = detaudit::serve;

namespace {

void expect_4xx(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const sv::http_error& e) {
    if (e.status() < 400 || e.status() > 499) __builtin_trap();
    (void)sv::json_text(sv::error_json(e.status(), e.what()));
  } catch (const detaudit::input_error& e) {
    (void)sv::json_text(sv::error_json(400, e.what()));
  }
}

void read_every_field(const sv::json& b) {
  constexpr int64_t i64_min = std::numeric_limits<int64_t>::min();
  constexpr int64_t i64_max = std::numeric_limits<int64_t>::max();
  for (auto it = b.begin(); it != b.end(); ++it) {
    const std::string key = it.key();
    const char* k = key.c_str();
    expect_4xx([&] { (void)sv::field_int(b, k, 0, i64_min, i64_max); });
    expect_4xx([&] { (void)sv::field_int(b, k, -1, -1, INT32_MAX); });
    expect_4xx([&] { (void)sv::field_number(b, k, 0.0); });
    expect_4xx([&] { (void)sv::field_bool(b, k, false); });
    expect_4xx([&] { (void)sv::field_string(b, k, ""); });
    expect_4xx([&] { (void)sv::field_stop(b, k); });
    expect_4xx([&] { sv::field_require_n1(b, k); });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body.assign(reinterpret_cast<const char*>(data), size);
  try {
    static sv::body_budget budget;
    const sv::parsed_body body = sv::body_parse(budget, size_t{1} << 30, req);
    const sv::json& b = body.j;
    (void)sv::json_text(b);
    read_every_field(b);
    expect_4xx([&] { sv::fields_reject_unsupported(b); });
    expect_4xx([&] {
      detaudit::runtime::sampling_params s;
      sv::sampling_parse(b, s);
      (void)sv::json_text(sv::sampling_to_json(s));
    });
    auto opts = b.find("options");
    if (opts != b.end() && opts->is_object()) {
      expect_4xx([&] {
        detaudit::runtime::sampling_params s;
        sv::sampling_parse(*opts, s);
      });
    }
  } catch (const sv::http_error& e) {
    if (e.status() != 400 && e.status() != 413) __builtin_trap();
  }
  return 0;
}
