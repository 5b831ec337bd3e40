// Bounds on what an HTTP target's answers may cost: a hostile or broken server must not make
// `detaudit run` hold more memory than the request can justify, N times over in the concurrency
// probe (N answers at once), nor write more than that into the records.
//
// Goals: each answer is bounded in bytes read (the HTTP client stops reading past the bound), in
// JSON values parsed (counted while the document is built, so a refused answer never reaches its
// full size), in nesting depth, in server-sent events, and, once read, in tokens and alternatives
// per step. Each bound comes from the request as sent (n_predict / max_tokens / num_predict,
// n_probs / top_logprobs / logprobs, the prompt's size) plus a margin, so an honest answer never
// meets one. Server metadata that is stored (run.json capabilities, a record's timings.server and
// usage, a server's error message) is cut to a fixed size.
// Non-goals: bounding the in-process engine (it generates what was asked); a byte-exact cap on
// stored metadata (json_bounded's budget is approximate by a few dozen bytes per level).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "reports/audit/record.h"

namespace detaudit::probes {

using json = nlohmann::json;

// An answer that cannot be read as the dialect's response, or that passes a bound; what() names
// the field or the bound. Recorded as the record's error.
class response_error : public std::runtime_error {
 public:
  explicit response_error(const std::string& what) : std::runtime_error(what) {}
};

// j[key] when present and not null, else nullptr.
const json* json_get(const json& j, const char* key);

struct response_limits {
  size_t max_body = 0;     // bytes of one answer kept by the HTTP client
  size_t max_values = 0;   // JSON values parsed in one answer, a stream's events together
  size_t max_events = 0;   // server-sent events in one streamed answer
  size_t max_tokens = 0;   // tokens in one answer
  size_t max_alts = 0;     // alternatives at one step
  size_t max_text = 0;     // bytes of the answer's text
  size_t max_depth = 0;    // JSON nesting of the answer (and of each streamed event)
  std::string asked;       // what the bounds come from, for messages: "n_predict 4, n_probs 2"
};

// Tokens and alternatives a server may add to what was asked (llama.cpp and OpenAI give exactly
// what was asked; the margin keeps a server that counts differently from being refused).
inline constexpr size_t TOKEN_MARGIN = 16;
inline constexpr size_t ALT_MARGIN = 16;
// Tokens assumed when a request sets no limit (n_predict < 0: until the end of the context).
inline constexpr size_t TOKENS_UNLIMITED = 32768;
// How deep an answer may nest JSON. What llama.cpp, OpenAI and ollama send nests fewer than ten
// levels; a record stores parts of an answer a few levels down (timings.server, usage), and every
// reader refuses JSON deeper than reports::JSON_MAX_DEPTH (128), so an answer this deep still
// leaves a readable record.
inline constexpr size_t ANSWER_MAX_DEPTH = 64;
// The most bytes a token's text may take (real vocabularies stay under a few dozen).
inline constexpr size_t TEXT_PER_TOKEN = 1024;
// Sizes of server metadata as stored (compact JSON text, about): a record's timings.server and
// usage, an error message quoted from the server, a string naming the server (build, fingerprint,
// model, model hash), and run.json's capabilities.raw (the probe's /props, /v1/models, ...).
inline constexpr size_t STORED_TIMINGS = 16 << 10;
inline constexpr size_t STORED_USAGE = 4 << 10;
inline constexpr size_t STORED_MESSAGE = 1 << 10;
inline constexpr size_t STORED_NAME = 256;
inline constexpr size_t STORED_RAW = 64 << 10;
// How deep stored server metadata may nest (deeper parts are left out, saying so): run.json is
// written indented, two spaces a level.
inline constexpr int STORED_DEPTH = 16;

// The bounds of the answer to a generation request with this body (as sent, --request included).
response_limits response_limits_for(const json& body);
// The bounds of a capability probe's GET (/props, /v1/models, /slots, /metrics, ...).
response_limits response_limits_get();

// `text` parsed as JSON, counting values into *used (a stream's events share one budget):
// discarded (is_discarded()) when the text is not JSON; throws response_error naming the bound
// when the text holds more than l.max_values values in all or nests deeper than l.max_depth.
// Never builds more than the budget allows.
json json_parse_bounded(const std::string& text, const response_limits& l, size_t* used);

// Throws response_error when rec holds more tokens, or a step more alternatives, or more text,
// than `l` allows.
void record_limits_check(const reports::record& rec, const response_limits& l);

// A copy of `j` whose compact text is about `max_bytes` at most: a string too long for what is
// left is cut (saying how long it was), an array or object ends where the budget does (a last
// entry says how many were left out), containers deeper than max_depth are replaced by a note.
// `j` as it is when it fits.
json json_bounded(const json& j, size_t max_bytes, int max_depth = STORED_DEPTH);
// `s` cut to at most max_bytes (on a UTF-8 boundary), saying how long it was.
std::string text_bounded(const std::string& s, size_t max_bytes);

}  // namespace detaudit::probes
