// The JSON fields of a generation request, read one way for every route of detaudit serve and
// for the engine target (whose recorded request is a llama.cpp /completion body): readers that
// name the field they reject, the sampling fields, the fields detaudit does not implement
// (refused unless neutral), and llama.cpp's /completion generation fields onto a scheduler
// request; and the JSON text and timings shapes llama.cpp's server answers with.
//
// Non-goals: HTTP (serve/), the prompt (tokenized by the caller: it needs the model or the chat
// template), a route's own fields (stream, echo, ...).
// Errors: every refusal is request_error 400 naming the field and quoting the value short.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/generate.h"
#include "runtime/request_error.h"
#include "runtime/sampling.h"
#include "runtime/scheduler.h"

namespace detaudit::runtime {

using json = nlohmann::json;

// JSON text; invalid UTF-8 (a byte token's piece) replaced by U+FFFD.
std::string json_text(const json& j);

// A client's value as an error message quotes it, never by recursion and never long: a number,
// true, false or null as written; a string as text_quote() writes it; an array or object by its
// type and size ("an array of 3 elements").
std::string value_quote(const json& v);
// A client's text in an error message: in JSON quotes, its first 40 bytes (cut at a character
// boundary) and, when longer, "... (N bytes)".
std::string text_quote(std::string_view s);

// Throws request_error 400: "field 'KEY': expected EXPECTED, found " and v as value_quote() writes it.
[[noreturn]] void field_fail(const char* key, const char* expected, const json& v);
// Field readers: the default when the key is absent or null; request_error 400 naming the key when
// the value has the wrong type or lies outside [lo, hi].
int64_t field_int(const json& b, const char* key, int64_t dflt, int64_t lo, int64_t hi);
double field_number(const json& b, const char* key, double dflt);
bool field_bool(const json& b, const char* key, bool dflt);
std::string field_string(const json& b, const char* key, const std::string& dflt);
// A string or an array of strings: at most MAX_STOP_STRINGS, each 1 to MAX_STOP_BYTES bytes.
inline constexpr size_t MAX_STOP_STRINGS = 64;
inline constexpr size_t MAX_STOP_BYTES = 128;
std::vector<std::string> field_stop(const json& b, const char* key);
// Throws request_error 400 naming `key` unless it is absent or equal to 1.
void field_require_n1(const json& b, const char* key);
// n_predict / max_tokens / num_predict: absent or null -> -1 (no limit); else an integer in
// [lo, slot_n_ctx]. A count the slot could never hold is 400 naming the field.
int64_t field_n_predict(int64_t slot_n_ctx, const json& b, const char* key, int64_t lo);

// The most top log-probs per token a request may ask for (llama.cpp's n_probs).
inline constexpr int64_t MAX_N_PROBS = 100;
// The generation fields of a llama.cpp /completion body, the prompt aside, read one way for
// detaudit serve's /completion and for the engine target (whose recorded request is such a body):
// n_predict (at most the slot context), the sampling fields, stop, n_probs (0..MAX_N_PROBS),
// cache_prompt, id_slot, speculative and speculative.n_max (0: no drafts), logit_hashes. Throws
// request_error 400 naming the field it rejects.
void completion_fields_parse(const json& b, const scheduler& sched, request& r);

// Throws request_error 400 naming the field when a field of llama.cpp's or OpenAI's that detaudit
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
void sampling_parse(const json& b, sampling_params& s);
json sampling_to_json(const sampling_params& s);

// llama.cpp's timings object: cache_n prompt tokens taken from the cache, prompt_n evaluated.
json timings_json(const run_timings& t, int64_t n_cached);

}  // namespace detaudit::runtime
