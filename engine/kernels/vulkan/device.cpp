// Vulkan instance, device enumeration with the capability checks of exact numerics, and the
// vk_device's lifetime (logical device, queue, command buffer, fence, descriptor pool).
//
// Goals: `detaudit devices` lists every physical device with the reason it cannot run exact
// numerics, if any; a machine without a Vulkan driver lists nothing instead of failing.
// Non-goals: choosing a device automatically, validation layers, multiple queues.
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/vulkan/vk_internal.h"
#include "kernels/vulkan/vk_pipeline.h"
#include "util/error.h"

namespace detaudit::kernels::vulkan {
namespace {

// What exact numerics needs of a physical device, found by describe().
struct phys_info {
  gpu::device_desc desc;
  uint32_t queue_family = 0;
  uint32_t host_coherent_type = 0;
  bool dot8 = false;  // VK_KHR_shader_integer_dot_product with shaderIntegerDotProduct
};

// Whether the device offers 4x8-bit integer dot products to shaders (the extension and its
// feature; the matmul's int8 path) and DETAUDIT_VULKAN_DOT8 is not "0".
bool dot8_available(VkPhysicalDevice pd) {
  const char* env = std::getenv("DETAUDIT_VULKAN_DOT8");
  if (env && std::string(env) == "0") return false;
  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, exts.data());
  bool has = false;
  for (const VkExtensionProperties& e : exts) has = has || std::string(e.extensionName) == VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
  if (!has) return false;
  VkPhysicalDeviceShaderIntegerDotProductFeatures dot{};
  dot.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES;
  VkPhysicalDeviceFeatures2 f2{};
  f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  f2.pNext = &dot;
  vkGetPhysicalDeviceFeatures2(pd, &f2);
  return dot.shaderIntegerDotProduct == VK_TRUE;
}

// A Vulkan 1.2 instance, or VK_NULL_HANDLE when there is no driver (or the loader is too old).
VkInstance instance_create() {
  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "detaudit";
  app.pEngineName = "detaudit";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  ci.pApplicationInfo = &app;
  VkInstance inst = VK_NULL_HANDLE;
  if (vkCreateInstance(&ci, nullptr, &inst) != VK_SUCCESS) return VK_NULL_HANDLE;
  return inst;
}

std::vector<VkPhysicalDevice> physical_devices(VkInstance inst) {
  uint32_t n = 0;
  if (vkEnumeratePhysicalDevices(inst, &n, nullptr) != VK_SUCCESS) return {};
  std::vector<VkPhysicalDevice> devs(n);
  if (vkEnumeratePhysicalDevices(inst, &n, devs.data()) < 0) return {};
  devs.resize(n);
  return devs;
}

const char* kind_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

std::string version_string(uint32_t v) {
  return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) + "." +
         std::to_string(VK_API_VERSION_PATCH(v));
}

// The first queue family with compute, or -1.
int64_t compute_family(VkPhysicalDevice pd) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
  std::vector<VkQueueFamilyProperties> fams(n);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, fams.data());
  for (uint32_t i = 0; i < n; ++i) {
    if ((fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && fams[i].queueCount > 0) return i;
  }
  return -1;
}

// A host-visible, host-coherent memory type (host-cached preferred: results are read back), or -1.
int64_t host_coherent_type(VkPhysicalDevice pd) {
  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  const VkMemoryPropertyFlags need = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  int64_t found = -1;
  for (uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
    const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
    if ((f & need) != need) continue;
    if (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) return i;
    if (found < 0) found = i;
  }
  return found;
}

// Name, kind, versions and the exact-mode checks of one physical device; the refusal names the
// first missing capability.
phys_info describe(VkPhysicalDevice pd, int index) {
  phys_info info;
  gpu::device_desc& d = info.desc;
  d.index = index;
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(pd, &props);
  d.name = props.deviceName;
  d.kind = kind_name(props.deviceType);
  d.api_version = version_string(props.apiVersion);
  d.driver = version_string(props.driverVersion);
  if (props.apiVersion < VK_API_VERSION_1_2) {
    d.refusal = "Vulkan 1.2 required, the device has " + d.api_version;
    return info;
  }
  VkPhysicalDeviceDriverProperties drv{};
  drv.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
  VkPhysicalDeviceFloatControlsProperties fc{};
  fc.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES;
  fc.pNext = &drv;
  VkPhysicalDeviceProperties2 p2{};
  p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  p2.pNext = &fc;
  vkGetPhysicalDeviceProperties2(pd, &p2);
  d.driver = std::string(drv.driverName) + (drv.driverInfo[0] ? std::string(" ") + drv.driverInfo : "");
  VkPhysicalDeviceFeatures feats;
  vkGetPhysicalDeviceFeatures(pd, &feats);
  const int64_t fam = compute_family(pd);
  const int64_t mem = host_coherent_type(pd);
  if (!fc.shaderRoundingModeRTEFloat32) {
    d.refusal = "no RTE rounding mode for float32 in shaders (shaderRoundingModeRTEFloat32)";
  } else if (!feats.shaderInt64) {
    d.refusal = "no 64-bit integers in shaders (shaderInt64)";
  } else if (fam < 0) {
    d.refusal = "no compute queue";
  } else if (mem < 0) {
    d.refusal = "no host-visible, host-coherent memory";
  } else {
    d.exact_ok = true;
    info.dot8 = dot8_available(pd);
    if (info.dot8) d.features = "int8 dot product";
    info.queue_family = static_cast<uint32_t>(fam);
    info.host_coherent_type = static_cast<uint32_t>(mem);
  }
  return info;
}

std::string result_name(VkResult r) {
  switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    default: return "VkResult " + std::to_string(static_cast<int>(r));
  }
}

// The handles a vk_device owns apart from its buffers and pipelines, created in this order.
struct device_handles {
  VkInstance instance = VK_NULL_HANDLE;
  VkDevice dev = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  VkCommandPool cmd_pool = VK_NULL_HANDLE;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  VkDescriptorPool desc_pool = VK_NULL_HANDLE;
};

// Destroys whatever of h exists (any prefix of the creation order).
void handles_destroy(device_handles& h) {
  if (h.dev != VK_NULL_HANDLE) {
    vkDeviceWaitIdle(h.dev);
    if (h.desc_pool != VK_NULL_HANDLE) vkDestroyDescriptorPool(h.dev, h.desc_pool, nullptr);
    if (h.fence != VK_NULL_HANDLE) vkDestroyFence(h.dev, h.fence, nullptr);
    if (h.cmd_pool != VK_NULL_HANDLE) vkDestroyCommandPool(h.dev, h.cmd_pool, nullptr);
    vkDestroyDevice(h.dev, nullptr);
  }
  if (h.instance != VK_NULL_HANDLE) vkDestroyInstance(h.instance, nullptr);
  h = device_handles{};
}

// The logical device (one queue of `family`, shaderInt64 on) and its command buffer, fence and
// descriptor pool (one set of up to MAX_BINDINGS storage buffers, reset after each dispatch).
void handles_create(VkPhysicalDevice pd, uint32_t family, bool dot8, device_handles& h) {
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{};
  qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  qci.queueFamilyIndex = family;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  VkPhysicalDeviceFeatures feats{};
  feats.shaderInt64 = VK_TRUE;
  VkDeviceCreateInfo dci{};
  dci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  dci.pEnabledFeatures = &feats;
  VkPhysicalDeviceShaderIntegerDotProductFeatures dot{};
  dot.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES;
  dot.shaderIntegerDotProduct = VK_TRUE;
  const char* dot_ext = VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
  if (dot8) {
    dci.pNext = &dot;
    dci.enabledExtensionCount = 1;
    dci.ppEnabledExtensionNames = &dot_ext;
  }
  vk_check(vkCreateDevice(pd, &dci, nullptr, &h.dev), "vkCreateDevice");
  vkGetDeviceQueue(h.dev, family, 0, &h.queue);
  VkCommandPoolCreateInfo pci{};
  pci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = family;
  vk_check(vkCreateCommandPool(h.dev, &pci, nullptr, &h.cmd_pool), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo cai{};
  cai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  cai.commandPool = h.cmd_pool;
  cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cai.commandBufferCount = 1;
  vk_check(vkAllocateCommandBuffers(h.dev, &cai, &h.cmd), "vkAllocateCommandBuffers");
  VkFenceCreateInfo fci{};
  fci.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
  vk_check(vkCreateFence(h.dev, &fci, nullptr, &h.fence), "vkCreateFence");
  VkDescriptorPoolSize size{};
  size.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
  size.descriptorCount = MAX_BINDINGS;
  VkDescriptorPoolCreateInfo dpci{};
  dpci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
  dpci.maxSets = 1;
  dpci.poolSizeCount = 1;
  dpci.pPoolSizes = &size;
  vk_check(vkCreateDescriptorPool(h.dev, &dpci, nullptr, &h.desc_pool), "vkCreateDescriptorPool");
}

}  // namespace

void vk_check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) throw std::runtime_error(std::string("vulkan: ") + what + " failed: " + result_name(r));
}

std::vector<gpu::device_desc> list_devices() {
  const VkInstance inst = instance_create();
  if (inst == VK_NULL_HANDLE) return {};
  std::vector<gpu::device_desc> out;
  const std::vector<VkPhysicalDevice> devs = physical_devices(inst);
  for (size_t i = 0; i < devs.size(); ++i) out.push_back(describe(devs[i], static_cast<int>(i)).desc);
  vkDestroyInstance(inst, nullptr);
  return out;
}

std::unique_ptr<gpu::device> open_device(int index) { return std::make_unique<vk_device>(index); }

vk_device::vk_device(int index) {
  device_handles h;
  h.instance = instance_create();
  if (h.instance == VK_NULL_HANDLE) throw input_error("vulkan: no Vulkan driver (vkCreateInstance failed)");
  try {
    const std::vector<VkPhysicalDevice> devs = physical_devices(h.instance);
    if (index < 0 || index >= static_cast<int>(devs.size()))
      throw input_error("vulkan: no device " + std::to_string(index) + " (" + std::to_string(devs.size()) +
                        " found)");
    phys_ = devs[static_cast<size_t>(index)];
    const phys_info info = describe(phys_, index);
    desc_ = info.desc;
    if (!desc_.exact_ok)
      throw input_error("vulkan device " + std::to_string(index) + " (" + desc_.name +
                        ") cannot run --numerics exact: " + desc_.refusal);
    queue_family_ = info.queue_family;
    host_coherent_type_ = info.host_coherent_type;
    dot8_ = info.dot8;
    handles_create(phys_, queue_family_, dot8_, h);
  } catch (...) {
    handles_destroy(h);
    throw;
  }
  instance_ = h.instance;
  dev_ = h.dev;
  queue_ = h.queue;
  cmd_pool_ = h.cmd_pool;
  cmd_ = h.cmd;
  fence_ = h.fence;
  desc_pool_ = h.desc_pool;
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(phys_, &props);
  for (int i = 0; i < 3; ++i) max_groups_[i] = props.limits.maxComputeWorkGroupCount[i];
}

vk_device::~vk_device() {
  if (dev_ != VK_NULL_HANDLE) vkDeviceWaitIdle(dev_);
  pipelines_.clear();
  for (buffer& b : scratch_) free_buffer(b);
  for (vk_weight& w : weights_) {
    free_buffer(w.data);
    free_buffer(w.bounds);
  }
  device_handles h{instance_, dev_, queue_, cmd_pool_, cmd_, fence_, desc_pool_};
  handles_destroy(h);
}

}  // namespace detaudit::kernels::vulkan
