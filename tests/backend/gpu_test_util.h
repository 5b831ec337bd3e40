// The device that tests/backend runs on: the API of the test executable (detaudit_vulkan_tests,
// detaudit_cuda_tests; the environment variable DETAUDIT_GPU_API overrides it), device
// DETAUDIT_GPU_DEVICE (default 0). A build or machine without that device fails the test
// with a message saying so: a backend test never passes without having run.
#pragma once

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/gpu/gpu.h"
#include "runtime/context.h"

namespace detaudit::test {

inline kernels::gpu::api gpu_test_api() {
  const char* a = std::getenv("DETAUDIT_GPU_API");
  const std::string s = a ? a : DETAUDIT_TEST_GPU_API;
  if (s == "cuda") return kernels::gpu::api::cuda;
  REQUIRE_MESSAGE(s == "vulkan", "DETAUDIT_GPU_API must be vulkan or cuda, found " << s);
  return kernels::gpu::api::vulkan;
}

inline int gpu_test_device_index() {
  const char* d = std::getenv("DETAUDIT_GPU_DEVICE");
  return d ? std::atoi(d) : 0;
}

// The opened test device, shared by the test cases of one process.
inline kernels::gpu::device& gpu_test_device() {
  static std::unique_ptr<kernels::gpu::device> dev;
  if (!dev) {
    const kernels::gpu::api a = gpu_test_api();
    std::string why;
    try {
      dev = kernels::gpu::open_device(a, gpu_test_device_index());
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!dev) FAIL("NO " << std::string(kernels::gpu::api_name(a)) << " DEVICE: the backend tests did not run: " << why);
  }
  return *dev;
}

// The runtime backend of the test executable's API.
inline runtime::backend_kind gpu_test_backend() {
  return gpu_test_api() == kernels::gpu::api::cuda ? runtime::BACKEND_CUDA : runtime::BACKEND_VULKAN;
}

// Per-step logits equal bit for bit (memcmp), step for step.
inline bool same_logit_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), 4 * a[i].size()) != 0) return false;
  return true;
}

}  // namespace detaudit::test
