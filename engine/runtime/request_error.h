// The error a request is refused or ended with, carrying the HTTP status its answer takes: thrown
// by the scheduler's slot actions and the request field readers (runtime/request_fields.h), turned
// into an answer by serve's one adapter (an OpenAI error object with this status) and into a
// recorded error by the engine target.
#pragma once

#include <stdexcept>
#include <string>

namespace detaudit::runtime {

class request_error : public std::runtime_error {
 public:
  request_error(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

}  // namespace detaudit::runtime
