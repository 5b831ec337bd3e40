// Link seam for fuzz_serve_request: http_json.cpp refers to the scheduler and to generation for the
// readers that need a loaded model (field_prompt, field_n_predict, token_piece, finish reasons).
// The fuzz target calls none of them, so it links these definitions instead of the whole engine;
// reaching one is a bug in the target and stops it at once.
#include <string_view>
#include <vector>

#include "runtime/generate.h"
#include "serve/scheduler.h"

namespace detaudit {

const model::model& serve::scheduler::model() const { __builtin_trap(); }
int64_t serve::scheduler::slot_n_ctx() const { __builtin_trap(); }
std::vector<int32_t> runtime::generate_tokenize(const tokenizer::vocab&, std::string_view) { __builtin_trap(); }
const char* runtime::finish_reason_name(runtime::finish_reason) { __builtin_trap(); }

}  // namespace detaudit
