// Instruction-set selection for the fast CPU kernels (cpu.h).
#include <cstdlib>
#include <string>

#include "kernels/cpu/cpu.h"
#include "util/error.h"

namespace detaudit::kernels::cpu {

const char* isa_name(isa i) {
  switch (i) {
    case isa::scalar: return "scalar";
    case isa::avx2: return "avx2";
    case isa::avx512: return "avx512";
  }
  return "?";
}

bool isa_supported(isa i) {
  switch (i) {
    case isa::scalar: return true;
#if defined(__x86_64__) || defined(__i386__)
    case isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512vnni");
#else
    case isa::avx2:
    case isa::avx512:
      return false;
#endif
  }
  return false;
}

std::vector<isa> isa_all_supported() {
  std::vector<isa> out;
  for (isa i : {isa::scalar, isa::avx2, isa::avx512})
    if (isa_supported(i)) out.push_back(i);
  return out;
}

isa isa_default() {
  const char* env = std::getenv("DETAUDIT_CPU_ISA");
  if (env && *env) {
    for (isa i : {isa::scalar, isa::avx2, isa::avx512}) {
      if (std::string(env) != isa_name(i)) continue;
      if (!isa_supported(i))
        throw input_error(std::string("DETAUDIT_CPU_ISA=") + env + ": this CPU does not support it");
      return i;
    }
    throw input_error(std::string("DETAUDIT_CPU_ISA=") + env + ": expected scalar, avx2 or avx512");
  }
  return isa_all_supported().back();
}

}  // namespace detaudit::kernels::cpu
