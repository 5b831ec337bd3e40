// Chat rendering. Each expected string is what the family's published Jinja template renders for
// the same messages, worked out by hand from the template text (tokenizer_config.json
// "chat_template" of: Qwen/Qwen2.5-7B-Instruct, Qwen/Qwen3-0.6B,
// deepseek-ai/DeepSeek-R1-Distill-Qwen-32B, meta-llama/Meta-Llama-3-8B-Instruct,
// meta-llama/Llama-2-7b-chat-hf, microsoft/Phi-3.5-mini-instruct, openai/gpt-oss-120b), with
// bos_token / eos_token the tokenizer's special tokens.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "util/error.h"

using namespace detaudit::chat;

namespace {

const std::string BOS_R1 = "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
const std::string EOS_R1 = "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
const std::string USER_R1 = "<\xef\xbd\x9cUser\xef\xbd\x9c>";
const std::string ASST_R1 = "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>";

std::vector<chat_message> sys_user() { return {{"system", "You are terse."}, {"user", "Hi"}}; }

}  // namespace

TEST_CASE("chat: chatml renders Qwen2.5's template with its default system message") {
  CHECK(chat_render(TEMPLATE_CHATML, sys_user(), true) ==
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  chat_options opt;
  opt.default_system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
  CHECK(chat_render(TEMPLATE_CHATML, {{"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}}, true, opt) ==
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"
        "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
  CHECK(chat_render(TEMPLATE_CHATML, {{"user", "Hi"}}, false) == "<|im_start|>user\nHi<|im_end|>\n");
  // The literal default system message is read from the template source (Jinja escapes resolved).
  const std::string qwen25 =
      "{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n        {{- '<|im_start|>system\\n' + "
      "messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n        {{- '<|im_start|>system\\nYou are Qwen, "
      "created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n    {%- endif %}";
  CHECK(chat_options_from_template(qwen25).default_system == opt.default_system);
  CHECK(chat_options_from_template("{{ '<|im_start|>' + message['role'] }}").default_system.empty());
}

TEST_CASE("chat: qwen3 renders the enable_thinking switch and strips past reasoning") {
  chat_options off;
  off.enable_thinking = false;
  CHECK(chat_render(TEMPLATE_QWEN3, {{"user", "Hi"}}, true, off) ==
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  CHECK(chat_render(TEMPLATE_QWEN3, sys_user(), true) ==
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // Reasoning of turns before the last user message is dropped.
  CHECK(chat_render(TEMPLATE_QWEN3, {{"user", "a"}, {"assistant", "<think>\nr\n</think>\n\nB"}, {"user", "c"}}, true) ==
        "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nB<|im_end|>\n<|im_start|>user\nc<|im_end|>\n"
        "<|im_start|>assistant\n");
  // The last assistant turn after the last user message keeps it, normalised.
  CHECK(chat_render(TEMPLATE_QWEN3, {{"user", "a"}, {"assistant", "<think>r</think>B"}}, false) ==
        "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\nB<|im_end|>\n");
}

TEST_CASE("chat: deepseek-r1 puts the system prompt after BOS and opens a think block") {
  chat_options opt;
  opt.bos_token = BOS_R1;
  opt.leading_bos = true;
  CHECK(chat_render(TEMPLATE_DEEPSEEK_R1, sys_user(), true, opt) ==
        BOS_R1 + "You are terse." + USER_R1 + "Hi" + ASST_R1 + "<think>\n");
  opt.leading_bos = false;  // the tokenizer adds BOS: not doubled
  CHECK(chat_render(TEMPLATE_DEEPSEEK_R1, {{"user", "Hi"}, {"assistant", "<think>x</think>Yes"}, {"user", "Ok"}}, true, opt) ==
        USER_R1 + "Hi" + ASST_R1 + "Yes" + EOS_R1 + USER_R1 + "Ok" + ASST_R1 + "<think>\n");
  opt.open_think = false;  // templates before January 2025
  CHECK(chat_render(TEMPLATE_DEEPSEEK_R1, {{"user", "Hi"}}, true, opt) == USER_R1 + "Hi" + ASST_R1);
  CHECK(chat_options_from_template("{{'" + ASST_R1 + "<think>\\n'}}").open_think);
  CHECK_FALSE(chat_options_from_template("{{'" + ASST_R1 + "'}}").open_think);
}

TEST_CASE("chat: llama3 renders headers, trims content and writes BOS only when asked") {
  chat_options opt;
  opt.bos_token = "<|begin_of_text|>";
  opt.leading_bos = true;
  CHECK(chat_render(TEMPLATE_LLAMA3, {{"system", " S "}, {"user", "Hi\n"}}, true, opt) ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  opt.leading_bos = false;
  CHECK(chat_render(TEMPLATE_LLAMA3, {{"user", "Hi"}}, false, opt) == "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST_CASE("chat: llama2 wraps the system prompt in SYS tags and writes BOS and EOS between turns") {
  chat_options opt;
  opt.bos_token = "<s>";
  opt.eos_token = "</s>";
  CHECK(chat_render(TEMPLATE_LLAMA2, {{"system", "S"}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}}, true, opt) ==
        "[INST] <<SYS>>\nS\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Bye [/INST]");
  opt.leading_bos = true;
  CHECK(chat_render(TEMPLATE_LLAMA2, {{"user", " Hi "}}, true, opt) == "<s>[INST] Hi [/INST]");
  CHECK_THROWS_AS(chat_render(TEMPLATE_LLAMA2, {{"user", "a"}, {"user", "b"}}, true, opt), detaudit::input_error);
  CHECK_THROWS_AS(chat_render(TEMPLATE_LLAMA2, {{"assistant", "a"}}, true, opt), detaudit::input_error);
}

TEST_CASE("chat: phi3 renders role tags, skips an empty system message and ends with EOS without a generation prompt") {
  chat_options opt;
  opt.eos_token = "<|endoftext|>";
  CHECK(chat_render(TEMPLATE_PHI3, sys_user(), true, opt) ==
        "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n");
  CHECK(chat_render(TEMPLATE_PHI3, {{"system", ""}, {"user", "Hi"}, {"assistant", "Yo"}}, false, opt) ==
        "<|user|>\nHi<|end|>\n<|assistant|>\nYo<|end|>\n<|endoftext|>");
}

TEST_CASE("chat: gemma renders model turns, opens the first user turn with the system text and requires alternation") {
  chat_options opt;
  opt.bos_token = "<bos>";
  opt.leading_bos = true;
  CHECK(chat_render(TEMPLATE_GEMMA, sys_user(), true, opt) ==
        "<bos><start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
  opt.leading_bos = false;
  CHECK(chat_render(TEMPLATE_GEMMA, {{"user", " Hi \n"}, {"assistant", "Yo"}, {"user", "More"}}, false, opt) ==
        "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n<start_of_turn>user\nMore<end_of_turn>\n");
  CHECK_THROWS_WITH_AS(chat_render(TEMPLATE_GEMMA, {{"user", "a"}, {"user", "b"}}, true, opt), doctest::Contains("alternate"),
                       detaudit::input_error);
  CHECK_THROWS_AS(chat_render(TEMPLATE_GEMMA, {{"assistant", "a"}}, true, opt), detaudit::input_error);
  CHECK_THROWS_AS(chat_render(TEMPLATE_GEMMA, {{"system", "s"}, {"system", "t"}}, true, opt), detaudit::input_error);
  // detection: the markers of Gemma's templates; phi3 and chatml markers are not confused with them
  CHECK(chat_detect_family("{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}") == TEMPLATE_GEMMA);
  CHECK(chat_resolve_family("gemma", "", "m.gguf") == TEMPLATE_GEMMA);
}

TEST_CASE("chat: gpt-oss renders harmony: the system message with its date, developer instructions, final-channel turns") {
  chat_options opt;
  opt.current_date = "2026-12-01";
  const std::string head =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n"
      "Current date: 2026-12-01\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be "
      "included for every message.<|end|>";
  CHECK(chat_render(TEMPLATE_GPT_OSS, sys_user(), true, opt) ==
        head + "<|start|>developer<|message|># Instructions\n\nYou are terse.\n\n<|end|><|start|>user<|message|>Hi<|end|>"
               "<|start|>assistant");
  // no system message: no developer message; earlier assistant turns end with <|end|>, a last one
  // without a generation prompt with <|return|>; an empty system message writes no developer turn
  CHECK(chat_render(TEMPLATE_GPT_OSS, {{"user", "a"}, {"assistant", "b"}, {"user", "c"}, {"assistant", "d"}}, false, opt) ==
        head + "<|start|>user<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>b<|end|>"
               "<|start|>user<|message|>c<|end|><|start|>assistant<|channel|>final<|message|>d<|return|>");
  CHECK(chat_render(TEMPLATE_GPT_OSS, {{"system", ""}, {"user", "a"}}, true, opt) ==
        head + "<|start|>user<|message|>a<|end|><|start|>assistant");
  opt.reasoning_effort = "high";
  CHECK(chat_render(TEMPLATE_GPT_OSS, {{"user", "a"}}, true, opt).find("Reasoning: high\n\n") != std::string::npos);
  CHECK_THROWS_WITH_AS(chat_render(TEMPLATE_GPT_OSS, {{"user", "a"}, {"assistant", "x<|channel|>analysis<|message|>y"}}, true, opt),
                       doctest::Contains("<|channel|> tags"), detaudit::input_error);
  // the date: DETAUDIT_CHAT_DATE pins it when the options leave it empty, and must be a date
  setenv("DETAUDIT_CHAT_DATE", "2031-02-03", 1);
  CHECK(chat_current_date() == "2031-02-03");
  CHECK(chat_render(TEMPLATE_GPT_OSS, {{"user", "a"}}, true).find("Current date: 2031-02-03\n") != std::string::npos);
  for (const char* bad : {"2031-2-3", "yesterday", "2031-13-01", "2031-02-32", "", "2031-02-03x", "2026-02-29", "2026-04-31"}) {
    setenv("DETAUDIT_CHAT_DATE", bad, 1);
    CHECK_THROWS_AS(chat_current_date(), detaudit::input_error);
  }
  setenv("DETAUDIT_CHAT_DATE", "2028-02-29", 1);  // a leap day
  CHECK(chat_current_date() == "2028-02-29");
  setenv("DETAUDIT_CHAT_DATE", std::string(5000, '9').c_str(), 1);
  try {
    chat_current_date();
    FAIL("accepted");
  } catch (const detaudit::input_error& e) {
    CHECK(std::string(e.what()).size() < 120);  // the value is cut short in the message
  }
  unsetenv("DETAUDIT_CHAT_DATE");
  const std::string today = chat_current_date();
  CHECK(today.size() == 10);
  CHECK(today[4] == '-');
  // detection: harmony's markers; its <|end|> does not make it phi3
  CHECK(chat_detect_family("{{- \"<|start|>assistant<|channel|>final<|message|>\" + message.content + \"<|end|>\" }}") ==
        TEMPLATE_GPT_OSS);
  CHECK(chat_resolve_family("gpt-oss", "", "m.gguf") == TEMPLATE_GPT_OSS);
  // A file's own template sets the identity, cutoff and default reasoning level its system message writes.
  const chat_options own = chat_options_from_template(
      "{%- macro build_system_message() -%}{%- if model_identity is not defined %}{%- set model_identity = \"You are Bob.\" %}"
      "{%- endif %}{{- model_identity + \"\\n\" }}{{- \"Knowledge cutoff: 2030-01\\n\" }}{%- if reasoning_effort is not defined %}"
      "{%- set reasoning_effort = \"low\" %}{%- endif %}{%- endmacro -%}<|start|>assistant<|channel|>final");
  CHECK(own.model_identity == "You are Bob.");
  CHECK(own.knowledge_cutoff == "2030-01");
  CHECK(own.reasoning_effort == "low");
  chat_options pinned = own;
  pinned.current_date = "2026-12-01";
  CHECK(chat_render(TEMPLATE_GPT_OSS, {{"user", "a"}}, true, pinned).rfind(
            "<|start|>system<|message|>You are Bob.\nKnowledge cutoff: 2030-01\nCurrent date: 2026-12-01\n\nReasoning: low\n\n", 0) == 0);
}

TEST_CASE("chat: unknown roles are input errors") {
  CHECK_THROWS_AS(chat_render(TEMPLATE_CHATML, {{"tool", "x"}}, true), detaudit::input_error);
}

TEST_CASE("chat: the family comes from an override name, the template, or chatml for a file without one") {
  CHECK(chat_resolve_family("llama3", "", "m.gguf") == TEMPLATE_LLAMA3);
  CHECK(chat_resolve_family("", "<|im_start|>x<|im_end|>", "m.gguf") == TEMPLATE_CHATML);
  CHECK(chat_resolve_family("phi3", "<|im_start|>x<|im_end|>", "m.gguf") == TEMPLATE_PHI3);
  // no template at all: chatml, as llama-server does, and the caller can tell
  const family_choice none = chat_choose_family("", "", "m.gguf");
  CHECK(none.family == TEMPLATE_CHATML);
  CHECK(none.fallback);
  CHECK(chat_fallback_family("", "") == TEMPLATE_CHATML);
  // an override or a template of the file's own is never the fallback
  CHECK_FALSE(chat_choose_family("llama2", "", "m.gguf").fallback);
  CHECK(chat_choose_family("llama2", "", "m.gguf").family == TEMPLATE_LLAMA2);
  CHECK_FALSE(chat_fallback_family("llama2", "").has_value());
  CHECK_FALSE(chat_choose_family("", "<|im_start|>x<|im_end|>", "m.gguf").fallback);
  CHECK_FALSE(chat_fallback_family("", "{{ messages }}").has_value());
  // a template that is present but fits no family stays an error
  try {
    chat_choose_family("", "{{ messages }}", "model.gguf");
    FAIL("expected an input_error");
  } catch (const detaudit::input_error& e) {
    CHECK(std::string(e.what()) ==
          "model.gguf: chat template not recognised; pass --chat-template chatml|qwen3|deepseek-r1|llama3|llama2|phi3|gemma|gpt-oss");
  }
  CHECK_THROWS_AS(chat_resolve_family("", "{{ messages }}", "model.gguf"), detaudit::input_error);
  CHECK_THROWS_AS(chat_resolve_family("vicuna", "", "m.gguf"), detaudit::input_error);
}

// Issue 47.4: a 2 MB template still detected as chatml cost 27 s of CPU per chat request (the
// default-system search ran to the end of the text from every "<|im_start|>system\n"). A template
// is read once, at model load, in time linear in its size; past CHAT_TEMPLATE_MAX_BYTES it is not
// read at all, and chat without --chat-template is refused naming its size.
TEST_CASE("chat: a template is read in linear time, and one past the cap is refused for chat, naming its size") {
  // Heads of the default system message, each followed by an expression, and the end marker only
  // at the very end: each head's search for that end used to run to the end of the text.
  std::string worst;
  while (worst.size() + 64 < CHAT_TEMPLATE_MAX_BYTES) worst += "<|im_start|>system\\n{{ x }}";
  worst += "<|im_end|>";
  const chat_template_info t = chat_template_parse(worst);
  CHECK(t.present);
  CHECK_FALSE(t.too_large);
  CHECK(t.family == TEMPLATE_CHATML);
  CHECK(t.options.default_system.empty());  // no head is followed by a literal
  CHECK(t.scanned <= 2 * worst.size());
  // The same answer as on a template of two heads (the scans agree with a scan from each head).
  CHECK(chat_options_from_template("<|im_start|>system\\n{{ x }}<|im_end|><|im_start|>system\\nHello\\n<|im_end|>").default_system ==
        "Hello\n");
  CHECK(chat_options_from_template("<|im_start|>system\\n<|im_end|><|im_start|>system\\nA\\<|im_end|>").default_system == "A\\");

  const std::string big = std::string(2 * 1000 * 1000, ' ') + "<|im_start|>x<|im_end|>";
  const chat_template_info b = chat_template_parse(big);
  CHECK(b.present);
  CHECK(b.too_large);
  CHECK(b.bytes == big.size());
  CHECK_FALSE(b.family.has_value());
  CHECK(b.scanned == 0);
  CHECK_FALSE(chat_fallback_family("", b).has_value());  // present: never the no-template fallback
  try {
    chat_choose_family("", b, "big.gguf");
    FAIL("expected an input_error");
  } catch (const detaudit::input_error& e) {
    CHECK(std::string(e.what()) == "big.gguf: chat template is 2000023 bytes, more than the 1048576 detaudit reads; pass "
                                   "--chat-template chatml|qwen3|deepseek-r1|llama3|llama2|phi3|gemma|gpt-oss");
  }
  CHECK(chat_choose_family("chatml", b, "big.gguf").family == TEMPLATE_CHATML);
}

// The hostile review of issue 47: a template's "Knowledge cutoff: " or default system message ran
// to the next quote or end marker, 900 KB long, and every chat prompt then held it.
TEST_CASE("chat: what a template sets is bounded: a long or multi-line value keeps the default") {
  const chat_options dflt;
  const std::string long_cutoff = "{{- \"Knowledge cutoff: " + std::string(900 * 1000, 'x') + "\\n\" }}";
  CHECK(chat_options_from_template(long_cutoff).knowledge_cutoff == dflt.knowledge_cutoff);
  CHECK(chat_options_from_template("{{- \"Knowledge cutoff: 2025-01\\n\" }}").knowledge_cutoff == "2025-01");
  CHECK(chat_options_from_template("{{- \"Knowledge cutoff: 2025\n-01\" }}").knowledge_cutoff == dflt.knowledge_cutoff);
  const std::string long_system = "<|im_start|>system\\n" + std::string(5000, 'y') + "<|im_end|>";
  CHECK(chat_options_from_template(long_system).default_system.empty());
  CHECK(chat_options_from_template("<|im_start|>system\\n" + std::string(4000, 'y') + "<|im_end|>").default_system ==
        std::string(4000, 'y'));
  const std::string long_identity = "{%- set model_identity = \"" + std::string(600, 'z') + "\" %}";
  CHECK(chat_options_from_template(long_identity).model_identity == dflt.model_identity);
  CHECK(chat_options_from_template("{%- set reasoning_effort = \"high\" %}").reasoning_effort == "high");
}
