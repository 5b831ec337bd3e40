#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <pthread.h>
#include <thread>

#include "chat/chat_template.h"
#include "commands.h"
#include "runtime/context.h"
#include "runtime/scheduler.h"
#include "serve/http_server.h"
#include "util/error.h"

namespace detaudit::cli {
namespace {

struct serve_cmd_options {
  std::string model;
  int n_slots = 1;
  int64_t ctx_size = 0;
  int64_t ubatch = 512;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool no_repack = false;
  std::string numerics = "exact";
  backend_options backend;
  std::string spec;
  std::string draft;
  int n_draft = 8;
  int n_queue = 0;
  std::string slot_save_path;
  std::string api_key;
  std::string api_key_env;
  serve::http_server_params http;
};

runtime::scheduler_params scheduler_params_make(const serve_cmd_options& o) {
  runtime::scheduler_params sp;
  sp.ctx.numerics = runtime::numerics_from_name(o.numerics);
  apply_backend_options(o.backend, sp.ctx);
  sp.ctx.n_threads = o.threads;
  sp.ctx.repack = !o.no_repack;
  sp.ctx.n_ubatch = o.ubatch;
  sp.ctx.n_ctx = o.ctx_size;
  sp.n_slots = o.n_slots;
  sp.n_queue = o.n_queue;
  sp.n_draft = o.n_draft;
  sp.slot_save_path = o.slot_save_path;
  if (o.spec == "ngram") sp.spec = runtime::SPEC_NGRAM;
  else if (!o.spec.empty()) throw input_error("--spec: expected ngram, found '" + o.spec + "'");
  if (!o.draft.empty()) {
    if (sp.spec == runtime::SPEC_NGRAM) throw input_error("--spec ngram and --draft exclude each other: choose one kind of drafting");
    if (o.draft.find_first_not_of("0123456789") == std::string::npos)
      throw input_error("--draft takes the draft MODEL.gguf; for the number of draft tokens use --draft-max " + o.draft);
    sp.spec = runtime::SPEC_DRAFT;
    sp.draft = model::model::load(o.draft);
  }
  return sp;
}

// Serves until SIGINT or SIGTERM. The signals are blocked in every thread (before any starts)
// and taken here with sigwait, so no handler runs inside the server or the scheduler.
void run_serve(const serve_cmd_options& o) {
  serve::http_server_params hp = o.http;
  hp.api_key = o.api_key;
  if (!o.api_key_env.empty()) {
    const char* k = std::getenv(o.api_key_env.c_str());
    if (!k || !*k) throw input_error("--api-key-env: environment variable " + o.api_key_env + " is not set or empty");
    hp.api_key = k;
  }
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  // A bad DETAUDIT_CHAT_DATE is the server's configuration, not a client's mistake: refuse it now.
  if (std::getenv("DETAUDIT_CHAT_DATE")) chat::chat_current_date();
  auto m = model::model::load(o.model);
  if (auto f = chat::chat_fallback_family(hp.chat_template, m->chat_template()))
    std::cerr << "serve: " << o.model << " has no chat template; chat requests are rendered with "
              << chat::template_family_name(*f) << ", as llama-server does\n";
  const runtime::scheduler_params sp = scheduler_params_make(o);
  runtime::scheduler sched(m, sp);
  serve::http_server server(sched, hp);
  const int port = server.bind();
  std::cout << "listening on http://" << hp.host << ":" << port << std::endl;
  std::thread listener([&server] {
    if (!server.listen()) std::cerr << "serve: the HTTP server stopped with an error\n";
    kill(getpid(), SIGTERM);  // wakes sigwait below when the server ended on its own
  });
  int sig = 0;
  sigwait(&sigs, &sig);
  server.stop();
  listener.join();
  sched.stop();
}

}  // namespace

void setup_serve(CLI::App& app) {
  auto opt = std::make_shared<serve_cmd_options>();
  CLI::App* sub = app.add_subcommand(
      "serve",
      "Serve the model over HTTP: llama.cpp's /completion, /tokenize, /detokenize, /props, /slots, /metrics and\n"
      "OpenAI's /v1/completions, /v1/chat/completions, /v1/models, with continuous batching over -np slots. In\n"
      "--numerics exact a request's tokens, log-probs and logit hashes do not depend on what else is served.\n"
      "docs/serve-api.md lists every endpoint and field.");
  sub->add_option("-m,--model", opt->model, "GGUF model file")->required()->check(CLI::ExistingFile)->type_name("FILE.gguf");
  sub->add_option("--parallel", opt->n_slots, "Slots: requests generated at once (-np)")->check(CLI::Range(1, 256))->capture_default_str();
  sub->add_option("-c,--ctx-size", opt->ctx_size, "Total context, split evenly among the slots; 0: the model's trained context per slot")
      ->capture_default_str();
  sub->add_option("--ubatch", opt->ubatch, "Most tokens evaluated in one forward step (-ub)")->capture_default_str();
  sub->add_option("-t,--threads", opt->threads, "Threads used by the engine")->capture_default_str();
  sub->add_flag("--no-repack", opt->no_repack,
                "Keep the weights in the mapped file's layout (no load-time repacking for the CPU kernels: less memory, "
                "slower generation, the same bits)");
  sub->add_option("--numerics", opt->numerics, "exact (bit-identical under any batching) or float")->capture_default_str()->type_name("MODE");
  add_backend_options(sub, opt->backend);
  sub->add_option("--host", opt->http.host, "Address to listen on")->capture_default_str();
  sub->add_option("--port", opt->http.port, "Port to listen on; 0: any free port (printed)")->check(CLI::Range(0, 65535))->capture_default_str();
  CLI::Option* key = sub->add_option("--api-key", opt->api_key,
                                     "Require 'Authorization: Bearer KEY' (the scheme in any case) or 'X-Api-Key: KEY' "
                                     "on every route but /health; checked before the body is read (401)")
                         ->type_name("KEY");
  sub->add_option("--api-key-env", opt->api_key_env, "Read the API key from this environment variable")->excludes(key)->type_name("NAME");
  sub->add_option("--slot-save-path", opt->slot_save_path, "Folder for POST /slots/{id}?action=save|restore")->type_name("DIR");
  sub->add_option("--queue", opt->n_queue, "Most requests waiting for a slot before 503 (0: as many as slots; never fewer)")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
  sub->add_option("--spec", opt->spec, "Speculative decoding: ngram (drafts from the request's own text)")->type_name("KIND");
  sub->add_option("--draft,--model-draft", opt->draft,
                  "Speculative decoding with a draft model sharing the model's vocabulary (-md); drafts are verified in "
                  "the same batch and accepted only when they equal the token the model itself draws")
      ->type_name("FILE.gguf");
  sub->add_option("--draft-max", opt->n_draft, "Most draft tokens proposed per step (--spec ngram or --draft)")
      ->check(CLI::Range(0, 64))->capture_default_str();
  sub->add_option("--chat-template", opt->http.chat_template,
                  "Chat template family for /v1/chat/completions and /api/chat instead of the detected one (or of chatml, "
                  "used when the file has none): chatml, qwen3, deepseek-r1, llama3, llama2, phi3, gemma, gpt-oss "
                  "(gpt-oss writes the date: DETAUDIT_CHAT_DATE=YYYY-MM-DD pins it, else today in UTC)")
      ->type_name("NAME");
  sub->add_option("--max-body", opt->http.max_body,
                  "Largest request body in bytes: a larger Content-Length is 413 before the body is read; a body "
                  "needs a Content-Length (411 without, or chunked)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30))->capture_default_str()->type_name("BYTES");
  sub->add_option_function<size_t>(
         "--max-body-memory", [opt](size_t mib) { opt->http.max_body_memory = mib << 20; },
         "MiB of memory the parsed request bodies being handled may take together (a JSON body of many small "
         "values takes about 20 times its size parsed): a body that would take more than all of it is 413, one "
         "that does not fit beside the others now 503 (default 1024)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20))->type_name("MIB");
  sub->add_option("--timeout", opt->http.timeout_s,
                  "Seconds each read of a request body, and each write of an answer, may wait (the connection closes "
                  "after)")
      ->check(CLI::Range(1, 86400))->capture_default_str();
  sub->add_option("--header-timeout", opt->http.header_timeout_s,
                  "Seconds a request head may take in all from its first byte (408 after, not reset by each byte), "
                  "and a connection may wait idle for the next request (closed after)")
      ->check(CLI::Range(1, 3600))->capture_default_str();
  sub->add_option("--max-connections", opt->http.max_connections,
                  "Connections open at once, all clients together; one more is answered 503 and closed")
      ->check(CLI::Range(1, 768))->capture_default_str();
  sub->add_option("--max-connections-per-client", opt->http.max_connections_per_client,
                  "Connections open at once from one client address; one more is answered 503 and closed")
      ->check(CLI::Range(1, 768))->capture_default_str();
  sub->footer(
      "Prints 'listening on http://HOST:PORT' when ready; SIGINT / SIGTERM stop it (exit 0).\n"
      "Examples:\n"
      "  detaudit serve -m stories260K.gguf -np 4 -c 2048 --port 8080\n"
      "  curl -s localhost:8080/completion -d '{\"prompt\": \"Once upon a time\", \"n_predict\": 32, \"logit_hashes\": true}'");
  sub->callback([opt] { run_serve(*opt); });
}

}  // namespace detaudit::cli
