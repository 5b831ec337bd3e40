// The error every part of the server may throw to answer a request with an HTTP status: the
// handlers' field readers, and the scheduler's slot actions. It is runtime::request_error (the
// scheduler and the field readers live in the runtime); one adapter (http_server.cpp) turns it
// into the answer, an OpenAI error object with this status.
#pragma once

#include "runtime/request_error.h"

namespace detaudit::serve {

using http_error = runtime::request_error;

}  // namespace detaudit::serve
