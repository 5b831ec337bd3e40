// The Vulkan exact attention: every query row and head of one sequence over its KV cache cells,
// each head's result attention_exact_ref's bytes (docs/precision-contract.md section 11).
//
// quantize_act.comp turns the q heads into int16 blocks, then attention.comp runs its three
// passes (scores; max, weights and their sum; value sums and output), one dispatch each.
// Non-goals: keeping the cache on the device (the cells are copied in per call); more than
// 4 GiB of cells or scores.
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/vulkan/vk_act.h"
#include "kernels/vulkan/vk_internal.h"
#include "numerics/exact.h"
#include "util/error.h"

namespace detaudit::kernels::vulkan {

namespace {

constexpr uint64_t GROUP = 64;  // local_size_x of attention.comp
constexpr uint64_t MAX_BYTES = uint64_t(1) << 32;

enum attention_pass : uint32_t { PASS_SCORES = 0, PASS_SOFTMAX = 1, PASS_ACCUM = 2 };

struct attention_push {
  uint32_t pass, n_head, n_head_kv, head_dim, nb, n_cells;
  float kq_scale;
  uint32_t rh0;
  float softcap, inv_cap;  // softcap > 0: scores capped (gpu::attention_extras)
  uint32_t has_sinks;      // binding 8 holds n_head sinks
};

uint32_t u32(uint64_t v) { return static_cast<uint32_t>(v); }

void check_shape(int64_t n_q, const int64_t* n_kv, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                 int64_t n_cells) {
  if (n_q < 0 || n_cells < 0 || head_dim < 1 || n_head < 1 || n_head_kv < 1 || n_head % n_head_kv != 0) {
    throw input_error("vulkan attention: bad shape (n_q " + std::to_string(n_q) + ", n_head " +
                      std::to_string(n_head) + ", n_head_kv " + std::to_string(n_head_kv) + ", head_dim " +
                      std::to_string(head_dim) + ", n_cells " + std::to_string(n_cells) + ")");
  }
  for (int64_t r = 0; r < n_q; ++r) {
    if (n_kv[r] < 0 || n_kv[r] > n_cells) {
      throw input_error("vulkan attention: query row " + std::to_string(r) + " attends " +
                        std::to_string(n_kv[r]) + " positions, expected 0 .. " + std::to_string(n_cells));
    }
  }
}

// The three passes of attention.comp over `rows` (row, head) pairs, each split by the device's
// group-count limits; max_kv is the largest n_kv of the call.
void run_passes(vk_device& dev, std::initializer_list<const buffer*> bufs, attention_push p, uint64_t rows,
                uint64_t max_kv) {
  const uint64_t step0 = dev.max_groups(0);
  const uint64_t step1 = dev.max_groups(1);
  const uint64_t kv_chunks = (max_kv + GROUP - 1) / GROUP;
  p.pass = PASS_SCORES;
  for (uint64_t rh0 = 0; rh0 < rows && kv_chunks > 0; rh0 += step1) {
    p.rh0 = u32(rh0);
    dev.dispatch("attention", bufs, &p, sizeof p, u32(kv_chunks), u32(std::min(step1, rows - rh0)));
  }
  p.pass = PASS_SOFTMAX;
  for (uint64_t rh0 = 0; rh0 < rows; rh0 += step0) {
    p.rh0 = u32(rh0);
    dev.dispatch("attention", bufs, &p, sizeof p, u32(std::min(step0, rows - rh0)));
  }
  p.pass = PASS_ACCUM;
  for (uint64_t rh0 = 0; rh0 < rows; rh0 += step1) {
    p.rh0 = u32(rh0);
    dev.dispatch("attention", bufs, &p, sizeof p, u32((p.head_dim + GROUP - 1) / GROUP),
                 u32(std::min(step1, rows - rh0)));
  }
}

}  // namespace

void vk_device::attention(const float* q, int64_t n_q, const int64_t* n_kv, int64_t n_head, int64_t n_head_kv,
                          int64_t head_dim, const uint8_t* cells, int64_t n_cells, float kq_scale,
                          const gpu::attention_extras& x, float* out) {
  check_shape(n_q, n_kv, n_head, n_head_kv, head_dim, n_cells);
  const float inv_cap = gpu::attention_extras_check(x, n_head);
  act_check_finite(q, n_q * n_head * head_dim, "vulkan attention");
  if (n_q == 0) return;
  const uint64_t rows = static_cast<uint64_t>(n_q * n_head);
  const uint64_t hd = static_cast<uint64_t>(head_dim);
  const uint64_t nb = (hd + numerics::QBLOCK - 1) / numerics::QBLOCK;
  const uint64_t nc = static_cast<uint64_t>(n_cells);
  const uint64_t cell_bytes = 2 * static_cast<uint64_t>(n_head_kv) * nb * (numerics::QBLOCK * 2 + 4);
  if (nc * cell_bytes >= MAX_BYTES || rows * nc * 4 >= MAX_BYTES) {
    throw input_error("vulkan attention: " + std::to_string(n_cells) + " cells of " + std::to_string(cell_bytes) +
                      " bytes for " + std::to_string(rows) + " query heads exceed the backend's 4 GiB buffers");
  }
  std::vector<int32_t> nkv32(static_cast<size_t>(n_q));
  int64_t max_kv = 0;
  for (int64_t r = 0; r < n_q; ++r) {
    nkv32[static_cast<size_t>(r)] = static_cast<int32_t>(n_kv[r]);
    max_kv = std::max(max_kv, n_kv[r]);
  }
  buffer& qb = scratch(0, rows * hd * 4);  // q in, out after the last pass
  buffer& qq = scratch(1, rows * nb * numerics::QBLOCK * 4);
  buffer& qe = scratch(2, rows * nb * 4);
  buffer& qm = scratch(3, rows * 4);
  buffer& sum = scratch(4, rows * 8);
  buffer& cb = scratch(5, nc * cell_bytes);
  buffer& kvb = scratch(6, nkv32.size() * 4);
  buffer& sc = scratch(7, rows * nc * 4);
  buffer& sk = scratch(8, x.sinks ? static_cast<uint64_t>(n_head) * 4 : 4);
  if (x.sinks) std::memcpy(sk.mapped, x.sinks, static_cast<size_t>(n_head) * 4);
  std::memcpy(qb.mapped, q, rows * hd * 4);
  if (nc > 0) std::memcpy(cb.mapped, cells, nc * cell_bytes);
  std::memcpy(kvb.mapped, nkv32.data(), nkv32.size() * 4);
  act_quantize_rows(*this, qb, rows, hd, qq, qe, qm);
  attention_push p{PASS_SCORES, u32(n_head), u32(n_head_kv), u32(hd), u32(nb), u32(nc), numerics::flush(kq_scale), 0,
                   x.softcap, inv_cap, x.sinks ? 1u : 0u};
  run_passes(*this, {&cb, &qq, &qe, &qm, &kvb, &sc, &sum, &qb, &sk}, p, rows, static_cast<uint64_t>(max_kv));
  std::memcpy(out, qb.mapped, rows * hd * 4);
}

}  // namespace detaudit::kernels::vulkan
