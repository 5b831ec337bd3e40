// Link seam for fuzz_answers: target_common.cpp (the capabilities' redaction, the interrupt flag)
// dispatches "engine:" specs to the in-process engine target, which would pull the whole engine
// into the sanitized build. The fuzz target reads answers and never makes a target, so it links
// this definition instead; reaching it is a bug in the target and stops it at once.
#include <memory>
#include <string>

#include "probes/target_engine.h"

namespace detaudit::probes {

std::unique_ptr<target> target_make_engine(const std::string&, const target_options&) { __builtin_trap(); }

}  // namespace detaudit::probes
