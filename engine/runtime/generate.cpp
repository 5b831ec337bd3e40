#include "runtime/generate.h"

#include <chrono>

#include "tokenizer/vocab.h"
#include "util/error.h"

namespace detaudit::runtime {
namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

// Companion sequences running beside a request (generate_params::companions).
class companion_set {
 public:
  companion_set(context& ctx, const std::vector<std::vector<int32_t>>& prompts) : ctx_(ctx), prompts_(prompts) {
    for (size_t i = 0; i < prompts.size(); ++i) ids_.push_back(ctx.seq_new());
  }
  ~companion_set() {
    for (int32_t id : ids_) ctx_.seq_free(id);
  }
  companion_set(const companion_set&) = delete;
  companion_set& operator=(const companion_set&) = delete;
  // Appends every companion's prompt (logits at its last token) to batch.
  void add_prompts(std::vector<token_in>& batch) const {
    for (size_t i = 0; i < ids_.size(); ++i)
      for (size_t t = 0; t < prompts_[i].size(); ++t) batch.push_back({ids_[i], prompts_[i][t], t + 1 == prompts_[i].size()});
  }
  // Takes the companions' logits (the first n of `logits`, in add order) and appends each one's next
  // greedy token, while it has room in the context.
  void add_next(const std::vector<std::vector<float>>& logits, std::vector<token_in>& batch, int64_t n_ctx) {
    next_.clear();
    for (size_t i = 0; i < n_wanting_; ++i) next_.push_back(sample_greedy(logits[i]));
    n_wanting_ = 0;
    for (size_t i = 0; i < ids_.size() && i < next_.size(); ++i)
      if (ctx_.seq_len(ids_[i]) < n_ctx) {
        batch.push_back({ids_[i], next_[i], true});
        ++n_wanting_;
      }
  }
  void set_wanting(size_t n) { n_wanting_ = n; }
  size_t wanting() const { return n_wanting_; }

 private:
  context& ctx_;
  const std::vector<std::vector<int32_t>>& prompts_;
  std::vector<int32_t> ids_;
  std::vector<int32_t> next_;
  size_t n_wanting_ = 0;
};

void collect_traces(const context& ctx, int32_t seq, std::vector<token_trace>& out) {
  if (!ctx.params().trace_hashes) return;
  for (const token_trace& t : ctx.last_traces())
    if (t.seq == seq) out.push_back(t);
}

int64_t context_limit(const context& ctx) {
  return ctx.params().n_ctx > 0 ? ctx.params().n_ctx : ctx.model().hp().n_ctx_train;
}

void check_generate_params(const generate_params& p) {
  sampling_check_params(p.sampling);
  if (p.n_predict < -1) throw input_error("generate: n-predict must be >= -1 (-1: until the end), found " +
                                          std::to_string(p.n_predict));
  if (p.n_top_logprobs < 0) throw input_error("generate: top-logprobs must be >= 0, found " + std::to_string(p.n_top_logprobs));
}

}  // namespace

generate_result generate(context& ctx, std::span<const int32_t> prompt, const generate_params& p,
                         const text_callback& on_text) {
  check_generate_params(p);
  if (prompt.empty()) throw input_error("generate: the prompt has no tokens (the vocabulary adds no BOS to an empty text)");
  const int64_t n_ctx = context_limit(ctx);
  generate_result r;
  token_step steps(ctx.model().vocab(), prompt, p.sampling, p.n_top_logprobs, p.n_predict, p.stop, on_text, r);
  seq_scope seq(ctx);
  r.device = ctx.device_description();
  r.prompt_tokens.assign(prompt.begin(), prompt.end());
  r.timings.n_prompt = static_cast<int64_t>(prompt.size());

  for (const auto& c : p.companions)
    if (c.empty()) throw input_error("generate: a companion sequence has an empty prompt");
  companion_set others(ctx, p.companions);
  std::vector<token_in> batch;
  others.add_prompts(batch);
  others.set_wanting(p.companions.size());
  for (size_t i = 0; i < prompt.size(); ++i) batch.push_back({seq.id(), prompt[i], i + 1 == prompt.size()});
  auto t0 = clock_type::now();
  std::vector<std::vector<float>> out = ctx.decode(batch);
  r.timings.prompt_ms = ms_since(t0);
  collect_traces(ctx, seq.id(), r.traces);

  t0 = clock_type::now();
  // n_predict 0: the prompt is evaluated, no token is drawn.
  while (p.n_predict != 0 && !steps.add(out.back(), ctx.seq_len(seq.id()), n_ctx)) {
    batch.clear();
    others.add_next(out, batch, n_ctx);
    batch.push_back({seq.id(), steps.history().back(), true});
    out = ctx.decode(batch);
    collect_traces(ctx, seq.id(), r.traces);
  }
  steps.end();
  r.timings.gen_ms = ms_since(t0);
  return r;
}

std::vector<std::vector<int32_t>> generate_filler_prompts(const tokenizer::vocab& v, int n) {
  static const char* const FILLERS[] = {
      "Tell a short story about a lighthouse keeper and a storm.",
      "List ten facts about octopuses.",
      "Explain how a hash table handles collisions.",
      "Summarise the rules of chess in a few sentences.",
      "Describe how bread rises.",
      "Write four short poems about autumn leaves.",
      "Explain the difference between a list and a set.",
  };
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    const char* text = FILLERS[static_cast<size_t>(i) % std::size(FILLERS)];
    out.push_back(tokenizer::encode(v, std::string(text) + (i >= 7 ? " (" + std::to_string(i) + ")" : ""), true, false));
  }
  return out;
}

}  // namespace detaudit::runtime
