// The verdict server's planted answers: what a test's cases file says each prompt is answered
// with, in a form that knows no dialect, and the renderers that write one answer in the shape of
// the route it was asked on.
//
// Goals: every field detaudit reads from a response can be planted exactly (token bytes and how
// each dialect spells them, ids, log-probs in any order, cache counts, batch width, hashes,
// errors, delays), so a test knows the right verdict before it runs. Non-goals: sampling,
// tokenizing, streaming (a "stream": true request is refused with 400).
//
// Cases file (JSON), written by each test:
//
//   {"server": {"model": "planted-model",      the id /v1/models gives (detaudit's target model)
//               "props": false,                 GET /props answers: a llama.cpp-family server
//               "api_version": false,           GET /api/version and /api/tags answer (ollama)
//               "slots": "off"|"real"|"one"|"all",  GET /slots: absent, the real busy count, at most 1, or
//                                               every slot busy always (a lying server)
//               "metrics": "off"|"real"|"one"|"all",  GET /metrics (llamacpp:requests_processing) likewise
//               "concurrency": "parallel"|"serial", "delay_ms": 0, "n_slots": 8,
//               "get_delay_ms": 0,              every GET (the capability probe's routes) answers this late
//               "deep_json": 0,                 N > 0: /props and every 200 answer carry "deep", N arrays nested
//               "flood": "", "flood_count": 0,  hostile answers to every generation request (below)
//               "props_name_bytes": 0, "props_depth": 0, "props_width": 0},  a hostile /props (below)
//    "cases": {"<prompt text>": CASE, ...}}
//
//   CASE:   {"answers": [ANSWER, ...],          temperature-0 requests, in arrival order; past the end: answers[0]
//            "seed": "honour"|"ignore",         temperature > 0: a function of the seed, or fresh every time
//            "seed_answer": ANSWER,             the base of every temperature > 0 answer
//            "shape": "newer"|"older",          llama.cpp /completion completion_probabilities shape
//            "auto_ids": false,                 tokens without "id" get one made from their bytes
//            "cache_report": "auto"|"usage"|"timings"|"none",  where cached_tokens is reported
//            "cache_n": true,                   timings carry cache_n (false: prompt_n and tokens_evaluated only)
//            "prompt_tokens": 8, "delay_ms": D}
//   ANSWER: {"tokens": [TOKEN, ...], "text": "...",  text defaults to the tokens' bytes
//            "finish": "stop"|"length", "error": {"status": 500, "message": "..."},
//            "delay_ms", "cached_tokens", "max_seqs_in_step", "draft_proposed", "draft_accepted",
//            "logit_hashes": ["hex", ...], "omit": ["logprobs", "bytes", "ids", "top", "token_logprob"]}
//   TOKEN:  {"text": "..."} or {"bytes": [226, 130]}, "form": "text"|"replacement"|"openai"|"escape"|"sentencepiece",
//            "id", "logprob", "prob" (older shape only; default exp(logprob)), "top": [TOKEN, ...]
//
// Floods (a hostile server; each answer is written as it is sent, never held whole): every
// generation request, on any route and streamed or not, is answered in llama.cpp's /completion
// shape with flood_count of
//   tokens   token ids in "tokens"                      {"content": "x", "tokens": [1, 1, ...]}
//   alts     alternatives of the one token's step        "top_logprobs": [{"id": 2, "token": "b", ...}, ...]
//   values   zeros in "timings"                          {"content": "x", "timings": {"v": [0, 0, ...]}}
//   events   server-sent events, none of them the last   data: {"content": "x", "stop": false}
// A hostile /props (props_name_bytes > 0 or props_width > 0; implies "props"): "build_info" and
// "system_fingerprint" of props_name_bytes bytes each, and "wide": props_depth nested arrays
// around props_width zeros.
//
// Token forms (how the token's string is spelled; its "bytes" array is always the real bytes):
//   text           the bytes themselves (valid UTF-8)        "Price"
//   replacement    U+FFFD, as llama.cpp writes a partial character
//   openai         "bytes:\xe2\x82"                          (OpenAI's spelling of byte tokens)
//   escape         "\xe2" for each byte >= 0x80               (DeepSeek's)
//   sentencepiece  "<0xE2>" for each byte                    (a SentencePiece byte piece)
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace detaudit::verdicts {

using json = nlohmann::json;

struct plant_token {
  std::string bytes;               // the token's raw bytes
  std::string form = "text";
  std::optional<int> id;
  std::optional<double> logprob;   // natural log
  std::optional<double> prob;      // older llama.cpp shape: sent instead of exp(logprob)
  std::vector<plant_token> top;    // the step's alternatives, in the order planted
};

struct plant_answer {
  std::vector<plant_token> tokens;
  std::optional<std::string> text;
  std::string finish = "stop";
  int error_status = 0;            // non-zero: answer with this status and error_message
  std::string error_message;
  int delay_ms = -1;               // -1: the case's
  std::optional<int> cached_tokens, max_seqs_in_step, draft_proposed, draft_accepted;
  std::vector<std::string> logit_hashes;
  bool omit_logprobs = false, omit_bytes = false, omit_ids = false, omit_top = false, omit_token_logprob = false;

  std::string text_or_bytes() const;  // `text`, else the tokens' bytes joined
};

struct plant_case {
  std::vector<plant_answer> answers;
  bool seed_honour = true;
  plant_answer seed_answer;
  bool older_shape = false;
  bool auto_ids = false;
  std::string cache_report = "auto";
  bool cache_n = true;
  int prompt_tokens = 8;
  int delay_ms = -1;               // -1: the server's
};

struct plant_server {
  std::string model = "planted-model";
  bool props = false, api_version = false;
  std::string slots = "off", metrics = "off";  // off | real | one | all
  bool serial = false;
  int delay_ms = 0;
  int n_slots = 8;
  int get_delay_ms = 0;
  int deep_json = 0;
  std::string flood;               // "" | tokens | alts | values | events
  int64_t flood_count = 0;
  int64_t props_name_bytes = 0, props_width = 0;
  int props_depth = 0;
  std::map<std::string, plant_case> cases;     // by prompt text
  plant_case default_case;                     // any other prompt (the concurrency probe's fillers)
};

// Throws std::runtime_error naming the field when the file does not match the schema above.
plant_server plant_load(const json& j);

// What the renderers need to know about the request.
struct route_ask {
  std::string path;                // "/completion", "/v1/chat/completions", "/v1/completions", "/api/generate", "/api/chat"
  bool return_tokens = false;
  std::string model;
};

// The body of a 200 answer in the route's shape.
json render_answer(const route_ask& ask, const plant_answer& a, const plant_case& c);
// The body of an error answer in the route's shape (OpenAI's {"error": {...}}, ollama's {"error": "..."}).
json render_error(const route_ask& ask, int status, const std::string& message);

}  // namespace detaudit::verdicts
