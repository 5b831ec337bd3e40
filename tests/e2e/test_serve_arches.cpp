// detaudit serve on each architecture beyond llama: a synthetic model with the chat template its
// family ships, answered on /v1/chat/completions exactly as /completion answers the rendered text.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "gguf/gguf.h"
#include "model/synth.h"
#include "serve_util.h"
#include "synth_util.h"
#include "test_util.h"

using json = nlohmann::json;
using namespace detaudit;

namespace {

// A synth model of `arch` rewritten with `jinja` as its chat template.
std::string synth_with_template(model::arch_id arch, const std::string& jinja) {
  const std::string dir = test::process_scratch_dir(std::string("serve_arches_") + model::arch_name(arch));
  model::synth_write(test::small_model(arch, gguf::DTYPE_Q8_0), dir + "/plain.gguf");
  const gguf::file f = gguf::file::open(dir + "/plain.gguf");
  gguf::writer w(f.alignment());
  for (const gguf::kv& e : f.metadata())
    if (e.key != "general.alignment") w.set(e.key, e.val);
  w.set("tokenizer.chat_template", gguf::value::of_string(jinja));
  for (const gguf::tensor_info& t : f.tensors()) w.add_tensor(t.name, t.type, t.ne, f.tensor_data(t), t.n_bytes);
  w.write(dir + "/chat.gguf");
  return dir + "/chat.gguf";
}

// The template of Phi-3-mini-4k-instruct's tokenizer_config.json (its markers are what detection reads).
const char* const PHI3_JINJA =
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + "
    "'<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif "
    "message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor "
    "%}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}";

// google/gemma-2-2b-it's template (llama.cpp keeps it as models/templates/google-gemma-2-2b-it.jinja).
const char* const GEMMA2_JINJA =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif "
    "%}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "(message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ "
    "'<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if "
    "add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";

}  // namespace

TEST_CASE("serve arches: phi3 with its chat template answers /v1/chat/completions as /completion answers the phi3 text") {
  const std::string path = synth_with_template(model::ARCH_PHI3, PHI3_JINJA);
  test::serve_child srv({"-np", "1", "-c", "256"}, path);
  auto c = test::http_client(srv.port);
  auto props = c.Get("/props");
  REQUIRE(props);
  REQUIRE(props->status == 200);
  CHECK(json::parse(props->body)["chat_template"] == PHI3_JINJA);
  const json messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}};
  const char* rendered = "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n";
  const json plain = test::post_json(srv.port, "/completion", {{"prompt", rendered}, {"n_predict", 8}, {"temperature", 0}});
  const json chat = test::post_json(srv.port, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}});
  REQUIRE(chat.contains("choices"));
  CHECK(chat["choices"][0]["message"]["content"] == plain["content"]);
  CHECK(chat["usage"]["prompt_tokens"] == plain["tokens_evaluated"]);
  CHECK(chat["usage"]["completion_tokens"] == 8);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve arches: gemma2 with its template renders model turns on /v1/chat/completions and broken alternation is a 400") {
  const std::string path = synth_with_template(model::ARCH_GEMMA2, GEMMA2_JINJA);
  test::serve_child srv({"-np", "1", "-c", "256"}, path);
  const json messages = {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Yo"}},
                         {{"role", "user"}, {"content", "More"}}};
  const char* rendered = "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n<start_of_turn>user\nMore<end_of_turn>\n<start_of_turn>model\n";
  const json plain = test::post_json(srv.port, "/completion", {{"prompt", rendered}, {"n_predict", 6}, {"temperature", 0}});
  const json chat = test::post_json(srv.port, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 6}, {"temperature", 0}});
  REQUIRE(chat.contains("choices"));
  CHECK(chat["choices"][0]["message"]["content"] == plain["content"]);
  CHECK(chat["usage"]["prompt_tokens"] == plain["tokens_evaluated"]);
  auto c = test::http_client(srv.port);
  const json twice = {{"messages", {{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}}}};
  auto r = c.Post("/v1/chat/completions", twice.dump(), "application/json");
  REQUIRE(r);
  CHECK(r->status == 400);
  CHECK(r->body.find("alternate") != std::string::npos);
  CHECK(srv.stop() == 0);
}

// The template is Gemma 2's, which raises on a system message: llama-server merges the system text
// into the first user message, joined by one newline (tests/data/llamacpp-2026-08/chat-renders.json,
// gemma/system-user), and so does detaudit serve.
TEST_CASE("serve arches: gemma3 puts the system text in the first user turn, as /completion answers that text") {
  const std::string path = synth_with_template(model::ARCH_GEMMA3, GEMMA2_JINJA);
  test::serve_child srv({"-np", "2", "-c", "512"}, path);
  const json messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}};
  const char* rendered = "<start_of_turn>user\nBe brief.\nHi<end_of_turn>\n<start_of_turn>model\n";
  const json plain = test::post_json(srv.port, "/completion", {{"prompt", rendered}, {"n_predict", 12}, {"temperature", 0}});
  const json chat = test::post_json(srv.port, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 12}, {"temperature", 0}});
  REQUIRE(chat.contains("choices"));
  CHECK(chat["choices"][0]["message"]["content"] == plain["content"]);
  CHECK(chat["usage"]["prompt_tokens"] == plain["tokens_evaluated"]);
  CHECK(chat["usage"]["completion_tokens"] == 12);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve arches: qwen3moe answers /v1/chat/completions as /completion, and alike alone and among concurrent requests") {
  const char* chatml =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  const std::string path = synth_with_template(model::ARCH_QWEN3MOE, chatml);
  test::serve_child srv({"-np", "4", "-c", "1024"}, path);
  const json messages = {{{"role", "user"}, {"content", "Hi"}}};
  const char* rendered = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  const json request = {{"prompt", rendered}, {"n_predict", 12}, {"temperature", 0}, {"cache_prompt", false}};
  const json plain = test::post_json(srv.port, "/completion", request);
  const json chat = test::post_json(srv.port, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 12}, {"temperature", 0}});
  REQUIRE(chat.contains("choices"));
  CHECK(chat["choices"][0]["message"]["content"] == plain["content"]);
  CHECK(chat["usage"]["prompt_tokens"] == plain["tokens_evaluated"]);
  // Four at once share forward steps (the experts see other requests' rows): the same answer.
  std::vector<std::string> answers(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < answers.size(); ++i)
    threads.emplace_back([&, i] {
      auto r = test::http_client(srv.port).Post("/completion", request.dump(), "application/json");
      if (r && r->status == 200) answers[i] = r->body;
    });
  for (std::thread& t : threads) t.join();
  for (const std::string& a : answers) {
    REQUIRE_FALSE(a.empty());
    CHECK(json::parse(a)["content"] == plain["content"]);
  }
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve arches: gpt-oss renders harmony on /v1/chat/completions with the pinned date, and channel tags in content are a 400") {
  // The markers of openai/gpt-oss-120b's harmony template (its generation prompt and a channel).
  const char* harmony =
      "{{- \"<|start|>system<|message|>\" }}{%- for message in messages -%}{{- \"<|start|>\" + message.role + "
      "\"<|channel|>final<|message|>\" + message.content + \"<|end|>\" }}{%- endfor -%}"
      "{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}";
  const std::string path = synth_with_template(model::ARCH_GPT_OSS, harmony);
  setenv("DETAUDIT_CHAT_DATE", "2026-12-01", 1);
  test::serve_child srv({"-np", "2", "-c", "1024"}, path);
  unsetenv("DETAUDIT_CHAT_DATE");
  const json messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}};
  // What the harmony template writes for these messages (system message, the system text as the
  // developer's instructions, the user turn, the generation prompt).
  const char* rendered =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n"
      "Current date: 2026-12-01\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be "
      "included for every message.<|end|><|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>"
      "<|start|>user<|message|>Hi<|end|><|start|>assistant";
  const json plain = test::post_json(srv.port, "/completion", {{"prompt", rendered}, {"n_predict", 10}, {"temperature", 0}});
  const json chat = test::post_json(srv.port, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 10}, {"temperature", 0}});
  REQUIRE(chat.contains("choices"));
  CHECK(chat["choices"][0]["message"]["content"] == plain["content"]);
  CHECK(chat["usage"]["prompt_tokens"] == plain["tokens_evaluated"]);
  CHECK(chat["usage"]["completion_tokens"] == 10);
  // chat_template_kwargs.reasoning_effort reaches the system message, as llama-server passes it
  std::string high = rendered;
  high.replace(high.find("Reasoning: medium"), 17, "Reasoning: high");
  const json plain_high = test::post_json(srv.port, "/completion", {{"prompt", high}, {"n_predict", 10}, {"temperature", 0}});
  const json chat_high = test::post_json(srv.port, "/v1/chat/completions",
                                         {{"messages", messages}, {"max_tokens", 10}, {"temperature", 0},
                                          {"chat_template_kwargs", {{"reasoning_effort", "high"}}}});
  REQUIRE(chat_high.contains("choices"));
  CHECK(chat_high["choices"][0]["message"]["content"] == plain_high["content"]);
  CHECK(chat_high["usage"]["prompt_tokens"] == plain_high["tokens_evaluated"]);
  auto c = test::http_client(srv.port);
  const json bad_effort = {{"messages", messages}, {"chat_template_kwargs", {{"reasoning_effort", 3}}}};
  auto be = c.Post("/v1/chat/completions", bad_effort.dump(), "application/json");
  REQUIRE(be);
  CHECK(be->status == 400);
  const json tagged = {{"messages",
                        {{{"role", "user"}, {"content", "a"}},
                         {{"role", "assistant"}, {"content", "<|channel|>final<|message|>b"}},
                         {{"role", "user"}, {"content", "c"}}}}};
  auto r = c.Post("/v1/chat/completions", tagged.dump(), "application/json");
  REQUIRE(r);
  CHECK(r->status == 400);
  CHECK(r->body.find("<|channel|> tags") != std::string::npos);
  CHECK(srv.stop() == 0);
  // A DETAUDIT_CHAT_DATE that is no date is the server's configuration: refused at start, not a 400 later.
  const test::cmd_result bad = test::run_cmd("DETAUDIT_CHAT_DATE=2026-02-30 timeout 30 " + test::shell_quote(test::detaudit_bin()) +
                                             " serve -m " + test::shell_quote(path) + " --port 0");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("DETAUDIT_CHAT_DATE '2026-02-30' is not a YYYY-MM-DD date") != std::string::npos);
}
