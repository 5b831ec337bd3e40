// The Vulkan exact matmul: weight upload (bytes plus per-row exponent bounds) and
// y = matmul_exact_ref(quantize_act(x), w) through quantize_act.comp and matmul.comp, or, for the
// integer block types on a device with 4x8-bit integer dot products, quantize_act.comp,
// act_pack8.comp and matmul_dot8.comp (the same bits).
//
// Goals: the bytes of kernels/ref whatever the device; every check that the reference makes by
// throwing (type, row length, non-finite fp16 scales or float weights, non-finite activations)
// is made here on the host before any dispatch, because a shader cannot report it.
// Non-goals: keeping activations on the device between calls; tensors of 4 GiB or more (the
// shaders address the weight bytes with 32-bit offsets).
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/weight_types.h"
#include "kernels/cpu/cpu.h"
#include "kernels/vulkan/vk_act.h"
#include "kernels/vulkan/vk_internal.h"
#include "numerics/exact.h"
#include "numerics/wblock.h"
#include "util/error.h"

namespace detaudit::kernels::vulkan {

namespace {

constexpr uint32_t TOKEN_TILE = 8;      // tokens per matmul invocation (matmul.glsl's TILE)
constexpr uint64_t ROWS_PER_GROUP = 64;  // rows per matmul workgroup (its local size)
constexpr uint64_t MAX_BYTES = uint64_t(1) << 32;

struct quantize_push {
  uint32_t n, nb, row0;
};

struct pack8_push {
  uint32_t n_blocks;
};

struct matmul_push {
  int32_t type;
  uint32_t n_in, nb, row_bytes, n_out, n_tok, row0, tok0;
};

uint32_t u32(uint64_t v) { return static_cast<uint32_t>(v); }

}  // namespace

void act_check_finite(const float* x, int64_t n, const char* who) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, x + i, 4);
    if ((b & 0x7f800000u) == 0x7f800000u) {
      throw input_error(std::string(who) + ": input element " + std::to_string(i) + " is " +
                        std::to_string(x[i]) + ", expected a finite value");
    }
  }
}

void act_quantize_rows(vk_device& dev, const buffer& x, uint64_t rows, uint64_t n, const buffer& q,
                       const buffer& e, const buffer& m) {
  const uint64_t nb = (n + numerics::QBLOCK - 1) / numerics::QBLOCK;
  const uint64_t step = dev.max_groups(0);
  for (uint64_t r0 = 0; r0 < rows; r0 += step) {
    const quantize_push p{u32(n), u32(nb), u32(r0)};
    dev.dispatch("quantize_act", {&x, &q, &e, &m}, &p, sizeof p, u32(std::min(step, rows - r0)));
  }
}

gpu::weight_handle vk_device::upload_weight(gguf::dtype t, const uint8_t* data, int64_t n_in, int64_t n_out) {
  numerics::weight_check_type(t);
  if (!gguf::weight_type_of(t)->gpu)  // gguf/weight_types.h, column gpu: a type the kernels do not decode
    throw input_error(std::string("vulkan upload_weight: ") + gguf::dtype_get(t).name +
                      " weights are not computed on the GPU yet; use --backend cpu");
  if (n_in < 0 || n_out < 0) {
    throw input_error("vulkan upload_weight: negative shape (" + std::to_string(n_in) + ", " +
                      std::to_string(n_out) + ")");
  }
  const uint64_t row_bytes = gguf::dtype_row_bytes(t, n_in);
  const uint64_t bytes = row_bytes * static_cast<uint64_t>(n_out);
  if (bytes + 4 > MAX_BYTES) {
    throw input_error("vulkan upload_weight: a weight tensor of " + std::to_string(bytes) +
                      " bytes; the Vulkan backend takes tensors below 4 GiB");
  }
  std::vector<int32_t> bounds(static_cast<size_t>(n_out));
  cpu::weight_row_bounds(t, data, n_in, 0, n_out, bounds.data());
  vk_weight w;
  w.type = t;
  w.n_in = n_in;
  w.n_out = n_out;
  w.row_bytes = row_bytes;
  w.data = make_buffer(std::max<uint64_t>(4, bytes));
  try {
    w.bounds = make_buffer(std::max<uint64_t>(4, bounds.size() * 4));
    weights_.push_back(w);
  } catch (...) {
    free_buffer(w.data);
    free_buffer(w.bounds);
    throw;
  }
  std::memset(w.data.mapped, 0, w.data.bytes);
  if (bytes > 0) std::memcpy(w.data.mapped, data, bytes);
  if (!bounds.empty()) std::memcpy(w.bounds.mapped, bounds.data(), bounds.size() * 4);
  return gpu::weight_handle{static_cast<int32_t>(weights_.size() - 1)};
}

void vk_device::matmul(gpu::weight_handle h, const float* x, int64_t n_tok, float* y) {
  if (h.id < 0 || static_cast<size_t>(h.id) >= weights_.size()) {
    throw std::logic_error("vulkan matmul: unknown weight handle " + std::to_string(h.id));
  }
  const vk_weight& w = weights_[static_cast<size_t>(h.id)];
  if (n_tok < 0) throw input_error("vulkan matmul: negative token count " + std::to_string(n_tok));
  const uint64_t nt = static_cast<uint64_t>(n_tok);
  const uint64_t n_in = static_cast<uint64_t>(w.n_in);
  const uint64_t n_out = static_cast<uint64_t>(w.n_out);
  act_check_finite(x, n_tok * w.n_in, "vulkan matmul");
  if (nt == 0 || n_out == 0) return;
  if (n_in == 0) {
    std::memset(y, 0, nt * n_out * sizeof(float));
    return;
  }
  const uint64_t nb = (n_in + numerics::QBLOCK - 1) / numerics::QBLOCK;
  buffer& xb = scratch(0, nt * n_in * 4);
  buffer& qb = scratch(1, nt * nb * numerics::QBLOCK * 4);
  buffer& eb = scratch(2, nt * nb * 4);
  buffer& mb = scratch(3, nt * 4);
  buffer& yb = scratch(4, nt * n_out * 4);
  std::memcpy(xb.mapped, x, nt * n_in * 4);
  act_quantize_rows(*this, xb, nt, n_in, qb, eb, mb);
  const bool dot8 = dot8_ && cpu::matmul_fast_type(w.type);
  const buffer* act = &qb;
  const buffer* lo = nullptr;
  const buffer* hs = nullptr;
  if (dot8) {
    buffer& hib = scratch(5, nt * nb * 8 * 4);
    buffer& lob = scratch(6, nt * nb * 8 * 4);
    buffer& hsb = scratch(7, nt * nb * 2 * 4);
    const uint64_t n_groups = (nt * nb + 63) / 64;
    const uint64_t gx = std::min<uint64_t>(n_groups, max_groups(0));
    const pack8_push pp{u32(nt * nb)};
    dispatch("act_pack8", {&qb, &hib, &lob, &hsb}, &pp, sizeof pp, u32(gx), u32((n_groups + gx - 1) / gx));
    act = &hib;
    lo = &lob;
    hs = &hsb;
  }
  const uint64_t row_step = uint64_t(max_groups(0)) * ROWS_PER_GROUP;
  const uint64_t tile_step = max_groups(1);
  const uint64_t n_tiles = (nt + TOKEN_TILE - 1) / TOKEN_TILE;
  for (uint64_t tile0 = 0; tile0 < n_tiles; tile0 += tile_step) {
    for (uint64_t r0 = 0; r0 < n_out; r0 += row_step) {
      const matmul_push p{static_cast<int32_t>(w.type), u32(n_in), u32(nb), u32(w.row_bytes), u32(n_out),
                          u32(nt), u32(r0), u32(tile0 * TOKEN_TILE)};
      const uint32_t gx = u32((std::min(row_step, n_out - r0) + ROWS_PER_GROUP - 1) / ROWS_PER_GROUP);
      const uint32_t gy = u32(std::min(tile_step, n_tiles - tile0));
      if (dot8) dispatch("matmul_dot8", {&w.data, &w.bounds, act, &eb, &mb, &yb, lo, hs}, &p, sizeof p, gx, gy);
      else dispatch("matmul", {&w.data, &w.bounds, act, &eb, &mb, &yb}, &p, sizeof p, gx, gy);
    }
  }
  std::memcpy(y, yb.mapped, nt * n_out * 4);
}

}  // namespace detaudit::kernels::vulkan
