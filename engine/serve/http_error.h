// The error every part of the server may throw to answer a request with an HTTP status: the
// handlers' field readers, and the scheduler's slot actions. One adapter (http_server.cpp) turns
// it into the answer, an OpenAI error object with this status.
#pragma once

#include <stdexcept>
#include <string>

namespace detaudit::serve {

class http_error : public std::runtime_error {
 public:
  http_error(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

}  // namespace detaudit::serve
