// Reasoning models: the thinking a server returns apart from the answer (llama-server, vLLM and
// SGLang's reasoning_content, newer vLLM's reasoning, ollama's thinking) is recorded, compared as
// its own stream, counted, and never graded.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "probes/response_limits.h"
#include "probes/target_http.h"
#include "reports/audit/record.h"
#include "reports/compare.h"
#include "test_reports_util.h"

using namespace detaudit;
using json = nlohmann::json;

TEST_CASE("reasoning: each dialect's thinking field is recorded apart from the answer") {
  reports::record chat;
  probes::openai_parse(json::parse(R"({"choices": [{"message": {"role": "assistant", "content": "#### 7",
      "reasoning_content": "3 + 4 is 7."}, "finish_reason": "stop"}],
      "usage": {"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 6}}})"),
                       true, chat);
  CHECK(chat.text == "#### 7");
  CHECK(chat.reasoning == "3 + 4 is 7.");
  CHECK(chat.usage["reasoning_tokens"] == 6);
  reports::record vllm;
  probes::openai_parse(json::parse(R"({"choices": [{"message": {"content": "7", "reasoning": "add"}}]})"), true, vllm);
  CHECK(vllm.reasoning == "add");
  reports::record ollama;
  probes::ollama_parse(json::parse(R"({"message": {"role": "assistant", "content": "7", "thinking": "add them"}, "done": true})"),
                       true, ollama);
  CHECK(ollama.text == "7");
  CHECK(ollama.reasoning == "add them");
  reports::record gen;
  probes::ollama_parse(json::parse(R"({"response": "7", "thinking": "sum", "done": true})"), false, gen);
  CHECK(gen.reasoning == "sum");
  // A streamed chat answer: the deltas' reasoning_content pieces are joined like the content.
  const std::string sse =
      "data: {\"choices\": [{\"delta\": {\"reasoning_content\": \"3 + 4\"}}]}\n\n"
      "data: {\"choices\": [{\"delta\": {\"reasoning_content\": \" is 7.\"}}]}\n\n"
      "data: {\"choices\": [{\"delta\": {\"content\": \"#### 7\"}, \"finish_reason\": \"stop\"}]}\n\n"
      "data: [DONE]\n\n";
  const json assembled = probes::stream_assemble_openai(sse, true, probes::response_limits_for(json{{"max_tokens", 16}}));
  reports::record streamed = test::rec("q", "alone", {});
  probes::openai_parse(assembled, true, streamed);
  CHECK(streamed.text == "#### 7");
  CHECK(streamed.reasoning == "3 + 4 is 7.");
  // A record keeps it across a write and a read; a record without it has no such field.
  const json j = reports::record_to_json(streamed);
  CHECK(j["reasoning"] == "3 + 4 is 7.");
  CHECK(reports::record_from_json(j, "t").reasoning == "3 + 4 is 7.");
  CHECK_FALSE(reports::record_to_json(reports::record{}).contains("reasoning"));
}

TEST_CASE("reasoning: compared as its own stream, and the answer alone decides the grade") {
  using test::rec;
  using test::words;
  reports::record a = rec("q", "alone", words("#### 7"));
  reports::record b = rec("q", "control", words("#### 7"));
  a.reasoning = "First 3, then 4: 7.";
  b.reasoning = "First 3, then 4: 7.";
  const reports::divergence same = reports::diverge(a, b);
  CHECK(same.identical);
  CHECK(same.reasoning_compared);
  CHECK(same.reasoning_offset == -1);
  // Thinking that parts at byte 6 makes the responses part, though the answers agree.
  b.reasoning = "First 4, then 3: 7.";
  const reports::divergence d = reports::diverge(a, b);
  CHECK_FALSE(d.identical);
  CHECK(d.reasoning_offset == 6);
  CHECK(d.token_index == -1);
  CHECK(d.char_offset == -1);
  CHECK(d.note == "the reasoning parts at byte 6 ('3, then 4: 7.' vs '4, then 3: 7.'); the final answers agree");
  // Without thinking on either side nothing is compared.
  CHECK_FALSE(reports::diverge(rec("q", "alone", words("x")), rec("q", "control", words("x"))).reasoning_compared);
  // Grading reads the answer only: neither the thinking field nor a leading <think> block.
  reports::record g = test::graded(rec("q", "alone", {}), "7");
  g.text = "<think>it is #### 5, no</think>\n#### 7";
  g.reasoning = "#### 5";
  CHECK(reports::grade(g) == std::optional<bool>(true));
  g.text = "<think>#### 7 is what I will say";  // thinking cut short: no answer
  CHECK(reports::grade(g) == std::optional<bool>(false));
  CHECK(reports::final_answer("  <think>a</think>b") == "b");
  CHECK(reports::final_answer("plain <think>") == "plain <think>");
}
