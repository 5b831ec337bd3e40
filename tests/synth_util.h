// The small synthetic model shape the engine tests share: n_embd 256, 2 layers, 4 heads (2 KV),
// n_ff 512 (every K-quant can pack it).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <unistd.h>
#include <vector>

#include "gguf/gguf.h"
#include "model/synth.h"
#include "test_util.h"

namespace detaudit::test {

inline model::synth_options small_model(model::arch_id a, gguf::dtype t, uint64_t seed = 7, int64_t n_ctx = 2048) {
  model::synth_options o;
  o.arch = a;
  o.type = t;
  o.n_embd = 256;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ff = 512;
  o.n_ctx = n_ctx;
  o.seed = seed;
  o.tied_output = a == model::ARCH_GEMMA2;  // gemma2 has no output.weight
  return o;
}

// A Q8_0 model (n_embd 128, stories260K's vocabulary) whose top logits lie close enough for
// float rounding to flip tokens under concurrency: the float-divergence tests' model. Written once
// per test process.
inline std::string narrow_model() {
  static const std::string path = [] {
    model::synth_options o = small_model(model::ARCH_LLAMA, gguf::DTYPE_Q8_0, 7, 1024);
    o.n_embd = 128;
    o.n_ff = 384;
    o.vocab_from = fixture("models/stories260K.gguf");
    const std::string p = process_scratch_dir("narrow_model") + "/narrow.gguf";
    model::synth_write(o, p);
    return p;
  }();
  return path;
}

// Random weights over stories260K's vocabulary: unlike stories260K itself, it generates byte
// tokens (<0x80>..<0xFF>) and ranks them among its top log-probs. Written once per process.
inline std::string byte_token_model() {
  static const std::string path = [] {
    model::synth_options o;
    o.n_embd = 64;
    o.n_layer = 2;
    o.n_head = 4;
    o.n_head_kv = 2;
    o.n_ff = 192;
    o.vocab_from = fixture("models/stories260K.gguf");
    const std::string p = process_scratch_dir("byte_token_model") + "/bytes.gguf";
    model::synth_write(o, p);
    return p;
  }();
  return path;
}

// stories260K with every output_norm weight 3e38: in float numerics the forward overflows and the
// logits are infinite or NaN (exact numerics refuse nothing here: they are not asked). Written
// into `dir`; returns the path.
inline std::string overflow_model(const std::string& dir) {
  const std::string path = dir + "/overflow.gguf";
  std::filesystem::copy_file(fixture("models/stories260K.gguf"), path, std::filesystem::copy_options::overwrite_existing);
  const gguf::file f = gguf::file::open(path);
  for (const gguf::tensor_info& t : f.tensors()) {
    if (t.name != "output_norm.weight") continue;
    if (t.type != gguf::DTYPE_F32) throw std::runtime_error("overflow_model: output_norm.weight is not F32");
    const std::vector<float> huge(t.n_elements, 3e38f);
    std::fstream out(path, std::ios::in | std::ios::out | std::ios::binary);
    out.seekp(static_cast<std::streamoff>(f.data_offset() + t.offset));
    out.write(reinterpret_cast<const char*>(huge.data()), static_cast<std::streamsize>(huge.size() * sizeof(float)));
    if (!out.good()) throw std::runtime_error("overflow_model: cannot write " + path);
    return path;
  }
  throw std::runtime_error("overflow_model: no output_norm.weight");
}

// The small Q8_0 model (n_embd 256, 2 layers, 4 heads, 2 KV heads, head_dim 64), written once per
// process into its own folder (test cases may run as parallel processes), removed at exit: the
// bench tests' model (tests/unit/test_bench.cpp, tests/e2e/test_bench.cpp).
struct bench_model {
  std::string dir, path;
  uint64_t n_params = 0;
  bench_model() : dir(scratch_dir("bench_model_" + std::to_string(::getpid()))), path(dir + "/small-q8_0.gguf") {
    n_params = model::synth_write(small_model(model::ARCH_LLAMA, gguf::DTYPE_Q8_0), path);
  }
  ~bench_model() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

inline const bench_model& q8_model() {
  static const bench_model m;
  return m;
}

}  // namespace detaudit::test
