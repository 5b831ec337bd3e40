// What a GGUF file holds, as a JSON document: architecture and hyperparameters, file type,
// vocabulary, chat template family, tensors, parameter count, and whether the engine can run it.
//
// Works on any valid GGUF, whatever its architecture (vocab-only files included); only
// interpretation that the file supports is reported.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "gguf/gguf.h"

namespace detaudit::model {

struct inspect_options {
  bool tensors = false;  // include the per-tensor table
  bool sha256 = false;   // hash the whole file
  bool metadata = false; // include every metadata key (arrays past 16 elements summarised)
};

// Returns the description. Throws input_error when the file cannot be read or is malformed.
nlohmann::json inspect_file(const std::string& path, const inspect_options& opt);

// Renders a description as aligned human-readable text (one "key: value" per line, then the
// tensor table when present).
std::string inspect_to_text(const nlohmann::json& info);

// JSON text with invalid UTF-8 (a file's bytes are not always text) replaced by U+FFFD.
std::string safe_dump(const nlohmann::json& j, int indent = -1);

// llama.cpp's general.file_type names ("MOSTLY_Q4_K_M", ...); "unknown(N)" for others.
std::string file_type_name(int64_t ftype);

}  // namespace detaudit::model
