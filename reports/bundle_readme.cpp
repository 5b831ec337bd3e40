// A bundle's README.md: the issue text, written for someone who has never seen detaudit.
#include <cstdio>

#include "reports/audit/redact.h"
#include "reports/audit/utf8.h"
#include "reports/bundle_internal.h"
#include "reports/compare_internal.h"
#include "reports/format_internal.h"

namespace detaudit::reports {
namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// `'text'` on one line, as an inline code span that survives backticks in the text.
std::string code(const std::string& s) { return md_code_line("'" + escape_line(s, '\'') + "'"); }

// `text` on one line, for values (specs, settings) where quotes would only be noise.
std::string value_code(const std::string& s) { return s.empty() ? "" : md_code(s); }

std::string scalar_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// An engine spec with its model file named, not located: the README goes into an issue, and a
// local path says nothing to its readers (engine:/home/me/m/q8.gguf?x -> engine:q8.gguf?x).
std::string spec_public(const std::string& spec) {
  if (spec.rfind("engine:", 0) != 0) return spec;
  const size_t q = spec.find('?');
  const std::string path = spec.substr(7, q == std::string::npos ? std::string::npos : q - 7);
  const size_t slash = path.find_last_of('/');
  return "engine:" + (slash == std::string::npos ? path : path.substr(slash + 1)) + (q == std::string::npos ? "" : spec.substr(q));
}

// What was different about a condition's request, in words.
std::string condition_words(const bundle_side& s, const json& options) {
  const std::string c = s.rec->condition;
  if (c == "alone") return "the request sent alone, with nothing else in flight";
  if (c == "control") return "the same request sent alone again (the control: run-to-run noise)";
  if (c == "repeat") return "the same request sent alone a third time";
  if (s.n_concurrent > 0)
    return "the same request sent with " + std::to_string(s.n_concurrent - 1) + " others at once (" +
           std::to_string(s.n_concurrent) + " requests released together from " + std::to_string(s.n_concurrent) + " threads)";
  if (c == "cache-off") return "the same request with `cache_prompt: false`";
  if (c == "cache-on") return "the same request with `cache_prompt: true`";
  if (c == "cache-warm") return "the same request with `cache_prompt: true`, right after the same request (prompt served from the cache)";
  if (starts_with(c, "ubatch-")) return "the same request on the engine with micro-batch (ubatch) " + c.substr(7);
  if (c == "spec-ngram") return "the same request with n-gram speculative decoding on";
  if (c == "spec-off") return "the same request with speculative decoding off";
  if (c == "seed-fixed")
    return "the request at temperature " + value_code(scalar_text(options.value("seed_temperature", json("?")))) + " with seed " +
           value_code(scalar_text(options.value("seed", json("?")))) + ", repetition " + std::to_string(s.rec->repetition);
  if (c == "seed-none") return "the request at a temperature above 0 without a seed, repetition " + std::to_string(s.rec->repetition);
  return "condition " + code(c);
}

// A table row: `key` is detaudit's own words or md_escape'd, `value` Markdown already (a code span).
void row_add(std::string& out, const std::string& key, const std::string& value) {
  if (!value.empty()) out += "| " + md_cell(key) + " | " + md_cell(value) + " |\n";
}

// The scalar settings of the server's /props (or the engine's settings), nested keys joined by ".".
void settings_rows(std::string& out, const json& o, const std::string& prefix, int depth, int& shown) {
  for (const auto& [k, v] : o.items()) {
    if (shown >= 40) return;
    if (v.is_object() && depth < 2) {
      settings_rows(out, v, prefix + k + ".", depth + 1, shown);
    } else if (v.is_primitive() && !v.is_null()) {
      std::string text = scalar_text(v);
      // An absolute path (a model file on the server or this machine) is named, not located.
      if (v.is_string() && text.size() > 1 && text[0] == '/' && text.find('/', 1) != std::string::npos)
        text = ".../" + text.substr(text.find_last_of('/') + 1);
      row_add(out, "server settings: " + md_escape(prefix + k), value_code(text.size() > 120 ? text.substr(0, 120) + "..." : text));
      ++shown;
    }
  }
}

std::string section_target(const bundle_ctx& c) {
  const json& t = c.a.rec->target;
  const json caps = c.target_entry.value("capabilities", json::object());
  std::string out = "## Target\n\n| | |\n|---|---|\n";
  row_add(out, "spec", value_code(spec_public(json_str(t, "spec"))));
  // Every value here is what the server or the run folder said: a code span, never markup.
  row_add(out, "dialect", value_code(json_str(t, "dialect")));
  row_add(out, "URL", value_code(json_str(t, "url")));
  row_add(out, "model", value_code(json_str(t, "model", json_str(caps, "model"))));
  row_add(out, "model sha256", value_code(json_str(t, "model_sha256", json_str(caps, "model_sha256"))));
  row_add(out, "server build", value_code(json_str(t, "build", json_str(caps, "build"))));
  row_add(out, "fingerprint", value_code(json_str(t, "fingerprint", json_str(caps, "fingerprint"))));
  if (caps.contains("n_slots")) row_add(out, "slots", value_code(scalar_text(caps["n_slots"])));
  for (const char* k : {"token_ids", "cache_control", "logit_hashes", "logprobs_kind", "seed"})
    if (caps.contains(k)) row_add(out, k, value_code(scalar_text(caps[k])));
  if (c.a.rec->request.contains("engine")) row_add(out, "engine settings", value_code(c.a.rec->request["engine"].dump()));
  if (c.a.rec->target != c.b.rec->target && json_str(c.b.rec->target, "spec") != json_str(t, "spec"))
    row_add(out, "side B's target",
            value_code(spec_public(json_str(c.b.rec->target, "spec"))) + " " + value_code(json_str(c.b.rec->target, "fingerprint")));
  if (!c.engine)
    out += "\nHow the server was started (fill in before filing; the flags decide batching, caching and slots):\n\n"
           "```\n<the command that started the server, e.g. llama-server -m MODEL.gguf -np 8 -c 4096 --port 8080>\n```\n";
  const json raw = caps.value("raw", json::object());
  if (raw.is_object()) {
    std::string rows;
    int shown = 0;
    settings_rows(rows, raw.contains("props") && raw["props"].is_object() ? raw["props"] : raw, "", 0, shown);
    if (!rows.empty())
      out += "\n<details><summary>Server settings (its /props or equivalent, " + std::to_string(shown) +
             " scalar values)</summary>\n\n| | |\n|---|---|\n" + rows + "\n</details>\n";
  }
  out += "\nThe capability probe's answer (the server's /props or equivalent, as run.json keeps it: at most 16 KiB a route) is in "
         "`target.json`.\n\n";
  const json& m = c.manifest;
  if (m.is_object() && !m.empty()) {
    out += "Run " + md_code(json_str(m, "run_id")) + ", detaudit " + md_code(json_str(m, "tool_version")) + ", started " +
           md_code(json_str(m, "started")) + ", options " +
           md_code(redact_json(m.value("options", json::object()), "").dump(-1, ' ', false, json::error_handler_t::replace)) + ".\n\n";
  }
  return out;
}

std::string section_pair(const bundle_ctx& c) {
  const json options = c.manifest.value("options", json::object());
  std::string out = "## The pair\n\n| side | condition | what was sent |\n|---|---|---|\n";
  out += "| A | " + md_cell(value_code(c.a.name)) + " | " + md_cell(condition_words(c.a, options)) + " |\n";
  out += "| B | " + md_cell(value_code(c.b.name)) + " | " + md_cell(condition_words(c.b, options)) + " |\n\n";
  out += "Both bodies are in `request-A.json` and `request-B.json`, the responses (detaudit's records, docs/records.md) "
         "in `response-A.json` and `response-B.json`.\n";
  if (!c.fillers.empty())
    out += "The " + std::to_string(c.fillers.size()) + " other requests were not recorded: " + md_escape(c.filler_note) +
           ". Their bodies are in `fillers/`.\n";
  return out + "\n";
}

std::string section_context(const divergence& d) {
  const std::string body = "A: " + escape_line(d.before_a) + "⟦" + escape_line(d.after_a) + "\n" + "B: " + escape_line(d.before_b) +
                           "⟦" + escape_line(d.after_b) + "\n";
  const std::string fence = md_fence(body + "````");  // at least four, more than any run in the texts
  return "Context (up to 40 characters before and 60 after; `⟦` marks the first difference):\n\n" + fence + "\n" + body + fence +
         "\n\n";
}

std::string grade_words(const std::optional<bool>& g) { return !g ? "not graded" : *g ? "right" : "wrong"; }

std::string section_result(const bundle_ctx& c) {
  const divergence& d = c.row.d;
  std::string out = "## Result\n\nSide A is " + value_code(c.a.name) + ", side B " + value_code(c.b.name) + " (what each sent: \"The pair\", below).\n\n";
  for (const auto& [side, r] : {std::pair{"A", c.a.rec}, std::pair{"B", c.b.rec}})
    if (!r->error.empty()) out += "Side " + std::string(side) + " has no usable response: " + code(r->error) + "\n\n";
  if (!c.row.exercised) out += "Condition not exercised: " + md_escape(c.row.reason) + ". Its responses are shown for information only.\n\n";
  if (c.no_response)
    out += "A side has no response to compare (its condition was not exercised): the pair says nothing about determinism.\n\n";
  else if (!c.row.error)
    out += d.identical ? "The two responses are **identical** token for token.\n\n"
           : d.token_index >= 0
               ? "The two responses **differ** from generated token " + std::to_string(d.token_index) + ".\n\n"
               : "The two responses **differ** from byte " + std::to_string(d.char_offset) +
                     " of their texts (compared on the texts: a side reported no tokens).\n\n";
  out += "How often: over this item's records for the two conditions, " + std::to_string(c.differed) + " of " +
         std::to_string(c.compared) + " comparison(s) differ.\n\n";
  if (!d.identical && !c.row.error && !c.no_response && d.token_index >= 0) {
    out += "- First differing token: index " + std::to_string(d.token_index) + " (byte " + std::to_string(d.char_offset) + " of the text): A " +
           code(d.token_a) + " (id " + std::to_string(d.id_a) + ") vs B " + code(d.token_b) + " (id " + std::to_string(d.id_b) + ")\n";
    out += "- Margin at that step (top-1 minus top-2 log-prob): A " + margin_text(d.margin_a) + ", B " + margin_text(d.margin_b) +
           " (near 0: a near-tie flipped; large: a real change of the computation)\n";
    if (c.row.oracle) {
      const row_oracle& o = *c.row.oracle;
      out += "- Exact math (`detaudit --oracle`, the same model file teacher-forced in exact numerics): " +
             (o.cls.empty() ? std::string() : "**" + o.cls + "**: ") + oracle_sentence(c.row, {code, value_code}) + "\n";
    }
  }
  if (d.hashes_available)
    out += d.hash_step >= 0 ? "- First differing logit hash: step " + std::to_string(d.hash_step) + "\n"
                            : "- Logit hashes: identical at every step\n";
  else
    out += "- Logit hashes: not available from this target\n";
  if (!d.note.empty()) out += "- Note: " + md_escape(d.note) + "\n";
  const record& a = *c.a.rec;
  const record& b = *c.b.rec;
  out += "- Generated: A " + std::to_string(a.tokens.size()) + " tokens (finish " + code(a.finish_reason) + "), B " +
         std::to_string(b.tokens.size()) + " tokens (finish " + code(b.finish_reason) + ")\n";
  if (!a.grader.empty())
    out += "- Graded with " + value_code(a.grader) + " against " + code(a.reference.substr(0, 200)) + ": A " + grade_words(c.row.correct_a) +
           ", B " + grade_words(c.row.correct_b) + ", flip " + flip_name(c.row.flip) + "\n";
  out += "\n";
  if (!d.identical && !c.row.error && !c.no_response) out += section_context(d);
  return out;
}

std::string section_repro(const bundle_ctx& c) {
  std::string out = "## Reproduce\n\n";
  if (c.engine) {
    out += "The target is detaudit's built-in engine, so the reproducers run `detaudit run` on `item.jsonl` and read its JSON "
           "report (`detaudit` on PATH, or give its path):\n\n```\npython3 repro.py --detaudit /path/to/detaudit\n"
           "sh repro.sh /path/to/detaudit\n```\n\nwhich run\n\n";
    // Shell words on one line, each single-quoted where it needs it; the fence outlasts any backticks.
    const auto word = [](const std::string& raw) {
      const std::string a = escape_line(raw);
      if (a.find_first_of(" {}\"'*?&;|$`<>()\\") == std::string::npos) return a;
      std::string q = "'";
      for (char ch : a) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
      return q + "'";
    };
    std::string cmd = "detaudit run " + word("--target=" + spec_public(c.engine_spec)) + " --prompts=item.jsonl";
    for (const std::string& arg : c.engine_args) {
      const size_t eq = arg.find('=');
      cmd += " " + word(eq != std::string::npos && starts_with(arg, "--target=") ? "--target=" + spec_public(arg.substr(eq + 1)) : arg);
    }
    const std::string fence = md_fence(cmd);
    out += fence + "\n" + cmd + "\n" + fence + "\n\n";
    if (c.item_lines.size() > 1)
      out += "`item.jsonl` holds the item, then the prompts that were sent beside it; `--shard 1/" + std::to_string(c.item_lines.size()) +
             "` runs the first line only, and the others are its fillers, as in the original run.\n";
    out += "The reproducers use the model path the run used (in `bundle.json`); this text names the file only. Pass "
           "`--target SPEC` to repro.py where the model lives elsewhere.\n\n";
  } else {
    out += "Against the server the run used (" + value_code(c.a.url) + ") or another URL:\n\n```\npython3 repro.py [--url http://HOST:PORT] [--tries N]\n"
           "sh repro.sh [http://HOST:PORT]\n```\n\n";
    out += "Side A (" + value_code(c.a.name) + ") is sent first, then side B (" + value_code(c.b.name) + "), each as recorded, to " + value_code(c.a.path);
    if (c.a.n_concurrent + c.b.n_concurrent > 0)
      out += "; the concurrent side is released together with the bodies in `fillers/` from separate threads (repro.sh: background curl jobs)";
    if (c.a.warm || c.b.warm) out += "; the cache-warm side is sent once before, to fill the prompt cache";
    out += ". A server that needs a key: put it in the environment variable `DETAUDIT_REPRO_KEY` (repro.py: or name another "
           "with `--api-key-env NAME`).\n\n";
    out += "Divergence that comes from batch composition and timing is not certain to recur on one replay; `--tries N` replays "
           "the pair N times and says how often it differed (\"differed 7 of 10\").\n\n";
  }
  out += "Both print `identical` (exit 0) or `different` with the first differing token and both texts around it (exit 1); "
         "exit 2 when a request fails.\n\n";
  return out;
}

}  // namespace

std::string bundle_readme(const bundle_ctx& c) {
  const bool none = c.row.error || c.no_response;
  const char* verb = c.row.error ? "has a failed request under" : c.no_response ? "has a side without a response under"
                     : c.row.d.identical ? "is identical under" : "differs between";
  const char* gave = none ? "did not give two responses." : c.row.d.identical ? "gave the same tokens." : "gave different tokens.";
  // Names from records are escaped onto one line: a newline or control byte cannot break the title.
  std::string out = "# detaudit: item " + value_code(c.item_id) + " " + verb + " " + value_code(c.a.name) + " and " +
                    value_code(c.b.name) + "\n\n";
  out += "A determinism report written by `detaudit bundle`: the same prompt at the same settings, sent under two "
         "conditions, " + std::string(gave) + "\n\n";
  // The result first: what differs, where, how often; then what was audited and how to replay it.
  out += section_result(c) + section_pair(c) + section_target(c) + section_repro(c);
  out += "## Files\n\n| file | what |\n|---|---|\n"
         "| `request-A.json`, `request-B.json` | the request bodies as sent (secrets redacted) |\n"
         "| `response-A.json`, `response-B.json` | the two responses as detaudit recorded them |\n"
         "| `target.json` | the target's capabilities and settings from the run's `run.json` |\n"
         "| `bundle.json` | what the reproducers read |\n";
  if (!c.fillers.empty()) out += "| `fillers/filler-K.json` | the bodies sent beside the item |\n";
  if (c.engine) out += "| `item.jsonl` | the prompts file the reproducers give `detaudit run` |\n";
  out += "| `repro.py`, `repro.sh` | replay the pair (Python standard library; curl) |\n";
  return out;
}

}  // namespace detaudit::reports
