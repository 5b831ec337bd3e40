#include "app.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "runtime/bench.h"
#include "util/error.h"

namespace detaudit::cli {
namespace {

// llama.cpp's multi-letter short flags and the long options detaudit knows them by.
const std::map<std::string, std::string> LLAMACPP_FLAGS = {
    {"-np", "--parallel"},      {"-ub", "--ubatch"},         {"-ngl", "--n-gpu-layers"},
    {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"},  {"-fa", "--flash-attn"},
    {"-tb", "--threads-batch"}, {"-md", "--model-draft"},    {"-ngld", "--n-gpu-layers-draft"},
    {"-cb", "--cont-batching"}, {"-nkvo", "--no-kv-offload"}, {"-dev", "--device"},
    {"-sm", "--split-mode"},    {"-ts", "--tensor-split"},   {"-mg", "--main-gpu"},
};

// Finds the subcommand named in args (the first token naming one), or nullptr.
CLI::App* find_subcommand(CLI::App& app, const std::vector<std::string>& args, size_t* index) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") break;
    CLI::App* sub = app.get_subcommand_ptr(args[i]).get();
    if (sub) {
      *index = i;
      return sub;
    }
  }
  return nullptr;
}

bool option_given(const CLI::Option* opt, const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--") break;
    for (const std::string& l : opt->get_lnames())
      if (a == "--" + l || a.rfind("--" + l + "=", 0) == 0) return true;
    for (const std::string& s : opt->get_snames())
      if (a.size() >= 2 && a[0] == '-' && a[1] != '-' && a.substr(1, s.size()) == s) return true;
  }
  return false;
}

std::string json_scalar(const nlohmann::json& v, const std::string& file, const std::string& key) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) return v.dump();
  throw input_error("config " + file + ": key '" + key + "': expected a string, number, boolean or array of them, found " +
                    v.type_name());
}

// Expands `--config FILE.json` into the flags it names, inserted right after the subcommand.
// A key given on the command line too is dropped from the config: the command line wins.
std::vector<std::string> expand_config(CLI::App& app, std::vector<std::string> args) {
  auto it = std::find(args.begin(), args.end(), "--config");
  std::string file;
  if (it != args.end()) {
    if (it + 1 == args.end()) throw CLI::ArgumentMismatch("--config needs a FILE.json argument");
    file = *(it + 1);
    args.erase(it, it + 2);
  } else {
    for (auto a = args.begin(); a != args.end(); ++a)
      if (a->rfind("--config=", 0) == 0) {
        file = a->substr(9);
        args.erase(a);
        break;
      }
  }
  if (file.empty()) return args;
  size_t sub_index = 0;
  CLI::App* sub = find_subcommand(app, args, &sub_index);
  if (!sub) throw CLI::ArgumentMismatch("--config applies to a subcommand; name one (e.g. detaudit run --config FILE)");
  std::ifstream in(file);
  if (!in) throw input_error("config " + file + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw input_error("config " + file + ": not valid JSON: " + message_line(e.what()));
  }
  if (!j.is_object()) throw input_error("config " + file + ": expected a JSON object of option names, found " + std::string(j.type_name()));
  std::vector<std::string> extra;
  for (auto& [key, v] : j.items()) {
    const CLI::Option* opt = sub->get_option_no_throw("--" + key);
    if (!opt) throw input_error("config " + file + ": unknown option '" + key + "' for 'detaudit " + sub->get_name() + "'");
    if (option_given(opt, args)) continue;
    if (v.is_boolean()) {
      if (opt->get_type_size() != 0) extra.push_back("--" + key + "=" + (v.get<bool>() ? "true" : "false"));
      else if (v.get<bool>()) extra.push_back("--" + key);
    } else if (v.is_array()) {
      for (const auto& e : v) {
        extra.push_back("--" + key);
        extra.push_back(json_scalar(e, file, key));
      }
    } else {
      extra.push_back("--" + key);
      extra.push_back(json_scalar(v, file, key));
    }
  }
  args.insert(args.begin() + static_cast<long>(sub_index) + 1, extra.begin(), extra.end());
  return args;
}

void build_app(CLI::App& app) {
  app.description(
      "detaudit: does an LLM inference engine give the same answer twice?\n"
      "Replays prompts against OpenAI-compatible servers and a built-in exact engine under batching,\n"
      "prompt caching, chunking and speculative decoding, and reports item by item where outputs part.");
  app.set_version_flag("--version", std::string("detaudit ") + DETAUDIT_VERSION + " (commit " + runtime::build_commit() + ")");
  app.require_subcommand(1);
  app.fallthrough(false);
  app.footer(
      "llama.cpp-style flags (-np, -ub, -ngl, ...) are accepted. Any subcommand takes --config FILE.json\n"
      "(an object of option names to values; flags on the command line override it).\n"
      "Exit codes: 0 ok, 1 beyond --fail-on, 2 usage or input error, 3 incomplete (a target unreachable, requests\n"
      "that failed after their retries, or a full disk), 4 internal error, 5 unjudged (nothing judged, or a probe\n"
      "asked for judged no item), 130 interrupted.");
  setup_inspect(app);
  setup_tokenize(app);
  setup_vocab(app);
  setup_synth(app);
  setup_generate(app);
  setup_score(app);
  setup_serve(app);
  setup_run(app);
  setup_merge(app);
  setup_compare(app);
  setup_report(app);
  setup_bundle(app);
  setup_bench(app);
  setup_devices(app);
}

// Levenshtein distance, for did-you-mean.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The closest long option of `sub` to `typed` (its "=VALUE" part dropped), "" when none is close.
std::string did_you_mean(const CLI::App* sub, const std::string& typed) {
  const std::string name = typed.substr(0, typed.find('='));
  std::string best;
  size_t best_d = std::max<size_t>(2, name.size() / 3) + 1;
  for (const CLI::Option* o : sub->get_options()) {
    for (const std::string& l : o->get_lnames()) {
      const size_t d = edit_distance(name, "--" + l);
      if (d < best_d) best_d = d, best = "--" + l;
    }
  }
  return best;
}

// CLI11 names an option by its long name, and sees llama.cpp's short flags already rewritten to
// their long names: put back what the user typed.
std::string as_typed(std::string msg, const std::vector<std::string>& typed, const CLI::App* sub) {
  std::vector<std::pair<std::string, std::string>> names(LLAMACPP_FLAGS.begin(), LLAMACPP_FLAGS.end());
  for (const CLI::Option* o : sub->get_options())  // "-m" typed, "--model" in CLI11's message
    if (!o->get_snames().empty() && !o->get_lnames().empty())
      names.emplace_back("-" + o->get_snames().front(), "--" + o->get_lnames().front());
  for (const auto& [short_flag, long_flag] : names) {
    if (std::find(typed.begin(), typed.end(), short_flag) == typed.end()) continue;
    if (std::find(typed.begin(), typed.end(), long_flag) != typed.end()) continue;
    for (size_t at = msg.find(long_flag); at != std::string::npos; at = msg.find(long_flag, at + short_flag.size())) {
      const size_t end = at + long_flag.size();
      const bool whole = end == msg.size() || !(std::isalnum(static_cast<unsigned char>(msg[end])) || msg[end] == '-');
      if (whole) msg.replace(at, long_flag.size(), short_flag);
    }
  }
  return msg;
}

int report_parse_error(CLI::App& app, const CLI::ParseError& e, const std::vector<std::string>& typed) {
  std::string sub;
  const CLI::App* where = &app;
  for (CLI::App* s : app.get_subcommands()) sub = " " + s->get_name(), where = s;
  std::string msg = as_typed(message_line(e.what()), typed, where);
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    // Name each unknown option as typed, with the closest real one; CLI11 lists them reversed and
    // mixed with their values.
    std::string unknown;
    for (const std::string& a : typed) {
      if (a == "--") break;
      if (a.size() < 2 || a[0] != '-' || std::isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.') continue;
      const std::string name = a.substr(0, a.find('='));
      if (where->get_option_no_throw(name) || LLAMACPP_FLAGS.count(name) || name == "--help" || name == "-h") continue;
      const std::string m = did_you_mean(where, name);
      unknown += (unknown.empty() ? "" : "; ") + ("unknown option " + name) + (m.empty() ? "" : " (did you mean " + m + "?)");
    }
    if (!unknown.empty()) msg = unknown;
  }
  std::fprintf(stderr, "detaudit%s: error: %s (see 'detaudit%s --help')\n", sub.c_str(), msg.c_str(), sub.c_str());
  return EXIT_USAGE;
}

}  // namespace

std::vector<std::string> cli_rewrite_args(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  out.reserve(args.size());
  bool passthrough = false;
  for (const std::string& a : args) {
    if (a == "--") passthrough = true;
    auto it = passthrough ? LLAMACPP_FLAGS.end() : LLAMACPP_FLAGS.find(a);
    out.push_back(it == LLAMACPP_FLAGS.end() ? a : it->second);
  }
  return out;
}

int cli_main(int argc, char** argv) {
  CLI::App app{"detaudit", "detaudit"};
  const std::vector<std::string> typed(argv + 1, argv + argc);
  try {
    build_app(app);
    std::vector<std::string> args = cli_rewrite_args(typed);
    args = expand_config(app, std::move(args));
    if (args.empty()) throw CLI::RequiredError("a subcommand is required (run, compare, report, merge, serve, generate, score, synth, inspect, tokenize, vocab)");
    std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
    app.parse(args);
    return EXIT_OK;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return report_parse_error(app, e, typed);
  } catch (const exit_with& e) {
    return e.code();
  } catch (const input_error& e) {
    std::fprintf(stderr, "detaudit: %s\n", message_line(e.what()).c_str());
    return EXIT_USAGE;
  } catch (const disk_full_error& e) {
    std::fprintf(stderr, "detaudit: disk full: %s\n", message_line(e.what()).c_str());
    return EXIT_UNREACHABLE;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "detaudit: out of memory\n");
    return EXIT_INTERNAL;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "detaudit: internal error: %s\n", message_line(e.what()).c_str());
    return EXIT_INTERNAL;
  }
}

}  // namespace detaudit::cli
