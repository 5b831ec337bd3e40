// Chat rendering: each family's Jinja template re-implemented for system / user / assistant turns.
//
// Sources (the published templates, read for behaviour; the expected strings in
// tests/unit/test_chat_render.cpp are derived from the same):
//   chatml       Qwen/Qwen2.5-7B-Instruct tokenizer_config.json (no-tools branch)
//   qwen3        Qwen/Qwen3-0.6B tokenizer_config.json (no-tools branch, reasoning_content absent)
//   deepseek-r1  deepseek-ai/DeepSeek-R1-Distill-Qwen-32B tokenizer_config.json (January 2025)
//   llama3       meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json
//   llama2       meta-llama/Llama-2-7b-chat-hf tokenizer_config.json
//   phi3         microsoft/Phi-3.5-mini-instruct tokenizer_config.json
//   gemma        google/gemma-2-2b-it (as llama.cpp's models/templates keeps it) and Gemma 3's
//                published template: roles alternate user/model; Gemma 3's writes a system message
//                before the first user turn's text, and so does this; Gemma 2's raises on one, and
//                llama-server merges it into the first user message (chat_options::system_role)
//   gpt-oss      openai/gpt-oss-120b's chat_template.jinja (harmony; llama.cpp's
//                models/templates/openai-gpt-oss-120b.jinja), no tools and no "thinking" field
#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <stdexcept>
#include <string>

#include "chat/chat_template.h"
#include "util/error.h"

namespace detaudit::chat {
namespace {

// Jinja's trim / Python's str.strip() on the ASCII whitespace the templates meet in practice.
std::string strip(std::string_view s, std::string_view chars = " \t\n\r\f\v") {
  const size_t b = s.find_first_not_of(chars);
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(chars);
  return std::string(s.substr(b, e - b + 1));
}

std::string lstrip(std::string_view s, std::string_view chars) {
  const size_t b = s.find_first_not_of(chars);
  return b == std::string_view::npos ? "" : std::string(s.substr(b));
}

std::string rstrip(std::string_view s, std::string_view chars) {
  const size_t e = s.find_last_not_of(chars);
  return e == std::string_view::npos ? "" : std::string(s.substr(0, e + 1));
}

// Python's s.split(sep)[0] and s.split(sep)[-1].
std::string_view before_first(std::string_view s, std::string_view sep) {
  const size_t p = s.find(sep);
  return p == std::string_view::npos ? s : s.substr(0, p);
}
std::string_view after_last(std::string_view s, std::string_view sep) {
  const size_t p = s.rfind(sep);
  return p == std::string_view::npos ? s : s.substr(p + sep.size());
}

// The conversation as the family's template sees it, as llama-server hands it over: a "developer"
// message is a system message, and where the template refuses the system role, a leading system
// message is merged into the next one (joined by "\n") or dropped when nothing follows.
std::vector<chat_message> messages_prepare(const std::vector<chat_message>& messages, const chat_options& opt) {
  std::vector<chat_message> ms = messages;
  for (chat_message& m : ms) {
    if (m.role == "developer") m.role = "system";
    if (m.role != "system" && m.role != "user" && m.role != "assistant")
      throw input_error("chat: role '" + m.role + "' is not supported (system, developer, user, assistant)");
  }
  if (!opt.system_role && !ms.empty() && ms[0].role == "system") {
    if (ms.size() > 1) ms[1].content = ms[0].content + "\n" + ms[1].content;
    ms.erase(ms.begin());
  }
  return ms;
}

const char* const IM_START = "<|im_start|>";
const char* const IM_END = "<|im_end|>\n";

std::string render_chatml(const std::vector<chat_message>& ms, bool gen, const chat_options& opt) {
  std::string out;
  const bool first_system = !ms.empty() && ms[0].role == "system";
  if (first_system) out += std::string(IM_START) + "system\n" + ms[0].content + IM_END;
  else if (!opt.default_system.empty()) out += std::string(IM_START) + "system\n" + opt.default_system + IM_END;
  for (size_t i = first_system ? 1 : 0; i < ms.size(); ++i)
    out += IM_START + ms[i].role + "\n" + ms[i].content + IM_END;
  if (gen) out += std::string(IM_START) + "assistant\n";
  return out;
}

bool is_tool_response(std::string_view c) {
  return c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
}

// An assistant turn of Qwen3: reasoning split off at </think>; shown again only for turns after
// the last user message (the current agentic turn).
std::string qwen3_assistant(const chat_message& m, bool after_last_query, bool is_last) {
  std::string content = m.content;
  std::string reasoning;
  if (m.content.find("</think>") != std::string::npos) {
    content = lstrip(after_last(m.content, "</think>"), "\n");
    reasoning = lstrip(after_last(rstrip(before_first(m.content, "</think>"), "\n"), "<think>"), "\n");
  }
  std::string out = std::string(IM_START) + "assistant\n";
  if (after_last_query && (is_last || !reasoning.empty()))
    out += "<think>\n" + strip(reasoning, "\n") + "\n</think>\n\n" + lstrip(content, "\n");
  else
    out += content;
  return out + IM_END;
}

std::string render_qwen3(const std::vector<chat_message>& ms, bool gen, const chat_options& opt) {
  std::string out;
  const bool first_system = !ms.empty() && ms[0].role == "system";
  if (first_system) out += std::string(IM_START) + "system\n" + ms[0].content + IM_END;
  size_t last_query = ms.empty() ? 0 : ms.size() - 1;
  for (size_t i = ms.size(); i-- > 0;)
    if (ms[i].role == "user" && !is_tool_response(ms[i].content)) {
      last_query = i;
      break;
    }
  for (size_t i = first_system ? 1 : 0; i < ms.size(); ++i) {
    if (ms[i].role == "assistant") out += qwen3_assistant(ms[i], i > last_query, i + 1 == ms.size());
    else out += IM_START + ms[i].role + "\n" + ms[i].content + IM_END;
  }
  if (gen) {
    out += std::string(IM_START) + "assistant\n";
    if (!opt.enable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

std::string render_deepseek_r1(const std::vector<chat_message>& ms, bool gen, const chat_options& opt) {
  std::string system;  // the template keeps the last system message
  for (const chat_message& m : ms)
    if (m.role == "system") system = m.content;
  std::string out = (opt.leading_bos ? opt.bos_token : "") + system;
  for (const chat_message& m : ms) {
    if (m.role == "user") out += "<\xef\xbd\x9cUser\xef\xbd\x9c>" + m.content;
    else if (m.role == "assistant")
      out += "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>" + std::string(after_last(m.content, "</think>")) +
             "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
  }
  if (gen) out += opt.open_think ? "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>\n" : "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>";
  return out;
}

std::string render_llama3(const std::vector<chat_message>& ms, bool gen, const chat_options& opt) {
  std::string out = opt.leading_bos && !ms.empty() ? opt.bos_token : "";
  for (const chat_message& m : ms)
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + strip(m.content) + "<|eot_id|>";
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Llama 2: the first system message opens the first turn in <<SYS>> tags; the turns after it
// must alternate user, assistant, user, ... counting every message, as the template checks them.
// A later system message is what the template makes of it under llama-server (its default Jinja
// path): where a user turn is due the template raises, and so does this; where an assistant turn
// is due it passes the check and writes nothing, and so does this. (llama.cpp's older built-in
// renderer, --no-jinja, folded it into the next turn instead; the model's own template decides.)
std::string render_llama2(const std::vector<chat_message>& ms, const chat_options& opt) {
  const bool has_system = !ms.empty() && ms[0].role == "system";
  std::string out;
  for (size_t i = has_system ? 1 : 0, k = 0; i < ms.size(); ++i, ++k) {
    const chat_message& m = ms[i];
    if ((m.role == "user") != (k % 2 == 0))
      throw input_error("chat: llama2 template: conversation roles must alternate user/assistant/user/... "
                        "(after an optional first system message; message " + std::to_string(i) + " is '" + m.role + "')");
    std::string content = m.content;
    if (k == 0 && has_system) content = "<<SYS>>\n" + ms[0].content + "\n<</SYS>>\n\n" + content;
    if (m.role == "user") out += (k == 0 && !opt.leading_bos ? "" : opt.bos_token) + "[INST] " + strip(content) + " [/INST]";
    else if (m.role == "assistant") out += " " + strip(content) + " " + opt.eos_token;
  }
  return out;
}

std::string render_phi3(const std::vector<chat_message>& ms, bool gen, const chat_options& opt) {
  std::string out;
  for (const chat_message& m : ms) {
    if (m.role == "system" && m.content.empty()) continue;
    out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
  }
  out += gen ? "<|assistant|>\n" : opt.eos_token;
  return out;
}

// Gemma: "assistant" is "model", each turn's text trimmed; a leading system message opens the
// first user turn ("SYSTEM\n\n" + text, Gemma 3's first_user_prefix); the turns after it must
// alternate user, model, user, ... as the templates require.
std::string render_gemma(const std::vector<chat_message>& ms, bool gen, const chat_options& opt) {
  std::string out = opt.leading_bos && !ms.empty() ? opt.bos_token : "";
  size_t first = 0;
  std::string prefix;
  if (!ms.empty() && ms[0].role == "system") {
    prefix = ms[0].content + "\n\n";
    first = 1;
  }
  for (size_t i = first; i < ms.size(); ++i) {
    const chat_message& m = ms[i];
    const bool user_turn = (i - first) % 2 == 0;
    if ((m.role == "user") != user_turn || (m.role != "user" && m.role != "assistant"))
      throw input_error("gemma: conversation roles must alternate user/assistant/user/assistant/... (message " +
                        std::to_string(i) + " is '" + m.role + "')");
    out += "<start_of_turn>" + std::string(m.role == "assistant" ? "model" : "user") + "\n" +
           (i == first ? prefix : std::string()) + strip(m.content) + "<end_of_turn>\n";
  }
  if (gen) out += "<start_of_turn>model\n";
  return out;
}

// gpt-oss (harmony): a system message with the model identity, knowledge cutoff, date, reasoning
// level and channels; a first system message becomes the developer message's instructions; user
// turns, and assistant turns in the final channel (the last one, when no generation prompt
// follows, ended by <|return|>). The template raises on channel tags inside an assistant's content,
// and so does this; a later system message is dropped, as the template drops it.
std::string render_gpt_oss(const std::vector<chat_message>& ms, bool gen, const chat_options& opt) {
  const std::string date = opt.current_date.empty() ? chat_current_date() : opt.current_date;
  std::string out = "<|start|>system<|message|>" + opt.model_identity + "\nKnowledge cutoff: " + opt.knowledge_cutoff +
                    "\nCurrent date: " + date + "\n\nReasoning: " + opt.reasoning_effort +
                    "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>";
  size_t first = 0;
  if (!ms.empty() && ms[0].role == "system") {
    if (!ms[0].content.empty()) out += "<|start|>developer<|message|># Instructions\n\n" + ms[0].content + "\n\n<|end|>";
    first = 1;
  }
  for (size_t i = first; i < ms.size(); ++i) {
    const chat_message& m = ms[i];
    if (m.role == "user") {
      out += "<|start|>user<|message|>" + m.content + "<|end|>";
    } else if (m.role == "assistant") {
      if (m.content.find("<|channel|>analysis<|message|>") != std::string::npos ||
          m.content.find("<|channel|>final<|message|>") != std::string::npos)
        throw input_error("gpt-oss: message " + std::to_string(i) + " holds <|channel|> tags in its content; pass only the "
                          "final message's text (the template refuses it too)");
      const bool last = i + 1 == ms.size();
      out += "<|start|>assistant<|channel|>final<|message|>" + m.content + (last && !gen ? "<|return|>" : "<|end|>");
    }
  }
  if (gen) out += "<|start|>assistant";
  return out;
}

// The literal text of a Jinja string from `from` up to the first `end`, with its escapes
// resolved; no text when it is not a plain literal (it holds a quote, an expression or a
// concatenation) or `end` never comes. `stop` is where the scan ended (the offending character, or
// `end`; npos when `end` never comes), `scanned` counts the characters it examined.
struct literal_scan {
  std::optional<std::string> text;
  size_t stop = std::string_view::npos;
};

literal_scan jinja_literal(std::string_view src, size_t from, std::string_view end, size_t& scanned) {
  literal_scan r;
  std::string out;
  for (size_t i = from; i < src.size(); ++i) {
    ++scanned;
    if (src.compare(i, end.size(), end) == 0) {
      r.text = std::move(out);
      r.stop = i;
      return r;
    }
    const char c = src[i];
    if (c == '\'' || c == '"' || c == '{' || c == '}' || c == '+') {
      r.stop = i;
      return r;
    }
    if (c == '\\' && i + 1 < src.size() && src.compare(i + 1, end.size(), end) != 0) {
      const char e = src[++i];
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
      continue;
    }
    out += c;
  }
  return r;
}

// What a template may set, at most: a default system message (Qwen 2.5's is 78 bytes), and one
// line for gpt-oss's identity, reasoning level and knowledge cutoff. A longer text is not what a
// published template says, and it would be in every prompt: the default is kept.
constexpr size_t MAX_DEFAULT_SYSTEM_BYTES = 4096;
constexpr size_t MAX_LINE_BYTES = 512;
constexpr size_t MAX_CUTOFF_BYTES = 32;

bool one_short_line(std::string_view s) {
  return s.size() <= MAX_LINE_BYTES && s.find_first_of("\n\r") == std::string_view::npos;
}

// chat_options_from_template, counting the characters examined in `scanned`. Every search runs
// once over the text, so a template costs time linear in its size: the default system message's
// heads are scanned each from where the last scan stopped (a head before that point would read the
// same characters to the same end).
chat_options options_read(std::string_view jinja, size_t& scanned) {
  chat_options opt;
  const std::string_view head = "<|im_start|>system\\n";
  size_t resume = 0;
  for (size_t p = jinja.find(head); p != std::string_view::npos; p = jinja.find(head, std::max(p + 1, resume))) {
    scanned += head.size();
    const literal_scan lit = jinja_literal(jinja, p + head.size(), "<|im_end|>", scanned);
    if (lit.text && !lit.text->empty() && lit.text->size() <= MAX_DEFAULT_SYSTEM_BYTES) {
      opt.default_system = *lit.text;
      break;
    }
    if (lit.stop == std::string_view::npos) break;  // no "<|im_end|>" after here: no later head has one either
    resume = lit.stop;
  }
  // Gemma 2's template raises on a system message; llama-server then merges it into the next one.
  if (jinja.find("System role not supported") != std::string_view::npos) opt.system_role = false;
  if (jinja.find("<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>") != std::string_view::npos)
    opt.open_think = jinja.find("<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>") != std::string_view::npos;
  // gpt-oss: the identity, knowledge cutoff and default reasoning level the file's template sets
  // (its build_system_message), when they are plain string literals.
  auto quoted_after = [&](std::string_view marker) -> std::optional<std::string> {
    const size_t p = jinja.find(marker);
    if (p == std::string_view::npos) return std::nullopt;
    size_t q = p + marker.size();
    while (q < jinja.size() && jinja[q] == ' ') ++q;
    if (q >= jinja.size() || (jinja[q] != '"' && jinja[q] != '\'')) return std::nullopt;
    const char quote = jinja[q];
    const size_t end = jinja.find(quote, q + 1);
    if (end == std::string_view::npos) return std::nullopt;
    const std::string_view lit = jinja.substr(q + 1, end - q - 1);
    if (lit.find('\\') != std::string_view::npos) return std::nullopt;  // escapes: keep the default
    if (!one_short_line(lit)) return std::nullopt;
    return std::string(lit);
  };
  if (auto v = quoted_after("set model_identity =")) opt.model_identity = *v;
  if (auto v = quoted_after("set reasoning_effort =")) opt.reasoning_effort = *v;
  if (const size_t p = jinja.find("Knowledge cutoff: "); p != std::string_view::npos) {
    const size_t e = jinja.find_first_of("\\\"'", p);
    if (e != std::string_view::npos && e - p - 18 <= MAX_CUTOFF_BYTES && one_short_line(jinja.substr(p + 18, e - p - 18)))
      opt.knowledge_cutoff = std::string(jinja.substr(p + 18, e - p - 18));
  }
  return opt;
}

}  // namespace

std::string chat_current_date() {
  if (const char* env = std::getenv("DETAUDIT_CHAT_DATE")) {
    const std::string d = env;
    auto digits = [&](size_t a, size_t b) {
      for (size_t i = a; i < b; ++i)
        if (d[i] < '0' || d[i] > '9') return false;
      return true;
    };
    bool ok = d.size() == 10 && d[4] == '-' && d[7] == '-' && digits(0, 4) && digits(5, 7) && digits(8, 10);
    if (ok) {
      const int y = std::stoi(d.substr(0, 4)), m = std::stoi(d.substr(5, 2)), day = std::stoi(d.substr(8, 2));
      const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
      const int days[12] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
      ok = m >= 1 && m <= 12 && day >= 1 && day <= days[m - 1];
    }
    if (!ok)
      throw input_error("DETAUDIT_CHAT_DATE '" + (d.size() > 40 ? d.substr(0, 40) + "...'" : d + "'") +
                        " is not a YYYY-MM-DD date");
    return d;
  }
  // The local date, as llama-server's strftime_now writes it.
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

chat_options chat_options_from_template(std::string_view jinja) {
  size_t scanned = 0;
  return options_read(jinja, scanned);
}

chat_template_info chat_template_parse(std::string_view jinja) {
  chat_template_info t;
  t.present = !jinja.empty();
  t.bytes = jinja.size();
  t.too_large = t.bytes > CHAT_TEMPLATE_MAX_BYTES;
  if (t.too_large) return t;
  t.family = chat_detect_family(jinja);
  t.options = options_read(jinja, t.scanned);
  return t;
}

std::string chat_render(template_family f, const std::vector<chat_message>& messages, bool add_generation_prompt,
                        const chat_options& opt) {
  const std::vector<chat_message> ms = messages_prepare(messages, opt);
  switch (f) {
    case TEMPLATE_CHATML: return render_chatml(ms, add_generation_prompt, opt);
    case TEMPLATE_QWEN3: return render_qwen3(ms, add_generation_prompt, opt);
    case TEMPLATE_DEEPSEEK_R1: return render_deepseek_r1(ms, add_generation_prompt, opt);
    case TEMPLATE_LLAMA3: return render_llama3(ms, add_generation_prompt, opt);
    case TEMPLATE_LLAMA2: return render_llama2(ms, opt);
    case TEMPLATE_PHI3: return render_phi3(ms, add_generation_prompt, opt);
    case TEMPLATE_GEMMA: return render_gemma(ms, add_generation_prompt, opt);
    case TEMPLATE_GPT_OSS: return render_gpt_oss(ms, add_generation_prompt, opt);
  }
  throw std::logic_error("chat_render: unknown template family");
}

std::optional<template_family> chat_fallback_family(std::string_view override_name, const chat_template_info& t) {
  if (override_name.empty() && !t.present) return TEMPLATE_CHATML;
  return std::nullopt;
}

std::optional<template_family> chat_fallback_family(std::string_view override_name, std::string_view jinja) {
  if (override_name.empty() && jinja.empty()) return TEMPLATE_CHATML;
  return std::nullopt;
}

family_choice chat_choose_family(std::string_view override_name, const chat_template_info& t, const std::string& origin) {
  const char* const choices = "chatml|qwen3|deepseek-r1|llama3|llama2|phi3|gemma|gpt-oss";
  if (!override_name.empty()) {
    std::optional<template_family> f = template_family_from_name(override_name);
    if (!f) throw input_error("unknown chat template '" + std::string(override_name) + "'; expected " + choices);
    return {*f, false};
  }
  if (std::optional<template_family> f = chat_fallback_family(override_name, t)) return {*f, true};
  if (t.too_large)
    throw input_error(origin + ": chat template is " + std::to_string(t.bytes) + " bytes, more than the " +
                      std::to_string(CHAT_TEMPLATE_MAX_BYTES) + " detaudit reads; pass --chat-template " + choices);
  if (!t.family) throw input_error(origin + ": chat template not recognised; pass --chat-template " + choices);
  return {*t.family, false};
}

family_choice chat_choose_family(std::string_view override_name, std::string_view jinja, const std::string& origin) {
  return chat_choose_family(override_name, chat_template_parse(jinja), origin);
}

template_family chat_resolve_family(std::string_view override_name, const chat_template_info& t, const std::string& origin) {
  return chat_choose_family(override_name, t, origin).family;
}

template_family chat_resolve_family(std::string_view override_name, std::string_view jinja, const std::string& origin) {
  return chat_choose_family(override_name, jinja, origin).family;
}

}  // namespace detaudit::chat
