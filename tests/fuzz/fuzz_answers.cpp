// libFuzzer target for what a server answers: the input is a generation answer as an HTTP target
// reads it (answer_read: one JSON document, or a text/event-stream body assembled by the dialect's
// stream reader, then the dialect's response reader), followed by what `run` does before a record
// is written (record_normalise, record_redact).
//
// Input layout: byte 0 picks the dialect (bits 0-1, dialect_table() order), the chat route (bit 2)
// and an event stream (bit 3); byte 1 the request's n_predict (bits 0-3, 15 = no limit) and top
// log-probs asked (bits 4-7); the rest is the answer's body. The request is built by the dialect's
// own request builder, so the bounds are the ones `run` would apply.
//
// Properties: no exception escapes answer_read (a bad answer is rec.error); an accepted answer
// holds no more tokens, and no step more alternatives, than the bounds allow; stored server
// metadata stays within its stored size; after redaction no 12 characters of the key remain in
// the record, in any case; the record written by record_to_json reads back to the same JSON.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>

#include "probes/response_limits.h"
#include "probes/target_http.h"
#include "reports/audit/record.h"
#include "reports/audit/redact.h"
#include "reports/audit/steps.h"

namespace pr = detaudit::probes;
namespace rp = detaudit::reports;

namespace {

const std::string KEY = "sk-Fuzz0123456789abcdefKEY";

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Whether any REDACT_MIN_MATCH characters of the key appear in `text`, ignoring case.
bool leaks_key(const std::string& text) {
  const std::string t = lower(text), k = lower(KEY);
  for (size_t i = 0; i + rp::REDACT_MIN_MATCH <= k.size(); ++i)
    if (t.find(k.substr(i, rp::REDACT_MIN_MATCH)) != std::string::npos) return true;
  return false;
}

// A few dozen bytes per level over the stored bound (response_limits.h: json_bounded).
constexpr size_t BOUNDED_SLACK = 64 * (pr::STORED_DEPTH + 1);

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const auto& table = pr::dialect_table();
  const pr::dialect_def& d = table[data[0] % table.size()];
  bool chat = (data[0] >> 2) & 1;
  if (chat && !d.chat_path) chat = false;
  if (!chat && !d.raw_path) chat = true;
  const bool events = (data[0] >> 3) & 1;

  pr::gen_request r;
  const int np = data[1] & 0x0f;
  r.n_predict = np == 15 ? -1 : np;
  r.n_probs = data[1] >> 4;
  if (chat) {
    r.messages.push_back({"user", "Once upon a time"});
  } else {
    r.prompt = "Once upon a time";
  }
  pr::http_server_info si;
  si.model = "m";
  si.llamacpp = d.api == pr::API_LLAMACPP;
  si.detaudit = true;
  pr::http_call call = d.build(r, si);
  if (events) call.body["stream"] = true;
  const pr::response_limits lim = pr::response_limits_for(call.body);

  const std::string body(reinterpret_cast<const char*>(data) + 2, size - 2);
  rp::record rec;
  rec.item_id = "fuzz";
  rec.probe = "base";
  rec.condition = "alone";
  rec.run_id = "fuzz";
  rec.request = call.body;
  rec.endpoint = call.path;
  rec.http_status = 200;
  rec.target = {{"spec", "fuzz"}, {"dialect", d.name}};
  pr::answer_read(d, chat, events, body, lim, "POST " + call.path, rec);

  if (rec.error.empty()) {
    if (rec.tokens.size() > lim.max_tokens) __builtin_trap();
    for (const auto& step : rec.top_logprobs)
      if (step.size() > lim.max_alts) __builtin_trap();
  } else if (!rec.tokens.empty() || !rec.top_logprobs.empty() || !rec.text.empty()) {
    __builtin_trap();  // a refused answer leaves nothing of itself as an answer
  }
  if (const auto t = rec.timings.find("server"); t != rec.timings.end())
    if (t->dump().size() > pr::STORED_TIMINGS + BOUNDED_SLACK) __builtin_trap();
  if (rec.usage.dump().size() > pr::STORED_USAGE + BOUNDED_SLACK) __builtin_trap();

  rp::record_normalise(rec);
  rp::record_redact(rec, KEY);
  const rp::json written = rp::record_to_json(rec);
  const std::string line = written.dump(-1, ' ', false, rp::json::error_handler_t::replace);
  if (leaks_key(line)) __builtin_trap();
  const rp::json again = rp::record_to_json(rp::record_from_json(rp::json::parse(line), "fuzz"));
  if (again != rp::json::parse(line)) __builtin_trap();
  return 0;
}
