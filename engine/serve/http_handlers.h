// Shared by the http_*.cpp files: the error type every handler may throw, JSON field readers
// that name the field they reject, token / log-prob formatting, and the two ways to run a
// completion on the scheduler (blocking, or streamed as server-sent events).
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
#include "serve/scheduler.h"

namespace detaudit::serve {

using json = nlohmann::json;

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
// JSON text; invalid UTF-8 (a byte token's piece) replaced by U+FFFD.
std::string json_text(const json& j);
void json_send(httplib::Response& res, const json& j);
// "data: {...}\n\n".
std::string sse_event(const json& j);

// A client's value as an error message quotes it, never by recursion and never long: a number,
// true, false or null as written; a string as text_quote() writes it; an array or object by its
// type and size ("an array of 3 elements").
std::string value_quote(const json& v);
// A client's text in an error message: in JSON quotes, its first 40 bytes (cut at a character
// boundary) and, when longer, "... (N bytes)".
std::string text_quote(std::string_view s);

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
// Field readers: the default when the key is absent or null; http_error 400 naming the key when
// the value has the wrong type or lies outside [lo, hi].
int64_t field_int(const json& b, const char* key, int64_t dflt, int64_t lo, int64_t hi);
double field_number(const json& b, const char* key, double dflt);
bool field_bool(const json& b, const char* key, bool dflt);
std::string field_string(const json& b, const char* key, const std::string& dflt);
// A string or an array of strings: at most MAX_STOP_STRINGS, each 1 to MAX_STOP_BYTES bytes.
inline constexpr size_t MAX_STOP_STRINGS = 64;
inline constexpr size_t MAX_STOP_BYTES = 128;
std::vector<std::string> field_stop(const json& b, const char* key);
// Token ids: a string (tokenized as a plain prompt), an array of ids, or a one-element array
// holding either. Ids are checked against the vocabulary.
std::vector<int32_t> field_prompt(const http_state& st, const json& b, const char* key);
// Throws http_error 400 naming `key` unless it is absent or equal to 1.
void field_require_n1(const json& b, const char* key);
// n_predict / max_tokens / num_predict: absent or null -> -1 (no limit); else an integer in
// [lo, the slot's context]. A count the slot could never hold is 400 naming the field.
int64_t field_n_predict(const http_state& st, const json& b, const char* key, int64_t lo);
int64_t field_n_predict(int64_t slot_n_ctx, const json& b, const char* key, int64_t lo);

// The most top log-probs per token a request may ask for (llama.cpp's n_probs).
inline constexpr int64_t MAX_N_PROBS = 100;
// The generation fields of a llama.cpp /completion body, the prompt aside, read one way for
// detaudit serve's /completion and for the engine target (whose recorded request is such a body):
// n_predict (at most the slot context), the sampling fields, stop, n_probs (0..MAX_N_PROBS),
// cache_prompt, id_slot, speculative and speculative.n_max (0: no drafts), logit_hashes. Throws
// http_error 400 naming the field it rejects.
void completion_fields_parse(const json& b, const scheduler& sched, request& r);

// Throws http_error 400 naming the field when a field of llama.cpp's or OpenAI's that detaudit
// serve does not implement has the wrong type, or a value other than its neutral one (grammar,
// json_schema, logit_bias, ignore_eos, mirostat, typical_p < 1, dry, xtc, dynatemp, top_n_sigma,
// min_keep > 1, n_indent, t_max_*_ms, post_sampling_probs, lora, tools, a non-text
// response_format, a samplers order other than llama.cpp's default). sampling_parse() calls it.
void fields_reject_unsupported(const json& b);
// A chat message's tool fields (tool_calls, function_call, tool_call_id): the templates here
// render no tools, so a message that carries one is refused (400 naming
// 'messages[i].FIELD') on every chat route, never rendered without it.
void message_tools_refuse(const json& m, size_t i);
// Sampling fields shared by all completion endpoints (temperature, top_k, top_p, min_p, seed,
// repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty), checked.
void sampling_parse(const json& b, runtime::sampling_params& s);
json sampling_to_json(const runtime::sampling_params& s);

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
// llama.cpp's timings object: cache_n prompt tokens taken from the cache, prompt_n evaluated.
json timings_json(const runtime::run_timings& t, int64_t n_cached);

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
