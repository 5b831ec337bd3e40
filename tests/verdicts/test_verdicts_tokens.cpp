// Known answers for the token comparison (issue 16, "Token comparison"): how two responses are
// found identical, retokenized or differing, and where. Each rule runs on every dialect whose
// response shape can carry it. Every expected value is worked out in the comment above its case.
//
// Layouts used below (byte offsets into the text):
//   "Price: €"  tokens "Price" ":" " " E2 82 AC   bytes P0-e4, ':'5, ' '6, E2 7, 82 8, AC 9
//   "A x"       tokens "A" " x"                    bytes A0, ' '1, 'x'2
#include "verdict_harness.h"

using namespace detaudit::verdicts_test;

namespace {

const std::vector<std::string> EURO = {"Price", ":", " ", "\xE2", "\x82", "\xAC"};  // "Price: €"
const std::vector<std::string> KIP = {"Price", ":", " ", "\xE2", "\x82", "\xAD"};   // "Price: ₭" (U+20AD)

// Rule (status): the same tokens and the same text -> identical. Nothing differs: token_index
// and char_offset are -1, and there is no step to take margins at (null). Exit 0 under --fail-on any.
void identical_answers(const dialect& d) {
  planted p(d);
  const answer a = answer({"The", " cat", " sat"}).top(1, {{" cat", -0.25}, {" dog", -1.5}});
  p.item("identical answers", {a, a});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"), {.status = "identical"});
  check_verdict(r.row("alone", "repeat"), {.status = "identical"});
  check_counts(r.pair("alone", "control"), 1, 0, 0, 0);
  CHECK(r.exit_code == 0);
}
VERDICTS_EACH_DIALECT("identical answers are identical", identical_answers)

// Rule (token bytes; first differing token and byte): "€" (E2 82 AC) against "₭" (E2 82 AD), each
// split over three byte tokens spelled the dialect's own way. Tokens 0-4 agree, token 5 differs;
// the texts part at the last byte: char_offset 9. Margins at step 5: alone AC -0.25 over AD -1.5
// -> 1.25; control AD -0.5 over AC -0.75 -> 0.25 (for probabilities: ln(e^-0.25) - ln(e^-1.5), ...).
void euro_split(const dialect& d) {
  planted p(d);
  p.item("euro split", {answer(EURO).top(5, {{"\xAC", -0.25}, {"\xAD", -1.5}}),
                        answer(KIP).top(5, {{"\xAD", -0.5}, {"\xAC", -0.75}})});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"), {.status = "differs", .token_index = 5, .char_offset = 9,
                                            .margin_a = margin(d, -0.25, -1.5), .margin_b = margin(d, -0.5, -0.75)});
  check_counts(r.pair("alone", "control"), 1, 1, 0, 0);
  CHECK(r.exit_code == 1);
}
VERDICTS_EACH_DIALECT("a euro sign split over byte tokens differs at its last byte", euro_split)

// Rule (prefix): when one side's tokens are a prefix of the other's, token_index is the shorter
// length and char_offset the shorter text's length. "A b c" vs "A b": token 2, byte 3.
// margin_a: alone's step 2 has " c" -0.25 over " d" -1.25 -> 1.0; control has no step 2 -> null.
void prefix_answer(const dialect& d) {
  planted p(d);
  p.item("prefix answer", {answer({"A", " b", " c"}).top(2, {{" c", -0.25}, {" d", -1.25}}),
                           answer({"A", " b"}).set("finish", "length")});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"), {.status = "differs", .token_index = 2, .char_offset = 3,
                                            .margin_a = margin(d, -0.25, -1.25)});
  CHECK(r.exit_code == 1);
}
VERDICTS_EACH_DIALECT("an answer that is a prefix of the other differs at the shorter length", prefix_answer)

// Rule (a side with no tokens is compared on its text only): control comes without any per-token
// data (no log-probs, no ids). The texts are equal -> identical, -1, -1, margins null; exit 0.
void no_logprobs_side(const dialect& d) {
  planted p(d);
  p.item("no logprobs", {answer({"The", " end"}).top(1, {{" end", -0.25}, {" fin", -2.0}}),
                         answer({"The", " end"}).omit("logprobs").omit("ids")});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"), {.status = "identical"});
  CHECK(r.exit_code == 0);
}
VERDICTS_EACH_DIALECT("a side without log-probs is compared on text: equal texts are identical", no_logprobs_side)

// Rule (text only): as above, but the texts differ: "Hello world" vs "Hello there". No token is
// compared (token_index -1, margins null); the first differing byte is 6 ('w' vs 't').
TEST_CASE("verdicts openai-chat: a side without log-probs and another text differs at the first differing byte") {
  planted p(OPENAI_CHAT);
  p.item("no logprobs other text", {answer({"Hello", " world"}).top(1, {{" world", -0.25}, {" there", -0.5}}),
                                    answer({"Hello", " there"}).omit("logprobs")});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"), {.status = "differs", .token_index = -1, .char_offset = 6});
  CHECK(r.exit_code == 1);
}

// A spelling of a byte token that decodes without a bytes field ("replacement" does not).
const char* decodable_form(const dialect& d) {
  return std::string(d.byte_form) == "replacement" ? "sentencepiece" : d.byte_form;
}

// Rule (token bytes: the `bytes` field, else the spelling decoded): alone sends the byte tokens
// of "Cost €" as U+FFFD with bytes [E2] [82] [AC]; control spells them the dialect's decodable way
// ("bytes:\xe2", "\xe2", "<0xE2>") without a bytes field. Same bytes -> identical, -1, -1; exit 0.
void bytes_field_or_not(const dialect& d) {
  planted p(d);
  const std::vector<std::string> toks = {"Cost", " ", "\xE2", "\x82", "\xAC"};
  p.item("bytes field or not", {answer(toks).form("replacement"), answer(toks).form(decodable_form(d)).omit("bytes")});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"), {.status = "identical"});
  CHECK(r.exit_code == 0);
}
TEST_CASE("verdicts openai-chat: the same byte token with and without a bytes field is identical") { bytes_field_or_not(OPENAI_CHAT); }
TEST_CASE("verdicts llamacpp: the same byte token with and without a bytes field is identical") { bytes_field_or_not(LLAMACPP); }
TEST_CASE("verdicts ollama: the same byte token with and without a bytes field is identical") { bytes_field_or_not(OLLAMA); }

// Two spellings of byte tokens per dialect, for the rule below.
std::pair<const char*, const char*> two_spellings(const dialect& d) {
  const std::string n = d.name;
  if (n == "openai-chat") return {"openai", "escape"};
  if (n == "openai-completions") return {"openai", "sentencepiece"};
  if (n == "llamacpp") return {"sentencepiece", "escape"};
  if (n == "llamacpp-older") return {"escape", "sentencepiece"};
  return {"escape", "openai"};
}

// Rule (escaped byte forms): "bytes:\xe2\x82" (OpenAI), "\xe2\x82" for bytes >= 0x80 (DeepSeek)
// and "<0xE2><0x82>" (SentencePiece) all decode to the bytes E2 82. "Cost €" is sent as "Cost", " ",
// a two-byte token E2 82 and a one-byte token AC; alone and control spell the byte tokens two
// different ways, neither with a bytes field: the same bytes -> identical; exit 0.
void byte_spellings(const dialect& d) {
  planted p(d);
  const std::vector<std::string> toks = {"Cost", " ", "\xE2\x82", "\xAC"};
  const auto [first, second] = two_spellings(d);
  p.item("byte spellings", {answer(toks).form(first).omit("bytes"), answer(toks).form(second).omit("bytes")});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"), {.status = "identical"});
  CHECK(r.exit_code == 0);
}
VERDICTS_EACH_DIALECT("byte tokens spelled two ways decode to the same bytes: identical", byte_spellings)

// Rule (status retokenized; issue 46.3): equal texts from different tokens -> retokenized: not
// identical, not counted in differ (pair differ 0) but in retokenized, and on one target's own
// pair a changed token: --fail-on any exits 1 and the verdict line names it. "Hello" as "Hel"+"lo"
// vs "H"+"ello": token 0 differs; the texts agree -> char_offset -1. Margins at step 0: alone
// "Hel" -0.25 over "H" -0.5 -> 0.25; control "H" -0.5 over "Hel" -1.0 -> 0.5.
void retokenized(const dialect& d) {
  planted p(d);
  p.item("retokenized", {answer({"Hel", "lo"}).top(0, {{"Hel", -0.25}, {"H", -0.5}}),
                         answer({"H", "ello"}).top(0, {{"H", -0.5}, {"Hel", -1.0}})});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"), {.status = "retokenized", .token_index = 0, .char_offset = -1,
                                            .margin_a = margin(d, -0.25, -0.5), .margin_b = margin(d, -0.5, -1.0)});
  const json& pair = r.pair("alone", "control");
  check_counts(pair, 1, 0, 0, 0);
  CHECK(pair.value("retokenized", int64_t{-1}) == 1);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("1 retokenized (same text, other tokens) under alone vs control") != std::string::npos);
}
VERDICTS_EACH_DIALECT("equal texts cut into different tokens are retokenized: a changed token fails --fail-on any", retokenized)

// Rule (--fail-on none gate list aside): the same retokenized pair under --fail-on drift: the any
// gate is not asked for, so nothing fails: exit 0 (retokenized is a finding of `any` only).
TEST_CASE("verdicts openai-chat: a retokenized row fails only the any gate") {
  planted p(OPENAI_CHAT);
  p.item("retokenized drift gate", {answer({"Hel", "lo"}), answer({"H", "ello"})});
  verdict_server srv(p.cases());
  const std::string dir = fresh_dir();
  const std::string prompts = prompts_write(dir, p.prompts());
  const outcome r = outcome_of(detaudit_cli("run --target " + srv.url() + " " + p.api_flags() + " --prompts " + prompts + " " +
                                            run_flags(dir + "/run", 16, "drift") + " --probe repeat"));
  check_verdict(r.row("alone", "control"), {.status = "retokenized", .token_index = 0, .char_offset = -1});
  CHECK(r.exit_code == 0);
}

// Rule (margins by value, whatever the order): step 1 differs (" x" vs " y"; "A x" vs "A y": byte 2).
// Alone lists " z" -1.5, " x" -0.25, " y" -0.75: sorted -0.25, -0.75 -> 0.5. Control lists
// " y" -0.5, " x" -2.0, " z" -0.625: sorted -0.5, -0.625 -> 0.125.
void unsorted_alternatives(const dialect& d) {
  planted p(d);
  p.item("unsorted alternatives", {answer({"A", " x"}).top(1, {{" z", -1.5}, {" x", -0.25}, {" y", -0.75}}),
                                   answer({"A", " y"}).top(1, {{" y", -0.5}, {" x", -2.0}, {" z", -0.625}})});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"), {.status = "differs", .token_index = 1, .char_offset = 2,
                                            .margin_a = margin(d, -0.25, -0.75), .margin_b = margin(d, -0.5, -0.625)});
}
VERDICTS_EACH_DIALECT("margins come from the alternatives sorted by value, not their order", unsorted_alternatives)

// Rule (margins, duplicates kept): alternatives with the same token string are all kept. Step 1
// differs (" a" vs " b"; "Q a" vs "Q b": byte 2). Alone: " a" -0.5, " a" -0.5, " b" -2.0 -> the
// top two are equal: margin 0. Control: " b" -0.5, " b" -1.0, " a" -2.0 -> 0.5 (a reader that
// dropped the duplicate would give 1.5). Not for openai-completions: a JSON object keeps one key.
void duplicate_alternatives(const dialect& d) {
  planted p(d);
  p.item("duplicate alternatives", {answer({"Q", " a"}).top(1, {{" a", -0.5}, {" a", -0.5}, {" b", -2.0}}),
                                    answer({"Q", " b"}).top(1, {{" b", -0.5}, {" b", -1.0}, {" a", -2.0}})});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"), {.status = "differs", .token_index = 1, .char_offset = 2,
                                            .margin_a = margin(d, -0.5, -0.5), .margin_b = margin(d, -0.5, -1.0)});
}
TEST_CASE("verdicts openai-chat: duplicate alternatives are both kept") { duplicate_alternatives(OPENAI_CHAT); }
TEST_CASE("verdicts llamacpp: duplicate alternatives are both kept") { duplicate_alternatives(LLAMACPP); }
TEST_CASE("verdicts llamacpp-older: duplicate alternatives are both kept") { duplicate_alternatives(LLAMACPP_OLDER); }
TEST_CASE("verdicts ollama: duplicate alternatives are both kept") { duplicate_alternatives(OLLAMA); }

// Rule (margins need two alternatives): step 1 differs (" x" vs " y"; byte 2). Alone recorded a
// single alternative there -> margin_a null; control two: " y" -0.5 over " x" -1.5 -> 1.0.
void single_alternative(const dialect& d) {
  planted p(d);
  p.item("single alternative", {answer({"A", " x"}).top(1, {{" x", -0.25}}),
                                answer({"A", " y"}).top(1, {{" y", -0.5}, {" x", -1.5}})});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"),
                {.status = "differs", .token_index = 1, .char_offset = 2, .margin_b = margin(d, -0.5, -1.5)});
}
TEST_CASE("verdicts openai-chat: one recorded alternative gives a null margin") { single_alternative(OPENAI_CHAT); }
TEST_CASE("verdicts llamacpp-older: one recorded alternative gives a null margin") { single_alternative(LLAMACPP_OLDER); }

// Rule (one target's ids name one vocabulary; issue 46.3): every token on both sides has known
// bytes, and they agree; control's " cat" carries id 901 where alone's has 900: the same bytes
// under another id is another token (the greedy choice changed). Equal texts -> retokenized at
// token 1, char_offset -1; --fail-on any fails on it: exit 1.
TEST_CASE("verdicts llamacpp: the same bytes under different ids on one target are retokenized, a changed token") {
  planted p(LLAMACPP);
  p.item("ids compared", {answer({"The", " cat"}).id(1, 900), answer({"The", " cat"}).id(1, 901)});
  const outcome r = run_planted(p, "--probe repeat");
  const json& row = r.row("alone", "control");
  check_verdict(row, {.status = "retokenized", .token_index = 1, .char_offset = -1});
  CHECK(row.value("note", "").find("same bytes under another id (900 vs 901)") != std::string::npos);
  CHECK(r.exit_code == 1);
}

// Rule (unknown bytes compare by id): the byte tokens come as U+FFFD without a bytes field, so
// their bytes are unknown; both sides have ids (3 + byte), so they compare by id: E2 and 82 agree,
// AC (id 175) vs AD (id 176) differ at token 5. The texts part at byte 9.
TEST_CASE("verdicts llamacpp: byte tokens of unknown bytes compare by id") {
  planted p(LLAMACPP);
  p.item("unknown bytes by id", {answer(EURO).form("replacement").omit("bytes"), answer(KIP).form("replacement").omit("bytes")});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"), {.status = "differs", .token_index = 5, .char_offset = 9});
}

// Rule (unknown bytes without ids compare by text): as above on ollama (no ids): every token's
// text agrees ("Price", ":", " ", U+FFFD x3), so the tokens agree (token_index -1) while the texts
// differ at byte 9 -> differs (tokens equal but text not: neither identical nor retokenized).
TEST_CASE("verdicts ollama: byte tokens of unknown bytes and no ids compare by text") {
  planted p(OLLAMA);
  p.item("unknown bytes by text", {answer(EURO).form("replacement").omit("bytes"), answer(KIP).form("replacement").omit("bytes")});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"), {.status = "differs", .token_index = -1, .char_offset = 9});
  CHECK(r.exit_code == 1);
}

// Rule (status drifted): tokens and text agree but a logit hash differs -> drifted, which the
// `identical` field counts as identical: differ 0, exit 0. hash_step: the first differing hash, 1.
TEST_CASE("verdicts llamacpp: equal tokens under a differing logit hash are drifted") {
  planted p(LLAMACPP);
  const std::vector<std::string> toks = {"One", " two", " three"};
  p.item("drifted", {answer(toks).set("logit_hashes", {"00000000000000a1", "00000000000000b2", "00000000000000c3"}),
                     answer(toks).set("logit_hashes", {"00000000000000a1", "00000000000000ff", "00000000000000c3"})});
  const outcome r = run_planted(p, "--probe repeat");
  check_verdict(r.row("alone", "control"), {.status = "drifted", .hash_step = 1});
  check_counts(r.pair("alone", "control"), 1, 0, 0, 0);
  CHECK(r.exit_code == 0);
}

}  // namespace
