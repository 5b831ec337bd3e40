#include "kernels/gpu/gpu.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "numerics/exact.h"
#include "util/error.h"

#ifdef DETAUDIT_HAVE_VULKAN
#include "kernels/vulkan/vulkan.h"
#endif
#ifdef DETAUDIT_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif

namespace detaudit::kernels::gpu {
namespace {

[[noreturn]] void not_compiled(api a) {
  if (a == api::vulkan)
    throw input_error("this build has no Vulkan backend: configure with -DDETAUDIT_VULKAN=ON");
  throw input_error("this build has no CUDA backend: configure with -DDETAUDIT_CUDA=ON");
}

// A float as %.9g prints it: every float told apart, 1e38 as 1e+38, a subnormal as itself.
std::string float_text(float v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", static_cast<double>(v));
  return b;
}

}  // namespace

const char* api_name(api a) { return a == api::vulkan ? "vulkan" : "cuda"; }

const char* act_name(act k) {
  switch (k) {
    case act::geglu: return "geglu";
    case act::swiglu_oai: return "swiglu_oai";
    case act::softcap: return "softcap";
    case act::scale: return "scale";
  }
  return "?";
}

float attention_extras_check(const attention_extras& x, int64_t n_head) {
  if (x.softcap != 0.0f && !numerics::softcap_cap_ok(x.softcap))
    throw input_error("attention: soft cap " + float_text(x.softcap) +
                      " is not 0 (none) or a positive normal float with a normal reciprocal");
  for (int64_t h = 0; x.sinks && h < n_head; ++h)
    if (!(x.sinks[h] - x.sinks[h] == 0.0f))
      throw input_error("attention: the sink of head " + std::to_string(h) + " (" + float_text(x.sinks[h]) +
                        ") is not finite");
  return x.softcap > 0.0f ? numerics::recip_f32(x.softcap) : 0.0f;
}

void act_kernel_params(act k, const act_params& p, float* p0, float* p1) {
  *p0 = 0.0f;
  *p1 = 0.0f;
  switch (k) {
    case act::geglu: break;
    case act::swiglu_oai:
      *p0 = p.alpha;
      *p1 = p.limit;
      break;
    case act::softcap:
      if (!numerics::softcap_cap_ok(p.cap))  // softcap_f32_ref's refusal, before anything is sent
        throw input_error("softcap: cap " + float_text(p.cap) +
                          " is not a positive normal float with a normal reciprocal");
      *p0 = p.cap;
      *p1 = numerics::recip_f32(p.cap);
      break;
    case act::scale: *p0 = numerics::flush(p.factor); break;
  }
}

bool api_compiled(api a) {
#ifdef DETAUDIT_HAVE_VULKAN
  if (a == api::vulkan) return true;
#endif
#ifdef DETAUDIT_HAVE_CUDA
  if (a == api::cuda) return true;
#endif
  (void)a;
  return false;
}

std::vector<device_desc> list_devices(api a) {
#ifdef DETAUDIT_HAVE_VULKAN
  if (a == api::vulkan) return vulkan::list_devices();
#endif
#ifdef DETAUDIT_HAVE_CUDA
  if (a == api::cuda) return cuda::list_devices();
#endif
  not_compiled(a);
}

std::unique_ptr<device> open_device(api a, int index) {
  if (!api_compiled(a)) not_compiled(a);
  const std::vector<device_desc> devs = list_devices(a);
  if (devs.empty())
    throw input_error(std::string("no ") + (a == api::vulkan ? "Vulkan" : "CUDA") +
                      " device found (`detaudit devices` lists what this machine has)");
  if (index < 0 || index >= static_cast<int>(devs.size())) {
    std::string names;
    for (const device_desc& d : devs) names += (names.empty() ? "" : ", ") + std::to_string(d.index) + ": " + d.name;
    throw input_error("--device " + std::to_string(index) + ": no such " + api_name(a) + " device (" + names + ")");
  }
  const device_desc& d = devs[static_cast<size_t>(index)];
  if (!d.exact_ok)
    throw input_error(std::string(api_name(a)) + " device " + std::to_string(index) + " (" + d.name +
                      ") cannot run --numerics exact: " + d.refusal);
#ifdef DETAUDIT_HAVE_VULKAN
  if (a == api::vulkan) return vulkan::open_device(index);
#endif
#ifdef DETAUDIT_HAVE_CUDA
  if (a == api::cuda) return cuda::open_device(index);
#endif
  not_compiled(a);
}

// ---- the default slots: host memory and the pointer forms ----

std::vector<float>& device::host_slot(int32_t s) {
  if (s < 0) throw std::logic_error("gpu slot " + std::to_string(s) + " is negative");
  if (static_cast<size_t>(s) >= host_slots_.size()) host_slots_.resize(static_cast<size_t>(s) + 1);
  return host_slots_[static_cast<size_t>(s)];
}

namespace {

// The first n floats of a slot that must hold them.
float* held(std::vector<float>& v, int64_t n, int32_t s) {
  if (n < 0 || static_cast<size_t>(n) > v.size())
    throw std::logic_error("gpu slot " + std::to_string(s) + " holds " + std::to_string(v.size()) + " floats, not " +
                           std::to_string(n));
  return v.data();
}

// Slot out, resized to n floats unless it is the same slot as an input (then it must hold them).
float* sized(std::vector<float>& v, int64_t n, int32_t s, bool is_input) {
  if (is_input) return held(v, n, s);
  v.resize(static_cast<size_t>(n));
  return v.data();
}

}  // namespace

void device::slot_write(int32_t s, const float* x, int64_t n) {
  std::vector<float>& v = host_slot(s);
  v.assign(x, x + n);
}

void device::slot_read(int32_t s, float* x, int64_t n) {
  std::vector<float>& v = host_slot(s);
  std::copy(held(v, n, s), held(v, n, s) + n, x);
}

void device::matmul_slot(weight_handle w, int32_t x, int64_t n_tok, int64_t n_in, int64_t n_out, int32_t y) {
  const float* px = held(host_slot(x), n_tok * n_in, x);
  if (y == x) throw std::logic_error("gpu matmul_slot: the output slot is the input slot");
  matmul(w, px, n_tok, sized(host_slot(y), n_tok * n_out, y, false));
}

void device::rms_norm_slot(int32_t x, int64_t rows, int64_t cols, int64_t group, const float* w, float eps,
                           int32_t out) {
  const float* px = held(host_slot(x), rows * cols, x);
  rms_norm(px, rows, cols, group, w, eps, sized(host_slot(out), rows * cols, out, out == x));
}

void device::swiglu_slot(int32_t gate, int32_t up, int64_t n, int32_t out) {
  const float* g = held(host_slot(gate), n, gate);
  const float* u = held(host_slot(up), n, up);
  swiglu(g, u, n, sized(host_slot(out), n, out, out == gate || out == up));
}

void device::add_slot(int32_t a, int32_t b, int64_t n, int32_t out) {
  const float* pa = held(host_slot(a), n, a);
  const float* pb = held(host_slot(b), n, b);
  add(pa, pb, n, sized(host_slot(out), n, out, out == a || out == b));
}

void device::activation_slot(act k, int32_t a, int32_t b, int64_t n, const act_params& p, int32_t out) {
  const float* pa = held(host_slot(a), n, a);
  const float* pb = act_binary(k) ? held(host_slot(b), n, b) : nullptr;
  activation(k, pa, pb, n, p, sized(host_slot(out), n, out, out == a || (act_binary(k) && out == b)));
}

void device::add_bias_slot(int32_t x, int64_t rows, int64_t cols, const float* b) {
  add_bias(held(host_slot(x), rows * cols, x), rows, cols, b);
}

void device::rope_slot(int32_t x, int64_t rows, int64_t n_head, int64_t head_dim, int64_t n_rot, bool neox,
                       const float* tables) {
  rope(held(host_slot(x), rows * n_head * head_dim, x), rows, n_head, head_dim, n_rot, neox, tables);
}

void device::kv_quantize_slot(int32_t k, int32_t v, int64_t rows, int64_t n_head_kv, int64_t head_dim,
                              uint8_t* cells) {
  const int64_t n = rows * n_head_kv * head_dim;
  kv_quantize(held(host_slot(k), n, k), held(host_slot(v), n, v), rows, n_head_kv, head_dim, cells);
}

}  // namespace detaudit::kernels::gpu
