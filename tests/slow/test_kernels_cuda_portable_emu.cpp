// The CUDA kernels themselves (kernels/cuda/kernels_*.cu), compiled as C++ and run on host
// threads, compared with kernels/ref by memcmp over every case of the op table (tests/op_cases.h)
// but those sized for a GPU (millions of threads): checks their thread mapping, indexing, shared
// memory reductions and barriers on machines without a GPU. A launch runs blockDim std::threads
// (kept from launch to launch) sharing one std::barrier (__syncthreads), which step through the
// blocks one after another, so __shared__ arrays become function statics. Pointers are host memory.
// Non-goals: warp-level behaviour or timing (the kernels use neither), device memory.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <bit>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "gguf/quants.h"
#include "kernels/cpu/cpu.h"
#include "kernels/gpu/gpu.h"
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

// The threads of the emulated thread blocks, started once and kept for every launch: run(n, job)
// has threads 0 .. n-1 each call job(t) concurrently and returns when all have.
class thread_pool {
 public:
  ~thread_pool() {
    stop_ = true;
    for (auto& g : go_) g->release();
    for (std::thread& t : threads_) t.join();
  }
  void run(unsigned n, std::function<void(unsigned)> job) {
    while (threads_.size() < n) {
      go_.push_back(std::make_unique<std::binary_semaphore>(0));
      threads_.emplace_back([this, t = static_cast<unsigned>(threads_.size())] { work(t); });
    }
    job_ = std::move(job);
    remaining_ = n;
    for (unsigned t = 0; t < n; ++t) go_[t]->release();
    done_.acquire();
  }

 private:
  void work(unsigned t) {
    for (;;) {
      go_[t]->acquire();
      if (stop_) return;
      job_(t);
      if (remaining_.fetch_sub(1) == 1) done_.release();
    }
  }
  std::vector<std::unique_ptr<std::binary_semaphore>> go_;
  std::vector<std::thread> threads_;
  std::function<void(unsigned)> job_;
  std::atomic<unsigned> remaining_{0};
  std::binary_semaphore done_{0};
  bool stop_ = false;
};

inline thread_pool& pool() {
  static thread_pool p;
  return p;
}

// kernel<<<grid, block>>>(args...): every block in turn, its threads concurrently: blockDim
// threads step through the blocks together, and a barrier ends each block, so that no thread
// starts the next (and touches its __shared__ arrays) before all have left this one.
template <typename K>
auto launch(K kernel, dim3 grid, dim3 block) {
  return [=](auto... args) {
    gridDim = grid;
    blockDim = block;
    std::barrier<> bar(static_cast<std::ptrdiff_t>(block.x));
    block_barrier = &bar;
    pool().run(block.x, [&](unsigned t) {
      threadIdx = dim3(t);
      for (unsigned by = 0; by < grid.y; ++by) {
        for (unsigned bx = 0; bx < grid.x; ++bx) {
          blockIdx = dim3(bx, by);
          kernel(args...);
          bar.arrive_and_wait();
        }
      }
    });
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
#define launch_activation emu_launch_activation
#define launch_add_bias emu_launch_add_bias
#define launch_rope emu_launch_rope
#define launch_kv_quantize emu_launch_kv_quantize
#define launch_attention emu_launch_attention
#define launch_find_nonfinite emu_launch_find_nonfinite

#include "kernels/cuda/kernels_attention.cu"
#include "kernels/cuda/kernels_elementwise.cu"
#include "kernels/cuda/kernels_matmul.cu"

#undef __global__
#undef __device__
#undef __shared__
#undef __syncthreads

#include "op_cases.h"
#include "op_table_driver.h"
#include "test_util.h"

using namespace detaudit;
namespace kc = detaudit::kernels::cuda;
using test::op_case;
using test::op_kind;

namespace {

// The activation blocks of a matmul and its pack buffer (the int8 path's hi / lo bytes).
struct matmul_scratch {
  std::vector<int16_t> q;
  std::vector<uint32_t> pack;
};

// Case c through the emulated kernels (int8: matmul with a pack buffer, the dp4a path of the
// integer block types), into a guarded buffer.
std::vector<float> emu_run(const op_case& c, const test::op_inputs& in, bool int8, matmul_scratch& m) {
  std::vector<float> out = test::output_buffer(c, in);
  float* y = out.data() + test::GUARD;
  switch (c.op) {
    case op_kind::matmul: {
      const int64_t nb = (c.n_in + 31) / 32;
      std::vector<int32_t> bounds(static_cast<size_t>(c.n_out));
      kernels::cpu::weight_row_bounds(c.type, in.w.data(), c.n_in, 0, c.n_out, bounds.data());
      m.q.assign(static_cast<size_t>(c.n_tok * nb * 32), 0);
      std::vector<int32_t> ex(static_cast<size_t>(c.n_tok * nb)), mx(static_cast<size_t>(c.n_tok));
      kc::emu_launch_quantize_rows(in.x.data(), c.n_tok, c.n_in, m.q.data(), ex.data(), mx.data());
      m.pack.assign(int8 ? static_cast<size_t>(c.n_tok * nb * 16) : 0, 0xdeadbeefu);
      kc::emu_launch_matmul(static_cast<int32_t>(c.type), in.w.data(), gguf::dtype_row_bytes(c.type, c.n_in), bounds.data(),
                            c.n_in, c.n_out, m.q.data(), ex.data(), mx.data(), c.n_tok, int8 ? m.pack.data() : nullptr, y);
      break;
    }
    case op_kind::rms_norm:
      kc::emu_launch_rms_norm(in.x.data(), c.rows, c.cols, c.group, c.weighted ? in.y.data() : nullptr, c.eps,
                              static_cast<float>(1.0 / static_cast<double>(c.group)), y);
      break;
    case op_kind::swiglu: kc::emu_launch_swiglu(in.x.data(), in.y.data(), c.cols, y); break;
    case op_kind::add: kc::emu_launch_add(in.x.data(), in.y.data(), c.cols, y); break;
    case op_kind::add_bias: kc::emu_launch_add_bias(y, c.rows, c.cols, in.y.data()); break;
    case op_kind::rope: kc::emu_launch_rope(y, c.rows, c.n_head, c.head_dim, c.n_rot, c.neox, in.tables.data()); break;
    case op_kind::kv_quantize:
      kc::emu_launch_kv_quantize(in.x.data(), in.y.data(), c.rows, c.n_head_kv, c.head_dim, reinterpret_cast<uint8_t*>(y));
      break;
    case op_kind::geglu: case op_kind::swiglu_oai: case op_kind::softcap: case op_kind::scale: {
      const kernels::gpu::act k = test::gpu_act(c);
      const kernels::gpu::act_params p = test::gpu_act_params(c);
      float p0, p1;
      kernels::gpu::act_kernel_params(k, p, &p0, &p1);
      kc::emu_launch_activation(static_cast<int>(k), in.x.data(), kernels::gpu::act_binary(k) ? in.y.data() : nullptr,
                                c.cols, p0, p1, y);
      break;
    }
    case op_kind::attention: {
      std::vector<int32_t> scratch(static_cast<size_t>(static_cast<int64_t>(c.n_kv.size()) * c.n_head * c.n_cells));
      const kernels::gpu::attention_extras x = test::gpu_attention_extras(c);
      const float inv_cap = kernels::gpu::attention_extras_check(x, c.n_head);
      kc::emu_launch_attention(in.q.data(), static_cast<int64_t>(c.n_kv.size()), c.n_kv.data(), c.n_head, c.n_head_kv,
                               c.head_dim, in.cells.data(), c.n_cells, c.kq_scale, x.softcap, inv_cap, x.sinks,
                               scratch.data(), y);
      break;
    }
  }
  return out;
}

// The emulated kernels as backends of the op table (op_table_driver.h): every op with plain
// products, and matmul of the integer block types with a pack buffer (the dp4a path), whose
// buffer must then hold every activation block's hi and lo bytes.
[[maybe_unused]] const bool emu_registered = [] {
  test::op_backend plain;
  plain.name = "the CUDA kernels on host threads";
  plain.ops = {op_kind::matmul,    op_kind::rms_norm,    op_kind::swiglu, op_kind::add,
               op_kind::add_bias,  op_kind::rope,        op_kind::kv_quantize, op_kind::attention,
               op_kind::geglu,     op_kind::swiglu_oai,  op_kind::softcap,     op_kind::scale};
  plain.skips = test::GPU_SKIPS | test::skips_gpu_scale;
  plain.run = [](const op_case& c, const test::op_inputs& in) {
    matmul_scratch m;
    return emu_run(c, in, false, m);
  };
  test::op_backend int8;
  int8.name = "the CUDA kernels on host threads, int8 path";
  int8.ops = {op_kind::matmul};
  int8.skips = plain.skips;
  int8.leaves_out = [](const op_case& c) -> std::string { return test::is_float_type(c.type) ? "f32/f16/bf16 rows: no int8 path" : ""; };
  int8.run = [](const op_case& c, const test::op_inputs& in) {
    matmul_scratch m;
    std::vector<float> out = emu_run(c, in, true, m);
    bool packed = true;
    for (size_t i = 0; i < m.q.size(); ++i) {
      const uint32_t hi = m.pack[i / 32 * 16 + i % 32 / 4] >> (8 * (i % 4)) & 0xffu;
      const uint32_t lo = m.pack[i / 32 * 16 + 8 + i % 32 / 4] >> (8 * (i % 4)) & 0xffu;
      packed = packed && static_cast<int32_t>(static_cast<int8_t>(hi)) * 256 + static_cast<int32_t>(lo) == m.q[i];
    }
    CHECK_MESSAGE(packed, "the pack buffer does not hold the activation blocks' hi and lo bytes");
    return out;
  };
  return test::op_backends_add({std::move(plain), std::move(int8)});
}();

}  // namespace

DETAUDIT_OP_TABLE_TESTS(" (CUDA kernels emulated)")

TEST_CASE("cuda portable emu: find_nonfinite flags NaN and infinities anywhere and nothing else") {
  // Finite extremes (largest normal, smallest subnormal, negative zero) leave the flag alone; one
  // NaN, +inf or -inf at the first, a middle or the last index of a grid-stride loop sets it.
  const int64_t n = 256 * 3 + 17;  // several thread blocks and a partial one
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i % 7) - 3.0f;
  x[5] = std::numeric_limits<float>::max();
  x[6] = -std::numeric_limits<float>::denorm_min();
  x[7] = -0.0f;
  int32_t flag = 0;
  kc::emu_launch_find_nonfinite(x.data(), n, &flag);
  CHECK(flag == 0);
  kc::emu_launch_find_nonfinite(x.data(), 0, &flag);  // nothing to check
  CHECK(flag == 0);
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  for (float b : bad) {
    for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
      CAPTURE(b);
      CAPTURE(at);
      std::vector<float> y = x;
      y[static_cast<size_t>(at)] = b;
      flag = 0;
      kc::emu_launch_find_nonfinite(y.data(), n, &flag);
      CHECK(flag == 1);
      flag = 0;  // a bad value past n is not read
      kc::emu_launch_find_nonfinite(y.data(), at, &flag);
      CHECK(flag == 0);
    }
  }
}
