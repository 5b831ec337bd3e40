// diverge(): hand-built token lists with known divergence points, margins, hash steps, prefix and
// text-only cases, UTF-8 context cutting, failed responses, log-prob drift.
#include <doctest/doctest.h>

#include <limits>
#include <nlohmann/json.hpp>

#include "reports/compare.h"
#include "test_reports_util.h"

using namespace detaudit::reports;
using detaudit::test::rec;
using detaudit::test::with_tokens;

namespace {

// A token of one byte that is not UTF-8 on its own: its string is U+FFFD, as a server shows it.
token_rec lone_byte(int32_t id, uint8_t byte) {
  token_rec t;
  t.id = id;
  t.text = "\xEF\xBF\xBD";
  t.bytes = {byte};
  return t;
}

// Both sides' tokens located at the shared index, cut alike before it: nothing to say.
void check_same_place(const divergence& d, int64_t index) {
  CHECK(d.token_index == index);
  CHECK(d.token_index_a == index);
  CHECK(d.token_index_b == index);
  CHECK_FALSE(d.tokenized_differently);
  CHECK(d.note.empty());
}

}  // namespace

TEST_CASE("report diverge: ids 1 2 3 4 vs 1 2 9 4 part at token 2 and byte 4 with both margins") {
  record a = rec("q", "alone", {{1, "a"}, {2, " b"}, {3, " c"}, {4, " d"}});
  record b = rec("q", "concurrent-8", {{1, "a"}, {2, " b"}, {9, " X"}, {4, " d"}});
  REQUIRE(a.text == "a b c d");
  REQUIRE(b.text == "a b X d");
  a.top_logprobs = {{{1, "a", -0.1}, {5, "z", -3}}, {{2, " b", -0.2}, {6, " y", -2}},
                    {{3, " c", -0.25}, {9, " X", -0.75}}, {{4, " d", -0.1}, {7, " w", -4}}};
  b.top_logprobs = {{{1, "a", -0.1}, {5, "z", -3}}, {{2, " b", -0.2}, {6, " y", -2}},
                    {{9, " X", -0.5}, {3, " c", -0.625}}, {{4, " d", -0.1}}};
  const divergence d = diverge(a, b);
  CHECK_FALSE(d.identical);
  CHECK(d.token_index == 2);
  CHECK(d.char_offset == 4);
  CHECK(d.token_a == " c");
  CHECK(d.token_b == " X");
  CHECK(d.id_a == 3);
  CHECK(d.id_b == 9);
  CHECK(d.before_a == "a b ");
  CHECK(d.after_a == "c d");
  CHECK(d.before_b == "a b ");
  CHECK(d.after_b == "X d");
  REQUIRE(d.margin_a.has_value());
  REQUIRE(d.margin_b.has_value());
  CHECK(*d.margin_a == 0.5);
  CHECK(*d.margin_b == 0.125);
  CHECK_FALSE(d.hashes_available);
  CHECK(d.hash_step == -1);
}

TEST_CASE("report diverge: a margin needs two alternatives at that step") {
  record a = rec("q", "alone", {{1, "a"}, {2, "b"}});
  record b = rec("q", "repeat", {{1, "a"}, {3, "c"}});
  a.top_logprobs = {{{1, "a", -0.1}, {5, "z", -3}}, {{2, "b", -0.2}}};
  const divergence d = diverge(a, b);
  CHECK(d.token_index == 1);
  CHECK_FALSE(d.margin_a.has_value());  // one alternative recorded
  CHECK_FALSE(d.margin_b.has_value());  // none recorded
}

TEST_CASE("report diverge: one response a prefix of the other parts where the shorter ends") {
  const record a = rec("q", "alone", {{1, "a"}, {2, " b"}, {3, " c"}});
  const record b = rec("q", "control", {{1, "a"}, {2, " b"}, {3, " c"}, {4, " d"}});
  const divergence d = diverge(a, b);
  CHECK_FALSE(d.identical);
  CHECK(d.token_index == 3);
  CHECK(d.char_offset == 5);
  CHECK(d.token_a == "");
  CHECK(d.id_a == -1);
  CHECK(d.token_b == " d");
  CHECK(d.id_b == 4);
  CHECK(d.before_a == "a b c");
  CHECK(d.after_a == "");
  CHECK(d.after_b == " d");
}

TEST_CASE("report diverge: without ids on every token the tokens compare by text") {
  const record a = rec("q", "alone", {{-1, "x"}, {-1, "y"}, {-1, "w"}});
  const record b = rec("q", "control", {{-1, "x"}, {-1, "z"}, {-1, "w"}});
  const divergence d = diverge(a, b);
  CHECK(d.token_index == 1);
  CHECK(d.char_offset == 1);
  CHECK(d.id_a == -1);
  CHECK(d.token_a == "y");
  CHECK(d.token_b == "z");
  // Ids on one side only: compared by text, so these are identical.
  const record c = rec("q", "alone", {{5, "x"}, {6, "y"}});
  const record e = rec("q", "control", {{-1, "x"}, {-1, "y"}});
  CHECK(diverge(c, e).identical);
  // The same ids with a different text still differ, at the first differing byte.
  record f = rec("q", "alone", {{5, "x"}, {6, "y"}});
  f.text = "xY";
  const divergence g = diverge(c, f);
  CHECK_FALSE(g.identical);
  CHECK(g.token_index == -1);
  CHECK(g.char_offset == 1);
}

TEST_CASE("report diverge: the same text from different tokens is retokenized at the token, with no byte offset") {
  const record a = rec("q", "alone", {{1, "ab"}, {2, "c"}, {3, "d"}});
  const record b = rec("q", "control", {{1, "ab"}, {7, "cd"}});
  const divergence d = diverge(a, b);
  CHECK_FALSE(d.identical);
  CHECK(d.retokenized);
  CHECK(d.token_index == 1);
  CHECK(d.char_offset == -1);
  CHECK(d.before_a == "ab");
  CHECK(d.after_a == "cd");
  // Other ids for the same bytes are the same tokens: ids mean nothing across vocabularies.
  const record c = rec("q", "control", {{1, "ab"}, {7, "c"}, {8, "d"}});
  CHECK(diverge(a, c).identical);
}

TEST_CASE("report diverge: logit hashes give the first drifting step, also under identical tokens") {
  record a = rec("q", "alone", {{1, "a"}, {2, "b"}, {3, "c"}});
  record b = rec("q", "control", {{1, "a"}, {2, "b"}, {3, "c"}});
  a.logit_hashes = {0x11, 0x22, 0x33};
  b.logit_hashes = {0x11, 0x22, 0x34};
  const divergence drift = diverge(a, b);
  CHECK(drift.identical);
  CHECK(drift.hashes_available);
  CHECK(drift.hash_step == 2);
  CHECK(drift.token_index == -1);

  record c = rec("q", "concurrent-8", {{1, "a"}, {2, "b"}, {9, "x"}});
  c.logit_hashes = {0x11, 0x99, 0x77};
  const divergence d = diverge(a, c);
  CHECK(d.token_index == 2);
  CHECK(d.hash_step == 1);  // logits drift before the token flips

  b.logit_hashes = a.logit_hashes;
  CHECK(diverge(a, b).hash_step == -1);
  b.logit_hashes.clear();
  CHECK_FALSE(diverge(a, b).hashes_available);
}

TEST_CASE("report diverge: context is 40 code points before and 60 from the offset and never cuts one") {
  std::string e50, u70, e40, u59;
  for (int i = 0; i < 50; ++i) e50 += "\xC3\xA9";  // é
  for (int i = 0; i < 70; ++i) u70 += "\xC3\xBC";  // ü
  for (int i = 0; i < 40; ++i) e40 += "\xC3\xA9";
  for (int i = 0; i < 59; ++i) u59 += "\xC3\xBC";
  const record a = rec("q", "alone", {{-1, e50 + "A" + u70}});
  const record b = rec("q", "control", {{-1, e50 + "B" + u70}});
  const divergence d = diverge(a, b);
  CHECK(d.char_offset == 100);
  CHECK(d.before_a == e40);
  CHECK(d.after_a == "A" + u59);
  CHECK(d.after_b == "B" + u59);

  // é (C3 A9) vs è (C3 A8) part at their second byte: the context starts at the code point.
  const record c = rec("q", "alone", {{-1, "ab\xC3\xA9" "cd"}});
  const record e = rec("q", "control", {{-1, "ab\xC3\xA8" "cd"}});
  const divergence m = diverge(c, e);
  CHECK(m.char_offset == 3);
  CHECK(m.before_a == "ab");
  CHECK(m.after_a == "\xC3\xA9" "cd");
  CHECK(m.after_b == "\xC3\xA8" "cd");
}

TEST_CASE("report diverge: a failed response is never identical and says why") {
  const record a = rec("q", "alone", {{1, "a"}});
  record b = rec("q", "concurrent-8", {});
  b.error = "HTTP 500: internal error";
  const divergence d = diverge(a, b);
  CHECK_FALSE(d.identical);
  CHECK(d.token_index == -1);
  CHECK(d.char_offset == -1);
  CHECK(d.note.find("HTTP 500") != std::string::npos);
}

TEST_CASE("report diverge: same tokens with a moved log-prob drift at that step, by the largest |difference|") {
  record a = rec("q", "alone", {{1, "a"}, {2, " b"}, {3, " c"}});
  record b = rec("q", "control", {{1, "a"}, {2, " b"}, {3, " c"}});
  a.top_logprobs = {{{1, "a", -0.5}, {5, "z", -1.0}}, {{2, " b", -0.25}, {6, " y", -2.0}}, {{3, " c", -0.125}}};
  // Step 0 lists the same values in another order; step 1 moves " b" by 1/128 and " y" by 1/64.
  b.top_logprobs = {{{5, "z", -1.0}, {1, "a", -0.5}}, {{2, " b", -0.2578125}, {6, " y", -2.015625}}, {{3, " c", -0.125}}};
  const divergence d = diverge(a, b);
  CHECK(d.identical);
  CHECK(d.drift_step == 1);
  REQUIRE(d.max_drift.has_value());
  CHECK(*d.max_drift == 0.015625);
}

TEST_CASE("report diverge: drift counts only the steps before the tokens part, and only shared alternatives") {
  record a = rec("q", "alone", {{1, "a"}, {2, " b"}, {3, " c"}});
  record b = rec("q", "concurrent-8", {{1, "a"}, {2, " b"}, {9, " X"}});
  a.top_logprobs = {{{1, "a", -0.5}, {7, "w", -3.0}}, {{2, " b", -0.25}}, {{3, " c", -0.5}, {9, " X", -0.75}}};
  // Step 0: "w" is listed by A only, "v" by B only: nothing shared moved. Step 2, where the tokens
  // part, moves both alternatives: that is the divergence, not drift.
  b.top_logprobs = {{{1, "a", -0.5}, {8, "v", -2.0}}, {{2, " b", -0.25}}, {{9, " X", -0.5}, {3, " c", -0.625}}};
  const divergence d = diverge(a, b);
  CHECK_FALSE(d.identical);
  CHECK(d.token_index == 2);
  CHECK(d.drift_step == -1);
  REQUIRE(d.max_drift.has_value());
  CHECK(*d.max_drift == 0.0);
}

TEST_CASE("report diverge: alternatives without ids are matched by string, and none at all is no evidence") {
  record a = rec("q", "alone", {{-1, "a"}, {-1, "b"}});
  record b = rec("q", "control", {{-1, "a"}, {-1, "b"}});
  const divergence none = diverge(a, b);
  CHECK(none.drift_step == -1);
  CHECK_FALSE(none.max_drift.has_value());  // nothing compared: not "0 drift"
  a.top_logprobs = {{{-1, "a", -0.5}, {-1, "c", -1.0}}, {{-1, "b", -0.25}}};
  b.top_logprobs = {{{-1, "a", -0.5}, {-1, "c", -1.0}}, {{-1, "b", -0.5}}};
  const divergence d = diverge(a, b);
  CHECK(d.drift_step == 1);
  REQUIRE(d.max_drift.has_value());
  CHECK(*d.max_drift == 0.25);
}

TEST_CASE("report drift: a drifted row's status, JSON fields, summary count and text line") {
  record a = rec("q1", "alone", {{1, "a"}, {2, " b"}});
  record c = rec("q1", "control", {{1, "a"}, {2, " b"}});
  record a2 = rec("q2", "alone", {{1, "a"}, {2, " b"}});
  record c2 = rec("q2", "control", {{1, "a"}, {2, " b"}});
  a.top_logprobs = {{{1, "a", -0.5}, {5, "z", -1.0}}, {{2, " b", -0.25}}};
  c.top_logprobs = {{{1, "a", -0.5078125}, {5, "z", -1.0}}, {{2, " b", -0.25}}};
  a2.top_logprobs = a.top_logprobs;
  c2.top_logprobs = a.top_logprobs;
  const report r = compare_run({a, c, a2, c2});
  REQUIRE(r.pairs.size() == 1);
  CHECK(r.pairs[0].differ == 0);
  CHECK(r.pairs[0].drifted == 1);
  const nlohmann::json j = nlohmann::json::parse(report_render(r, "json"));
  const nlohmann::json& rows = j["pairs"][0]["rows"];
  REQUIRE(rows.size() == 2);
  CHECK(rows[0]["status"] == "drifted");
  CHECK(rows[0]["drift_step"] == 0);
  CHECK(rows[0]["max_drift"] == 0.0078125);
  CHECK(rows[1]["status"] == "identical");
  CHECK(rows[1]["drift_step"] == -1);
  CHECK(rows[1]["max_drift"] == 0.0);
  const std::string text = report_render(r, "text");
  CHECK(text.find("DRIFTED") != std::string::npos);
  CHECK(text.find("1/2") != std::string::npos);
  CHECK(text.find("log-probs drifted from step 0 (max |d| 0.00781)") != std::string::npos);
  CHECK(report_render(r, "md").find("| drifted |") != std::string::npos);
  CHECK(report_render(r, "junit").find("<property name=\"drifted\" value=\"1\"/>") != std::string::npos);
}

TEST_CASE("report diverge: tokens that end inside a character are located by their bytes, not by the text's U+FFFD") {
  // Two lone bytes (0xC4, 0xC5) show in the text as U+FFFD, three bytes each, so the texts part at
  // byte 8 (" d" vs " e") while the tokens' bytes part at byte 4. Located by the text's offset, A's
  // byte 8 lies past token 6 and B's past token 4, whose cuts differ: a false "tokenize differently".
  auto with_lone_bytes = [&](record r) {
    const std::vector<token_rec> lones = {lone_byte(196, 0xC4), lone_byte(197, 0xC5)};
    r.tokens.insert(r.tokens.begin() + 1, lones.begin(), lones.end());
    r.text = r.tokens[0].text + "\xEF\xBF\xBD\xEF\xBF\xBD" + r.text.substr(r.tokens[0].text.size());
    return r;
  };
  const record a = with_lone_bytes(rec("q", "alone", {{1, "a"}, {4, " d"}, {5, "x"}, {6, "y"}, {7, "z"}}));
  const record b = with_lone_bytes(rec("q", "concurrent-8", {{1, "a"}, {8, " e"}, {9, "xyz"}}));
  REQUIRE(a.text == "a\xEF\xBF\xBD\xEF\xBF\xBD dxyz");
  const divergence d = diverge(a, b);
  CHECK(d.char_offset == 8);
  check_same_place(d, 3);
  // Cut differently before the parting byte: said, at the offset in the tokens' bytes.
  const record c = with_lone_bytes(rec("q", "concurrent-8", {{1, "a"}, {10, " d"}, {11, "x"}, {12, "yq"}}));
  const record e = with_lone_bytes(rec("q", "alone", {{1, "a"}, {13, " dx"}, {14, "y"}, {15, "z"}}));
  const divergence d2 = diverge(e, c);
  CHECK(d2.tokenized_differently);
  CHECK(d2.note ==
        "the targets tokenize differently: byte 7 of the tokens' bytes is in A's token 5 'z' and B's token 5 'yq'; token "
        "indices of the two sides do not correspond");

  // One side without bytes (a server that sends none): each side is laid out by its own tokens'
  // strings, which add up to its text.
  record no_bytes = with_lone_bytes(rec("q", "concurrent-8", {{1, "a"}, {8, " e"}, {9, "xyz"}}));
  for (token_rec& t : no_bytes.tokens) t.bytes.clear();
  const divergence d3 = diverge(a, no_bytes);
  CHECK(d3.char_offset == 8);
  check_same_place(d3, 3);
  // A token that really is U+FFFD (its bytes EF BF BD) on one side, a lone byte on the other.
  record real_fffd = no_bytes;
  real_fffd.tokens[1].bytes = {0xEF, 0xBF, 0xBD};
  const divergence d4 = diverge(a, real_fffd);
  CHECK(d4.token_index_a == 3);
  CHECK(d4.token_index_b == 3);
  CHECK_FALSE(d4.tokenized_differently);

  // A token of unknown bytes (no string, no bytes) does not put the others off.
  record ua = a, ub = b;
  token_rec unknown;
  unknown.id = 5;
  ua.tokens.insert(ua.tokens.begin() + 1, unknown);
  ub.tokens.insert(ub.tokens.begin() + 1, unknown);
  const divergence d5 = diverge(ua, ub);
  CHECK(d5.token_index == 4);
  CHECK(d5.token_index_a == 4);
  CHECK(d5.token_index_b == 4);
  CHECK_FALSE(d5.tokenized_differently);
}

TEST_CASE("report diverge: a text that neither its tokens' bytes nor their strings lay out is located by the bytes") {
  // 0xC3 0xA9 (é) split over two tokens and a lone 0xC4: the text reads "aé\uFFFD d", which is
  // neither the tokens' bytes (0xC4 is not UTF-8) nor their strings (each half of é shows U+FFFD).
  auto mixed = [&](const std::vector<std::pair<int32_t, std::string>>& rest, const std::string& cond) {
    record r = rec("q", cond, {{1, "a"}});
    for (const token_rec& t : {lone_byte(195, 0xC3), lone_byte(169, 0xA9), lone_byte(196, 0xC4)}) r.tokens.push_back(t);
    r.text += "\xC3\xA9\xEF\xBF\xBD";
    for (const auto& [id, text] : rest) {
      token_rec t;
      t.id = id;
      t.text = text;
      r.tokens.push_back(t);
      r.text += text;
    }
    return r;
  };
  const record a = mixed({{4, " d"}, {5, "x"}, {6, "yz"}}, "alone");
  const record b = mixed({{7, " dxy"}, {8, "q"}}, "concurrent-8");
  // Bytes: a C3 A9 C4 ' ' d x y z vs a C3 A9 C4 ' ' d x y q: they part at byte 8 of the tokens' bytes.
  const divergence d = diverge(a, b);
  CHECK(d.token_index == 4);
  CHECK(d.token_index_a == 6);
  CHECK(d.token_index_b == 5);
  CHECK(d.tokenized_differently);
  CHECK(d.note ==
        "the targets tokenize differently: byte 8 of the tokens' bytes is in A's token 6 'yz' and B's token 5 'q'; token "
        "indices of the two sides do not correspond");
  // One side's bytes unknown: not located rather than located wrongly.
  record c = b;
  c.tokens[1].bytes.clear();
  const divergence dc = diverge(a, c);
  CHECK(dc.token_index_a == -1);
  CHECK(dc.token_index_b == -1);
  CHECK_FALSE(dc.tokenized_differently);
}

TEST_CASE("report diverge: texts alike over different token bytes (U+FFFD, a stop string) are a difference, not a re-cut") {
  // Lone bytes 0xC4 and 0xC5 both show as U+FFFD: the same text, different tokens.
  record a = rec("q", "alone", {{1, "a"}, {3, " d"}});
  record b = rec("q", "control", {{1, "a"}, {3, " d"}});
  a.tokens.insert(a.tokens.begin() + 1, lone_byte(196, 0xC4));
  b.tokens.insert(b.tokens.begin() + 1, lone_byte(197, 0xC5));
  a.text = b.text = "a\xEF\xBF\xBD d";
  const divergence d = diverge(a, b);
  CHECK_FALSE(d.identical);
  CHECK_FALSE(d.retokenized);
  CHECK(d.token_index == 1);
  CHECK(d.note == "the texts are identical, but the tokens differ (a text shows each byte that is not UTF-8 as U+FFFD)");
  CHECK(d.after_a == "\xEF\xBF\xBD d");
  const report r = compare_run({a, b});
  REQUIRE(r.pairs.size() == 1);
  CHECK(r.pairs[0].differ == 1);
  CHECK(r.pairs[0].retokenized == 0);
  // Texts cut at a stop string before the tokens that differ: a difference too, said so.
  record s1 = rec("q", "alone", {{1, "a"}, {2, " b"}, {3, " c"}}), s2 = rec("q", "control", {{1, "a"}, {2, " b"}, {4, " d"}});
  s1.text = s2.text = "a b";
  const divergence ds = diverge(s1, s2);
  CHECK_FALSE(ds.identical);
  CHECK_FALSE(ds.retokenized);
  CHECK(ds.token_index == 2);
  CHECK(ds.note == "the texts are identical, but the tokens differ (a text ends before its tokens do, as at a stop string)");
  // The same tokens cut differently over one text: a re-cut, not a difference.
  record c1 = rec("q", "alone", {{1, "a"}, {2, " bc"}}), c2 = rec("q", "control", {{1, "a"}, {5, " b"}, {6, "c"}});
  const divergence dc = diverge(c1, c2);
  CHECK_FALSE(dc.identical);
  CHECK(dc.retokenized);
  CHECK(dc.note == "the texts are identical; the tokens are cut differently");
}

TEST_CASE("report diverge: targets that tokenize differently are located by byte, with each side's own token") {
  // A cuts "The answer" as "The"," answer", B as "The an","swer": the texts part at byte 11
  // ("is" vs "was"), which is A's token 2 and B's token 2 too, but B's tokens start elsewhere
  // before it (byte 6 instead of 3): their indices do not correspond.
  record a = rec("q", "alone", {{10, "The"}, {11, " answer"}, {12, " is"}, {13, " 4"}}, "", "A");
  record b = rec("q", "alone", {{20, "The an"}, {21, "swer"}, {22, " was"}, {23, " 4"}}, "", "B");
  const divergence d = diverge(a, b);
  CHECK_FALSE(d.identical);
  CHECK(d.char_offset == 11);
  CHECK(d.token_index == 0);  // the shared index parts at once: meaningless across vocabularies
  CHECK(d.token_index_a == 2);
  CHECK(d.token_index_b == 2);
  CHECK(d.tokenized_differently);
  CHECK(d.note ==
        "the targets tokenize differently: byte 11 is in A's token 2 ' is' and B's token 2 ' was'; token indices of the two sides "
        "do not correspond");
  // The same cut before the byte: the indices correspond, nothing is said.
  record c = rec("q", "alone", {{10, "The"}, {11, " answer"}, {14, " was"}}, "", "B");
  const divergence same_cut = diverge(a, c);
  CHECK(same_cut.token_index == 2);
  CHECK(same_cut.token_index_a == 2);
  CHECK(same_cut.token_index_b == 2);
  CHECK_FALSE(same_cut.tokenized_differently);
  CHECK(same_cut.note.empty());
  // A cross report says so once per pair.
  const report r = compare_run({a, b});
  bool noted = false;
  for (const std::string& n : r.notes) noted = noted || n.find("cross A:alone vs B:alone: the two sides tokenize differently (1 row(s))") == 0;
  CHECK(noted);
}

TEST_CASE("report diverge: an alternative is the same only with the same string, an id alone does not match across vocabularies") {
  // Two vocabularies: id 5 is "x" on A and "q" on B. The same text, so no drift can be read from
  // alternatives that are not the same token.
  record a = rec("q", "alone", {{10, "hi"}}, "", "A");
  record b = rec("q", "alone", {{900, "hi"}}, "", "B");
  a.top_logprobs = {{{10, "hi", -0.1}, {5, "x", -2.5}}};
  b.top_logprobs = {{{900, "hi", -0.1}, {5, "q", -1.2}}};
  const divergence d = diverge(a, b);
  CHECK(d.identical);
  CHECK(d.drift_step == -1);  // "hi" has another id on each side, "x"/"q" other strings: nothing shared
  REQUIRE(d.max_drift.has_value());
  CHECK(*d.max_drift == 0.0);
}

TEST_CASE("report diverge: log-probs of +-1e308 give the largest double, never inf (which JSON would write as null)") {
  record a = rec("q", "alone", {{1, "a"}, {2, "b"}});
  record b = rec("q", "control", {{1, "a"}, {3, "c"}});
  a.top_logprobs = {{{1, "a", 1e308}, {5, "z", -1e308}}, {{2, "b", 0.0}, {3, "c", -1e308}}};
  b.top_logprobs = {{{1, "a", -1e308}, {5, "z", -1e308}}, {{3, "c", 1e308}, {2, "b", -1e308}}};
  const divergence d = diverge(a, b);
  CHECK(d.token_index == 1);
  REQUIRE(d.max_drift.has_value());
  CHECK(*d.max_drift == std::numeric_limits<double>::max());
  REQUIRE(d.margin_b.has_value());
  CHECK(*d.margin_b == std::numeric_limits<double>::max());
  const nlohmann::json j = nlohmann::json::parse(report_render(compare_run({a, b}), "json"));
  CHECK(j["pairs"][0]["rows"][0]["max_drift"].is_number());
  CHECK(j["pairs"][0]["rows"][0]["margin_b"].is_number());
}

namespace {

token_rec bytes_tok(int32_t id, std::vector<uint8_t> bytes, const std::string& text = "\xEF\xBF\xBD") {
  token_rec t;
  t.id = id;
  t.text = text;
  t.bytes = std::move(bytes);
  return t;
}

}  // namespace

TEST_CASE("report diverge: equal texts over a token whose bytes one side does not give are still a difference") {
  const std::string text = "a\xEF\xBF\xBD d";
  const token_rec a0 = bytes_tok(1, {}, "a"), d0 = bytes_tok(3, {}, " d");
  const record a = with_tokens("alone", {a0, lone_byte(196, 0xC4), d0}, text);
  token_rec no_bytes = lone_byte(197, 0xC5);
  no_bytes.bytes.clear();
  token_rec fffd_bytes = bytes_tok(197, {0xEF, 0xBF, 0xBD});  // a server that sends U+FFFD's bytes for a byte token
  token_rec no_bytes_196 = lone_byte(196, 0xC4);
  no_bytes_196.bytes.clear();
  const std::vector<std::pair<std::string, record>> cases = {
      {"bytes on one side only", with_tokens("control", {a0, no_bytes, d0}, text)},
      {"U+FFFD's bytes for a byte token", with_tokens("control", {a0, fffd_bytes, d0}, text)},
      {"a genuine U+FFFD token", with_tokens("control", {a0, bytes_tok(65533, {0xEF, 0xBF, 0xBD}), d0}, text)},
  };
  for (const auto& [what, b] : cases) {
    CAPTURE(what);
    const divergence d = diverge(a, b);
    CHECK_FALSE(d.identical);
    CHECK_FALSE(d.retokenized);
    CHECK(d.token_index == 1);
    CHECK(d.note == "the texts are identical, but the tokens differ (a text shows each byte that is not UTF-8 as U+FFFD)");
  }
  // No bytes on either side: ids 196 and 197 with the same string at the same place.
  const divergence none = diverge(with_tokens("alone", {a0, no_bytes_196, d0}, text), cases[0].second);
  CHECK_FALSE(none.retokenized);
  CHECK(none.token_index == 1);
  // A token before the parting one whose bytes hold U+FFFD's does not hide the difference after it.
  const std::string t2 = "a\xEF\xBF\xBD\xEF\xBF\xBD";
  const token_rec first = bytes_tok(1, {'a', 0xEF, 0xBF, 0xBD}, "a\xEF\xBF\xBD");
  const divergence tail = diverge(with_tokens("alone", {first, lone_byte(196, 0xC4)}, t2),
                                  with_tokens("control", {first, lone_byte(197, 0xC5)}, t2));
  CHECK_FALSE(tail.retokenized);
  CHECK(tail.token_index == 1);
}

TEST_CASE("report diverge: with both sides' bytes known, the tokens are located where the bytes part, before the texts do") {
  // 0xC4 and 0xC5 both show as U+FFFD: the texts part at 'x' vs 'y', the bytes at byte 1.
  const record a = with_tokens("alone", {bytes_tok(1, {}, "a"), lone_byte(196, 0xC4), lone_byte(196, 0xC4), bytes_tok(2, {}, "x")},
                               "a\xEF\xBF\xBD\xEF\xBF\xBDx");
  const record b = with_tokens("concurrent-8", {bytes_tok(1, {}, "a"), bytes_tok(300, {0xC5, 0xC4}, "\xEF\xBF\xBD\xEF\xBF\xBD"),
                                                bytes_tok(3, {}, "y")},
                               "a\xEF\xBF\xBD\xEF\xBF\xBDy");
  const divergence d = diverge(a, b);
  check_same_place(d, 1);
  // 0xE2 alone vs 0xEF, then BF BD F0 9D, 84 9E: the first token parts at byte 0.
  const record c = with_tokens("alone", {lone_byte(226, 0xE2)}, "\xEF\xBF\xBD");
  const record e = with_tokens("concurrent-8",
                               {lone_byte(239, 0xEF), bytes_tok(301, {0xBF, 0xBD, 0xF0, 0x9D}), bytes_tok(302, {0x84, 0x9E})},
                               "\xEF\xBF\xBD\xF0\x9D\x84\x9E");
  const divergence d2 = diverge(c, e);
  CHECK(d2.token_index == 0);
  CHECK(d2.token_index_a == 0);
  CHECK(d2.token_index_b == 0);
  CHECK_FALSE(d2.tokenized_differently);
}

