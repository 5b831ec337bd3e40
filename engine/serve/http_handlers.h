// Shared by the http_*.cpp files: the request body's budget and parser, the readers that need the
// loaded model (a prompt's token ids), token / log-prob formatting, and the two ways to run a
// completion on the scheduler (blocking, or streamed as server-sent events). The error type, the
// field readers and the scheduler are the runtime's, used here under their names.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "serve/http_error.h"
#include "serve/http_server.h"
#include "runtime/request_fields.h"
#include "runtime/scheduler.h"

namespace detaudit::serve {

using json = nlohmann::json;

// The scheduler and the request field readers are the runtime's (runtime/scheduler.h,
// runtime/request_fields.h); the handlers use them under these names.
using runtime::completion_fields_parse;
using runtime::field_bool;
using runtime::field_fail;
using runtime::field_int;
using runtime::field_n_predict;
using runtime::field_number;
using runtime::field_require_n1;
using runtime::field_stop;
using runtime::field_string;
using runtime::fields_reject_unsupported;
using runtime::json_text;
using runtime::MAX_N_PROBS;
using runtime::MAX_STOP_BYTES;
using runtime::MAX_STOP_STRINGS;
using runtime::message_tools_refuse;
using runtime::metrics_snapshot;
using runtime::request;
using runtime::request_callbacks;
using runtime::request_result;
using runtime::sampling_parse;
using runtime::sampling_to_json;
using runtime::scheduler;
using runtime::slot_info;
using runtime::SPEC_NONE;
using runtime::text_quote;
using runtime::timings_json;
using runtime::token_event;
using runtime::value_quote;

// Parsed request bodies held in memory at once. A JSON body of many small values costs about 20
// times its bytes once parsed ({"x":[{},{},...]} of 8 MiB: about 180 MB), and a handler holds its
// parsed body until it answers, so with 256 connections the bodies alone could ask for tens of GB.
// Each body takes its estimated parsed size from the budget (--max-body-memory) for as long as its
// handler holds it: a body larger than the whole budget is 413, one that does not fit beside the
// others now is 503 (retry). Thread-safe.
class body_budget {
 public:
  class ticket {
   public:
    ticket() = default;
    ticket(body_budget* b, int64_t n) : b_(b), n_(n) {}
    ticket(ticket&& o) noexcept : b_(o.b_), n_(o.n_) { o.b_ = nullptr; }
    ticket& operator=(ticket&& o) noexcept {
      if (this != &o) {
        if (b_) b_->give_back(n_);
        b_ = o.b_;
        n_ = o.n_;
        o.b_ = nullptr;
      }
      return *this;
    }
    ticket(const ticket&) = delete;
    ~ticket() {
      if (b_) b_->give_back(n_);
    }

   private:
    body_budget* b_ = nullptr;
    int64_t n_ = 0;
  };
  // Takes `bytes` of a budget of `limit`; throws http_error 413 / 503 as above.
  ticket take(int64_t bytes, int64_t limit);

 private:
  void give_back(int64_t bytes);
  std::mutex mu_;
  int64_t held_ = 0;
};

struct http_state {
  scheduler& sched;
  http_server_params params;
  std::string model_id;     // the model file's name
  std::string fingerprint;  // system_fingerprint
  std::atomic<int64_t> next_id{1};
  body_budget bodies;
};

// ---- http_json.cpp ----

// {"error": {"message", "type", "code"}}; type from the status ("invalid_request_error", ...).
json error_json(int status, const std::string& message);
void error_send(httplib::Response& res, int status, const std::string& message);
void json_send(httplib::Response& res, const json& j);
// "data: {...}\n\n".
std::string sse_event(const json& j);


// The deepest nesting of arrays and objects a request body may have.
inline constexpr int MAX_BODY_DEPTH = 64;
// The request body as a JSON object, whatever its Content-Type, with its share of st.bodies, held
// as long as the parsed_body lives. Throws http_error 400 for malformed JSON, nesting deeper than
// MAX_BODY_DEPTH, or a non-object; 413 / 503 from body_budget::take.
struct parsed_body {
  json j;
  body_budget::ticket t;
};
parsed_body body_parse(body_budget& budget, size_t limit, const httplib::Request& req);
inline parsed_body body_parse(http_state& st, const httplib::Request& req) {
  return body_parse(st.bodies, st.params.max_body_memory, req);
}
// Token ids: a string (tokenized as a plain prompt), an array of ids, or a one-element array
// holding either. Ids are checked against the vocabulary.
std::vector<int32_t> field_prompt(const http_state& st, const json& b, const char* key);
// n_predict / max_tokens / num_predict: absent or null -> -1 (no limit); else an integer in
// [lo, the slot's context]. A count the slot could never hold is 400 naming the field.
int64_t field_n_predict(const http_state& st, const json& b, const char* key, int64_t lo);



// Token text (control tokens as their text) and its bytes.
std::string token_piece(const http_state& st, int32_t id);
json token_bytes(const std::string& piece);
// True when `s` is well-formed UTF-8 (RFC 3629: no overlong forms, surrogates or code points past
// U+10FFFF), i.e. when json_text() writes it unchanged.
bool utf8_is_valid(std::string_view s);
// A token's text as OpenAI's /v1/completions logprobs write it: the piece when it is valid UTF-8,
// else "bytes:" and one \xHH (lower-case hex) per byte, e.g. "bytes:\xe2\x80" for the first two
// bytes of a split character, so a client can recover the bytes.
std::string token_text_openai(const std::string& piece);
// llama.cpp's completion_probabilities entry for one generated token.
json token_probs_llamacpp(const http_state& st, const runtime::generated_token& t);
// The sampled token's log-prob when it is among the top entries, else null.
json token_logprob_of(const runtime::generated_token& t);

// "eos" | "word" | "limit"; OpenAI's "stop" | "length".
const char* stop_type_llamacpp(runtime::stop_type s);
const char* finish_reason_openai(const runtime::generate_result& g);

// ---- http_server.cpp ----

// Submits and waits for the result. Throws http_error 503 when the queue is full, 400 when the
// prompt does not fit a slot, and the scheduler's status when the request failed.
request_result completion_run(http_state& st, request r);

struct stream_format {
  std::function<std::string(const token_event&)> token;     // SSE text for one token ("" = none)
  std::function<std::string(const request_result&)> done;   // SSE text that ends a successful stream
};
// Submits and answers with a chunked text/event-stream; a failed request ends with an error event.
void completion_stream(http_state& st, request r, stream_format fmt, httplib::Response& res);

// ---- route registration ----
void routes_llamacpp(httplib::Server& srv, http_state& st,
                     const std::function<httplib::Server::Handler(httplib::Server::Handler)>& wrap);
void routes_openai(httplib::Server& srv, http_state& st,
                   const std::function<httplib::Server::Handler(httplib::Server::Handler)>& wrap);
void routes_ollama(httplib::Server& srv, http_state& st,
                   const std::function<httplib::Server::Handler(httplib::Server::Handler)>& wrap);

}  // namespace detaudit::serve
