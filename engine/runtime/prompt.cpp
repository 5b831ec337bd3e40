#include "runtime/prompt.h"

#include <filesystem>
#include <limits>

#include "tokenizer/vocab.h"
#include "util/error.h"

namespace detaudit::runtime {

std::vector<int32_t> generate_tokenize(const tokenizer::vocab& v, std::string_view text) {
  return tokenizer::encode(v, text, /*add_special=*/true, /*parse_special=*/true);
}

namespace {

chat::chat_options chat_options_for(const model::model& m, bool enable_thinking) {
  const tokenizer::vocab& v = m.vocab();
  chat::chat_options opt = m.chat_template().options;
  opt.enable_thinking = enable_thinking;
  if (v.ids().bos != tokenizer::TOKEN_NONE) opt.bos_token = v.token_text(v.ids().bos);
  if (v.ids().eos != tokenizer::TOKEN_NONE) opt.eos_token = v.token_text(v.ids().eos);
  opt.leading_bos = !v.add_bos();
  return opt;
}

}  // namespace

std::string generate_render_chat(const model::model& m, const chat_request& req) {
  const chat::template_family f = chat::chat_resolve_family(req.template_name, m.chat_template(), m.path());
  std::vector<chat::chat_message> msgs;
  if (!req.system.empty()) msgs.push_back({"system", req.system});
  msgs.push_back({"user", req.user});
  return chat::chat_render(f, msgs, /*add_generation_prompt=*/true, chat_options_for(m, req.enable_thinking));
}

std::vector<int32_t> generate_chat_tokens(const model::model& m, const std::vector<chat::chat_message>& msgs,
                                          const std::string& template_name, bool enable_thinking,
                                          const std::string& reasoning_effort) {
  // Named by its file name: a server's 400 says nothing of where its files are (docs/serve-api.md).
  const chat::template_family f =
      chat::chat_resolve_family(template_name, m.chat_template(), std::filesystem::path(m.path()).filename().string());
  chat::chat_options opt = chat_options_for(m, enable_thinking);
  if (!reasoning_effort.empty()) opt.reasoning_effort = reasoning_effort;
  return generate_tokenize(m.vocab(), chat::chat_render(f, msgs, /*add_generation_prompt=*/true, opt));
}

std::vector<int32_t> token_ids_parse(std::string_view text, const std::string& what) {
  std::vector<int32_t> ids;
  size_t i = 0;
  auto is_sep = [](char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (i < text.size()) {
    if (is_sep(text[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && !is_sep(text[j])) ++j;
    const std::string_view tok = text.substr(i, j - i);
    int64_t v = 0;
    bool ok = tok.size() <= 10;
    for (char c : tok) {
      ok = ok && c >= '0' && c <= '9';
      if (ok) v = v * 10 + (c - '0');
    }
    if (!ok || v > std::numeric_limits<int32_t>::max())
      throw input_error(what + ": '" + std::string(tok) + "' is not a token id (a non-negative integer)");
    ids.push_back(static_cast<int32_t>(v));
    i = j;
  }
  if (ids.empty()) throw input_error(what + ": no token ids given");
  return ids;
}

}  // namespace detaudit::runtime
