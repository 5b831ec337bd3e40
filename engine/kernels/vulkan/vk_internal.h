// The Vulkan backend's host side, shared by its files: device.cpp (instance, device selection,
// capability checks), pipeline.cpp (the embedded SPIR-V, one compute pipeline per shader),
// dispatch.cpp (buffers, synchronous dispatch), and one file per group of ops (ops_elementwise.cpp,
// ops_matmul.cpp, ops_attention.cpp) implementing gpu::device.
//
// Goals: the smallest host layer that runs one compute shader over host-visible buffers and waits
// for it; every op is then "copy inputs into scratch buffers, dispatch, copy the result out".
// Non-goals: overlapping transfers with compute, device-local memory, multiple queues.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/gpu/gpu.h"
#include "kernels/vulkan/vulkan.h"

namespace detaudit::kernels::vulkan {

// The SPIR-V of shaders/<name>.comp, compiled by glslc at build time and embedded (generated file).
struct shader_blob {
  const char* name;
  const uint32_t* words;
  uint64_t n_words;
};
extern const shader_blob SHADERS[];
extern const uint64_t N_SHADERS;

// A storage buffer in host-visible, host-coherent memory, mapped for its whole life.
struct buffer {
  VkBuffer handle = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  void* mapped = nullptr;
  uint64_t bytes = 0;
};

// A weight tensor on the device: its bytes and its per-row exponent bounds
// (kernels::cpu::weight_row_bounds, int32 per row).
struct vk_weight {
  gguf::dtype type{};
  int64_t n_in = 0;
  int64_t n_out = 0;
  uint64_t row_bytes = 0;
  buffer data;
  buffer bounds;
};

class vk_device final : public gpu::device {
 public:
  // Opens physical device `index`; throws input_error if it cannot run exact numerics.
  explicit vk_device(int index);
  ~vk_device() override;
  vk_device(const vk_device&) = delete;
  vk_device& operator=(const vk_device&) = delete;

  const gpu::device_desc& desc() const override { return desc_; }

  // ops_matmul.cpp
  gpu::weight_handle upload_weight(gguf::dtype t, const uint8_t* data, int64_t n_in, int64_t n_out) override;
  void matmul(gpu::weight_handle w, const float* x, int64_t n_tok, float* y) override;
  // ops_elementwise.cpp
  void rms_norm(const float* x, int64_t rows, int64_t cols, int64_t group, const float* w, float eps,
                float* out) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void add(const float* a, const float* b, int64_t n, float* out) override;
  void add_bias(float* x, int64_t rows, int64_t cols, const float* b) override;
  void activation(gpu::act k, const float* a, const float* b, int64_t n, const gpu::act_params& p,
                  float* out) override;
  void rope(float* x, int64_t rows, int64_t n_head, int64_t head_dim, int64_t n_rot, bool neox,
            const float* tables) override;
  void kv_quantize(const float* k, const float* v, int64_t rows, int64_t n_head_kv, int64_t head_dim,
                   uint8_t* cells) override;
  // ops_attention.cpp
  void attention(const float* q, int64_t n_q, const int64_t* n_kv, int64_t n_head, int64_t n_head_kv,
                 int64_t head_dim, const uint8_t* cells, int64_t n_cells, float kq_scale,
                 const gpu::attention_extras& x, float* out) override;

  // ---- dispatch.cpp: buffers and dispatch ----

  // A new buffer of `bytes` (at least 4); free with free_buffer (or left to the destructor).
  buffer make_buffer(uint64_t bytes);
  void free_buffer(buffer& b);
  // Scratch buffer `slot` (0 .. SCRATCH_SLOTS - 1) holding at least `bytes`; reused between calls
  // and grown when needed (its contents are then lost).
  static constexpr int SCRATCH_SLOTS = 9;
  buffer& scratch(int slot, uint64_t bytes);
  // Runs shaders/<name>.comp over (gx, gy, gz) workgroups with `bindings` at bindings 0, 1, ... of
  // set 0 (storage buffers, whole range) and `push` (push_bytes <= 128) as push constants, and
  // waits until it has finished. A group count beyond the device's limit is a logic_error (the
  // caller splits the work).
  void dispatch(const char* name, std::initializer_list<const buffer*> bindings, const void* push,
                uint32_t push_bytes, uint32_t gx, uint32_t gy = 1, uint32_t gz = 1);
  // The device's maxComputeWorkGroupCount.
  uint32_t max_groups(int dim) const { return max_groups_[dim]; }

 private:
  struct pipeline;  // pipeline.cpp
  pipeline& get_pipeline(const char* name, uint32_t n_bindings);

  gpu::device_desc desc_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice phys_ = VK_NULL_HANDLE;
  VkDevice dev_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkCommandPool cmd_pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkDescriptorPool desc_pool_ = VK_NULL_HANDLE;
  uint32_t host_coherent_type_ = 0;
  bool dot8_ = false;  // matmul of integer block types through matmul_dot8.comp (desc_.features)
  uint32_t max_groups_[3] = {0, 0, 0};
  std::unordered_map<std::string, std::unique_ptr<pipeline>> pipelines_;
  buffer scratch_[SCRATCH_SLOTS];
  std::vector<vk_weight> weights_;  // index = weight_handle::id
};

}  // namespace detaudit::kernels::vulkan
