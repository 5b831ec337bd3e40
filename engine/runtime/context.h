// The runtime: sequences, their KV caches, and batched evaluation of many sequences at once.
//
// Goals: one decode() call evaluates tokens of any number of sequences, each continuing at its own
// position, in forward steps of at most n_ubatch tokens; this is the mechanism behind concurrency in
// the server and the probes. In exact numerics the logits of a sequence do not depend on anything
// else in the batch, on n_ubatch, on the thread count, or on whether its cache was computed,
// copied from another sequence's prefix, or restored from a file. In float numerics they may, as
// in ordinary engines (kernels and rounding chosen by batch shape).
// Non-goals: scheduling requests (serve/ does that), sampling (runtime/sampling.h).
//
// Thread-safety: a context is used by one thread at a time; it may use n_threads internally.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "model/model.h"

namespace detaudit::runtime {

// The numerics and backend choices are the backends layer's (backends/backend.h); the runtime
// speaks of them by the same names.
using backends::numerics_mode;
using enum backends::numerics_mode;
using backends::numerics_name;
using backends::numerics_from_name;
using backends::backend_kind;
using enum backends::backend_kind;
using backends::backend_name;
using backends::backend_from_name;

struct context_params {
  numerics_mode numerics = NUMERICS_EXACT;
  backend_kind backend = BACKEND_CPU;
  int device = 0;  // GPU backends: the device index (`detaudit devices`)
  int n_threads = 1;
  int64_t n_ubatch = 512;  // most tokens evaluated in one forward step
  int64_t n_ctx = 0;       // most tokens per sequence; 0: the model's trained context
  bool trace_hashes = false;  // record a hash of every layer's output per token (see token_trace)
  bool repack = true;         // CPU exact: repack weights for the kernels at creation (same bits; --no-repack)
};

// One token to evaluate: appended to sequence `seq` at position seq_len(seq).
struct token_in {
  int32_t seq = 0;
  int32_t token = 0;
  bool logits = false;  // return this position's logits
};

// Per-layer activation hashes of one evaluated token (when trace_hashes): xxh3-64 of the f32
// output of each block, in layer order, then of the final norm.
struct token_trace {
  int32_t seq = 0;
  int64_t pos = 0;
  std::vector<uint64_t> layer_hashes;
  // Mixture-of-experts models: per layer, the experts the token used, best first (else empty).
  std::vector<std::vector<int32_t>> routes;
};

class context {
 public:
  // Throws input_error for bad parameters (n_ubatch < 1, n_threads < 1, n_ctx beyond 2^24, a GPU
  // backend with numerics other than exact, a GPU backend not built or a device that is missing
  // or cannot run exact numerics).
  context(std::shared_ptr<const model::model> m, const context_params& p);
  ~context();
  context(const context&) = delete;
  context& operator=(const context&) = delete;

  const model::model& model() const;
  const context_params& params() const;
  // What evaluates the forward pass, for run records: "cpu avx512", "vulkan 0: llvmpipe (LLVM
  // 15.0.6, 256 bits) [llvmpipe, Mesa 22.3.6]", "cuda 0: NVIDIA H200 [...]".
  const std::string& device_description() const;
  // What load-time repacking did (all zero with repack off, other numerics or a GPU backend).
  const backends::repack_stats& repack_stats() const;

  int32_t seq_new();                 // a new empty sequence; returns its id
  void seq_free(int32_t seq);
  // A new sequence whose first n tokens (and their cache) are copied from src (prefix reuse).
  int32_t seq_fork(int32_t src, int64_t n);
  int64_t seq_len(int32_t seq) const;
  const std::vector<int32_t>& seq_tokens(int32_t seq) const;
  void seq_truncate(int32_t seq, int64_t n);  // keep the first n tokens
  // Writes a sequence's tokens and cache to a file / reads one back as a new sequence. The file
  // records the model's sha256 and the numerics; restoring into another model or numerics is an
  // input_error. In exact numerics a restored cache is bit-identical to the saved one.
  void seq_save(int32_t seq, const std::string& path) const;
  int32_t seq_restore(const std::string& path);

  // Evaluates the batch in order, in forward steps of at most n_ubatch tokens. Tokens of one
  // sequence must appear in the order they are to be appended. Returns the logits (n_vocab
  // floats) of each entry with logits = true, in batch order. Throws input_error when a sequence
  // would exceed n_ctx ("sequence 3: context full at 2048 tokens") or a token id is out of range;
  // nothing of that batch is applied then.
  std::vector<std::vector<float>> decode(const std::vector<token_in>& batch);

  // Traces of the tokens of the last decode() when trace_hashes is on.
  const std::vector<token_trace>& last_traces() const;

  // The most sequences and tokens evaluated in one forward step so far (evidence for audits).
  int64_t max_seqs_in_step() const;
  int64_t max_tokens_in_step() const;
  // Of the last decode(): the most sequences, `seq` itself included, that shared one forward
  // step holding a token of `seq`. 0 when `seq` had no token in that batch (or it failed).
  int64_t last_seqs_in_step(int32_t seq) const;

  struct impl;

 private:
  std::unique_ptr<impl> p_;
};

// A sequence of a context, freed when the scope ends.
class seq_scope {
 public:
  explicit seq_scope(context& ctx) : ctx_(ctx), id_(ctx.seq_new()) {}
  ~seq_scope() { ctx_.seq_free(id_); }
  seq_scope(const seq_scope&) = delete;
  seq_scope& operator=(const seq_scope&) = delete;
  int32_t id() const { return id_; }

 private:
  context& ctx_;
  int32_t id_;
};

}  // namespace detaudit::runtime
