#include "app.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "util/error.h"

namespace detaudit::cli {
namespace {

// llama.cpp's multi-letter short flags and the long options detaudit knows them by.
const std::map<std::string, std::string> k_llamacpp_flags = {
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
  app.set_version_flag("--version", std::string("detaudit ") + DETAUDIT_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);
  app.footer(
      "llama.cpp-style flags (-np, -ub, -ngl, ...) are accepted. Any subcommand takes --config FILE.json\n"
      "(an object of option names to values; flags on the command line override it).\n"
      "Exit codes: 0 ok, 1 divergence beyond --fail-on, 2 usage or input error, 3 target unreachable, 4 internal error.");
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

int report_parse_error(CLI::App& app, const CLI::ParseError& e) {
  std::string sub;
  for (CLI::App* s : app.get_subcommands()) sub = " " + s->get_name();
  std::fprintf(stderr, "detaudit%s: error: %s (see 'detaudit%s --help')\n", sub.c_str(), message_line(e.what()).c_str(),
               sub.c_str());
  return EXIT_USAGE;
}

}  // namespace

std::vector<std::string> cli_rewrite_args(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  out.reserve(args.size());
  bool passthrough = false;
  for (const std::string& a : args) {
    if (a == "--") passthrough = true;
    auto it = passthrough ? k_llamacpp_flags.end() : k_llamacpp_flags.find(a);
    out.push_back(it == k_llamacpp_flags.end() ? a : it->second);
  }
  return out;
}

int cli_main(int argc, char** argv) {
  CLI::App app{"detaudit", "detaudit"};
  try {
    build_app(app);
    std::vector<std::string> args(argv + 1, argv + argc);
    args = cli_rewrite_args(args);
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
    return report_parse_error(app, e);
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
