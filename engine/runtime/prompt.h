// A request's prompt tokens: plain text as llama.cpp's server tokenizes it, a conversation through
// the model's chat template, or a written list of ids.
//
// Goals: one owner for "these messages become these tokens", shared by every endpoint that takes
// a prompt (detaudit generate, serve's routes, the engine target, the oracle).
// Non-goals: rendering templates (chat/), tokenizing (tokenizer/).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "model/model.h"

namespace detaudit::runtime {

// Token ids of a plain prompt as llama.cpp's server makes them: BOS / EOS as the vocabulary says,
// control tokens written in the text (<|im_start|>) parsed into their ids.
std::vector<int32_t> generate_tokenize(const tokenizer::vocab& v, std::string_view text);

struct chat_request {
  std::string system;         // "" = no system message
  std::string user;
  std::string template_name;  // "" = detect from tokenizer.chat_template; else chatml|qwen3|...
  bool enable_thinking = true;
};

// The conversation (system?, user) rendered with the model's chat template family plus the
// generation prompt; without the leading BOS when the vocabulary adds one (generate_tokenize
// adds it). A file without a template renders with chatml (chat::chat_choose_family). Throws
// input_error naming the model file when its template fits no family.
std::string generate_render_chat(const model::model& m, const chat_request& req);

// A conversation's prompt tokens as every chat endpoint makes them (serve's /v1/chat/completions
// and /api/chat, the engine target, the oracle): the template family `template_name` ("" =
// detected from the model, chatml when it has none), the generation prompt appended, then
// generate_tokenize. reasoning_effort: gpt-oss's "Reasoning:" level ("" = the template's default).
// Throws input_error naming the model file when its template fits no family.
std::vector<int32_t> generate_chat_tokens(const model::model& m, const std::vector<chat::chat_message>& msgs,
                                          const std::string& template_name, bool enable_thinking = true,
                                          const std::string& reasoning_effort = "");

// Token ids from a list such as "1, 403 407,261": commas and/or whitespace between ids. `what`
// (an option name) starts error messages. Throws input_error for anything that is not a
// non-negative 32-bit integer, or an empty list.
std::vector<int32_t> token_ids_parse(std::string_view text, const std::string& what);

}  // namespace detaudit::runtime
