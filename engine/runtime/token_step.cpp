#include "runtime/token_step.h"

#include <algorithm>

#include "util/error.h"

namespace detaudit::runtime {

size_t utf8_incomplete_tail(std::string_view s) {
  for (size_t k = 1; k <= std::min<size_t>(3, s.size()); ++k) {
    const auto c = static_cast<unsigned char>(s[s.size() - k]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    if (c >= 0xF8) return 0;           // not a lead byte: nothing to wait for
    const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return len > k ? k : 0;
  }
  return 0;
}

text_stream::text_stream(std::vector<std::string> stop, text_callback cb) : stop_(std::move(stop)), cb_(std::move(cb)) {
  for (const std::string& s : stop_) {
    if (s.empty()) throw input_error("generate: a stop string is empty");
    max_stop_ = std::max(max_stop_, s.size());
  }
}

bool text_stream::add(std::string_view piece) {
  if (stopped_) return true;
  const size_t from = text_.size() >= max_stop_ ? text_.size() - max_stop_ + 1 : 0;
  text_ += piece;
  size_t best = std::string::npos;
  for (const std::string& s : stop_) {
    const size_t p = text_.find(s, from);
    if (p < best) {
      best = p;
      stop_word_ = s;
    }
  }
  if (best != std::string::npos) {
    text_.resize(best);
    stopped_ = true;
    emit(text_.size());
    return true;
  }
  emit(text_.size() - std::max(utf8_incomplete_tail(text_), partial_stop_tail()));
  return false;
}

void text_stream::finish() { emit(text_.size()); }

size_t text_stream::partial_stop_tail() const {
  size_t best = 0;
  for (const std::string& s : stop_)
    for (size_t k = std::min(s.size() - 1, text_.size()); k > best; --k)
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        best = k;
        break;
      }
  return best;
}

void text_stream::emit(size_t upto) {
  if (upto <= emitted_) return;
  if (cb_) cb_(std::string_view(text_).substr(emitted_, upto - emitted_));
  emitted_ = upto;
}

const char* finish_reason_name(finish_reason f) { return f == FINISH_STOP ? "stop" : "length"; }

const char* stop_type_name(stop_type s) {
  switch (s) {
    case STOP_EOG: return "eog";
    case STOP_WORD: return "word";
    case STOP_LIMIT: return "limit";
    case STOP_CONTEXT: return "context";
  }
  return "unknown";
}

token_step::token_step(const tokenizer::vocab& v, std::span<const int32_t> prompt, const sampling_params& sampling,
                       int n_top_logprobs, int64_t n_predict, std::vector<std::string> stop, text_callback on_text,
                       generate_result& out)
    : v_(v),
      sampling_(sampling),
      n_top_(n_top_logprobs),
      n_predict_(n_predict),
      stream_(std::move(stop), std::move(on_text)),
      history_(prompt.begin(), prompt.end()),
      out_(out) {}

bool token_step::add(const std::vector<float>& logits, int64_t evaluated_len, int64_t n_ctx) {
  const uint64_t step = out_.tokens.size();
  // A forward that overflowed (float numerics on a hostile or broken model) is the model's fault,
  // told as such: no token is drawn from NaN or infinite logits.
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] - logits[i] != 0.0f)
      throw input_error("the model's logit for token " + std::to_string(i) + " at generated token " + std::to_string(step) +
                        " is " + (logits[i] != logits[i] ? "NaN" : "infinite") +
                        " (its forward overflowed: a broken model, or float numerics out of range)");
  generated_token t;
  t.logit_hash = logit_hash(logits);
  chain_.add(t.logit_hash);
  t.top = top_logprobs(logits, n_top_);
  t.id = sample_token(logits, history_, sampling_, step);
  t.piece = tokenizer::token_to_piece(v_, t.id, /*special=*/true);
  const int32_t id = t.id;
  out_.tokens.push_back(std::move(t));
  history_.push_back(id);
  bool done = true;
  if (v_.is_eog(id)) {
    out_.finish = FINISH_STOP;
    out_.stop = STOP_EOG;
  } else if (stream_.add(tokenizer::token_to_piece(v_, id, /*special=*/false))) {
    out_.finish = FINISH_STOP;
    out_.stop = STOP_WORD;
    out_.stop_word = stream_.stop_word();
  } else if (n_predict_ >= 0 && step + 1 >= static_cast<uint64_t>(n_predict_)) {
    out_.stop = STOP_LIMIT;
  } else if (evaluated_len >= n_ctx) {
    out_.stop = STOP_CONTEXT;
  } else {
    done = false;
  }
  if (done) end();
  return done;
}

void token_step::end() {
  stream_.finish();
  out_.text = stream_.text();
  out_.chained_hash = chain_.value();
  out_.timings.n_gen = static_cast<int64_t>(out_.tokens.size());
}
}  // namespace detaudit::runtime
