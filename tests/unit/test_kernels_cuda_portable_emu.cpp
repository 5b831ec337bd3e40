// The CUDA kernels themselves (kernels/cuda/kernels_*.cu), compiled as C++ and run on host
// threads, compared with kernels/ref by memcmp: checks their thread mapping, indexing, shared
// memory reductions and barriers on machines without a GPU. Each thread block runs as blockDim
// std::threads sharing one std::barrier (__syncthreads); blocks run one after another, so
// __shared__ arrays become function statics. Pointers are host memory.
// Non-goals: warp-level behaviour or timing (the kernels use neither), device memory.
#include <doctest/doctest.h>

#include <barrier>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gguf/quants.h"
#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"
#include "numerics/exact.h"

namespace detaudit::test::cuda_emu {

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline std::barrier<>* block_barrier = nullptr;

inline void syncthreads() { block_barrier->arrive_and_wait(); }

// kernel<<<grid, block>>>(args...): every block in turn, its threads concurrently.
template <typename K>
auto launch(K kernel, dim3 grid, dim3 block) {
  return [=](auto... args) {
    gridDim = grid;
    blockDim = block;
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        std::barrier<> bar(static_cast<std::ptrdiff_t>(block.x));
        block_barrier = &bar;
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < block.x; ++t) {
          threads.emplace_back([=] {
            threadIdx = dim3(t);
            blockIdx = dim3(bx, by);
            kernel(args...);
          });
        }
        for (std::thread& th : threads) th.join();
      }
    }
  };
}

}  // namespace detaudit::test::cuda_emu

// The kernels' CUDA vocabulary, mapped onto the emulation; the launchers renamed so that they
// never stand in for the real ones of a CUDA build.
using detaudit::test::cuda_emu::blockDim;
using detaudit::test::cuda_emu::blockIdx;
using detaudit::test::cuda_emu::dim3;
using detaudit::test::cuda_emu::gridDim;
using detaudit::test::cuda_emu::threadIdx;
#define __global__
#define __device__
#define __shared__ static
#define __syncthreads detaudit::test::cuda_emu::syncthreads
#define DETAUDIT_LAUNCH(kernel, grid, block) detaudit::test::cuda_emu::launch(kernel, dim3(grid), dim3(block))
#define launch_quantize_rows emu_launch_quantize_rows
#define launch_matmul emu_launch_matmul
#define launch_rms_norm emu_launch_rms_norm
#define launch_swiglu emu_launch_swiglu
#define launch_add emu_launch_add
#define launch_add_bias emu_launch_add_bias
#define launch_rope emu_launch_rope
#define launch_kv_quantize emu_launch_kv_quantize
#define launch_attention emu_launch_attention

#include "kernels/cuda/kernels_attention.cu"
#include "kernels/cuda/kernels_elementwise.cu"
#include "kernels/cuda/kernels_matmul.cu"

#undef __global__
#undef __device__
#undef __shared__
#undef __syncthreads

#include "test_util.h"

using namespace detaudit;
namespace kc = detaudit::kernels::cuda;

namespace {

using rng = detaudit::test::test_rng;

// "" when a and b hold the same n floats bit for bit, else the first differing index and values.
std::string first_mismatch(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(&a[i], &b[i], 4) != 0)
      return "index " + std::to_string(i) + ": kernel " + std::to_string(a[i]) + ", ref " + std::to_string(b[i]);
  }
  return "";
}

// Normal values with block scales 2^-spread .. 2^spread.
std::vector<float> values(rng& r, int64_t n, int spread) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t b = 0; b * 32 < n; ++b) {
    const float sc = std::bit_cast<float>(static_cast<uint32_t>(127 + r.range(-spread, spread)) << 23);
    for (int64_t i = b * 32; i < n && i < b * 32 + 32; ++i) x[static_cast<size_t>(i)] = r.normal() * sc;
  }
  return x;
}

}  // namespace

TEST_CASE("cuda portable emu: quantize and matmul kernels give matmul_exact_ref for every weight type") {
  rng r{901};
  for (gguf::dtype t : {gguf::DTYPE_F32, gguf::DTYPE_F16, gguf::DTYPE_BF16, gguf::DTYPE_Q4_0, gguf::DTYPE_Q4_1,
                        gguf::DTYPE_Q5_0, gguf::DTYPE_Q5_1, gguf::DTYPE_Q8_0, gguf::DTYPE_Q2_K, gguf::DTYPE_Q3_K,
                        gguf::DTYPE_Q4_K, gguf::DTYPE_Q5_K, gguf::DTYPE_Q6_K}) {
    const bool float_type = t == gguf::DTYPE_F32 || t == gguf::DTYPE_F16 || t == gguf::DTYPE_BF16;
    const bool wide = t == gguf::DTYPE_Q8_0 || t == gguf::DTYPE_Q4_K || t == gguf::DTYPE_F16;
    for (int64_t n_tok : {int64_t(1), int64_t(3), int64_t(wide ? 130 : 2)}) {
      const int64_t n_in = float_type ? 300 : 512, n_out = 5, nb = (n_in + 31) / 32;
      const uint64_t rb = gguf::dtype_row_bytes(t, n_in);
      std::vector<uint8_t> w(rb * n_out);
      for (int64_t row = 0; row < n_out; ++row) {
        std::vector<float> wf = values(r, n_in, 2);
        if (row == 2) wf.assign(wf.size(), 0.0f);  // a zero row
        gguf::quants_quantize_row(t, wf.data(), w.data() + rb * static_cast<uint64_t>(row), n_in);
      }
      std::vector<float> x = values(r, n_tok * n_in, 30);
      if (n_tok > 1) std::fill(x.begin() + n_in, x.begin() + 2 * n_in, 0.0f);  // a zero token
      std::vector<int32_t> bounds(n_out);
      kernels::cpu::weight_row_bounds(t, w.data(), n_in, 0, n_out, bounds.data());
      std::vector<int16_t> q(static_cast<size_t>(n_tok * nb * 32));
      std::vector<int32_t> ex(static_cast<size_t>(n_tok * nb)), mx(static_cast<size_t>(n_tok));
      std::vector<float> y(static_cast<size_t>(n_tok * n_out), -7.0f), want(y.size(), -8.0f);
      std::vector<numerics::qvec> xs(static_cast<size_t>(n_tok));
      for (int64_t k = 0; k < n_tok; ++k) numerics::quantize_act(x.data() + k * n_in, n_in, xs[static_cast<size_t>(k)]);
      kernels::matmul_exact_ref(xs.data(), n_tok, t, w.data(), n_in, n_out, want.data(), 0, n_out);
      kc::emu_launch_quantize_rows(x.data(), n_tok, n_in, q.data(), ex.data(), mx.data());
      // Without a pack buffer: plain products; with one: the dp4a path for integer block types.
      for (bool int8 : {false, true}) {
        std::vector<uint32_t> pack(int8 ? static_cast<size_t>(n_tok * nb * 16) : 0, 0xdeadbeefu);
        std::fill(y.begin(), y.end(), -7.0f);
        kc::emu_launch_matmul(static_cast<int32_t>(t), w.data(), rb, bounds.data(), n_in, n_out, q.data(), ex.data(),
                              mx.data(), n_tok, int8 ? pack.data() : nullptr, y.data());
        INFO(gguf::dtype_get(t).name << " n_tok " << n_tok << " int8 " << int8);
        REQUIRE(first_mismatch(y.data(), want.data(), y.size()) == "");
        if (!int8 || float_type) continue;
        // The integer types took the int8 path: the buffer holds every block's hi / lo bytes.
        for (int64_t i = 0; i < n_tok * nb; ++i) {
          for (int j = 0; j < 32; ++j) {
            const int32_t a = q[static_cast<size_t>(i * 32 + j)];
            const uint32_t hi = pack[static_cast<size_t>(i * 16 + j / 4)] >> (8 * (j % 4)) & 0xffu;
            const uint32_t lo = pack[static_cast<size_t>(i * 16 + 8 + j / 4)] >> (8 * (j % 4)) & 0xffu;
            REQUIRE(static_cast<int32_t>(static_cast<int8_t>(hi)) * 256 + static_cast<int32_t>(lo) == a);
          }
        }
      }
    }
  }
}

TEST_CASE("cuda portable emu: rms_norm swiglu add add_bias rope kernels give the reference bits") {
  rng r{902};
  const int64_t rows = 3, cols = 600;
  for (int64_t group : {int64_t(300), cols}) {
    std::vector<float> x = values(r, rows * cols, 30), w = values(r, group, 0), out(x.size()), want(x.size());
    std::fill(x.begin() + cols, x.begin() + 2 * cols, 0.0f);  // an all-zero row
    for (bool with_w : {true, false}) {
      kc::emu_launch_rms_norm(x.data(), rows, cols, group, with_w ? w.data() : nullptr, 1e-5f,
                              static_cast<float>(1.0 / static_cast<double>(group)), out.data());
      for (int64_t g = 0; g < rows * cols; g += group)
        kernels::rms_norm_f32_ref(x.data() + g, with_w ? w.data() : nullptr, group, 1e-5f, want.data() + g);
      INFO("rms group " << group << " weight " << with_w);
      REQUIRE(first_mismatch(out.data(), want.data(), out.size()) == "");
    }
  }
  const int64_t n = 3000;
  std::vector<float> a = values(r, n, 4), b = values(r, n, 4), out(n), want(n);
  for (float& v : a) v = v * 8.0f;
  kc::emu_launch_swiglu(a.data(), b.data(), n, out.data());
  kernels::swiglu_f32_ref(a.data(), b.data(), n, want.data());
  CHECK(first_mismatch(out.data(), want.data(), n) == "");
  kc::emu_launch_add(a.data(), b.data(), n, out.data());
  kernels::add_f32_ref(a.data(), b.data(), n, want.data());
  CHECK(first_mismatch(out.data(), want.data(), n) == "");
  out = a;
  kc::emu_launch_add_bias(out.data(), 30, 100, b.data());
  for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] = numerics::flush(a[static_cast<size_t>(i)] + b[static_cast<size_t>(i % 100)]);
  CHECK(first_mismatch(out.data(), want.data(), n) == "");
  for (bool neox : {false, true}) {
    const int64_t n_rows = 4, n_head = 3, head_dim = 64, n_rot = 48;
    std::vector<float> tab(static_cast<size_t>(n_rows * n_rot)), x = values(r, n_rows * n_head * head_dim, 3);
    for (int64_t row = 0; row < n_rows; ++row) kernels::rope_table_row(row * 37, n_rot, 10000.0, 1.0, nullptr, tab.data() + row * n_rot);
    std::vector<float> ref = x;
    for (int64_t row = 0; row < n_rows; ++row)
      kernels::rope_f32_ref(ref.data() + row * n_head * head_dim, n_head, head_dim, n_rot, row * 37, neox, tab.data() + row * n_rot);
    kc::emu_launch_rope(x.data(), n_rows, n_head, head_dim, n_rot, neox, tab.data());
    INFO("rope neox " << neox);
    CHECK(first_mismatch(x.data(), ref.data(), x.size()) == "");
  }
}

TEST_CASE("cuda portable emu: kv_quantize and attention kernels give the cells and attention_exact_ref") {
  rng r{903};
  for (int64_t head_dim : {64, 40, 128}) {
    const int64_t n_kv_head = 2, n_head = 6, n_cells = 150, nb = (head_dim + 31) / 32, cell_bytes = 2 * n_kv_head * nb * 68;
    std::vector<float> k = values(r, n_cells * n_kv_head * head_dim, 4), v = values(r, n_cells * n_kv_head * head_dim, 4);
    std::vector<uint8_t> cells(static_cast<size_t>(n_cells * cell_bytes), 0xcd), want_cells(cells.size(), 0xcd);
    kc::emu_launch_kv_quantize(k.data(), v.data(), n_cells, n_kv_head, head_dim, cells.data());
    for (int64_t p = 0; p < n_cells; ++p) {
      for (int64_t kind = 0; kind < 2; ++kind) {
        for (int64_t h = 0; h < n_kv_head; ++h) {
          numerics::qvec qv;
          numerics::quantize_act((kind ? v : k).data() + (p * n_kv_head + h) * head_dim, head_dim, qv);
          uint8_t* cell = want_cells.data() + p * cell_bytes;
          std::memcpy(cell + (kind * n_kv_head + h) * nb * 64, qv.q.data(), static_cast<size_t>(nb * 64));
          std::memcpy(cell + 2 * n_kv_head * nb * 64 + (kind * n_kv_head + h) * nb * 4, qv.exp.data(), static_cast<size_t>(nb * 4));
        }
      }
    }
    INFO("head_dim " << head_dim);
    REQUIRE(cells == want_cells);
    const std::vector<int64_t> n_kv = {150, 0, 1, 77};
    const int64_t n_q = 4;
    std::vector<float> q = values(r, n_q * n_head * head_dim, 4), out(q.size(), -3.0f), want(q.size(), -4.0f);
    std::vector<int32_t> scratch(static_cast<size_t>(n_q * n_head * n_cells));
    const float kq = kernels::attention_kq_scale(head_dim);
    kc::emu_launch_attention(q.data(), n_q, n_kv.data(), n_head, n_kv_head, head_dim, cells.data(), n_cells, kq,
                             scratch.data(), out.data());
    for (int64_t row = 0; row < n_q; ++row) {
      for (int64_t h = 0; h < n_head; ++h) {
        const int64_t kvh = h / (n_head / n_kv_head);
        kernels::kv_head_view kv, vv;
        kv.q = reinterpret_cast<const int16_t*>(cells.data()) + kvh * nb * 32;
        vv.q = kv.q + n_kv_head * nb * 32;
        kv.exp = reinterpret_cast<const int32_t*>(cells.data() + 2 * n_kv_head * nb * 64) + kvh * nb;
        vv.exp = kv.exp + n_kv_head * nb;
        kv.q_stride = vv.q_stride = cell_bytes / 2;
        kv.exp_stride = vv.exp_stride = cell_bytes / 4;
        const int64_t off = (row * n_head + h) * head_dim;
        kernels::attention_exact_ref(q.data() + off, head_dim, kv, vv, n_kv[static_cast<size_t>(row)], kq, want.data() + off);
      }
    }
    REQUIRE(first_mismatch(out.data(), want.data(), out.size()) == "");
  }
}
