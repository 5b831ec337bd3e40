// The compute pipeline of one embedded shader (vk_device::pipeline), shared by device.cpp (which
// owns and destroys them) and pipeline.cpp (which creates them).
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>

#include "kernels/vulkan/vk_internal.h"

namespace detaudit::kernels::vulkan {

// Push constants of every pipeline: one range of this many bytes at offset 0, compute stage.
constexpr uint32_t PUSH_BYTES = 128;
// The most storage buffers one shader may bind (set 0, bindings 0 .. n - 1).
constexpr uint32_t MAX_BINDINGS = 16;

struct vk_device::pipeline {
  VkDevice dev = VK_NULL_HANDLE;
  uint32_t n_bindings = 0;
  VkShaderModule module = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline handle = VK_NULL_HANDLE;

  pipeline() = default;
  pipeline(const pipeline&) = delete;
  pipeline& operator=(const pipeline&) = delete;
  ~pipeline();
};

// Throws std::runtime_error naming `what` and the VkResult unless r is VK_SUCCESS.
void vk_check(VkResult r, const char* what);

}  // namespace detaudit::kernels::vulkan
