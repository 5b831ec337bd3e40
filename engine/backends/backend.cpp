#include "backends/backend.h"

#include <stdexcept>

#include "util/error.h"

namespace detaudit::backends {

const char* numerics_name(numerics_mode m) {
  switch (m) {
    case NUMERICS_EXACT: return "exact";
    case NUMERICS_FLOAT: return "float";
    case NUMERICS_REFERENCE: return "reference";
  }
  return "?";
}

numerics_mode numerics_from_name(const std::string& name) {
  for (numerics_mode m : {NUMERICS_EXACT, NUMERICS_FLOAT, NUMERICS_REFERENCE})
    if (name == numerics_name(m)) return m;
  throw input_error("numerics '" + name + "': expected exact, float or reference");
}

std::unique_ptr<model::ops> ops_create(numerics_mode mode, const model::model& m, thread_pool* pool, bool repack,
                                       repack_stats* stats) {
  switch (mode) {
    case NUMERICS_EXACT: return ops_exact_create(m, pool, repack, stats);
    case NUMERICS_FLOAT: return ops_float_create(m, pool);
    case NUMERICS_REFERENCE: return ops_reference_create(m, pool);
  }
  throw std::logic_error("ops_create: unknown numerics mode");
}

const char* backend_name(backend_kind b) {
  switch (b) {
    case BACKEND_CPU: return "cpu";
    case BACKEND_VULKAN: return "vulkan";
    case BACKEND_CUDA: return "cuda";
  }
  return "?";
}

backend_kind backend_from_name(const std::string& name) {
  for (backend_kind b : {BACKEND_CPU, BACKEND_VULKAN, BACKEND_CUDA})
    if (name == backend_name(b)) return b;
  throw input_error("backend '" + name + "': expected cpu, vulkan or cuda");
}

}  // namespace detaudit::backends
