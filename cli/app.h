// The detaudit command line: argv rewriting, --config, dispatch and exit codes.
//
// Exit codes: 0 success · 1 divergence beyond --fail-on · 2 usage or input error · 3 incomplete:
// target unreachable, requests failed, or the disk full (what was written is kept) · 4 internal
// error (a bug or exhausted memory). Every usage or input error is one line on stderr.
#pragma once

#include <exception>
#include <string>
#include <vector>

namespace detaudit::cli {

constexpr int EXIT_OK = 0;
constexpr int EXIT_DIVERGED = 1;
constexpr int EXIT_USAGE = 2;
constexpr int EXIT_UNREACHABLE = 3;  // incomplete: a target unreachable, requests failed, or the disk full
constexpr int EXIT_INTERNAL = 4;  // a bug or resource failure in detaudit itself
constexpr int EXIT_UNJUDGED = 5;  // nothing judged, or a probe the run asked for judged nothing
constexpr int EXIT_INTERRUPTED = 130;  // SIGINT/SIGTERM: stopped cleanly, records kept (128 + SIGINT)

// Thrown by a subcommand's callback to end with a given exit code after it has printed what it
// has to say (e.g. EXIT_DIVERGED after a report, EXIT_UNREACHABLE after keeping the records).
class exit_with : public std::exception {
 public:
  explicit exit_with(int code) : code_(code) {}
  int code() const { return code_; }
  const char* what() const noexcept override { return "exit"; }

 private:
  int code_;
};

// Runs the command line; returns the process exit code. Never throws.
int cli_main(int argc, char** argv);

// llama.cpp-style multi-letter short flags ("-np", "-ub", "-ngl", ...) rewritten to their long
// forms ("--parallel", ...), since CLI11 accepts only one-character short options. Arguments after
// a bare "--" are left alone.
std::vector<std::string> cli_rewrite_args(const std::vector<std::string>& args);

}  // namespace detaudit::cli
