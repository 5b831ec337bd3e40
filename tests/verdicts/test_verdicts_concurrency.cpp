// Known answers for the concurrency rule (issue 16, "Condition rules", concurrent-N; issue 46:
// intervals, not gaps): whether the N requests really shared the server, judged in this order:
// the request's own batch width (max_seqs_in_step); else the most slots seen busy during the burst
// (/slots, else /metrics), unless the end times form a queue; else the end times alone. The
// timing test: each request's time alone L (the item's: min(alone, control); each filler's: sent
// alone once); a request that ended within 0.5 L_j before request j's end proves that the server
// worked on them together (one at a time, j alone would have held the server then). No such end,
// with every L known -> a queue.
//
// Every case sends --concurrency 4: the item beside three fillers (the fixed filler prompts,
// which the server answers " ok" with the same delay). Requests in arrival order: alone, control,
// the item's concurrent request; the planted answers follow that order.
#include "verdict_harness.h"

using namespace detaudit::verdicts_test;

namespace {

const std::string PROBE = "--probe concurrency --concurrency 4";

const answer YES = answer({"Yes", " indeed"}).top(1, {{" indeed", -0.25}, {" maybe", -1.0}});

// Rule (queue test): no batch width, no slot counts, so the timing decides. The server answers
// one request at a time, 150 ms each, and the item joins the queue 30 ms late, so it is answered
// last: end times about 150, 300, 450, 630 ms. The fillers' L ≈ 150, the item's ≈ 180 (30 + 150).
// Windows: fillers (75, 150], (225, 300], (375, 450]; the item (540, 630]: no other end in any ->
// a queue: not exercised. The answers agree, so the divergence shown is identical (-1, -1).
// The concurrency probe judged nothing (its only row not exercised): UNJUDGED, exit 5 (issue 46.5).
TEST_CASE("verdicts openai-chat: a serial server under the concurrency probe is a queue, not exercised") {
  planted p(OPENAI_CHAT);
  p.server("concurrency", "serial").server("delay_ms", 150);
  p.item("serial server", {YES});
  const outcome r = run_planted(p, PROBE);
  check_verdict(r.row("alone", "concurrent-4"), not_exercised("one after another (a queue)"));
  check_counts(r.pair("alone", "concurrent-4"), 1, 0, 0, 1);
  CHECK(r.exit_code == 5);
  CHECK(r.err.find("UNJUDGED: ") != std::string::npos);
  CHECK(r.err.find("probe concurrency judged nothing") != std::string::npos);
}

// Rule (queue test, uneven latencies; issue 46.4): a serial server where the item takes 600 ms and
// each filler 100 ms. The fillers are answered first (the item joins 30 ms late): ends ≈ 100, 200,
// 300, then the item at ≈ 930. Windows: fillers (50, 100], (150, 200], (250, 300], the item
// (930 - 0.5 x 630, 930] = (615, 930]: empty -> a queue, not exercised. (The old gap test called
// this exercised: only one of three gaps was wide, so it did not look like a queue.)
TEST_CASE("verdicts openai-chat: a serial server with one slow item among fast fillers is a queue") {
  planted p(OPENAI_CHAT);
  p.server("concurrency", "serial").server("delay_ms", 100);
  p.item("slow item", {YES}, {{"delay_ms", 600}});
  const outcome r = run_planted(p, PROBE);
  check_verdict(r.row("alone", "concurrent-4"), not_exercised("one after another (a queue)"));
  CHECK(r.exit_code == 5);
}

// Rule (queue test, uneven latencies on a parallel server): the same 600 ms item and 100 ms fillers,
// all served at once: the fillers end together at ≈ 100 ms, the item at ≈ 600. A filler's window
// (≈ 50, ≈ 100] holds the other fillers' ends: they were processed together -> exercised.
TEST_CASE("verdicts openai-chat: a parallel server with one slow item among fast fillers is exercised") {
  planted p(OPENAI_CHAT);
  p.server("delay_ms", 100);
  p.item("slow parallel item", {YES}, {{"delay_ms", 600}});
  const outcome r = run_planted(p, PROBE);
  check_verdict(r.row("alone", "concurrent-4"), {.status = "identical"});
  CHECK(r.exit_code == 0);
}

// Rule (a lying /slots; issue 46.4): the server is serial (150 ms a request) but /slots says all
// 8 slots are busy at every reading. The end times form a queue (as in the first case), so they
// decide: not exercised, the reason naming the end times and the slot count they overrule.
TEST_CASE("verdicts llamacpp: a /slots that says every slot is busy does not beat end times that form a queue") {
  planted p(LLAMACPP);
  p.server("concurrency", "serial").server("delay_ms", 150).server("slots", "all");
  p.item("lying slots", {YES});
  const outcome r = run_planted(p, PROBE);
  const json& row = r.row("alone", "concurrent-4");
  check_verdict(row, not_exercised("the end times form a queue"));
  CHECK(row.value("reason", "").find("/slots showed 8 slots busy") != std::string::npos);
  CHECK(r.exit_code == 5);
}

// Rule (queue test): the same timing on a parallel server: the 4 requests sleep their 150 ms
// together and end within a few ms of each other, so the consecutive gaps are ≈0, far below
// 0.5 L ≈ 75 ms: not a queue -> exercised; equal answers -> identical.
TEST_CASE("verdicts openai-chat: a parallel server under the concurrency probe is exercised") {
  planted p(OPENAI_CHAT);
  p.server("delay_ms", 150);
  p.item("parallel server", {YES});
  const outcome r = run_planted(p, PROBE);
  check_verdict(r.row("alone", "concurrent-4"), {.status = "identical"});
  check_counts(r.pair("alone", "concurrent-4"), 1, 0, 0, 0);
  CHECK(r.exit_code == 0);
}

// Rule (status and counts under an exercised condition): on a parallel server the concurrent
// answer "Yes maybe" against alone's "Yes indeed": token 1, byte 4 ("Yes" 0-2, ' ' 3).
// Margins at step 1: alone " indeed" -0.25 over " maybe" -1.0 -> 0.75; concurrent " maybe"
// -0.5 over " indeed" -0.625 -> 0.125. Counted in differ: exit 1 under --fail-on any.
TEST_CASE("verdicts openai-chat: a concurrent answer that differs on a parallel server is counted") {
  planted p(OPENAI_CHAT);
  p.server("delay_ms", 150);
  p.item("parallel differs", {YES, YES, answer({"Yes", " maybe"}).top(1, {{" maybe", -0.5}, {" indeed", -0.625}})});
  const outcome r = run_planted(p, PROBE);
  check_verdict(r.row("alone", "concurrent-4"),
                {.status = "differs", .token_index = 1, .char_offset = 4, .margin_a = 0.75, .margin_b = 0.125});
  check_counts(r.pair("alone", "concurrent-4"), 1, 1, 0, 0);
  CHECK(r.exit_code == 1);
}

// Rule (slots): /slots reports the real number of requests in their delay; the 4 requests sleep
// 300 ms together, so the runner sees up to 4 slots processing: slots_busy_max >= 2 -> exercised.
TEST_CASE("verdicts llamacpp: /slots showing several busy slots during the burst is exercised") {
  planted p(LLAMACPP);
  p.server("delay_ms", 300).server("slots", "real");
  p.item("slots busy", {YES});
  const outcome r = run_planted(p, PROBE);
  check_verdict(r.row("alone", "concurrent-4"), {.status = "identical"});
  CHECK(r.exit_code == 0);
}

// Rule (slots): the same parallel server, but /slots never shows more than one slot processing:
// slots_busy_max 1 -> not exercised, "at most one slot was busy at a time during the burst (/slots)".
// The probe judged nothing: exit 5.
TEST_CASE("verdicts llamacpp: /slots reporting one busy slot is not exercised") {
  planted p(LLAMACPP);
  p.server("delay_ms", 300).server("slots", "one");
  p.item("slots one", {YES});
  const outcome r = run_planted(p, PROBE);
  const json& row = r.row("alone", "concurrent-4");
  check_verdict(row, not_exercised("at most one slot was busy at a time"));
  CHECK(row.value("reason", "").find("/slots") != std::string::npos);
  CHECK(r.exit_code == 5);
}

// Rule (slots from /metrics when there is no /slots): llamacpp:requests_processing never above 1
// -> not exercised, the same reason with /metrics as its source.
TEST_CASE("verdicts llamacpp: /metrics reporting one request processing is not exercised") {
  planted p(LLAMACPP);
  p.server("delay_ms", 300).server("metrics", "one");
  p.item("metrics one", {YES});
  const outcome r = run_planted(p, PROBE);
  const json& row = r.row("alone", "concurrent-4");
  check_verdict(row, not_exercised("at most one slot was busy at a time"));
  CHECK(row.value("reason", "").find("/metrics") != std::string::npos);
}

// Rule (order: slots before timing): a serial server whose /slots honestly shows one busy slot at
// a time. The slot count is present and below 2, so it decides: "at most one slot ... (/slots)".
TEST_CASE("verdicts llamacpp: a serial server's honest /slots decides before the timing") {
  planted p(LLAMACPP);
  p.server("concurrency", "serial").server("delay_ms", 150).server("slots", "real");
  p.item("serial slots", {YES});
  const outcome r = run_planted(p, PROBE);
  const json& row = r.row("alone", "concurrent-4");
  check_verdict(row, not_exercised("at most one slot was busy at a time"));
  CHECK(row.value("reason", "").find("/slots") != std::string::npos);
}

// Rule (order: batch width first): the concurrent answer says max_seqs_in_step 1 while /slots
// shows all 4 busy: the request's own batch width decides -> not exercised, "batch width 1".
TEST_CASE("verdicts llamacpp: a batch width of 1 is not exercised even when /slots shows several busy") {
  planted p(LLAMACPP);
  p.server("delay_ms", 300).server("slots", "real");
  p.item("batch width one", {YES, YES, answer(YES).set("max_seqs_in_step", 1)});
  const outcome r = run_planted(p, PROBE);
  check_verdict(r.row("alone", "concurrent-4"), not_exercised("never shared a forward step (batch width 1)"));
}

// Rule (order: batch width first): a serial server (whose timing alone would read as a queue)
// whose concurrent answer says max_seqs_in_step 3: batch width >= 2 -> exercised.
TEST_CASE("verdicts llamacpp: a batch width of 3 is exercised even when the timing looks like a queue") {
  planted p(LLAMACPP);
  p.server("concurrency", "serial").server("delay_ms", 150);
  p.item("batch width three", {YES, YES, answer(YES).set("max_seqs_in_step", 3)});
  const outcome r = run_planted(p, PROBE);
  check_verdict(r.row("alone", "concurrent-4"), {.status = "identical"});
  CHECK(r.exit_code == 0);
}

}  // namespace

// Rule (queue test, its scale): the item's time alone is the smaller of alone's and control's
// latency, so a slow first request (a cold server) does not make a queue look like batching. The
// serial server takes 100 ms a request; the item's alone answer takes 600 ms more, its control
// none. End times ≈ 100, 200, 300, 430 ms (the item joins 30 ms late, last): the item's window
// (430 - 0.5 x ~130, 430] holds no end -> a queue. Against alone's ~730 ms its window would reach
// back past 300 and 200, and the row would pass as exercised.
TEST_CASE("verdicts openai-chat: a slow alone request does not make a queue look like batching") {
  planted p(OPENAI_CHAT);
  p.server("concurrency", "serial").server("delay_ms", 100);
  answer slow = YES;
  slow.set("delay_ms", 600);
  p.item("cold item", {slow, YES, YES});
  const outcome r = run_planted(p, PROBE);
  check_verdict(r.row("alone", "concurrent-4"), not_exercised("one after another (a queue)"));
  CHECK(r.exit_code == 5);
}

// A llama.cpp server too busy to answer /slots within the poller's 2 s (every GET 2.5 s late) used
// to end `detaudit run` with "terminate called after throwing unreachable_error" from the
// poller's thread, mid-run. A reading that does not come is no reading: the run goes on, and
// without busy slots the timing test judges the burst.
TEST_CASE("verdicts llamacpp: a /slots that answers too late to poll does not end the run") {
  planted p(LLAMACPP);
  p.server("delay_ms", 300).server("slots", "real").server("get_delay_ms", 2500);
  p.item("slow slots", {YES});
  const outcome r = run_planted(p, PROBE);
  INFO(r.err);
  CHECK(r.err.find("terminate") == std::string::npos);
  CHECK(r.exit_code == 0);
  const json& row = r.row("alone", "concurrent-4");
  CHECK(row.value("reason", "").find("/slots") == std::string::npos);  // no slot reading was taken
}

// Planted answers for one of the fixed filler prompts (probes/conditions.cpp FILLERS), which is no
// item of the run.
void filler_case(planted& p, const std::string& prompt, const std::vector<answer>& answers) {
  json a = json::array();
  for (const answer& x : answers) a.push_back(x.to_json(p.d()));
  p.case_field(prompt, "answers", a);
  if (p.d().ids) p.case_field(prompt, "auto_ids", true);
}

// Rule (busy slots cannot stand in for end times that do not show overlap; hostile review): a
// serial server whose /slots says every slot is busy, and whose first fixed filler fails both sends
// that measure its time alone (HTTP 500), then answers in the burst. That filler's time alone is
// unknown; no window holds another end: not shown to overlap, and /slots does not decide: not
// exercised, the reason naming the unknown time alone and the overruled slots.
TEST_CASE("verdicts llamacpp: a lying /slots does not decide when a filler's time alone is unknown") {
  planted p(LLAMACPP);
  p.server("concurrency", "serial").server("delay_ms", 150).server("slots", "all");
  p.item("lying slots unknown", {YES});
  const answer fail = answer({" ok"}).error(500, "planted");
  filler_case(p, "Write a short story about a lighthouse keeper.", {fail, fail, answer({" ok"})});
  const outcome r = run_planted(p, PROBE);
  const json& row = r.row("alone", "concurrent-4");
  CHECK(row.value("exercised", true) == false);
  CHECK(row.value("reason", "").find("the time alone of 1 request(s) is unknown") != std::string::npos);
  CHECK(row.value("reason", "").find("slots busy: the end times decide") != std::string::npos);
}

// Rule (a fixed filler's time alone is the quicker of two sends; hostile review): a serial server
// whose fixed fillers each take 600 ms the first time they are sent (a cold path) and 20 ms after.
// One slow sample would give them 300 ms windows reaching back over the fillers ended just before;
// the quicker of two (20 ms) keeps the burst a queue: not exercised.
TEST_CASE("verdicts openai-chat: one slow send of a fixed filler does not make a queue look batched") {
  planted p(OPENAI_CHAT);
  p.server("concurrency", "serial").server("delay_ms", 20);
  p.item("cold fillers", {YES}, {{"delay_ms", 100}});
  for (const char* f : {"Write a short story about a lighthouse keeper.", "List five facts about octopuses.",
                        "Explain how a hash table handles collisions."})
    filler_case(p, f, {answer({" ok"}).set("delay_ms", 600), answer({" ok"})});
  const outcome r = run_planted(p, PROBE);
  check_verdict(r.row("alone", "concurrent-4"), not_exercised("one after another (a queue)"));
}
