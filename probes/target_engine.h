// The in-process engine as an audit target: `engine:PATH.gguf[?numerics=...&threads=...]`.
#pragma once

#include <memory>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "probes/target.h"

namespace detaudit::probes {

// "engine:PATH.gguf[?numerics=exact|float&threads=N&ubatch=N&spec=ngram|none&ctx=N&np=N&chat_template=NAME]".
// Loads the model and starts a serving scheduler (as `detaudit serve` does), so that concurrent
// complete() calls share forward steps. Throws input_error for a bad spec or model file.
std::unique_ptr<target> target_make_engine(const std::string& spec, const target_options& opt);

// "engine:PATH[?K=V&K=V...]" split into the path and the settings in the order given (the engine
// target's and --oracle's spec). `what` names the spec in errors ("target 'engine:m.gguf'").
// Throws input_error when the prefix or the path is missing, or an entry has no '='.
struct engine_spec_parts {
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;
};
engine_spec_parts engine_spec_split(const std::string& spec, const std::string& what);
// A setting's integer value in [lo, hi], else input_error "WHAT: KEY must be an integer in ...".
int64_t engine_setting_int(const std::string& what, const std::string& key, const std::string& v, int64_t lo, int64_t hi);

}  // namespace detaudit::probes
