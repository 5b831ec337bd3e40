// Hostile cases for the GPU backends' activation slots (ops_gpu.cpp's host/device bookkeeping and
// the devices' slot forms), end to end through runtime::context against the CPU backend:
//  - a step that fails after its last KV store and returns no logits (the CUDA slots defer the
//    non-finite check to the next slot_read / kv_quantize_slot, and such a step has none after
//    its last KV store): the GPU must throw in that step as the CPU does, and the next, clean step
//    (here of another sequence) must not inherit the error. Vulkan's host slots throw at the op;
//    a copy of gpu.cpp's default slots that defers matmul's error to the next read, as CUDA's do,
//    fails the first two cases (decodes 1 and 3 succeed, 2 and 4 throw);
//  - a failing step in the middle of a context's life (a batch of several sequences, chunked),
//    then further steps in the same context: the CPU's logits bit for bit;
//  - a mixture-of-experts model with per-layer trace reads (host reads of the residual stream
//    between device ops) in a batch of several sequences, chunked: the CPU's traces, routes and
//    logits.
// The models are tiny (n_embd 64, one or two layers) so lavapipe runs them in seconds.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gpu_test_util.h"
#include "model/model.h"
#include "model/synth.h"
#include "runtime/context.h"
#include "synth_util.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit;

namespace {

using logits_t = std::vector<std::vector<float>>;
using runtime::token_in;

runtime::context_params params(runtime::backend_kind b, int64_t n_ubatch = 512, bool trace = false) {
  runtime::context_params p;
  p.backend = b;
  p.device = test::gpu_test_device_index();
  p.n_ubatch = n_ubatch;
  p.n_ctx = 64;
  p.trace_hashes = trace;
  return p;
}

model::synth_options tiny(model::arch_id a, int64_t n_layer) {
  model::synth_options o = test::small_model(a, gguf::DTYPE_F32, 21, 64);
  o.n_embd = 64;
  o.n_layer = n_layer;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ff = 128;
  o.n_expert = 4;
  o.n_expert_used = 2;
  o.n_ff_exp = 64;
  return o;
}

// Overwrites the f32 values of rows [r0, r0 + values.size() / row_len) of tensor `name` in a GGUF file.
void patch_rows(const std::string& path, const std::string& name, int64_t r0, const std::vector<float>& values) {
  uint64_t at = 0;
  {
    const gguf::file f = gguf::file::open(path);
    const gguf::tensor_info* t = f.find_tensor(name);
    REQUIRE_MESSAGE(t != nullptr, name);
    REQUIRE(t->type == gguf::DTYPE_F32);
    at = f.data_offset() + t->offset + static_cast<uint64_t>(r0) * static_cast<uint64_t>(t->ne[0]) * 4;
    REQUIRE(at + values.size() * 4 <= f.data_offset() + t->offset + t->n_bytes);
  }
  std::fstream s(path, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(s.good());
  s.seekp(static_cast<std::streamoff>(at));
  s.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * 4));
  REQUIRE(s.good());
}

constexpr int32_t POISON = 5;  // the token that overflows
constexpr int64_t DIM = 3;        // the residual dimension only it uses

// The f32 values of tensor `name` (ggml order: rows of ne[0]).
std::vector<float> read_tensor(const std::string& path, const std::string& name) {
  const gguf::file f = gguf::file::open(path);
  const gguf::tensor_info* t = f.find_tensor(name);
  REQUIRE_MESSAGE(t != nullptr, name);
  REQUIRE(t->type == gguf::DTYPE_F32);
  std::vector<float> v(static_cast<size_t>(t->n_elements));
  std::memcpy(v.data(), f.tensor_data(*t), v.size() * 4);
  return v;
}

// One layer of F32 weights, patched so that only token POISON reaches residual dimension DIM:
// its embedding is 1000 * e_DIM, column DIM of every other embedding row and row DIM of
// attn_output are zero (so DIM of the normalized FFN input is 0 for every other token and about 8
// for POISON), and column DIM of ffn_gate and ffn_up is g. With g large, POISON's SwiGLU product
// (about 64 g^2) overflows to infinity in the FFN, after the layer's KV store and attention, and
// ffn_down's matmul rejects it (an input_error); every other token computes as with g = 0.
std::string poisoned_model(const std::string& dir, float g, int k) {
  model::synth_options o = tiny(model::ARCH_LLAMA, 1);
  const std::string path = dir + "/poison-" + std::to_string(k) + ".gguf";
  model::synth_write(o, path);
  const int64_t d = o.n_embd;
  std::vector<float> emb = read_tensor(path, "token_embd.weight");
  for (size_t r = 0; r < emb.size() / static_cast<size_t>(d); ++r) {
    float* row = emb.data() + r * static_cast<size_t>(d);
    if (static_cast<int32_t>(r) == POISON) std::fill(row, row + d, 0.0f);
    row[DIM] = static_cast<int32_t>(r) == POISON ? 1000.0f : 0.0f;
  }
  patch_rows(path, "token_embd.weight", 0, emb);
  std::vector<float> wo = read_tensor(path, "blk.0.attn_output.weight");
  const size_t wo_cols = wo.size() / static_cast<size_t>(d);
  patch_rows(path, "blk.0.attn_output.weight", DIM, std::vector<float>(wo_cols, 0.0f));
  for (const char* name : {"blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"}) {
    std::vector<float> w = read_tensor(path, name);
    for (size_t r = 0; r < w.size() / static_cast<size_t>(d); ++r) w[r * static_cast<size_t>(d) + DIM] = g;
    patch_rows(path, name, 0, w);
  }
  return path;
}

// Whether decoding the one token on a fresh CPU context throws an input_error.
bool cpu_throws(std::shared_ptr<const model::model> m, int32_t tok, bool logits) {
  runtime::context c(std::move(m), params(runtime::BACKEND_CPU));
  const int32_t s = c.seq_new();
  try {
    c.decode({{s, tok, logits}});
  } catch (const input_error&) {
    return true;
  }
  return false;
}

// A poisoned model where POISON fails on the CPU (in the last block, after the KV store: the
// control model with g = 1 evaluates it) and the clean tokens 7, 9 and 11 do not.
std::shared_ptr<const model::model> find_poisoned(const std::string& dir) {
  {
    auto control = model::model::load(poisoned_model(dir, 1.0f, -1));
    REQUIRE_MESSAGE(!cpu_throws(control, POISON, false), "the embedding alone must not fail");
    REQUIRE(!cpu_throws(control, POISON, true));
  }
  for (int k = 0; k < 12; ++k) {
    const float c = static_cast<float>(std::pow(10.0, 15.0 + 0.5 * k));
    auto m = model::model::load(poisoned_model(dir, c, k));
    if (cpu_throws(m, POISON, false) && !cpu_throws(m, 7, true) && !cpu_throws(m, 9, true) && !cpu_throws(m, 11, true)) {
      MESSAGE("poisoned model: g = " << c);
      return m;
    }
  }
  FAIL("no g made only the poisoned token fail on the CPU");
  return nullptr;
}

// The sequence of decodes: a failing step, then clean steps in the same context. Returns the
// logits of the clean steps and, per decode, whether it threw an input_error.
struct outcome {
  logits_t logits;
  std::vector<int> threw;
};

outcome run_after_failure(std::shared_ptr<const model::model> m, const runtime::context_params& p,
                          const std::vector<std::vector<token_in>>& batches) {
  runtime::context c(std::move(m), p);
  if (p.backend != runtime::BACKEND_CPU)  // the GPU really runs it
    REQUIRE(c.device_description().rfind(kernels::gpu::api_name(test::gpu_test_api()), 0) == 0);
  for (int i = 0; i < 3; ++i) c.seq_new();
  outcome o;
  for (const std::vector<token_in>& b : batches) {
    try {
      for (auto& l : c.decode(b)) o.logits.push_back(std::move(l));
      o.threw.push_back(0);
    } catch (const input_error&) {
      o.threw.push_back(1);
    }
  }
  return o;
}

}  // namespace

TEST_CASE("gpu slots hostile: a step without logits that fails after its last KV store throws there, not in the next step") {
  test::gpu_test_device();
  const std::string dir = test::scratch_dir("gpu_slots_hostile_nologits");
  const std::shared_ptr<const model::model> m = find_poisoned(dir);
  // 1: the poisoned token alone, no logits (CPU: input_error at ffn_down's matmul, after the KV store).
  // 2: a clean token of another sequence, with logits (CPU: fine).
  // 3: two clean tokens and the poisoned one, none with logits.
  // 4: clean tokens of two sequences, with logits.
  const std::vector<std::vector<token_in>> batches = {
      {{0, POISON, false}},
      {{1, 7, true}},
      {{1, 9, false}, {2, POISON, false}, {0, 11, false}},
      {{0, 9, true}, {1, 11, true}},
  };
  const outcome cpu = run_after_failure(m, params(runtime::BACKEND_CPU), batches);
  REQUIRE(cpu.threw == std::vector<int>{1, 0, 1, 0});
  const outcome gpu = run_after_failure(m, params(test::gpu_test_backend()), batches);
  CHECK_MESSAGE(gpu.threw == cpu.threw, "which decodes threw (1) on the GPU: " << gpu.threw[0] << gpu.threw[1]
                                                                                  << gpu.threw[2] << gpu.threw[3]);
  CHECK(test::same_logit_bits(gpu.logits, cpu.logits));
}

TEST_CASE("gpu slots hostile: after a failed step in a batch of sequences (chunked) the context gives the CPU's logits") {
  test::gpu_test_device();
  const std::string dir = test::scratch_dir("gpu_slots_hostile_midlife");
  const std::shared_ptr<const model::model> m = find_poisoned(dir);
  // Prefill two sequences; then a batch whose first chunk is clean and whose second holds the
  // poisoned token (with logits requested, so every backend reads the result in that step); the
  // whole batch is rolled back; then more steps in the same context, of other shapes.
  const std::vector<std::vector<token_in>> batches = {
      {{0, 7, false}, {0, 9, false}, {1, 11, false}, {0, 13, true}, {1, 15, true}},
      {{0, 17, true}, {1, 19, false}, {2, 21, true}, {1, POISON, true}, {0, 23, true}},
      {{1, 25, true}},
      {{0, 27, true}, {2, 29, true}, {1, 31, false}, {1, 33, true}, {2, 35, true}, {0, 37, true}},
      {{2, POISON, false}, {0, 39, false}},
      {{0, 41, true}, {1, 43, true}, {2, 45, true}},
  };
  for (int64_t n_ubatch : {3, 512}) {
    CAPTURE(n_ubatch);
    const outcome cpu = run_after_failure(m, params(runtime::BACKEND_CPU, n_ubatch), batches);
    REQUIRE(cpu.threw == std::vector<int>{0, 1, 0, 0, 1, 0});
    const outcome gpu = run_after_failure(m, params(test::gpu_test_backend(), n_ubatch), batches);
    CHECK(gpu.threw == cpu.threw);
    CHECK(test::same_logit_bits(gpu.logits, cpu.logits));
  }
}

TEST_CASE("gpu slots hostile: qwen3moe with per-layer trace reads, chunked batches of sequences, equals the CPU") {
  test::gpu_test_device();
  const std::string dir = test::scratch_dir("gpu_slots_hostile_moe");
  const std::string path = dir + "/moe.gguf";
  model::synth_write(tiny(model::ARCH_QWEN3MOE, 2), path);
  auto m = model::model::load(path);
  const std::vector<std::vector<token_in>> batches = {
      {{0, 3, false}, {1, 4, true}, {0, 5, false}, {2, 6, false}, {1, 7, false}, {0, 8, true}, {2, 9, true}},
      {{1, 10, true}},
      {{2, 11, true}, {0, 12, true}, {1, 13, true}, {2, 14, false}, {2, 15, true}},
  };
  for (bool trace : {true, false}) {
    for (int64_t n_ubatch : {2, 512}) {
      CAPTURE(trace);
      CAPTURE(n_ubatch);
      runtime::context cpu(m, params(runtime::BACKEND_CPU, n_ubatch, trace));
      runtime::context gpu(m, params(test::gpu_test_backend(), n_ubatch, trace));
      for (int i = 0; i < 3; ++i) {
        cpu.seq_new();
        gpu.seq_new();
      }
      for (const std::vector<token_in>& b : batches) {
        CHECK(test::same_logit_bits(gpu.decode(b), cpu.decode(b)));
        const std::vector<runtime::token_trace>& tc = cpu.last_traces();
        const std::vector<runtime::token_trace>& tg = gpu.last_traces();
        REQUIRE(tc.size() == tg.size());
        CHECK(tc.size() == (trace ? b.size() : 0));
        for (size_t i = 0; i < tc.size(); ++i) {
          CHECK(tg[i].layer_hashes == tc[i].layer_hashes);
          CHECK(tg[i].routes == tc[i].routes);
        }
      }
    }
  }
}
