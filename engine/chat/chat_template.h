// Chat template families, recognised from a GGUF's tokenizer.chat_template (a Jinja string).
//
// Goal: name the family a template belongs to by its distinguishing markers, so the engine can
// render conversations with its own implementation of that family. Non-goal: a Jinja interpreter.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace detaudit::chat {

enum template_family {
  TEMPLATE_CHATML,       // <|im_start|>role ... <|im_end|> (Qwen2.5)
  TEMPLATE_QWEN3,        // ChatML with the enable_thinking switch and <think> blocks
  TEMPLATE_DEEPSEEK_R1,  // <｜User｜> ... <｜Assistant｜> (DeepSeek-R1-Distill)
  TEMPLATE_LLAMA3,       // <|start_header_id|>role<|end_header_id|> ... <|eot_id|>
  TEMPLATE_LLAMA2,       // [INST] ... [/INST] (Llama 2, Mistral)
  TEMPLATE_PHI3,         // <|user|> ... <|end|> <|assistant|>
};

// "chatml", "qwen3", "deepseek-r1", "llama3", "llama2", "phi3".
const char* template_family_name(template_family f);
std::optional<template_family> template_family_from_name(std::string_view name);

// Returns the family whose markers the template contains, or nullopt when none fits.
std::optional<template_family> chat_detect_family(std::string_view jinja);

}  // namespace detaudit::chat
