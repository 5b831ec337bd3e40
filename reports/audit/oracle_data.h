// The oracle's figures as a run folder keeps them (oracle.json): per response, the exact
// distribution at each generated token, summarised, and the server's distance from it (fidelity).
// probes/oracle.cpp computes them; reports/oracle.h says what the reports make of them. This file
// owns their shape and their reading and writing, so that the two sides agree on one definition.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "reports/audit/record.h"

namespace detaudit::reports {

// 2: each response's fidelity carries the spread (spread_n, spread_max). A schema 1 file is refused
// (recompute it with --oracle): its figures hold no spread, and its absolute max would put back the
// offset-sized bound.
inline constexpr int ORACLE_FILE_SCHEMA = 2;
// Below this a reported log-prob stands for "impossible" (a server writing -inf as -1e308), not a
// value to measure: no model gives a token e^-10000.
inline constexpr double ORACLE_LOWEST_LOGPROB = -1e4;

// One generated token teacher-forced: the exact distribution at that step, summarised.
struct oracle_step {
  int32_t id = -1;            // the token the server chose (an id of the oracle's vocabulary)
  std::string token;          // its text
  double logprob = 0;         // its exact log-prob
  int rank = 0;               // tokens with a strictly higher exact log-prob (0: it is the argmax)
  int32_t best_id = -1;       // the exact argmax (lowest id among equals)
  std::string best_token;     // its text
  double best_logprob = 0;
  double second_logprob = 0;  // the runner-up's (margin = best - second)
};

// One response (one record) as the oracle saw it.
struct oracle_response {
  // How the server's tokens became vocabulary ids: "ids" (the server gave them), "pieces" (each
  // token's bytes are one vocabulary token), "retokenized" (the text tokenized again: steps are
  // the oracle's tokens, not the server's). "" when not evaluated.
  std::string alignment;
  std::string skipped;             // why it was not evaluated ("" when it was)
  std::string note;                // what else to know (tokens whose bytes more than one token spells)
  std::string prompt_hash;         // of the prompt token ids; rows are judged only between equal ones
  int64_t prompt_tokens = 0;
  std::vector<oracle_step> steps;  // one per generated token (per oracle token when retokenized)
  // Fidelity over the log-probs the server reported for vocabulary tokens.
  int64_t fid_n = 0;
  double fid_sum = 0, fid_max = 0;
  int64_t fid_equal = 0;           // of fid_n, those equal to the exact value bit for bit
  int64_t spread_n = 0;            // steps with at least two values
  double spread_max = 0;           // the largest step spread (max d - min d, d = server - exact)
  int64_t kl_n = 0;
  double kl_sum = 0;
};

// A log-prob the server reported that stands for a value, not for "impossible".
bool oracle_logprob_usable(double v);

// Adds one step's reported log-probs to `o`'s fidelity: each (server, exact) pair to fid_*, the
// step's spread to spread_* when two or more pairs count. A pair whose server value is not finite or
// is below ORACLE_LOWEST_LOGPROB does not count.
void oracle_step_fidelity(oracle_response& o, const std::vector<std::pair<double, double>>& server_exact);

struct oracle_data {
  json model = json::object();  // {"spec", "path", "sha256", "numerics", "device"}
  std::map<std::string, oracle_response> responses;  // by record_key()
  // {"seconds", "items", "prefills", "responses", "distinct_continuations", "tokens_evaluated",
  //  "tokens_scored"}: tokens_scored counts every response's steps; tokens_evaluated what the
  // engine ran (prefix sharing makes it smaller).
  json cost = json::object();
  std::vector<std::string> notes;
};

json oracle_to_json(const oracle_data& d);
// Throws input_error naming `where` and the field when the shape differs.
oracle_data oracle_from_json(const json& j, const std::string& where);
// DIR/oracle.json: written whole (a temporary file renamed), read back; oracle_present() says
// whether a run folder has one.
inline constexpr const char* ORACLE_FILE = "oracle.json";
void oracle_write(const std::string& dir, const oracle_data& d);
bool oracle_present(const std::string& dir);
oracle_data oracle_read(const std::string& dir);

}  // namespace detaudit::reports
