// The Vulkan backend's entry points (gpu.cpp calls them when built with -DDETAUDIT_VULKAN=ON).
#pragma once

#include <memory>
#include <vector>

#include "kernels/gpu/gpu.h"

namespace detaudit::kernels::vulkan {

// Every physical device the loader reports, in its order, with whether it can run exact numerics
// (RTE rounding for float32, 64-bit integers in shaders, a compute queue, host-visible coherent
// memory). Empty when there is no loader or no driver.
std::vector<gpu::device_desc> list_devices();
// Opens device `index` (checked by the caller: it exists and can run exact numerics).
std::unique_ptr<gpu::device> open_device(int index);

}  // namespace detaudit::kernels::vulkan
