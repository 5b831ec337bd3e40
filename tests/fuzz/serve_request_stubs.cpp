// Link seam for fuzz_serve_request: http_json.cpp and runtime/request_fields.cpp refer to the
// scheduler and to generation for the readers that need a loaded model or a running scheduler
// (field_prompt, field_n_predict, completion_fields_parse, token_piece, finish reasons).
// The fuzz target calls none of them, so it links these definitions instead of the whole engine;
// reaching one is a bug in the target and stops it at once.
#include <string_view>
#include <vector>

#include "runtime/generate.h"
#include "runtime/scheduler.h"

namespace detaudit {

const model::model& runtime::scheduler::model() const { __builtin_trap(); }
int64_t runtime::scheduler::slot_n_ctx() const { __builtin_trap(); }
const runtime::scheduler_params& runtime::scheduler::params() const { __builtin_trap(); }
std::vector<int32_t> runtime::generate_tokenize(const tokenizer::vocab&, std::string_view) { __builtin_trap(); }
const char* runtime::finish_reason_name(runtime::finish_reason) { __builtin_trap(); }

}  // namespace detaudit
