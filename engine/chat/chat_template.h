// Chat template families, recognised from a GGUF's tokenizer.chat_template (a Jinja string).
//
// Goal: name the family a template belongs to by its distinguishing markers, and render
// conversations with the engine's own implementation of that family (system, user and assistant
// turns). Non-goals: a Jinja interpreter, tool calls, multimodal content.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace detaudit::chat {

enum template_family {
  TEMPLATE_CHATML,       // <|im_start|>role ... <|im_end|> (Qwen2.5)
  TEMPLATE_QWEN3,        // ChatML with the enable_thinking switch and <think> blocks
  TEMPLATE_DEEPSEEK_R1,  // <｜User｜> ... <｜Assistant｜> (DeepSeek-R1-Distill)
  TEMPLATE_LLAMA3,       // <|start_header_id|>role<|end_header_id|> ... <|eot_id|>
  TEMPLATE_LLAMA2,       // [INST] ... [/INST] (Llama 2, Mistral)
  TEMPLATE_PHI3,         // <|user|> ... <|end|> <|assistant|>
  TEMPLATE_GEMMA,        // <start_of_turn>user ... <end_of_turn> <start_of_turn>model (Gemma 2, Gemma 3)
  TEMPLATE_GPT_OSS,      // harmony: <|start|>role<|message|> ... <|end|>, channels (gpt-oss)
};

// "chatml", "qwen3", "deepseek-r1", "llama3", "llama2", "phi3", "gemma", "gpt-oss".
const char* template_family_name(template_family f);
std::optional<template_family> template_family_from_name(std::string_view name);

// Returns the family whose markers the template contains, or nullopt when none fits.
std::optional<template_family> chat_detect_family(std::string_view jinja);

// ---- rendering (chat_render.cpp): each family's template re-implemented, no Jinja ----

struct chat_message {
  std::string role;  // "system", "user" or "assistant" ("developer" is read as "system")
  std::string content;
};

struct chat_options {
  bool enable_thinking = true;  // qwen3: false closes an empty <think> block after the assistant header
  // Text of the BOS / EOS tokens, written where the template writes bos_token / eos_token (llama2
  // writes them between turns, phi3 writes EOS after a conversation without generation prompt).
  std::string bos_token;
  std::string eos_token;
  // Write a bos_token that would open the text. Leave false when the tokenizer adds BOS itself
  // (vocab add_bos), so BOS is not doubled; llama.cpp strips it for the same reason.
  bool leading_bos = false;
  // chatml: the system message written when the conversation has none (Qwen2.5's templates carry
  // "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."); "" writes none.
  std::string default_system;
  // deepseek-r1: the generation prompt opens "<think>\n", as the templates published since
  // January 2025 do; false for the earlier ones that end at "<｜Assistant｜>".
  bool open_think = true;
  // gpt-oss: the "Current date: YYYY-MM-DD" its system message states (the template calls
  // strftime_now, so the same conversation renders differently on another day). Empty: the
  // DETAUDIT_CHAT_DATE environment variable when set (it must be a YYYY-MM-DD date), else
  // today's local date, as llama-server writes it. Pin it to replay a conversation bit for bit.
  std::string current_date;
  // gpt-oss: the "Reasoning:" level of its system message (the template's default, "medium"; a
  // request may set it, as chat_template_kwargs.reasoning_effort does for llama-server).
  std::string reasoning_effort = "medium";
  // gpt-oss: the model identity and knowledge cutoff its system message states (the published
  // template's values; chat_options_from_template reads a file's own).
  std::string model_identity = "You are ChatGPT, a large language model trained by OpenAI.";
  std::string knowledge_cutoff = "2024-06";
  // false for a template that refuses a system message (Gemma 2's raises "System role not
  // supported"): a leading system message is then merged into the next message, joined by "\n",
  // or dropped when nothing follows, as llama-server's chat workarounds do.
  bool system_role = true;
};

// The date a gpt-oss conversation renders with opt.current_date empty: DETAUDIT_CHAT_DATE or
// today's local date (as llama-server's strftime_now), as YYYY-MM-DD. Throws input_error for a
// DETAUDIT_CHAT_DATE that is not a calendar date written YYYY-MM-DD.
std::string chat_current_date();

// The options a template implies: default_system for ChatML templates that write a literal
// default system message, open_think for DeepSeek-R1 templates, gpt-oss's model identity,
// knowledge cutoff and default reasoning level when its template sets them as plain literals.
// BOS / EOS text are left empty.
chat_options chat_options_from_template(std::string_view jinja);

// Renders a conversation as the family's template does (the source of each is named in
// chat_render.cpp). add_generation_prompt appends the assistant header (llama2 has none: its text
// always ends with " [/INST]" after a user turn). Throws input_error for a role other than system,
// developer, user and assistant, and where the family's template raises (llama2 and gemma when
// user and assistant turns do not alternate). tests/unit/test_chat_llamacpp.cpp holds every
// family to llama.cpp's rendering of the same messages.
std::string chat_render(template_family f, const std::vector<chat_message>& messages, bool add_generation_prompt,
                        const chat_options& opt = {});

// The most template text the engine reads: published templates are a few kB (the largest, with
// tool-call branches, around 20 kB); a file whose template is larger is refused for chat (naming
// its size and --chat-template) rather than scanned on every request.
constexpr size_t CHAT_TEMPLATE_MAX_BYTES = size_t{1} << 20;

// A model's template, read once (at model load): whether the file has one, its family and the
// options it implies. Reading costs time linear in the template's size, and is skipped past
// CHAT_TEMPLATE_MAX_BYTES.
struct chat_template_info {
  bool present = false;    // the file has a non-empty tokenizer.chat_template
  size_t bytes = 0;        // its size
  bool too_large = false;  // bytes > CHAT_TEMPLATE_MAX_BYTES: not read, no family, default options
  std::optional<template_family> family;  // chat_detect_family's answer
  chat_options options;                   // chat_options_from_template's answer
  size_t scanned = 0;  // characters examined while reading the options (the tests hold it linear)
};

chat_template_info chat_template_parse(std::string_view jinja);

// The fallback, as llama-server's (its CHATML_TEMPLATE_SRC): chatml when no override is named and
// the file has no template at all (`jinja` empty); nullopt otherwise, when the override or the
// file's own template decides. The one place that says when the fallback applies. Never throws.
std::optional<template_family> chat_fallback_family(std::string_view override_name, std::string_view jinja);
std::optional<template_family> chat_fallback_family(std::string_view override_name, const chat_template_info& t);

struct family_choice {
  template_family family = TEMPLATE_CHATML;
  bool fallback = false;  // chosen by chat_fallback_family(): the file has no template
};

// The family to render with: the one named by `override_name` when it is not empty, else the
// fallback when the file has no template, else the one detected in `jinja`. Throws input_error
// for an unknown override name, and, naming `origin` (the model file), for a template that is
// present but fits no family: "model.gguf: chat template not recognised; pass
// --chat-template chatml|qwen3|deepseek-r1|llama3|llama2|phi3|gemma|gpt-oss", and for one larger
// than CHAT_TEMPLATE_MAX_BYTES (unless an override names the family).
family_choice chat_choose_family(std::string_view override_name, std::string_view jinja, const std::string& origin);
family_choice chat_choose_family(std::string_view override_name, const chat_template_info& t, const std::string& origin);

// chat_choose_family(...).family, for callers that need not know whether it was the fallback.
template_family chat_resolve_family(std::string_view override_name, std::string_view jinja, const std::string& origin);
template_family chat_resolve_family(std::string_view override_name, const chat_template_info& t, const std::string& origin);

}  // namespace detaudit::chat
