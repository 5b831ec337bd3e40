// Device enumeration and opening through kernels/gpu/gpu.h on the test executable's API: the
// test device is listed with well-formed fields and can run exact numerics, the opened device
// describes itself as listed, and a bad index is an input_error that lists the devices there are.
// On Vulkan, a Mesa lavapipe (llvmpipe) device, when installed, must qualify for exact mode.
#include <doctest/doctest.h>

#include <cctype>
#include <string>
#include <vector>

#include "backend/gpu_test_util.h"
#include "kernels/gpu/gpu.h"
#include "util/error.h"

using namespace detaudit;
using namespace detaudit::kernels;

namespace {

// "1.3.230" or "13.0": dot-separated decimal numbers.
bool is_version(const std::string& v) {
  if (v.empty() || v.front() == '.' || v.back() == '.') return false;
  int dots = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == '.') {
      if (v[i - 1] == '.') return false;
      ++dots;
    } else if (!std::isdigit(static_cast<unsigned char>(v[i]))) {
      return false;
    }
  }
  return dots >= 1;
}

std::string describe(const gpu::device_desc& d) {
  return std::to_string(d.index) + ": " + d.name + " [" + d.kind + "] api " + d.api_version + " driver " + d.driver +
         (d.exact_ok ? " exact ok" : " refused: " + d.refusal);
}

}  // namespace

TEST_CASE("gpu list_devices lists the test device with well-formed fields and exact_ok") {
  const gpu::api a = detaudit::test::gpu_test_api();
  REQUIRE(gpu::api_compiled(a));
  const std::vector<gpu::device_desc> devs = gpu::list_devices(a);
  for (const gpu::device_desc& d : devs) MESSAGE(describe(d));
  const int idx = detaudit::test::gpu_test_device_index();
  REQUIRE_MESSAGE(idx < static_cast<int>(devs.size()), "no " << std::string(gpu::api_name(a)) << " device " << idx);
  for (size_t i = 0; i < devs.size(); ++i) {
    const gpu::device_desc& d = devs[i];
    CHECK(d.index == static_cast<int>(i));
    CHECK(!d.name.empty());
    CHECK((d.kind == "cpu" || d.kind == "integrated" || d.kind == "discrete" || d.kind == "virtual" ||
           d.kind == "other"));
    CHECK_MESSAGE(is_version(d.api_version), d.api_version);
    CHECK(!d.driver.empty());
    CHECK(d.exact_ok == d.refusal.empty());
    if (a == gpu::api::vulkan && d.name.find("llvmpipe") != std::string::npos) {
      CHECK_MESSAGE(d.exact_ok, describe(d));
      CHECK(d.kind == "cpu");
      CHECK(d.driver.find("llvmpipe") != std::string::npos);
    }
  }
  CHECK_MESSAGE(devs[static_cast<size_t>(idx)].exact_ok, describe(devs[static_cast<size_t>(idx)]));
}

TEST_CASE("gpu opened device describes itself as list_devices does") {
  const gpu::api a = detaudit::test::gpu_test_api();
  const gpu::device_desc& got = detaudit::test::gpu_test_device().desc();
  const std::vector<gpu::device_desc> devs = gpu::list_devices(a);
  const int idx = detaudit::test::gpu_test_device_index();
  REQUIRE(idx < static_cast<int>(devs.size()));
  const gpu::device_desc& want = devs[static_cast<size_t>(idx)];
  CHECK(got.index == want.index);
  CHECK(got.name == want.name);
  CHECK(got.kind == want.kind);
  CHECK(got.api_version == want.api_version);
  CHECK(got.driver == want.driver);
  CHECK(got.exact_ok);
}

TEST_CASE("gpu open_device with a bad index is an input_error listing the devices") {
  const gpu::api a = detaudit::test::gpu_test_api();
  const std::vector<gpu::device_desc> devs = gpu::list_devices(a);
  REQUIRE(!devs.empty());
  for (int bad : {static_cast<int>(devs.size()), -1, 1000}) {
    std::string what;
    try {
      gpu::open_device(a, bad);
    } catch (const input_error& e) {
      what = e.what();
    }
    REQUIRE_MESSAGE(!what.empty(), "open_device(" << bad << ") did not throw input_error");
    CHECK_MESSAGE(what.find(std::to_string(bad)) != std::string::npos, what);
    for (const gpu::device_desc& d : devs) CHECK_MESSAGE(what.find(d.name) != std::string::npos, what);
  }
}
