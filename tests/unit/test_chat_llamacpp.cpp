// Every chat template family against llama.cpp's own rendering of the same messages
// (tests/data/llamacpp-2026-08/chat-renders.json; tests/data/README.md says how it was made):
// the same bytes, or an input_error where llama.cpp's template raised.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit::chat;
using nlohmann::json;

TEST_CASE("chat llama.cpp: every family renders each conversation as llama.cpp does, or refuses where it raises") {
  const json d = json::parse(detaudit::test::file_text(detaudit::test::test_data("llamacpp-2026-08/chat-renders.json")));
  const std::string date = d.at("date");
  int n = 0;
  for (const json& c : d.at("cases")) {
    const std::string id = c.at("id");
    CAPTURE(id);
    const std::string fam_name = c.at("family");
    const std::optional<template_family> fam = template_family_from_name(fam_name);
    REQUIRE(fam.has_value());
    const json& t = d.at("templates").at(fam_name);
    chat_options opt;
    opt.bos_token = t.at("bos");
    opt.eos_token = t.at("eos");
    opt.leading_bos = true;
    opt.current_date = date;
    const json& o = t.at("options");
    opt.default_system = o.value("default_system", "");
    opt.open_think = o.value("open_think", true);
    opt.system_role = o.value("system_role", true);
    if (o.contains("model_identity")) opt.model_identity = o.at("model_identity");
    if (o.contains("knowledge_cutoff")) opt.knowledge_cutoff = o.at("knowledge_cutoff");
    if (o.contains("reasoning_effort")) opt.reasoning_effort = o.at("reasoning_effort");
    opt.enable_thinking = c.value("enable_thinking", true);
    if (c.contains("kwargs") && c["kwargs"].contains("reasoning_effort")) opt.reasoning_effort = c["kwargs"]["reasoning_effort"];
    std::vector<chat_message> msgs;
    for (const json& m : c.at("messages")) msgs.push_back({m.at("role"), m.at("content")});
    const bool gen = c.at("add_generation_prompt");
    if (c.contains("error")) {
      CHECK_THROWS_AS(chat_render(*fam, msgs, gen, opt), detaudit::input_error);
    } else {
      std::string got;
      try {
        got = chat_render(*fam, msgs, gen, opt);
      } catch (const detaudit::input_error& e) {
        got = std::string("input_error: ") + e.what();
      }
      CHECK(got == c.at("output").get<std::string>());
    }
    ++n;
  }
  CHECK(n >= 80);
}
