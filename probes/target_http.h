// HTTP targets, internal to detaudit_probes: one target class over the dialects of dialect_table()
// (one row each: routes, request builder, response reader, stream reader, what it can report);
// the target class does the rest (capability probe, detection, the HTTP call, errors, timings).
//
//   dialect              raw prompt            chat messages
//   openai-chat          (refused)             POST /v1/chat/completions
//   openai-completions   POST /v1/completions  (refused)
//   llamacpp             POST /completion      POST /v1/chat/completions (+ llama.cpp fields)
//   ollama               POST /api/generate    POST /api/chat
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "probes/response_limits.h"
#include "probes/target.h"

namespace detaudit::probes {

enum http_api { API_OPENAI_CHAT, API_OPENAI_COMPLETIONS, API_LLAMACPP, API_OLLAMA };

// What the capability probe found that shapes a request.
struct http_server_info {
  std::string model;      // sent as "model" ("" = not sent)
  bool llamacpp = false;  // llama.cpp's server or detaudit serve: llama.cpp's extra fields are accepted
  bool detaudit = false;  // detaudit serve: ask for the logit-hash extension
  int logprob_cap = 20;   // most top log-probs per step the server gives
};

struct http_call {
  std::string path;
  json body;
};

// One HTTP dialect: everything detaudit knows of it, in one row.
struct dialect_def {
  http_api api;
  const char* name;       // as --api takes it and records say it
  const char* summary;    // for --help and docs
  const char* raw_path;   // POST route of a raw prompt; nullptr: refused
  const char* chat_path;  // POST route of chat messages; nullptr: refused
  const char* detect;     // GET route whose JSON answer identifies the dialect; nullptr: never detected
  // gen_request -> route + body. Throws input_error when the request kind does not fit the dialect
  // (a raw prompt to openai-chat, chat messages to openai-completions).
  http_call (*build)(const gen_request& r, const http_server_info& s);
  // The answer of `chat` (chat route) or raw route -> text, tokens, top_logprobs, finish_reason,
  // usage, timings["server"], evidence (cached_tokens, draft_proposed, draft_accepted,
  // batch_width), logit_hashes, chained_hash. Throws response_error.
  void (*parse)(const json& j, bool chat, reports::record& rec);
  // A text/event-stream body -> the JSON the same request answers unstreamed; nullptr: the dialect
  // cannot be streamed. Throws response_error for a stream that ends before its last event, an
  // event that is not JSON, an error event, or a stream beyond `l` (events, values, depth).
  json (*stream)(const std::string& body, bool chat, const response_limits& l);
  bool token_ids;         // answers carry token ids
  int logprob_cap;        // most top log-probs per step it gives (raw route)
};

// Every dialect, in detection order (the first whose `detect` route answers JSON wins).
const std::vector<dialect_def>& dialect_table();
const dialect_def& dialect_of(http_api api);
// Throws input_error naming the value and every dialect's name for an unknown one.
const dialect_def& dialect_parse(const std::string& name);
// "openai-chat, openai-completions, llamacpp, ollama"
std::string dialect_names_text();

// The dialects' functions (dialect_*.cpp, stream.cpp), reached through dialect_table().
http_call openai_chat_request(const gen_request& r, const http_server_info& s);
http_call openai_completions_request(const gen_request& r, const http_server_info& s);
http_call llamacpp_request(const gen_request& r, const http_server_info& s);
http_call ollama_request(const gen_request& r, const http_server_info& s);
void openai_parse(const json& j, bool chat, reports::record& rec);
void llamacpp_parse(const json& j, bool chat, reports::record& rec);
void ollama_parse(const json& j, bool chat, reports::record& rec);
json stream_assemble_openai(const std::string& body, bool chat, const response_limits& l);
json stream_assemble_llamacpp(const std::string& body, bool chat, const response_limits& l);
// A 2xx answer's body -> rec, as the HTTP target reads it: `events` when it came as
// text/event-stream to a streamed request (d.stream assembles it), else one JSON document; parsed
// within `lim`, then read by d.parse. Never throws for what a server sends: an answer that cannot
// be read sets rec.error ("WHERE: ...") and leaves no answer in rec. Server metadata kept in rec
// (timings.server, usage, finish_reason, fingerprint) is cut to the stored bounds.
void answer_read(const dialect_def& d, bool chat, bool events, const std::string& body, const response_limits& lim,
                 const std::string& where, reports::record& rec);

// ---- shared by the readers (target_http.cpp) ----

// (json_get and response_error: response_limits.h.)
// Throw response_error "field 'where.key': expected ..., found ..." on a wrong type.
const json& json_array_at(const json& j, const char* key, const std::string& where);
std::string json_string_at(const json& j, const char* key, const std::string& where, const std::string& dflt);
double json_number_at(const json& j, const char* key, const std::string& where);
// A token's raw bytes from a "bytes" array when they differ from its text (not valid UTF-8 on
// their own); empty otherwise.
std::vector<uint8_t> token_bytes_parse(const json* bytes, const std::string& text, const std::string& where);
// detaudit serve's extension: "logit_hashes" (hex strings) and "chained_hash".
void hashes_parse(const json& j, reports::record& rec);
// A token id field "id" at `where`: -1 when absent; response_error when not an integer.
int32_t id_of(const json& e, const std::string& where);
// One per-token log-prob entry {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]} as
// OpenAI's chat logprobs.content and ollama's logprobs carry it (ids when the server adds "id").
void chat_token_parse(const json& e, const std::string& where, reports::record& rec);

// An http(s) URL target; detects the dialect when opt.api is empty. Throws input_error (bad URL,
// unknown --api, a server no dialect fits) and unreachable_error.
std::unique_ptr<target> target_make_http(const std::string& url, const target_options& opt);

}  // namespace detaudit::probes
