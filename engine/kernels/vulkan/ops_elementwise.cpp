// The element-wise ops of vk_device: rms_norm, swiglu, add, add_bias, rope, kv_quantize and the
// activations of gemma and gpt-oss (shaders/activation.comp). Each
// copies its inputs into scratch buffers, runs its shader (shaders/<op>.comp) and copies the result
// out, so `out` may alias an input. The shaders loop over their work (grid-stride), so one dispatch
// of at most maxComputeWorkGroupCount groups covers any size.
//
// Inputs that kernels/ref rejects are rejected here with the same kind of error before anything
// runs on the device: non-finite values where the reference decomposes floats (rms_norm's x,
// kv_quantize's k and v), bad shapes, eps <= 0.
#include <cstring>
#include <string>

#include "kernels/vulkan/vk_internal.h"
#include "util/error.h"

namespace detaudit::kernels::vulkan {
namespace {

constexpr int64_t MAX_ELEMS = int64_t(1) << 31;  // indices in the shaders are uint32

// Element count limit of one call (32-bit shader indices).
uint32_t to_u32(int64_t n, const char* op) {
  if (n < 0 || n >= MAX_ELEMS)
    throw input_error(std::string("vulkan ") + op + ": size " + std::to_string(n) + " out of range [0, 2^31)");
  return static_cast<uint32_t>(n);
}

void check_finite(const float* x, int64_t n, const char* op) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, x + i, 4);
    if ((b & 0x7f800000u) == 0x7f800000u)
      throw input_error(std::string("vulkan ") + op + ": non-finite value " + std::to_string(x[i]) + " at index " +
                        std::to_string(i) + " (expected a finite float)");
  }
}

uint32_t group_count(uint64_t items, uint32_t per_group, uint32_t max_groups) {
  const uint64_t g = (items + per_group - 1) / per_group;
  return static_cast<uint32_t>(g < max_groups ? g : max_groups);
}

struct push_n {
  uint32_t n;
};

struct push_act {
  uint32_t n;
  uint32_t kind;  // gpu::act
  float p0, p1;   // gpu::act_kernel_params
};

struct push_rms_norm {
  uint32_t n_seg;
  uint32_t group;
  uint32_t has_w;
  float eps;
  float inv_n;
};

struct push_add_bias {
  uint32_t n;
  uint32_t cols;
};

struct push_rope {
  uint32_t n_pairs;
  uint32_t n_head;
  uint32_t head_dim;
  uint32_t half_rot;
  uint32_t neox;
};

struct push_kv {
  uint32_t n_blocks;
  uint32_t n_head_kv;
  uint32_t head_dim;
  uint32_t nb;
};

// out = shaders/<name>.comp of a and b, element-wise over n floats (swiglu, add).
void binary_op(vk_device& dev, const char* name, const float* a, const float* b, int64_t n, float* out) {
  const uint32_t n32 = to_u32(n, name);
  if (n32 == 0) return;
  const uint64_t bytes = uint64_t(n32) * 4;
  buffer& ba = dev.scratch(0, bytes);
  buffer& bb = dev.scratch(1, bytes);
  buffer& bo = dev.scratch(2, bytes);
  std::memcpy(ba.mapped, a, bytes);
  std::memcpy(bb.mapped, b, bytes);
  push_n pc{n32};
  dev.dispatch(name, {&ba, &bb, &bo}, &pc, sizeof pc, group_count(n32, 256, dev.max_groups(0)));
  std::memcpy(out, bo.mapped, bytes);
}

}  // namespace

void vk_device::rms_norm(const float* x, int64_t rows, int64_t cols, int64_t group, const float* w, float eps,
                         float* out) {
  if (group < 1 || cols < 0 || rows < 0 || cols % group != 0)
    throw input_error("vulkan rms_norm: group " + std::to_string(group) + " does not divide cols " +
                      std::to_string(cols));
  if (!(eps > 0.0f)) throw input_error("vulkan rms_norm: eps " + std::to_string(eps) + " is not > 0");
  const uint32_t n = to_u32(rows * cols, "rms_norm");
  if (n == 0) return;
  check_finite(x, n, "rms_norm");
  const uint64_t bytes = uint64_t(n) * 4;
  buffer& bx = scratch(0, bytes);
  buffer& bw = scratch(1, static_cast<uint64_t>(group) * 4);
  buffer& bo = scratch(2, bytes);
  std::memcpy(bx.mapped, x, bytes);
  if (w) std::memcpy(bw.mapped, w, static_cast<size_t>(group) * 4);
  push_rms_norm pc{n / static_cast<uint32_t>(group), static_cast<uint32_t>(group), w ? 1u : 0u, eps,
                   static_cast<float>(1.0 / static_cast<double>(group))};
  dispatch("rms_norm", {&bx, &bw, &bo}, &pc, sizeof pc, group_count(pc.n_seg, 1, max_groups(0)));
  std::memcpy(out, bo.mapped, bytes);
}

void vk_device::swiglu(const float* gate, const float* up, int64_t n, float* out) {
  binary_op(*this, "swiglu", gate, up, n, out);
}

void vk_device::add(const float* a, const float* b, int64_t n, float* out) { binary_op(*this, "add", a, b, n, out); }

void vk_device::activation(gpu::act k, const float* a, const float* b, int64_t n, const gpu::act_params& p,
                           float* out) {
  push_act pc{to_u32(n, gpu::act_name(k)), static_cast<uint32_t>(k), 0.0f, 0.0f};
  gpu::act_kernel_params(k, p, &pc.p0, &pc.p1);  // a cap softcap_f32_ref refuses is refused here
  if (pc.n == 0) return;
  const uint64_t bytes = uint64_t(pc.n) * 4;
  buffer& ba = scratch(0, bytes);
  buffer& bb = scratch(1, gpu::act_binary(k) ? bytes : 4);
  buffer& bo = scratch(2, bytes);
  std::memcpy(ba.mapped, a, bytes);
  if (gpu::act_binary(k)) std::memcpy(bb.mapped, b, bytes);
  dispatch("activation", {&ba, &bb, &bo}, &pc, sizeof pc, group_count(pc.n, 256, max_groups(0)));
  std::memcpy(out, bo.mapped, bytes);
}

void vk_device::add_bias(float* x, int64_t rows, int64_t cols, const float* b) {
  if (rows < 0 || cols < 0) throw input_error("vulkan add_bias: negative shape");
  const uint32_t n = to_u32(rows * cols, "add_bias");
  if (n == 0) return;
  const uint64_t bytes = uint64_t(n) * 4;
  buffer& bx = scratch(0, bytes);
  buffer& bb = scratch(1, static_cast<uint64_t>(cols) * 4);
  std::memcpy(bx.mapped, x, bytes);
  std::memcpy(bb.mapped, b, static_cast<size_t>(cols) * 4);
  push_add_bias pc{n, static_cast<uint32_t>(cols)};
  dispatch("add_bias", {&bx, &bb}, &pc, sizeof pc, group_count(n, 256, max_groups(0)));
  std::memcpy(x, bx.mapped, bytes);
}

void vk_device::rope(float* x, int64_t rows, int64_t n_head, int64_t head_dim, int64_t n_rot, bool neox,
                     const float* tables) {
  if (n_rot < 0 || n_rot % 2 != 0 || n_rot > head_dim)
    throw input_error("vulkan rope: n_rot " + std::to_string(n_rot) + " must be even and <= head_dim " +
                      std::to_string(head_dim));
  if (rows < 0 || n_head < 0) throw input_error("vulkan rope: negative shape");
  const uint32_t n = to_u32(rows * n_head * head_dim, "rope");
  const uint32_t n_pairs = to_u32(rows * n_head * (n_rot / 2), "rope");
  if (n_pairs == 0) return;
  const uint64_t bytes = uint64_t(n) * 4;
  const uint64_t table_bytes = static_cast<uint64_t>(rows * n_rot) * 4;
  buffer& bx = scratch(0, bytes);
  buffer& bt = scratch(1, table_bytes);
  std::memcpy(bx.mapped, x, bytes);
  std::memcpy(bt.mapped, tables, table_bytes);
  push_rope pc{n_pairs, static_cast<uint32_t>(n_head), static_cast<uint32_t>(head_dim),
               static_cast<uint32_t>(n_rot / 2), neox ? 1u : 0u};
  dispatch("rope", {&bx, &bt}, &pc, sizeof pc, group_count(n_pairs, 256, max_groups(0)));
  std::memcpy(x, bx.mapped, bytes);
}

void vk_device::kv_quantize(const float* k, const float* v, int64_t rows, int64_t n_head_kv, int64_t head_dim,
                            uint8_t* cells) {
  if (rows < 0 || n_head_kv < 0 || head_dim < 1) throw input_error("vulkan kv_quantize: bad shape");
  const int64_t nb = (head_dim + 31) / 32;
  const uint32_t n = to_u32(rows * n_head_kv * head_dim, "kv_quantize");
  const uint32_t n_blocks = to_u32(rows * 2 * n_head_kv * nb, "kv_quantize");
  if (n_blocks == 0) return;
  check_finite(k, n, "kv_quantize");
  check_finite(v, n, "kv_quantize");
  const uint64_t bytes = uint64_t(n) * 4;
  const uint64_t cell_bytes = static_cast<uint64_t>(2 * n_head_kv * nb * (32 * 2 + 4));
  const uint64_t out_bytes = static_cast<uint64_t>(rows) * cell_bytes;
  to_u32(static_cast<int64_t>(out_bytes / 4), "kv_quantize");
  buffer& bk = scratch(0, bytes);
  buffer& bv = scratch(1, bytes);
  buffer& bc = scratch(2, out_bytes);
  std::memcpy(bk.mapped, k, bytes);
  std::memcpy(bv.mapped, v, bytes);
  push_kv pc{n_blocks, static_cast<uint32_t>(n_head_kv), static_cast<uint32_t>(head_dim), static_cast<uint32_t>(nb)};
  dispatch("kv_quantize", {&bk, &bv, &bc}, &pc, sizeof pc, group_count(n_blocks, 64, max_groups(0)));
  std::memcpy(cells, bc.mapped, out_bytes);
}

}  // namespace detaudit::kernels::vulkan
