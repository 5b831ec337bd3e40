#include "chat/chat_template.h"

namespace detaudit::chat {
namespace {

struct family_row {
  template_family family;
  const char* name;
  const char* markers[3];  // all must occur in the template (nullptr ends the list)
};

// Checked in order: more specific families first (Qwen3 and DeepSeek-R1 also contain ChatML-like
// or generic markers).
const family_row FAMILIES[] = {
    {TEMPLATE_QWEN3, "qwen3", {"<|im_start|>", "enable_thinking", nullptr}},
    {TEMPLATE_DEEPSEEK_R1, "deepseek-r1", {"<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>", nullptr, nullptr}},
    {TEMPLATE_CHATML, "chatml", {"<|im_start|>", "<|im_end|>", nullptr}},
    {TEMPLATE_LLAMA3, "llama3", {"<|start_header_id|>", "<|end_header_id|>", nullptr}},
    {TEMPLATE_GPT_OSS, "gpt-oss", {"<|start|>", "<|channel|>", nullptr}},  // before phi3: both write <|end|>
    {TEMPLATE_PHI3, "phi3", {"<|assistant|>", "<|end|>", nullptr}},
    {TEMPLATE_GEMMA, "gemma", {"<start_of_turn>", "<end_of_turn>", nullptr}},
    {TEMPLATE_LLAMA2, "llama2", {"[INST]", "[/INST]", nullptr}},
};

}  // namespace

const char* template_family_name(template_family f) {
  for (const family_row& r : FAMILIES)
    if (r.family == f) return r.name;
  return "unknown";
}

std::optional<template_family> template_family_from_name(std::string_view name) {
  for (const family_row& r : FAMILIES)
    if (name == r.name) return r.family;
  return std::nullopt;
}

std::optional<template_family> chat_detect_family(std::string_view jinja) {
  for (const family_row& r : FAMILIES) {
    bool all = true;
    for (const char* m : r.markers)
      if (m && jinja.find(m) == std::string_view::npos) all = false;
    if (all) return r.family;
  }
  return std::nullopt;
}

}  // namespace detaudit::chat
