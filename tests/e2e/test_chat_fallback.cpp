// The chat template fallback, as llama-server's: a model file with no tokenizer.chat_template is
// rendered with chatml, and says so (serve: a line at start and /props; generate --chat: a line).
// A template that is present but not recognised stays an error; --chat-template decides always.
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "serve_util.h"
#include "test_util.h"

using json = nlohmann::json;
using namespace detaudit;

namespace {

// stories260K, which has no tokenizer.chat_template, rewritten with `jinja` as its template.
std::string stories_with_template(const std::string& name, const std::string& jinja) {
  const gguf::file f = gguf::file::open(test::fixture("models/stories260K.gguf"));
  REQUIRE(f.find("tokenizer.chat_template") == nullptr);
  gguf::writer w(f.alignment());
  for (const gguf::kv& e : f.metadata())
    if (e.key != "general.alignment") w.set(e.key, e.val);
  w.set("tokenizer.chat_template", gguf::value::of_string(jinja));
  for (const gguf::tensor_info& t : f.tensors()) w.add_tensor(t.name, t.type, t.ne, f.tensor_data(t), t.n_bytes);
  const std::string path = test::process_scratch_dir("chat_fallback_" + name) + "/" + name + ".gguf";
  w.write(path);
  return path;
}

const char* const CHATML_JINJA =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

json get_json(int port, const std::string& path) {
  auto c = test::http_client(port);
  auto r = c.Get(path.c_str());
  REQUIRE(r);
  REQUIRE(r->status == 200);
  return json::parse(r->body);
}

const json MESSAGES = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}};
// MESSAGES as chatml writes them (no default system message: chat_options_from_template("")).
const char* const MESSAGES_CHATML =
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";

const char* const NOTE = "has no chat template; chat requests are rendered with chatml, as llama-server does";

}  // namespace

TEST_CASE("chat_fallback: serve renders chat with chatml for a model without a template and says so") {
  test::serve_child srv({"-np", "1", "-c", "256"});
  const std::string err = test::file_text(srv.err_path);
  CHECK(err.find("serve: " + test::fixture("models/stories260K.gguf") + " " + NOTE) != std::string::npos);
  const json props = get_json(srv.port, "/props");
  CHECK(props["chat_template"] == "");
  CHECK(props.value("chat_template_fallback", "") == "chatml");

  // the chat answer is the completion of the chatml text
  const json plain = test::post_json(srv.port, "/completion", {{"prompt", MESSAGES_CHATML}, {"n_predict", 8}});
  const json chat = test::post_json(srv.port, "/v1/chat/completions", {{"messages", MESSAGES}, {"max_tokens", 8}});
  REQUIRE(chat.contains("choices"));
  CHECK(chat["choices"][0]["message"]["content"] == plain["content"]);
  CHECK(chat["usage"]["prompt_tokens"] == plain["tokens_evaluated"]);
  const json ollama = test::post_json(srv.port, "/api/chat",
                                      {{"messages", MESSAGES}, {"stream", false}, {"options", {{"num_predict", 8}}}});
  REQUIRE(ollama.contains("message"));
  CHECK(ollama["message"]["content"] == plain["content"]);
  CHECK(ollama["prompt_eval_count"] == plain["tokens_evaluated"]);
  CHECK(srv.stop() == 0);
}

TEST_CASE("chat_fallback: /props names the fallback only when it is used") {
  {  // --chat-template decides: no fallback
    test::serve_child srv({"-np", "1", "-c", "256", "--chat-template", "chatml"});
    CHECK_FALSE(get_json(srv.port, "/props").contains("chat_template_fallback"));
    CHECK(test::file_text(srv.err_path).find(NOTE) == std::string::npos);
  }
  {  // the file's own template decides
    test::serve_child srv({"-np", "1", "-c", "256"}, stories_with_template("chatml", CHATML_JINJA));
    const json props = get_json(srv.port, "/props");
    CHECK(props["chat_template"] == CHATML_JINJA);
    CHECK_FALSE(props.contains("chat_template_fallback"));
    CHECK(test::file_text(srv.err_path).find(NOTE) == std::string::npos);
    const json chat = test::post_json(srv.port, "/v1/chat/completions", {{"messages", MESSAGES}, {"max_tokens", 2}});
    CHECK(chat.contains("choices"));
  }
}

TEST_CASE("chat_fallback: a template that is present but not recognised is still 400 on the chat routes") {
  const std::string model = stories_with_template("unknown", "{{ messages }}");
  test::serve_child srv({"-np", "1", "-c", "256"}, model);
  CHECK_FALSE(get_json(srv.port, "/props").contains("chat_template_fallback"));
  CHECK(test::file_text(srv.err_path).find(NOTE) == std::string::npos);
  for (const char* route : {"/v1/chat/completions", "/api/chat"}) {
    CAPTURE(route);
    const json e = test::post_json(srv.port, route, {{"messages", MESSAGES}, {"stream", false}}, 400);
    REQUIRE(e.contains("error"));
    // The file's name, not where it lives: the server's clients learn nothing of its folders.
    CHECK(e["error"]["message"] == std::filesystem::path(model).filename().string() +
                                       ": chat template not recognised; pass --chat-template "
                                       "chatml|qwen3|deepseek-r1|llama3|llama2|phi3|gemma|gpt-oss");
  }
  CHECK(srv.stop() == 0);
}

TEST_CASE("chat_fallback: generate --chat renders a model without a template with chatml and says so") {
  const std::string bin = test::shell_quote(test::detaudit_bin());
  const std::string stories = test::fixture("models/stories260K.gguf");
  const std::string base = bin + " generate -m " + test::shell_quote(stories) + " -n 4 --json ";
  const test::cmd_result chat = test::run_cmd(base + "--chat --system 'Be brief.' -p Hi");
  REQUIRE(chat.exit_code == 0);
  CHECK(chat.err == "generate: " + stories + " has no chat template; --chat renders the prompt with chatml, as "
                                             "llama-server does\n");
  const test::cmd_result plain = test::run_cmd(base + "-p " + test::shell_quote(MESSAGES_CHATML));
  REQUIRE(plain.exit_code == 0);
  CHECK(json::parse(chat.out)["prompt_tokens"] == json::parse(plain.out)["prompt_tokens"]);
  CHECK(json::parse(chat.out)["tokens"] == json::parse(plain.out)["tokens"]);

  const test::cmd_result named = test::run_cmd(base + "--chat --chat-template chatml -p Hi");
  CHECK(named.exit_code == 0);
  CHECK(named.err.empty());
  const std::string unknown_model = test::shell_quote(stories_with_template("unknown_gen", "{{ messages }}"));
  const test::cmd_result unknown = test::run_cmd(bin + " generate -m " + unknown_model + " --chat -p Hi -n 2");
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.err.find("chat template not recognised; pass --chat-template chatml|qwen3|deepseek-r1|llama3|llama2|phi3|gemma|gpt-oss") !=
        std::string::npos);
}
