// One step of generation, from a position's logits to the next token, and what a request's
// generation returns.
//
// Goals: one owner of the per-token step — logit hash into the chain, top-N log-probs before
// sampling, the sampled token and its piece, the text released to a stream, and the decision to
// stop (end-of-generation token, stop string, n_predict, full context) — so that runtime::generate
// and serve's slots give the same bits because they run the same code, not two copies that agree.
// Non-goals: evaluating the model (the caller decodes), scheduling, drafting.
//
// Thread-safety: a token_step belongs to one request and is used by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/context.h"
#include "runtime/hashes.h"
#include "runtime/sampling.h"
#include "tokenizer/vocab.h"

namespace detaudit::runtime {

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

// The token step of one request. Writes into a generate_result the caller owns (it must outlive
// the token_step): each add() appends a token; when generation ends, the text, chained hash and
// n_gen are final.
class token_step {
 public:
  // `on_text` receives the released text (text_stream). Throws input_error for an empty stop string.
  token_step(const tokenizer::vocab& v, std::span<const int32_t> prompt, const sampling_params& sampling,
             int n_top_logprobs, int64_t n_predict, std::vector<std::string> stop, text_callback on_text,
             generate_result& out);

  // Takes the logits of the request's last evaluated position; its sequence holds `evaluated_len`
  // tokens and can hold `n_ctx`. Samples the next token (appended to the result and the history)
  // and returns true when generation ends with it: out.finish / stop / stop_word say why, and
  // end() has run.
  bool add(const std::vector<float>& logits, int64_t evaluated_len, int64_t n_ctx);

  // Ends generation where it stands (n_predict 0, a cancelled request): releases the held-back
  // text and makes out.text, chained_hash and timings.n_gen final. Idempotent.
  void end();

  const std::vector<int32_t>& history() const { return history_; }  // prompt + sampled tokens

 private:
  const tokenizer::vocab& v_;
  sampling_params sampling_;
  int n_top_;
  int64_t n_predict_;
  text_stream stream_;
  std::vector<int32_t> history_;
  hash_chain chain_;
  generate_result& out_;
};

}  // namespace detaudit::runtime
