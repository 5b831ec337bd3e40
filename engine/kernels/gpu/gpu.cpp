#include "kernels/gpu/gpu.h"

#include <string>

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

}  // namespace

const char* api_name(api a) { return a == api::vulkan ? "vulkan" : "cuda"; }

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

}  // namespace detaudit::kernels::gpu
