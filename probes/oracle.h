// `--oracle engine:MODEL.gguf`: every response of a run teacher-forced through the exact engine on
// the model file the server serves (reports/oracle.h says what the reports make of it).
//
// Goals: one prefill per item (per distinct prompt), the responses' tokens arranged in a trie so
// that a prefix two responses share is evaluated once and each branch forks the cache there; the
// server's tokens mapped to the vocabulary by id, else by their bytes, else by tokenizing the text
// again, and a response that cannot be mapped said so instead of guessed at.
// Non-goals: another numerics than exact (the oracle is the exact math).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "reports/audit/oracle_data.h"
#include "reports/audit/record.h"

namespace detaudit::probes {

struct oracle_options {
  // "engine:PATH.gguf[?threads=N&backend=cpu|vulkan|cuda&device=N&ubatch=N&chat_template=NAME]".
  std::string spec;
  std::function<void(const std::string&)> log;  // progress (stderr); may be empty
};

// Checks the spec and loads nothing. Throws input_error naming what is wrong.
void oracle_spec_check(const std::string& spec);

// Loads the model and sets up a small context on the spec's backend and device: what a bad model
// file or device would fail on, found before a run sends anything. Throws input_error.
void oracle_preflight(const std::string& spec);

// Evaluates every record that has a response. Stops with interrupted_error when the run is asked
// to stop (run_interrupt()). Throws input_error for a bad spec or model file.
reports::oracle_data oracle_evaluate(const std::vector<reports::record>& records, const oracle_options& opt);

}  // namespace detaudit::probes
