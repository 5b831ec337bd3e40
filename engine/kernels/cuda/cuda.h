// The CUDA backend's entry points (gpu.cpp calls them when built with -DDETAUDIT_CUDA=ON).
#pragma once

#include <memory>
#include <vector>

#include "kernels/gpu/gpu.h"

namespace detaudit::kernels::cuda {

// Every CUDA device the runtime reports, in its order, with whether it can run exact numerics
// (compute capability 8.0 or newer, for which the kernels are built). Empty when there is no
// driver or no GPU.
std::vector<gpu::device_desc> list_devices();
// Opens device `index` (checked by the caller: it exists and can run exact numerics).
std::unique_ptr<gpu::device> open_device(int index);

}  // namespace detaudit::kernels::cuda
