// Host-visible storage buffers and the synchronous dispatch of one compute shader: record,
// submit, wait on the fence, reset. Buffers are host-coherent and stay mapped, so the host writes
// inputs before a dispatch and reads results after it with plain memcpy.
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/vulkan/vk_internal.h"
#include "kernels/vulkan/vk_pipeline.h"

namespace detaudit::kernels::vulkan {
namespace {

// A memory type allowed by `type_bits` with the flags of `preferred`, else any host-visible,
// host-coherent one allowed by type_bits.
uint32_t pick_memory_type(VkPhysicalDevice pd, uint32_t type_bits, uint32_t preferred) {
  if (type_bits & (1u << preferred)) return preferred;
  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  const VkMemoryPropertyFlags need = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  for (uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
    if ((type_bits & (1u << i)) && (mp.memoryTypes[i].propertyFlags & need) == need) return i;
  }
  throw std::runtime_error("vulkan: no host-visible, host-coherent memory type for a storage buffer");
}

// A descriptor set from `pool` with bindings[i] (whole buffer) at binding i.
VkDescriptorSet descriptor_set_write(VkDevice dev, VkDescriptorPool pool, VkDescriptorSetLayout layout,
                                     std::initializer_list<const buffer*> bindings) {
  VkDescriptorSetAllocateInfo dai{};
  dai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
  dai.descriptorPool = pool;
  dai.descriptorSetCount = 1;
  dai.pSetLayouts = &layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  vk_check(vkAllocateDescriptorSets(dev, &dai, &set), "vkAllocateDescriptorSets");
  std::vector<VkDescriptorBufferInfo> infos;
  std::vector<VkWriteDescriptorSet> writes;
  infos.reserve(bindings.size());
  for (const buffer* b : bindings) infos.push_back(VkDescriptorBufferInfo{b->handle, 0, VK_WHOLE_SIZE});
  for (uint32_t i = 0; i < infos.size(); ++i) {
    VkWriteDescriptorSet w{};
    w.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    w.dstSet = set;
    w.dstBinding = i;
    w.descriptorCount = 1;
    w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w.pBufferInfo = &infos[i];
    writes.push_back(w);
  }
  vkUpdateDescriptorSets(dev, static_cast<uint32_t>(writes.size()), writes.data(), 0, nullptr);
  return set;
}

}  // namespace

buffer vk_device::make_buffer(uint64_t bytes) {
  buffer b;
  b.bytes = (bytes < 4 ? 4 : bytes + 3) & ~uint64_t(3);
  VkBufferCreateInfo bci{};
  bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  bci.size = b.bytes;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  vk_check(vkCreateBuffer(dev_, &bci, nullptr, &b.handle), "vkCreateBuffer");
  try {
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(dev_, b.handle, &req);
    VkMemoryAllocateInfo mai{};
    mai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    mai.allocationSize = req.size;
    mai.memoryTypeIndex = pick_memory_type(phys_, req.memoryTypeBits, host_coherent_type_);
    vk_check(vkAllocateMemory(dev_, &mai, nullptr, &b.memory), "vkAllocateMemory");
    vk_check(vkBindBufferMemory(dev_, b.handle, b.memory, 0), "vkBindBufferMemory");
    vk_check(vkMapMemory(dev_, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped), "vkMapMemory");
  } catch (...) {
    free_buffer(b);
    throw;
  }
  return b;
}

void vk_device::free_buffer(buffer& b) {
  if (b.mapped) vkUnmapMemory(dev_, b.memory);
  if (b.handle != VK_NULL_HANDLE) vkDestroyBuffer(dev_, b.handle, nullptr);
  if (b.memory != VK_NULL_HANDLE) vkFreeMemory(dev_, b.memory, nullptr);
  b = buffer{};
}

buffer& vk_device::scratch(int slot, uint64_t bytes) {
  if (slot < 0 || slot >= SCRATCH_SLOTS)
    throw std::logic_error("vulkan: scratch slot " + std::to_string(slot) + " out of range");
  buffer& b = scratch_[slot];
  if (b.bytes >= bytes && b.handle != VK_NULL_HANDLE) return b;
  uint64_t size = 4096;
  while (size < bytes) size *= 2;
  free_buffer(b);
  b = make_buffer(size);
  return b;
}

void vk_device::dispatch(const char* name, std::initializer_list<const buffer*> bindings, const void* push,
                         uint32_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz) {
  if (gx > max_groups_[0] || gy > max_groups_[1] || gz > max_groups_[2])
    throw std::logic_error(std::string("vulkan: dispatch of ") + name + " exceeds maxComputeWorkGroupCount");
  if (push_bytes > PUSH_BYTES) throw std::logic_error(std::string("vulkan: push constants too large for ") + name);
  pipeline& p = get_pipeline(name, static_cast<uint32_t>(bindings.size()));
  if (gx == 0 || gy == 0 || gz == 0) return;

  const VkDescriptorSet set = descriptor_set_write(dev_, desc_pool_, p.set_layout, bindings);
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  vk_check(vkBeginCommandBuffer(cmd_, &bi), "vkBeginCommandBuffer");
  vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.handle);
  vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
  if (push_bytes > 0) vkCmdPushConstants(cmd_, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
  vkCmdDispatch(cmd_, gx, gy, gz);
  VkMemoryBarrier mb{};
  mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0,
                       nullptr, 0, nullptr);
  vk_check(vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");

  VkSubmitInfo si{};
  si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cmd_;
  VkResult r = vkQueueSubmit(queue_, 1, &si, fence_);
  if (r == VK_SUCCESS) r = vkWaitForFences(dev_, 1, &fence_, VK_TRUE, UINT64_MAX);
  vkResetFences(dev_, 1, &fence_);
  vkResetCommandBuffer(cmd_, 0);
  vkResetDescriptorPool(dev_, desc_pool_, 0);
  vk_check(r, (std::string("dispatch of ") + name).c_str());
}

}  // namespace detaudit::kernels::vulkan
