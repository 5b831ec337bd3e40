// Generation and teacher-forced scoring on a context, and their JSON / text results: the library
// behind `detaudit generate` and `detaudit score`.
//
// Goals: one request at a time on its own sequence of a context — prefill in one decode() call
// (the context splits it by n_ubatch), then one token per step: logits -> step hash -> top-N
// log-probs -> sample -> stop on an end-of-generation token, a stop string, n_predict or a full
// context. Every step records what an audit compares (token id, piece, pre-sampling top log-probs,
// logit hash) and the run a chained hash (runtime/hashes.h). Scoring evaluates prompt +
// continuation in one decode() and reports the same per continuation token.
// Non-goals: scheduling many requests (serve/), prompt caches, speculative decoding.
//
// Thread-safety: a call uses its context exclusively (context is single-threaded).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "model/model.h"
#include "runtime/context.h"
#include "runtime/sampling.h"

namespace detaudit::runtime {

// ---- prompts ----

// Token ids of a plain prompt as llama.cpp's server makes them: BOS / EOS as the vocabulary says,
// control tokens written in the text (<|im_start|>) parsed into their ids.
std::vector<int32_t> generate_tokenize(const tokenizer::vocab& v, std::string_view text);

struct chat_request {
  std::string system;         // "" = no system message
  std::string user;
  std::string template_name;  // "" = detect from tokenizer.chat_template; else chatml|qwen3|...
  bool enable_thinking = true;
};

// The conversation (system?, user) rendered with the model's chat template family plus the
// generation prompt; without the leading BOS when the vocabulary adds one (generate_tokenize
// adds it). A file without a template renders with chatml (chat::chat_choose_family). Throws
// input_error naming the model file when its template fits no family.
std::string generate_render_chat(const model::model& m, const chat_request& req);

// A conversation's prompt tokens as every chat endpoint makes them (serve's /v1/chat/completions
// and /api/chat, the engine target, the oracle): the template family `template_name` ("" =
// detected from the model, chatml when it has none), the generation prompt appended, then
// generate_tokenize. Throws input_error naming the model file when its template fits no family.
std::vector<int32_t> generate_chat_tokens(const model::model& m, const std::vector<chat::chat_message>& msgs,
                                          const std::string& template_name, bool enable_thinking = true);

// Token ids from a list such as "1, 403 407,261": commas and/or whitespace between ids. `what`
// (an option name) starts error messages. Throws input_error for anything that is not a
// non-negative 32-bit integer, or an empty list.
std::vector<int32_t> token_ids_parse(std::string_view text, const std::string& what);

// ---- generation ----

struct generate_params {
  int64_t n_predict = 128;        // most tokens to generate; -1: until EOG or the context is full
  sampling_params sampling;
  std::vector<std::string> stop;  // generation ends when the text contains one; the text ends before it
  int n_top_logprobs = 5;         // top log-probs reported per step (0: none)
  // Other sequences evaluated in the same forward steps as this one (the "beside N others"
  // condition): each companion's prompt is prefilled in the request's prefill step and it then
  // continues greedily, one token per step, while the request generates. Their output is
  // discarded; they exist so batch composition can be varied.
  std::vector<std::vector<int32_t>> companions;
};

// n companion prompts (built-in filler texts, cycled) tokenized with v, for generate_params.
std::vector<std::vector<int32_t>> generate_filler_prompts(const tokenizer::vocab& v, int n);

enum finish_reason { FINISH_STOP, FINISH_LENGTH };           // OpenAI's "stop" / "length"
enum stop_type { STOP_EOG, STOP_WORD, STOP_LIMIT, STOP_CONTEXT };  // why, in llama.cpp server's terms

const char* finish_reason_name(finish_reason f);  // "stop", "length"
const char* stop_type_name(stop_type s);          // "eog", "word", "limit", "context"

struct generated_token {
  int32_t id = 0;
  std::string piece;                // token_to_piece with control tokens' text ("</s>")
  std::vector<token_logprob> top;   // pre-sampling: raw logits, temperature 1, no penalties
  uint64_t logit_hash = 0;
};

struct run_timings {
  int64_t n_prompt = 0;
  int64_t n_gen = 0;
  double prompt_ms = 0;  // the prefill decode()
  double gen_ms = 0;     // from the end of prefill to the last token sampled
  double prompt_tokens_per_s() const { return prompt_ms > 0 ? 1000.0 * static_cast<double>(n_prompt) / prompt_ms : 0; }
  double gen_tokens_per_s() const { return gen_ms > 0 ? 1000.0 * static_cast<double>(n_gen) / gen_ms : 0; }
};

struct generate_result {
  std::vector<int32_t> prompt_tokens;
  std::vector<generated_token> tokens;  // every sampled token, an end-of-generation token included
  std::string text;                     // generated text without control tokens, cut before a stop string
  uint64_t chained_hash = 0;
  finish_reason finish = FINISH_LENGTH;
  stop_type stop = STOP_LIMIT;
  std::string stop_word;                // the stop string that ended generation (STOP_WORD)
  run_timings timings;
  // With context_params::trace_hashes: per evaluated position of this request (prompt and
  // generated tokens, in order), the hash of every layer's output and of the final norm.
  std::vector<token_trace> traces;
  std::string device;  // the context's device_description()
};

// Called with each new piece of text as soon as it is safe to show: never a partial UTF-8
// sequence, never text that may turn out to begin a stop string. The pieces concatenate to
// generate_result::text.
using text_callback = std::function<void(std::string_view)>;

// Number of bytes at the end of s that begin a UTF-8 sequence not yet complete (0..3).
size_t utf8_incomplete_tail(std::string_view s);

// Generated text, cut before the first stop string, released to a callback as it becomes safe:
// held back are an incomplete UTF-8 sequence at the end and the longest end of the text that is a
// proper beginning of a stop string. Throws input_error for an empty stop string.
class text_stream {
 public:
  text_stream(std::vector<std::string> stop, text_callback cb);
  // Appends a piece; returns true when the text now contains a stop string (it is cut there and
  // everything before it released). Pieces added after that are ignored.
  bool add(std::string_view piece);
  // Releases whatever is held back (at the end of generation).
  void finish();
  const std::string& text() const { return text_; }
  const std::string& stop_word() const { return stop_word_; }

 private:
  size_t partial_stop_tail() const;
  void emit(size_t upto);

  std::vector<std::string> stop_;
  text_callback cb_;
  size_t max_stop_ = 0;
  std::string text_;
  std::string stop_word_;
  size_t emitted_ = 0;
  bool stopped_ = false;
};

// Generates from `prompt` on a new sequence of ctx (freed on return). Throws input_error for an
// empty prompt, bad sampling parameters, an empty stop string, n_predict < -1, or a prompt that
// does not fit the context (from context::decode).
generate_result generate(context& ctx, std::span<const int32_t> prompt, const generate_params& p,
                         const text_callback& on_text = {});

// ---- teacher-forced scoring ----

struct score_step {
  int32_t id = 0;          // the continuation token at this step
  float logprob = 0.0f;    // its log-probability
  std::vector<token_logprob> top;
  uint64_t logit_hash = 0;
};

struct score_result {
  std::vector<score_step> steps;  // one per continuation token
  uint64_t chained_hash = 0;
  run_timings timings;            // n_prompt = prompt + continuation tokens evaluated, prompt_ms their decode
};

// Evaluates prompt + continuation (all but the last continuation token, whose logits no step
// needs) in one decode() on a new sequence, with logits at the positions that predict each
// continuation token. Throws input_error for an empty prompt or continuation, or an id outside
// the vocabulary.
score_result score(context& ctx, std::span<const int32_t> prompt, std::span<const int32_t> continuation, int top_k);

struct score_item {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
};

// The items of a llama.cpp reference file ({"items": [{"prompt_tokens": [...], "tokens": [...],
// ...}, ...]}, as in the fixtures' reference/*.json), in file order. Throws input_error naming the
// file and item when the structure differs.
std::vector<score_item> score_read_reference(const std::string& path);

// ---- results ----

// {version, precision_contract, simd, backend[, device]} of this build; `device` is a context's
// device_description() ("cpu avx512", "vulkan 0: llvmpipe ..."): backend is its first word.
nlohmann::json run_environment(const std::string& device = "");

// {model {path, sha256}, numerics, sampling, prompt_tokens, tokens [{id, piece, top [[id,
// logprob]...], logit_hash}], text, chained_hash, finish_reason, stop_type, [stop_word], timings,
// environment}. Reads the whole model file once for its sha256.
nlohmann::json generate_to_json(const generate_result& r, const model::model& m, numerics_mode numerics,
                                const generate_params& p);

// One line per step "step token_id logit_hash" (step from 0) and a last line "chained <hash>":
// nothing that varies between identical runs, so two outputs compare with cmp.
std::string generate_hashes_text(const generate_result& r);
// "trace POS LAYER HASH" per traced position and layer ("norm" for the final norm), for diffing
// two runs: the first differing line names the first position and layer where they part.
std::string generate_trace_text(const generate_result& r);

// Timings and the finish reason, for stderr.
std::string generate_summary_text(const generate_result& r);

// {"items": [{"steps": [{"id", "logprob", "top": [[id, logprob], ...], "logit_hash"}, ...],
// "chained_hash"}, ...]} in item order.
nlohmann::json score_to_json(const std::vector<score_result>& items);

// Per item a header line and one line per step: step, id, logprob, logit hash, top entries.
std::string score_to_text(const std::vector<score_result>& items);

}  // namespace detaudit::runtime
