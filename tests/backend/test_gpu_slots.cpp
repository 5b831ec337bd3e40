// The slot forms of gpu::device (activations that stay on the device between ops) against the
// pointer forms, which tests/backend's other files compare with kernels/ref: a transformer layer's
// chain of slot ops (in-place outputs included) must leave the bytes the same chain of pointer ops
// leaves, for one token, a few (the CUDA backend's per-row matmul kernel) and more than eight (its
// tiled kernel). Also: a non-finite activation is an input_error by the next read at the latest,
// and the device works normally afterwards; constant inputs (a norm weight, RoPE tables) changed in
// place at the same address are used with their new values; misused slots are logic errors.
#include <doctest/doctest.h>

#include "backend/gpu_test_util.h"
#include "test_util.h"

#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/dtype.h"
#include "gguf/quants.h"
#include "kernels/gpu/gpu.h"
#include "util/error.h"

using namespace detaudit;

namespace {

constexpr int64_t N_EMBD = 256, N_FF = 512, N_HEAD = 4, HEAD_DIM = 64, N_HEAD_KV = 2;
constexpr float EPS = 1e-5f;

std::vector<float> normal_values(int64_t n, uint64_t seed, float scale) {
  test::test_rng r{seed};
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = scale * (r.uniform() * 2.0f - 1.0f);
  return v;
}

struct layer {
  kernels::gpu::weight_handle gate, up, down, kv;
  std::vector<float> norm_w, bias;
};

kernels::gpu::weight_handle upload(kernels::gpu::device& dev, gguf::dtype t, int64_t n_in, int64_t n_out, uint64_t seed) {
  const std::vector<float> w = normal_values(n_in * n_out, seed, 0.1f);
  std::vector<uint8_t> bytes(gguf::dtype_row_bytes(t, n_in) * static_cast<uint64_t>(n_out));
  for (int64_t r = 0; r < n_out; ++r)
    gguf::quants_quantize_row(t, w.data() + r * n_in, bytes.data() + gguf::dtype_row_bytes(t, n_in) * static_cast<uint64_t>(r), n_in);
  return dev.upload_weight(t, bytes.data(), n_in, n_out);
}

layer make_layer(kernels::gpu::device& dev) {
  layer l;
  l.gate = upload(dev, gguf::DTYPE_Q4_K, N_EMBD, N_FF, 1);
  l.up = upload(dev, gguf::DTYPE_Q8_0, N_EMBD, N_FF, 2);
  l.down = upload(dev, gguf::DTYPE_Q6_K, N_FF, N_EMBD, 3);
  l.kv = upload(dev, gguf::DTYPE_Q5_0, N_EMBD, N_HEAD_KV * HEAD_DIM, 4);
  l.norm_w = normal_values(N_EMBD, 5, 2.0f);
  l.bias = normal_values(N_EMBD, 6, 0.5f);
  return l;
}

struct result {
  std::vector<float> x;
  std::vector<uint8_t> cells;
};

int64_t cell_bytes() {
  const int64_t nb = (HEAD_DIM + 31) / 32;
  return 2 * N_HEAD_KV * nb * (32 * 2 + 4);
}

// norm -> gate, up -> swiglu (in place) -> down -> residual add (in place) -> bias -> rope ->
// norm (in place) -> kv projection -> kv cells; by pointer ops on host arrays.
result run_pointer(kernels::gpu::device& dev, const layer& l, const std::vector<float>& x0, int64_t n_tok,
                   const std::vector<float>& tables) {
  std::vector<float> x = x0, h(x.size()), g(static_cast<size_t>(n_tok * N_FF)), u(g.size()), d(x.size());
  std::vector<float> kv(static_cast<size_t>(n_tok * N_HEAD_KV * HEAD_DIM));
  dev.rms_norm(x.data(), n_tok, N_EMBD, N_EMBD, l.norm_w.data(), EPS, h.data());
  dev.matmul(l.gate, h.data(), n_tok, g.data());
  dev.matmul(l.up, h.data(), n_tok, u.data());
  dev.swiglu(g.data(), u.data(), n_tok * N_FF, g.data());
  dev.matmul(l.down, g.data(), n_tok, d.data());
  dev.add(x.data(), d.data(), n_tok * N_EMBD, x.data());
  dev.add_bias(x.data(), n_tok, N_EMBD, l.bias.data());
  dev.rope(x.data(), n_tok, N_HEAD, HEAD_DIM, HEAD_DIM, false, tables.data());
  dev.rms_norm(x.data(), n_tok, N_EMBD, HEAD_DIM, nullptr, EPS, x.data());
  dev.matmul(l.kv, x.data(), n_tok, kv.data());
  result r;
  r.cells.resize(static_cast<size_t>(n_tok * cell_bytes()));
  dev.kv_quantize(kv.data(), kv.data(), n_tok, N_HEAD_KV, HEAD_DIM, r.cells.data());
  r.x = x;
  return r;
}

// The same chain on slots (x: 10, h: 11, g: 12, u: 13, d: 14, kv: 15).
result run_slots(kernels::gpu::device& dev, const layer& l, const std::vector<float>& x0, int64_t n_tok,
                 const std::vector<float>& tables) {
  dev.slot_write(10, x0.data(), n_tok * N_EMBD);
  dev.rms_norm_slot(10, n_tok, N_EMBD, N_EMBD, l.norm_w.data(), EPS, 11);
  dev.matmul_slot(l.gate, 11, n_tok, N_EMBD, N_FF, 12);
  dev.matmul_slot(l.up, 11, n_tok, N_EMBD, N_FF, 13);
  dev.swiglu_slot(12, 13, n_tok * N_FF, 12);
  dev.matmul_slot(l.down, 12, n_tok, N_FF, N_EMBD, 14);
  dev.add_slot(10, 14, n_tok * N_EMBD, 10);
  dev.add_bias_slot(10, n_tok, N_EMBD, l.bias.data());
  dev.rope_slot(10, n_tok, N_HEAD, HEAD_DIM, HEAD_DIM, false, tables.data());
  dev.rms_norm_slot(10, n_tok, N_EMBD, HEAD_DIM, nullptr, EPS, 10);
  dev.matmul_slot(l.kv, 10, n_tok, N_EMBD, N_HEAD_KV * HEAD_DIM, 15);
  result r;
  r.cells.resize(static_cast<size_t>(n_tok * cell_bytes()));
  dev.kv_quantize_slot(15, 15, n_tok, N_HEAD_KV, HEAD_DIM, r.cells.data());
  r.x.resize(static_cast<size_t>(n_tok * N_EMBD));
  dev.slot_read(10, r.x.data(), n_tok * N_EMBD);
  return r;
}

std::vector<float> rope_tables(int64_t n_tok, uint64_t seed) {
  return normal_values(n_tok * HEAD_DIM, seed, 1.0f);  // (cos, sin) pairs per row: any values do
}

void check_same(const result& a, const result& b) {
  REQUIRE(a.x.size() == b.x.size());
  CHECK(std::memcmp(a.x.data(), b.x.data(), a.x.size() * sizeof(float)) == 0);
  REQUIRE(a.cells.size() == b.cells.size());
  CHECK(std::memcmp(a.cells.data(), b.cells.data(), a.cells.size()) == 0);
}

}  // namespace

TEST_CASE("gpu slots: a layer's chain of slot ops leaves the pointer ops' bytes (1, 5 and 12 tokens)") {
  kernels::gpu::device& dev = test::gpu_test_device();
  const layer l = make_layer(dev);
  for (int64_t n_tok : {1, 5, 12}) {
    CAPTURE(n_tok);
    const std::vector<float> x0 = normal_values(n_tok * N_EMBD, 100 + static_cast<uint64_t>(n_tok), 3.0f);
    const std::vector<float> tables = rope_tables(n_tok, 200 + static_cast<uint64_t>(n_tok));
    const result want = run_pointer(dev, l, x0, n_tok, tables);
    check_same(run_slots(dev, l, x0, n_tok, tables), want);
    check_same(run_slots(dev, l, x0, n_tok, tables), want);  // again, on slots that already hold data
  }
}

TEST_CASE("gpu slots: constant inputs changed in place are used with their new values") {
  kernels::gpu::device& dev = test::gpu_test_device();
  layer l = make_layer(dev);
  const int64_t n_tok = 3;
  const std::vector<float> x0 = normal_values(n_tok * N_EMBD, 300, 3.0f);
  std::vector<float> tables = rope_tables(n_tok, 301);
  const result first = run_slots(dev, l, x0, n_tok, tables);
  // The same addresses, new values: a device that kept the first upload would repeat `first`.
  for (float& w : l.norm_w) w = -w * 0.5f;
  for (float& b : l.bias) b += 1.0f;
  const std::vector<float> t2 = rope_tables(n_tok, 302);
  std::copy(t2.begin(), t2.end(), tables.begin());
  const result want = run_pointer(dev, l, x0, n_tok, tables);
  const result got = run_slots(dev, l, x0, n_tok, tables);
  check_same(got, want);
  CHECK(std::memcmp(got.x.data(), first.x.data(), got.x.size() * sizeof(float)) != 0);
}

TEST_CASE("gpu slots: a non-finite activation is an input_error by the next read, and the device recovers") {
  kernels::gpu::device& dev = test::gpu_test_device();
  const layer l = make_layer(dev);
  const int64_t n_tok = 2;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    CAPTURE(bad);
    std::vector<float> x = normal_values(n_tok * N_EMBD, 400, 1.0f);
    x[static_cast<size_t>(N_EMBD + 7)] = bad;
    // matmul rejects it (the pointer form at once; the CUDA slot form by the read that follows).
    CHECK_THROWS_AS(([&] {
                      std::vector<float> y(static_cast<size_t>(n_tok * N_FF));
                      dev.slot_write(20, x.data(), n_tok * N_EMBD);
                      dev.matmul_slot(l.gate, 20, n_tok, N_EMBD, N_FF, 21);
                      dev.slot_read(21, y.data(), n_tok * N_FF);
                    }()),
                    input_error);
    // So does the KV quantization, whose cells come back in the same call.
    CHECK_THROWS_AS(([&] {
                      std::vector<uint8_t> cells(static_cast<size_t>(cell_bytes()));
                      dev.slot_write(22, x.data() + N_EMBD, N_HEAD_KV * HEAD_DIM);
                      dev.kv_quantize_slot(22, 22, 1, N_HEAD_KV, HEAD_DIM, cells.data());
                    }()),
                    input_error);
    // Afterwards a clean chain gives the pointer ops' bytes: no stale error is left behind.
    const std::vector<float> x0 = normal_values(n_tok * N_EMBD, 401, 3.0f);
    const std::vector<float> tables = rope_tables(n_tok, 402);
    check_same(run_slots(dev, l, x0, n_tok, tables), run_pointer(dev, l, x0, n_tok, tables));
  }
}

TEST_CASE("gpu slots: reading more than a slot holds, a negative slot or an in-place matmul is a logic error") {
  kernels::gpu::device& dev = test::gpu_test_device();
  const layer l = make_layer(dev);
  const std::vector<float> x = normal_values(N_EMBD, 500, 1.0f);
  dev.slot_write(30, x.data(), N_EMBD);
  std::vector<float> y(static_cast<size_t>(2 * N_EMBD));
  CHECK_THROWS_AS(dev.slot_read(30, y.data(), 2 * N_EMBD), std::logic_error);
  CHECK_THROWS_AS(dev.slot_write(-1, x.data(), N_EMBD), std::logic_error);
  CHECK_THROWS_AS(dev.matmul_slot(l.gate, 30, 1, N_EMBD, N_FF, 30), std::logic_error);
  CHECK_THROWS_AS(dev.matmul_slot(l.gate, 31, 1, N_EMBD, N_FF, 32), std::logic_error);  // slot 31 holds nothing
  dev.slot_read(30, y.data(), N_EMBD);  // what it holds still reads back
  CHECK(std::memcmp(y.data(), x.data(), N_EMBD * sizeof(float)) == 0);
}
