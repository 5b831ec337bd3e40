// One compute pipeline per embedded shader (SHADERS), created on first use: shader module,
// descriptor set layout of n storage buffers, pipeline layout with one 128-byte push-constant
// range, and the compute pipeline (entry point "main").
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/vulkan/vk_internal.h"
#include "kernels/vulkan/vk_pipeline.h"

namespace detaudit::kernels::vulkan {
namespace {

const shader_blob* find_shader(const char* name) {
  for (uint64_t i = 0; i < N_SHADERS; ++i) {
    if (std::strcmp(SHADERS[i].name, name) == 0) return &SHADERS[i];
  }
  return nullptr;
}

void create_layouts(VkDevice dev, uint32_t n_bindings, VkDescriptorSetLayout* set_layout, VkPipelineLayout* layout) {
  std::vector<VkDescriptorSetLayoutBinding> binds(n_bindings);
  for (uint32_t i = 0; i < n_bindings; ++i) {
    binds[i] = VkDescriptorSetLayoutBinding{};
    binds[i].binding = i;
    binds[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    binds[i].descriptorCount = 1;
    binds[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo sci{};
  sci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
  sci.bindingCount = n_bindings;
  sci.pBindings = binds.data();
  vk_check(vkCreateDescriptorSetLayout(dev, &sci, nullptr, set_layout), "vkCreateDescriptorSetLayout");
  VkPushConstantRange range{};
  range.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  range.offset = 0;
  range.size = PUSH_BYTES;
  VkPipelineLayoutCreateInfo lci{};
  lci.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
  lci.setLayoutCount = 1;
  lci.pSetLayouts = set_layout;
  lci.pushConstantRangeCount = 1;
  lci.pPushConstantRanges = &range;
  vk_check(vkCreatePipelineLayout(dev, &lci, nullptr, layout), "vkCreatePipelineLayout");
}

void create_pipeline(VkDevice dev, const shader_blob& s, VkPipelineLayout layout, VkShaderModule* module,
                     VkPipeline* handle) {
  VkShaderModuleCreateInfo mci{};
  mci.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
  mci.codeSize = static_cast<size_t>(s.n_words) * sizeof(uint32_t);
  mci.pCode = s.words;
  vk_check(vkCreateShaderModule(dev, &mci, nullptr, module), "vkCreateShaderModule");
  VkComputePipelineCreateInfo cci{};
  cci.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
  cci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  cci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  cci.stage.module = *module;
  cci.stage.pName = "main";
  cci.layout = layout;
  vk_check(vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &cci, nullptr, handle),
           (std::string("vkCreateComputePipelines (") + s.name + ")").c_str());
}

}  // namespace

vk_device::pipeline::~pipeline() {
  if (dev == VK_NULL_HANDLE) return;
  if (handle != VK_NULL_HANDLE) vkDestroyPipeline(dev, handle, nullptr);
  if (layout != VK_NULL_HANDLE) vkDestroyPipelineLayout(dev, layout, nullptr);
  if (set_layout != VK_NULL_HANDLE) vkDestroyDescriptorSetLayout(dev, set_layout, nullptr);
  if (module != VK_NULL_HANDLE) vkDestroyShaderModule(dev, module, nullptr);
}

vk_device::pipeline& vk_device::get_pipeline(const char* name, uint32_t n_bindings) {
  const auto it = pipelines_.find(name);
  if (it != pipelines_.end()) {
    if (it->second->n_bindings != n_bindings)
      throw std::logic_error(std::string("vulkan: shader ") + name + " used with " + std::to_string(n_bindings) +
                             " bindings, created with " + std::to_string(it->second->n_bindings));
    return *it->second;
  }
  const shader_blob* s = find_shader(name);
  if (!s) throw std::logic_error(std::string("vulkan: no embedded shader named ") + name);
  if (n_bindings > MAX_BINDINGS)
    throw std::logic_error(std::string("vulkan: shader ") + name + " binds more than " +
                           std::to_string(MAX_BINDINGS) + " buffers");
  auto p = std::make_unique<pipeline>();
  p->dev = dev_;
  p->n_bindings = n_bindings;
  create_layouts(dev_, n_bindings, &p->set_layout, &p->layout);
  create_pipeline(dev_, *s, p->layout, &p->module, &p->handle);
  pipeline& ref = *p;
  pipelines_.emplace(name, std::move(p));
  return ref;
}

}  // namespace detaudit::kernels::vulkan
