// Run identity: the part of run.json ("identity") that decides whether two runs may be compared,
// resumed into one folder or merged. The runner writes it (probes/runner.cpp); this is its reader.
//
//   {"targets":  [{"label", "spec", "dialect", "build", "fingerprint", "model", "model_sha256",
//                  "chat_template"}],
//    "request":  {"n_predict", "temperature", "top_p", "top_k", "n_probs", "chat", "system", "stop",
//                 "extra"},                          what every request carries
//    "probes":   [...], "probe_settings": {"concurrency", "seed", "seed_k", "seed_temperature"},
//    "items":    {"count", "sha256"},                 the prompt set (ids and prompt hashes)
//    "shard":    {"count"}}                           how the items were sliced (index aside)
#pragma once

#include <string>
#include <vector>

#include "reports/audit/record.h"

namespace detaudit::reports {

struct identity_difference {
  std::string field;  // dotted path: "request.n_predict", "targets.A.model", "items.sha256"
  json a, b;          // the two values (null when absent on a side)
};

// Every leaf where the two identities differ, in path order; target entries are keyed by label.
std::vector<identity_difference> identity_diff(const json& a, const json& b);

// "request.n_predict: 16 vs 32" (strings shortened to 80 bytes).
std::string identity_difference_text(const identity_difference& d);

// The run's identity from its manifest; an empty object for a manifest without one (older runs,
// a bare records file).
json identity_of(const json& manifest);

// Whether a difference is in what every request carries ("request.*"): responses under different
// request settings are not comparable item by item.
bool identity_is_request_setting(const identity_difference& d);

}  // namespace detaudit::reports
