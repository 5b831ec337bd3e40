// The in-process engine as an audit target: `engine:PATH.gguf[?numerics=...&threads=...]`.
#pragma once

#include <memory>
#include <string>

#include "probes/target.h"

namespace detaudit::probes {

// "engine:PATH.gguf[?numerics=exact|float&threads=N&ubatch=N&spec=ngram|none&ctx=N&np=N&chat_template=NAME]".
// Loads the model and starts a serving scheduler (as `detaudit serve` does), so that concurrent
// complete() calls share forward steps. Throws input_error for a bad spec or model file.
std::unique_ptr<target> target_make_engine(const std::string& spec, const target_options& opt);

}  // namespace detaudit::probes
