// One generated step as the verdicts read it: the sampled token's bytes, the margin between the
// best two alternatives, and where the sampled token stands among them.
//
// Goals: every dialect's tokens compared as bytes, whatever form the server wrote them in; margins
// and ranks from the alternatives' values, never from the order a server listed them in.
// Non-goals: token ids across vocabularies (two models' ids mean nothing to each other).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "reports/audit/record.h"

namespace detaudit::reports {

// The bytes a token string stands for, with the escaped forms servers use for a byte that is not
// valid UTF-8 on its own decoded:
//   "bytes:\xe2\x82"  OpenAI's form (the whole string)
//   "\xe2"            an escape for a byte >= 0x80 (DeepSeek's form; "\x41" stays four characters)
//   "<0xE2>"          a SentencePiece byte piece
// nullopt when the result still holds U+FFFD: the server replaced the bytes and they are lost.
std::optional<std::string> token_string_bytes(const std::string& s);

// A token's bytes: its `bytes` field (unless that is only U+FFFD's bytes, as some servers send for
// a byte token), else token_string_bytes(text). nullopt: not known.
std::optional<std::string> token_bytes(const token_rec& t);

// Best minus second-best log-prob among the alternatives, by value (two alternatives with the same
// string both count). nullopt with fewer than two.
std::optional<double> step_margin(const std::vector<alt_rec>& alts);

// How many alternatives have a strictly higher log-prob than the sampled token: 0 when it is the
// top (ties included), alts.size() when it is outside them. The sampled token's log-prob is its own
// `logprob`, else that of the alternative that is the same token (same id, else same bytes, else
// same string). -1 when there are no alternatives.
int step_rank(const token_rec& t, const std::vector<alt_rec>& alts);

// Tidies a record as a target wrote it: each step's alternatives sorted best first (stable: equal
// values keep their order, duplicates kept), each token's rank set, and a token's missing log-prob
// taken from its own alternative. Idempotent.
void record_normalise(record& r);

// The first step whose sampled token is not the top alternative, in a greedy request (temperature
// 0); -1 when there is none, when the request was not greedy, or when nothing says.
int64_t first_not_argmax(const record& r);

}  // namespace detaudit::reports
