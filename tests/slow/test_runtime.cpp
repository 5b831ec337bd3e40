// The invariance matrix: one sequence's logits evaluated alone token by token, as one step, with
// several n_ubatch, inside a batch of eight interleaved sequences, with 1 and 2 threads, after
// seq_save -> seq_restore and after seq_fork prefix reuse. In exact numerics every logit vector
// is bit-identical (memcmp) to the alone-token-by-token baseline, also with the kernels of every
// instruction set this CPU supports (DETAUDIT_CPU_ISA); in float numerics at least one
// condition differs (which shows that the comparison can see divergence).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cpu/cpu.h"
#include "model/model.h"
#include "model/synth.h"
#include "runtime/context.h"
#include "synth_util.h"
#include "test_util.h"

using namespace detaudit;

namespace {

using logits_t = std::vector<std::vector<float>>;
using runtime::token_in;

runtime::context_params params(runtime::numerics_mode mode, int64_t n_ubatch = 512, int n_threads = 1) {
  runtime::context_params p;
  p.numerics = mode;
  p.n_ubatch = n_ubatch;
  p.n_threads = n_threads;
  p.n_ctx = 256;
  return p;
}

std::vector<token_in> entries(int32_t seq, const std::vector<int32_t>& toks, size_t begin, size_t end) {
  std::vector<token_in> b;
  for (size_t i = begin; i < end; ++i) b.push_back({seq, toks[i], true});
  return b;
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

bool same_bits(const logits_t& a, const logits_t& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), 4 * a[i].size()) != 0) return false;
  return true;
}

// (a) Baseline: the prompt token by token, then n_gen greedy tokens one at a time. Appends the
// generated tokens to `toks` and returns the logits of every position.
logits_t eval_alone(std::shared_ptr<const model::model> m, runtime::numerics_mode mode, std::vector<int32_t>& toks,
                    int n_gen) {
  runtime::context c(std::move(m), params(mode));
  const int32_t s = c.seq_new();
  logits_t out;
  for (size_t i = 0; i < toks.size(); ++i) out.push_back(c.decode({{s, toks[i], true}})[0]);
  for (int g = 0; g < n_gen; ++g) {
    toks.push_back(argmax(out.back()));
    out.push_back(c.decode({{s, toks.back(), true}})[0]);
  }
  return out;
}

// (b, c, e) The whole sequence in one decode call.
logits_t eval_whole(std::shared_ptr<const model::model> m, const runtime::context_params& p,
                    const std::vector<int32_t>& toks) {
  runtime::context c(std::move(m), p);
  const int32_t s = c.seq_new();
  return c.decode(entries(s, toks, 0, toks.size()));
}

// (d) Inside a crowd: seven other sequences of different lengths, some already started, their
// tokens interleaved with the target's in decode calls of several tokens per sequence.
logits_t eval_crowd(std::shared_ptr<const model::model> m, const runtime::context_params& p,
                    const std::vector<int32_t>& toks) {
  runtime::context c(m, p);
  const int32_t target = c.seq_new();
  std::vector<int32_t> others;
  std::vector<std::vector<int32_t>> other_toks;
  const int64_t n_vocab = m->hp().n_vocab;
  for (int k = 0; k < 7; ++k) {
    others.push_back(c.seq_new());
    std::vector<int32_t> t;
    for (int i = 0; i < 3 + 5 * k; ++i) t.push_back(static_cast<int32_t>((1 + 37 * k + 11 * i) % n_vocab));
    other_toks.push_back(t);
  }
  std::vector<size_t> done(7, 0);
  c.decode(entries(others[2], other_toks[2], 0, 4));  // two sequences start earlier
  c.decode(entries(others[5], other_toks[5], 0, 9));
  done[2] = 4;
  done[5] = 9;
  logits_t out;
  size_t pos = 0;
  for (int round = 0; pos < toks.size(); ++round) {
    std::vector<token_in> b;
    for (int k = 0; k < 7; ++k) {
      const size_t take = std::min<size_t>(1 + (k + round) % 3, other_toks[k].size() - done[k]);
      for (size_t i = 0; i < take; ++i) b.push_back({others[k], other_toks[k][done[k]++], (k + i) % 2 == 0});
      if (k == 3) {  // the target sits in the middle of the batch
        const size_t n = std::min<size_t>(1 + round % 4, toks.size() - pos);
        for (size_t i = 0; i < n; ++i) b.push_back({target, toks[pos++], true});
      }
    }
    std::vector<std::vector<float>> l = c.decode(b);
    size_t li = 0;
    for (const token_in& t : b) {
      if (!t.logits) continue;
      if (t.seq == target) out.push_back(l[li]);
      ++li;
    }
  }
  CHECK(c.max_seqs_in_step() > 1);
  return out;
}

// (f) The first n_prefix tokens evaluated and saved; the rest evaluated in a new context from
// the restored file.
logits_t eval_restored(std::shared_ptr<const model::model> m, const runtime::context_params& p,
                       const std::vector<int32_t>& toks, size_t n_prefix, const std::string& file) {
  logits_t out;
  {
    runtime::context c(m, p);
    const int32_t s = c.seq_new();
    out = c.decode(entries(s, toks, 0, n_prefix));
    c.seq_save(s, file);
  }
  runtime::context c(m, p);
  const int32_t s = c.seq_restore(file);
  CHECK(c.seq_tokens(s) == std::vector<int32_t>(toks.begin(), toks.begin() + n_prefix));
  for (auto& l : c.decode(entries(s, toks, n_prefix, toks.size()))) out.push_back(std::move(l));
  return out;
}

// (g) A sequence that shares the first n_prefix tokens and then diverges is forked at n_prefix;
// the fork continues with the target's tokens.
logits_t eval_forked(std::shared_ptr<const model::model> m, const runtime::context_params& p,
                     const std::vector<int32_t>& toks, size_t n_prefix) {
  runtime::context c(m, p);
  const int32_t a = c.seq_new();
  std::vector<int32_t> other(toks.begin(), toks.begin() + n_prefix);
  for (int i = 0; i < 5; ++i) other.push_back((toks[i] + 7) % static_cast<int32_t>(m->hp().n_vocab));
  logits_t out = c.decode(entries(a, other, 0, n_prefix));
  c.decode(entries(a, other, n_prefix, other.size()));
  const int32_t f = c.seq_fork(a, static_cast<int64_t>(n_prefix));
  c.seq_free(a);
  for (auto& l : c.decode(entries(f, toks, n_prefix, toks.size()))) out.push_back(std::move(l));
  return out;
}

// Sets DETAUDIT_CPU_ISA for the lifetime of the object (contexts created meanwhile use that set).
struct isa_override {
  explicit isa_override(kernels::cpu::isa i) { ::setenv("DETAUDIT_CPU_ISA", kernels::cpu::isa_name(i), 1); }
  ~isa_override() { ::unsetenv("DETAUDIT_CPU_ISA"); }
  isa_override(const isa_override&) = delete;
  isa_override& operator=(const isa_override&) = delete;
};

struct outcome {
  int n_conditions = 0;
  std::vector<std::string> differing;
};

// Runs every condition against the baseline; returns which ones differ bit-wise.
outcome invariance_matrix(std::shared_ptr<const model::model> m, runtime::numerics_mode mode,
                          std::vector<int32_t> prompt, const std::string& scratch) {
  std::vector<int32_t> toks = prompt;
  const logits_t base = eval_alone(m, mode, toks, 8);
  const size_t n_prefix = prompt.size();
  outcome o;
  auto check = [&](const std::string& name, const logits_t& l) {
    ++o.n_conditions;
    if (!same_bits(base, l)) o.differing.push_back(name);
  };
  check("whole prompt in one step", eval_whole(m, params(mode), toks));
  for (int64_t ub : {1, 7, 64, 512}) check("n_ubatch " + std::to_string(ub), eval_whole(m, params(mode, ub), toks));
  check("2 threads, one step", eval_whole(m, params(mode, 512, 2), toks));
  check("2 threads, n_ubatch 7", eval_whole(m, params(mode, 7, 2), toks));
  check("in a batch of 8 sequences, n_ubatch 16", eval_crowd(m, params(mode, 16), toks));
  check("in a batch of 8 sequences, n_ubatch 512, 2 threads", eval_crowd(m, params(mode, 512, 2), toks));
  check("seq_save -> seq_restore", eval_restored(m, params(mode), toks, n_prefix, scratch + "/seq.bin"));
  check("seq_fork prefix reuse", eval_forked(m, params(mode, 64), toks, n_prefix));
  for (kernels::cpu::isa i : kernels::cpu::isa_all_supported()) {
    isa_override use(i);
    check(std::string(kernels::cpu::isa_name(i)) + " kernels, one step", eval_whole(m, params(mode), toks));
    check(std::string(kernels::cpu::isa_name(i)) + " kernels, n_ubatch 1, 2 threads", eval_whole(m, params(mode, 1, 2), toks));
  }
  return o;
}

// Gemma's and gpt-oss's sliding window is 8 positions here, so the 36-token prompt crosses it in
// every condition (alternate layers slide: the period is 2). gpt-oss's MXFP4 case is llama.cpp's
// MXFP4_MOE mixture (experts mxfp4, the other matrices q8_0).
model::synth_options synth(model::arch_id a, gguf::dtype t) {
  model::synth_options o = test::small_model(a, t, 11, 256);
  if (model::arch_oai_block(a)) {
    o.sliding_window = 8;
    if (t == gguf::DTYPE_MXFP4) model::synth_apply_mixture(o, "mxfp4_moe");
  }
  if (model::arch_gemma_block(a)) {
    o.sliding_window = 8;
    o.swa_period = 2;
    o.tied_output = a == model::ARCH_GEMMA2;
  }
  return o;
}

struct model_case {
  std::string name;
  std::string path;
};

// stories260K and synth models covering every weight type, each architecture in five or more.
std::vector<model_case> invariance_models(const std::string& dir) {
  std::vector<model_case> cases = {{"stories260K", test::fixture("models/stories260K.gguf")}};
  const std::pair<model::arch_id, gguf::dtype> kinds[] = {
      {model::ARCH_LLAMA, gguf::DTYPE_F16},  {model::ARCH_QWEN2, gguf::DTYPE_Q8_0},
      {model::ARCH_QWEN3, gguf::DTYPE_Q4_K}, {model::ARCH_LLAMA, gguf::DTYPE_Q6_K},
      {model::ARCH_QWEN2, gguf::DTYPE_Q4_K}, {model::ARCH_QWEN3, gguf::DTYPE_F16},
      {model::ARCH_LLAMA, gguf::DTYPE_F32},  {model::ARCH_QWEN2, gguf::DTYPE_BF16},
      {model::ARCH_QWEN3, gguf::DTYPE_Q8_0}, {model::ARCH_LLAMA, gguf::DTYPE_Q4_0},
      {model::ARCH_QWEN2, gguf::DTYPE_Q4_1}, {model::ARCH_QWEN3, gguf::DTYPE_Q5_0},
      {model::ARCH_LLAMA, gguf::DTYPE_Q5_1}, {model::ARCH_QWEN2, gguf::DTYPE_Q2_K},
      {model::ARCH_QWEN3, gguf::DTYPE_Q3_K}, {model::ARCH_LLAMA, gguf::DTYPE_Q5_K},
      {model::ARCH_PHI3, gguf::DTYPE_Q4_K},  {model::ARCH_PHI3, gguf::DTYPE_F16},
      {model::ARCH_PHI3, gguf::DTYPE_Q6_K},  {model::ARCH_PHI3, gguf::DTYPE_Q8_0},
      {model::ARCH_PHI3, gguf::DTYPE_Q5_K},
      {model::ARCH_GEMMA2, gguf::DTYPE_Q4_K}, {model::ARCH_GEMMA2, gguf::DTYPE_F16},
      {model::ARCH_GEMMA2, gguf::DTYPE_Q8_0}, {model::ARCH_GEMMA2, gguf::DTYPE_Q6_K},
      {model::ARCH_GEMMA2, gguf::DTYPE_Q5_K}, {model::ARCH_GEMMA3, gguf::DTYPE_Q4_K},
      {model::ARCH_GEMMA3, gguf::DTYPE_F16},  {model::ARCH_GEMMA3, gguf::DTYPE_Q8_0},
      {model::ARCH_GEMMA3, gguf::DTYPE_Q6_K}, {model::ARCH_GEMMA3, gguf::DTYPE_Q5_K},
      {model::ARCH_QWEN3MOE, gguf::DTYPE_Q4_K}, {model::ARCH_QWEN3MOE, gguf::DTYPE_F16},
      {model::ARCH_QWEN3MOE, gguf::DTYPE_Q8_0}, {model::ARCH_QWEN3MOE, gguf::DTYPE_Q6_K},
      {model::ARCH_QWEN3MOE, gguf::DTYPE_Q5_K},
      {model::ARCH_GPT_OSS, gguf::DTYPE_MXFP4}, {model::ARCH_GPT_OSS, gguf::DTYPE_F16},
      {model::ARCH_GPT_OSS, gguf::DTYPE_Q8_0},  {model::ARCH_GPT_OSS, gguf::DTYPE_Q4_K},
      {model::ARCH_GPT_OSS, gguf::DTYPE_Q6_K},
  };
  for (const auto& [a, t] : kinds) {
    const std::string name = std::string(model::arch_name(a)) + "-" + gguf::dtype_get(t).name;
    model::synth_write(synth(a, t), dir + "/" + name + ".gguf");
    cases.push_back({name, dir + "/" + name + ".gguf"});
  }
  return cases;
}

// 36 tokens: as one step, the prompt takes float mode's batched (>= 32 tokens) matmul path.
std::vector<int32_t> prompt_of(const model::model& m) {
  std::vector<int32_t> p = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315};
  for (int i = 0; i < 24; ++i) p.push_back(static_cast<int32_t>((300 + 53 * i) % m.hp().n_vocab));
  return p;
}

}  // namespace

TEST_CASE("runtime: exact numerics give bit-identical logits under every batching condition") {
  const std::string dir = test::scratch_dir("runtime_invariance_exact");
  for (const model_case& mc : invariance_models(dir)) {
    CAPTURE(mc.name);
    auto m = model::model::load(mc.path);
    outcome o = invariance_matrix(m, runtime::NUMERICS_EXACT, prompt_of(*m), dir);
    std::string diff;
    for (const std::string& d : o.differing) diff += d + "; ";
    CAPTURE(diff);
    CHECK(o.n_conditions == 11 + 2 * static_cast<int>(kernels::cpu::isa_all_supported().size()));
    CHECK(o.differing.empty());
  }
}

TEST_CASE("runtime: float numerics diverge under the same conditions (the test can see divergence)") {
  const std::string dir = test::scratch_dir("runtime_invariance_float");
  int n_differing = 0, n_models_differing = 0;
  for (const model_case& mc : invariance_models(dir)) {
    auto m = model::model::load(mc.path);
    outcome o = invariance_matrix(m, runtime::NUMERICS_FLOAT, prompt_of(*m), dir);
    std::string diff;
    for (const std::string& d : o.differing) diff += "\n  " + d;
    MESSAGE(mc.name << ": " << o.differing.size() << " of " << o.n_conditions << " conditions differ" << diff);
    n_differing += static_cast<int>(o.differing.size());
    n_models_differing += o.differing.empty() ? 0 : 1;
  }
  CHECK(n_differing > 0);
  CHECK(n_models_differing > 1);
}
