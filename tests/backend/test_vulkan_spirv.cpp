// Static checks of the embedded SPIR-V (kernels/vulkan: SHADERS) against the precision contract,
// independent of the device: a driver that never fuses multiply-add (Mesa lavapipe does not)
// cannot show a missing `precise`, so the decorations are read from the binaries themselves.
// Every shader must declare RoundingModeRTE for 32-bit floats; every float add, subtract and
// multiply must carry NoContraction; no float division, dot product, matrix product, FMA, mix,
// ldexp or transcendental builtin may appear.
#ifdef DETAUDIT_HAVE_VULKAN

#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <string>

#include "kernels/vulkan/vk_internal.h"

namespace {

using detaudit::kernels::vulkan::N_SHADERS;
using detaudit::kernels::vulkan::SHADERS;
using detaudit::kernels::vulkan::shader_blob;

// SPIR-V opcodes, decorations and GLSL.std.450 instruction numbers used below (SPIR-V 1.5 spec,
// GLSL.std.450 extended instruction set).
constexpr uint32_t OP_EXT_INST = 12;
constexpr uint32_t OP_EXECUTION_MODE = 16;
constexpr uint32_t OP_DECORATE = 71;
constexpr uint32_t DECORATION_NO_CONTRACTION = 42;
constexpr uint32_t MODE_ROUNDING_MODE_RTE = 4462;
const std::set<uint32_t> NEED_NO_CONTRACTION = {129, 131, 133, 142, 143};  // FAdd FSub FMul VectorTimesScalar MatrixTimesScalar
const std::set<uint32_t> FORBIDDEN_OPS = {136, 140, 141, 144, 145, 146, 147, 148};  // FDiv FRem FMod *Times* Dot
// Sin .. InverseSqrt (13-32), FMix 46, Fma 50, Ldexp 53, Length 66, Distance 67, Normalize 69, FaceForward
// 70, Reflect 71, Refract 72.
bool forbidden_glsl_inst(uint32_t i) {
  return (i >= 13 && i <= 32) || i == 46 || i == 50 || i == 53 || (i >= 66 && i <= 72 && i != 68);
}

// Problems found in one shader, one per line; empty when it follows the contract.
std::string spirv_problems(const shader_blob& s) {
  std::string out;
  if (s.n_words < 5 || s.words[0] != 0x07230203u) return "not a SPIR-V module\n";
  std::set<uint32_t> no_contraction, need;
  bool rte32 = false;
  for (uint64_t i = 5; i < s.n_words;) {
    const uint32_t op = s.words[i] & 0xffffu, n = s.words[i] >> 16;
    if (n == 0 || i + n > s.n_words) return out + "malformed instruction at word " + std::to_string(i) + "\n";
    const uint32_t* w = s.words + i;
    if (op == OP_DECORATE && n >= 3 && w[2] == DECORATION_NO_CONTRACTION) no_contraction.insert(w[1]);
    if (op == OP_EXECUTION_MODE && n >= 4 && w[2] == MODE_ROUNDING_MODE_RTE && w[3] == 32) rte32 = true;
    if (NEED_NO_CONTRACTION.count(op) && n >= 3) need.insert(w[2]);
    if (FORBIDDEN_OPS.count(op)) out += "forbidden opcode " + std::to_string(op) + "\n";
    if (op == OP_EXT_INST && n >= 5 && forbidden_glsl_inst(w[4]))
      out += "forbidden GLSL.std.450 instruction " + std::to_string(w[4]) + "\n";
    i += n;
  }
  if (!rte32) out += "no RoundingModeRTE 32 execution mode\n";
  for (uint32_t id : need) {
    if (!no_contraction.count(id)) out += "float operation %" + std::to_string(id) + " without NoContraction\n";
  }
  return out;
}

}  // namespace

TEST_CASE("vulkan every embedded shader declares RTE and marks every float operation NoContraction") {
  REQUIRE(N_SHADERS > 0);
  std::set<std::string> names;
  for (uint64_t i = 0; i < N_SHADERS; ++i) {
    const shader_blob& s = SHADERS[i];
    names.insert(s.name);
    const std::string problems = spirv_problems(s);
    CHECK_MESSAGE(problems.empty(), s.name << ":\n" << problems);
  }
  for (const char* op : {"rms_norm", "swiglu", "add", "add_bias", "rope", "kv_quantize"})
    CHECK_MESSAGE(names.count(op) == 1, "no embedded shader " << op);
}

#endif  // DETAUDIT_HAVE_VULKAN
