// Secrets kept out of every artefact: the one redaction rule of detaudit, applied to everything a
// run records (run.json's targets and capabilities, every field of every record) and to what
// bundles write. Reports and bundles read only what was recorded, so a string redacted here never
// reaches a report, a bundle or a terminal.
//
// The rule (docs/records.md, "Secrets"):
//   - a field named authorization, api_key, api-key, apikey or x-api-key (any case) holds
//     "[REDACTED]", whatever its value;
//   - in every other string, object keys included, the key itself and any stretch of 12 or more
//     consecutive characters of it, compared case-insensitively (ASCII), are replaced by
//     "[REDACTED]": a server echoing the key lower-cased, cut short or inside other text is caught.
//     A key shorter than 12 characters is matched whole.
// Non-goals: a key spread over separate strings (one token each) in pieces under 12 characters;
// other encodings of the key (base64, URL-escaped).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "reports/audit/record.h"

namespace detaudit::reports {

inline constexpr size_t REDACT_MIN_MATCH = 12;
inline constexpr const char* REDACTED = "[REDACTED]";

// `s` with every match of `secret` (the rule above) replaced; `s` as it is when secret is empty.
std::string redact_text(std::string_view s, const std::string& secret);
// Whether redact_text would change `s`.
bool redact_matches(std::string_view s, const std::string& secret);
// A copy of `j` with credential fields replaced and every string (keys too) redacted. With an
// empty secret only the credential fields go.
json redact_json(const json& j, const std::string& secret);
// Every string of the record redacted: target, request, endpoint, text, tokens (their text and
// bytes), top log-probs, finish reason, chained hash, usage, timings, evidence, error.
void record_redact(record& r, const std::string& secret);

}  // namespace detaudit::reports
