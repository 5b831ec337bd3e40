// The oracle pass: records -> per item a trie of the responses' token ids -> one exact prefill per
// prompt, forks at every branch, one distribution per trie node -> per response the exact
// log-prob, rank and argmax of each of its tokens and its distance from exact on what it reported.
#include "probes/oracle.h"

#include "probes/target.h"
#include "probes/target_engine.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>

#include "chat/chat_template.h"
#include "model/model.h"
#include "reports/audit/kld.h"
#include "reports/audit/steps.h"
#include "runtime/context.h"
#include "runtime/generate.h"
#include "runtime/sampling.h"
#include "tokenizer/vocab.h"
#include "util/error.h"
#include "util/sha256.h"

namespace detaudit::probes {
namespace {

using reports::json;
using reports::ORACLE_LOWEST_LOGPROB;
using reports::oracle_response;
using reports::oracle_step;
using reports::record;

struct oracle_settings {
  std::string path;
  runtime::context_params ctx;
  std::string chat_template;
};


oracle_settings settings_parse(const std::string& spec) {
  const std::string what = "--oracle '" + spec + "'";
  if (spec.rfind("engine:", 0) != 0) throw input_error(what + ": expected engine:MODEL.gguf (the model file the server serves)");
  oracle_settings s;
  s.ctx.numerics = runtime::NUMERICS_EXACT;
  s.ctx.n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const engine_spec_parts parts = engine_spec_split(spec, what);
  s.path = parts.path;
  std::set<std::string> seen;
  for (const auto& [key, v] : parts.query) {
    if (!seen.insert(key).second) throw input_error(what + ": " + key + " is given twice");
    if (key == "threads") s.ctx.n_threads = static_cast<int>(engine_setting_int(what, key, v, 1, 1024));
    else if (key == "ubatch") s.ctx.n_ubatch = engine_setting_int(what, key, v, 1, 1 << 20);
    else if (key == "backend") s.ctx.backend = runtime::backend_from_name(v);
    else if (key == "device") s.ctx.device = static_cast<int>(engine_setting_int(what, key, v, 0, 255));
    else if (key == "chat_template") {
      if (!chat::template_family_from_name(v))
        throw input_error(what + ": unknown chat_template '" + v + "' (expected chatml, qwen3, deepseek-r1, llama3, llama2, phi3, gemma, gpt-oss)");
      s.chat_template = v;
    } else if (key == "numerics") {
      if (v != "exact") throw input_error(what + ": the oracle is the exact engine; numerics must be exact, found '" + v + "'");
    } else {
      throw input_error(what + ": unknown setting '" + key + "' (expected threads, ubatch, backend, device, chat_template)");
    }
  }
  if (seen.count("device") && s.ctx.backend == runtime::BACKEND_CPU)
    throw input_error(what + ": device applies to backend=vulkan or backend=cuda");
  return s;
}

std::string ids_hash(const std::vector<int32_t>& ids) {
  sha256 h;
  for (int32_t id : ids) {
    const uint8_t b[4] = {static_cast<uint8_t>(id), static_cast<uint8_t>(id >> 8), static_cast<uint8_t>(id >> 16),
                          static_cast<uint8_t>(id >> 24)};
    h.update(b, 4);
  }
  return h.hex_digest().substr(0, 16);
}

// The bytes of each vocabulary token -> its id; a normal token wins over a byte or control token
// of the same bytes (it is what a model emits for them), the lowest id among equals.
class piece_map {
 public:
  explicit piece_map(const tokenizer::vocab& v) {
    for (int32_t id = 0; id < v.size(); ++id) {
      const std::string p = tokenizer::token_to_piece(v, id, true);
      if (p.empty()) continue;
      const bool normal = v.type_of(id) == tokenizer::TOKEN_TYPE_NORMAL;
      auto it = map_.find(p);
      if (it == map_.end()) {
        map_.emplace(p, std::make_pair(id, normal));
        continue;
      }
      ambiguous_.insert(p);
      if (normal && !it->second.second) it->second = {id, true};
    }
  }
  int32_t find(const std::string& bytes) const {
    const auto it = map_.find(bytes);
    return it == map_.end() ? -1 : it->second.first;
  }
  // Whether more than one token spells these bytes (a byte token and a normal one, say).
  bool ambiguous(const std::string& bytes) const { return ambiguous_.count(bytes) > 0; }

 private:
  std::unordered_map<std::string, std::pair<int32_t, bool>> map_;
  std::set<std::string> ambiguous_;
};


// One response prepared for the trie.
struct prepared {
  const record* rec = nullptr;
  std::string key;
  std::vector<int32_t> prompt;
  std::vector<int32_t> ids;                                    // continuation, vocabulary ids
  std::vector<std::vector<std::pair<int32_t, double>>> alts;  // per step: (id, server log-prob), mapped only
  std::vector<std::optional<double>> chosen_lp;                // per step: the server's log-prob of its token
  std::string alignment;
  std::string skipped;
  std::string note;
};

std::optional<std::vector<int32_t>> prompt_tokens(const record& r, const model::model& m, const oracle_settings& s,
                                                  std::string& why) {
  const json& q = r.request;
  if (q.is_object() && q.contains("messages")) {
    const json& ms = q["messages"];
    std::vector<chat::chat_message> msgs;
    if (ms.is_array())
      for (const json& e : ms) {
        if (!e.is_object() || !e.contains("role") || !e["role"].is_string() || !e.contains("content") ||
            !e["content"].is_string()) {
          why = "its messages are not all {role, content} strings";
          return std::nullopt;
        }
        msgs.push_back({e["role"].get<std::string>(), e["content"].get<std::string>()});
      }
    if (msgs.empty()) {
      why = "its request has no messages";
      return std::nullopt;
    }
    bool thinking = true;
    if (q.contains("chat_template_kwargs") && q["chat_template_kwargs"].is_object()) {
      const json& k = q["chat_template_kwargs"];
      if (k.contains("enable_thinking") && k["enable_thinking"].is_boolean()) thinking = k["enable_thinking"].get<bool>();
    }
    try {
      return runtime::generate_chat_tokens(m, msgs, s.chat_template, thinking);
    } catch (const input_error& e) {
      why = std::string("its chat cannot be rendered: ") + e.what() + " (add chat_template=NAME to --oracle)";
      return std::nullopt;
    }
  }
  if (q.is_object() && q.contains("prompt")) {
    const json& p = q["prompt"];
    if (p.is_string()) return runtime::generate_tokenize(m.vocab(), p.get<std::string>());
    if (p.is_array() && !p.empty()) {
      std::vector<int32_t> ids;
      for (const json& e : p) {
        if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX ||
            (e.is_number_unsigned() && e.get<uint64_t>() > uint64_t(INT32_MAX))) {
          why = "its prompt is an array of something other than token ids";
          return std::nullopt;
        }
        ids.push_back(static_cast<int32_t>(e.get<int64_t>()));
      }
      return ids;
    }
  }
  why = "its request holds no prompt or messages the oracle can rebuild";
  return std::nullopt;
}

// Fills p.ids / p.alts / p.alignment, or p.skipped.
void continuation_map(prepared& p, const tokenizer::vocab& v, const piece_map& pieces) {
  const record& r = *p.rec;
  const int32_t n_vocab = v.size();
  const bool pre = r.logprobs_kind == "pre-sampling";
  auto alt_id = [&](const reports::alt_rec& a) -> int32_t {
    if (a.id >= 0) return a.id < n_vocab ? a.id : -1;
    const std::optional<std::string> b = reports::token_string_bytes(a.token);
    return b ? pieces.find(*b) : -1;
  };
  auto alts_fill = [&] {
    p.alts.assign(p.ids.size(), {});
    p.chosen_lp.assign(p.ids.size(), std::nullopt);
    if (!pre) return;
    for (size_t k = 0; k < p.ids.size() && k < r.tokens.size(); ++k) {
      p.chosen_lp[k] = r.tokens[k].logprob;
      if (k >= r.top_logprobs.size()) continue;
      std::set<int32_t> seen;
      for (const reports::alt_rec& a : r.top_logprobs[k]) {
        const int32_t id = alt_id(a);
        if (id >= 0 && seen.insert(id).second) p.alts[k].emplace_back(id, a.logprob);
      }
    }
  };
  const bool all_ids = !r.tokens.empty() && std::all_of(r.tokens.begin(), r.tokens.end(), [](const reports::token_rec& t) { return t.id >= 0; });
  if (all_ids) {
    // The ids decide; the texts check that they are this vocabulary's. A token with no text of
    // its own is one whose bytes the server put into the next token's text (llama-server gives one
    // entry per chunk of whole UTF-8 characters, with the chunk's last id): its piece is held until
    // a token with text comes, which must then spell the held pieces and its own.
    std::string held;
    for (size_t k = 0; k < r.tokens.size(); ++k) {
      const reports::token_rec& t = r.tokens[k];
      if (t.id >= n_vocab) {
        p.skipped = "token " + std::to_string(k) + " has id " + std::to_string(t.id) + ", outside this vocabulary (" +
                    std::to_string(n_vocab) + " tokens): is --oracle the model file the server serves?";
        return;
      }
      p.ids.push_back(t.id);
      if (v.is_control(t.id)) continue;  // servers write a control token as its name or as nothing
      const std::string piece = tokenizer::token_to_piece(v, t.id, true);
      const std::optional<std::string> b = reports::token_bytes(t);
      if (!b || b->empty()) {
        held += piece;
      } else {
        if (*b != held + piece) {
          p.skipped = "token " + std::to_string(k) + " (id " + std::to_string(t.id) + ") is '" + tokenizer::piece_escape(*b) +
                      "' to the server and '" + tokenizer::piece_escape(held + piece) +
                      "' in this vocabulary: is --oracle the model file the server serves?";
          return;
        }
        held.clear();
      }
    }
    p.alignment = "ids";
    alts_fill();
    return;
  }
  // By each token's bytes.
  bool mapped = !r.tokens.empty();
  std::vector<int32_t> ids;
  int64_t ambiguous = 0;
  for (const reports::token_rec& t : r.tokens) {
    const std::optional<std::string> b = reports::token_bytes(t);
    const int32_t id = b ? pieces.find(*b) : -1;
    if (id < 0) {
      mapped = false;
      break;
    }
    if (pieces.ambiguous(*b)) ++ambiguous;
    ids.push_back(id);
  }
  if (mapped) {
    p.ids = std::move(ids);
    p.alignment = "pieces";
    if (ambiguous > 0)
      p.note = std::to_string(ambiguous) + " of its tokens are bytes that more than one vocabulary token spells (a byte "
               "token and a normal one): the normal one was taken";
    alts_fill();
    return;
  }
  // By tokenizing the text again: the server's own token boundaries are lost, and with them its
  // per-step log-probs (no fidelity for this response).
  std::string text;
  bool known = true;
  for (const reports::token_rec& t : r.tokens) {
    const std::optional<std::string> b = reports::token_bytes(t);
    if (!b) {
      known = false;
      break;
    }
    text += *b;
  }
  if (!known || r.tokens.empty()) text = r.text;
  if (text.find("\xEF\xBF\xBD") != std::string::npos) {
    p.skipped = "its tokens are not tokens of this vocabulary and its text holds U+FFFD (bytes the server replaced): "
                "nothing to align by";
    return;
  }
  if (text.empty()) {
    p.skipped = "it generated no text";
    return;
  }
  // Tokenized after a newline, whose tokens are then dropped: the text is a continuation, and a
  // tokenizer that adds a leading space to what it is given (SentencePiece) would add one to it.
  const std::string sentinel = "\n";
  const std::vector<int32_t> all = tokenizer::encode(v, sentinel + text, /*add_special=*/false, /*parse_special=*/false);
  std::string lead;
  size_t skip = 0;
  while (skip < all.size() && lead.size() < sentinel.size() + 1 && lead != sentinel && lead != " " + sentinel)
    lead += tokenizer::token_to_piece(v, all[skip++], true);
  if (lead != sentinel && lead != " " + sentinel) {
    p.skipped = "its tokens are not tokens of this vocabulary, and its text cannot be tokenized apart from what precedes it";
    return;
  }
  p.ids.assign(all.begin() + static_cast<std::ptrdiff_t>(skip), all.end());
  if (p.ids.empty()) {
    p.skipped = "it generated no text";
    return;
  }
  p.alignment = "retokenized";
  p.alts.assign(p.ids.size(), {});
  p.chosen_lp.assign(p.ids.size(), std::nullopt);
}

// The exact distribution at one trie node, summarised for the ids asked of it.
struct node_dist {
  int32_t best_id = -1;
  float best_lp = 0, second_lp = 0;
  std::unordered_map<int32_t, std::pair<float, int>> lookup;  // id -> (log-prob, rank)
};

struct trie_node {
  int32_t tok = -1;
  int parent = -1;
  int64_t depth = 0;  // tokens of the continuation before this node's distribution
  std::map<int32_t, int> kids;
  std::set<int32_t> need;
  node_dist dist;
};

class item_eval {
 public:
  item_eval(runtime::context& ctx, int64_t& evaluated) : ctx_(ctx), evaluated_(evaluated) {
    nodes_.push_back({});
  }

  // The node path of a continuation; adds nodes and the ids each node must look up.
  void add(const prepared& p) {
    int cur = 0;
    for (size_t k = 0; k < p.ids.size(); ++k) {
      trie_node& n = nodes_[static_cast<size_t>(cur)];
      n.need.insert(p.ids[k]);
      for (const auto& a : p.alts[k]) n.need.insert(a.first);
      auto it = n.kids.find(p.ids[k]);
      int next;
      if (it == n.kids.end()) {
        next = static_cast<int>(nodes_.size());
        nodes_[static_cast<size_t>(cur)].kids.emplace(p.ids[k], next);
        trie_node c;
        c.tok = p.ids[k];
        c.parent = cur;
        c.depth = static_cast<int64_t>(k) + 1;
        nodes_.push_back(std::move(c));
      } else {
        next = it->second;
      }
      cur = next;
    }
  }

  void run(const std::vector<int32_t>& prompt) {
    const int32_t seq = ctx_.seq_new();
    std::vector<runtime::token_in> batch;
    for (size_t i = 0; i < prompt.size(); ++i) batch.push_back({seq, prompt[i], i + 1 == prompt.size()});
    const std::vector<std::vector<float>> l = ctx_.decode(batch);
    evaluated_ += static_cast<int64_t>(prompt.size());
    dist_fill(nodes_[0], l.at(0));
    n_prompt_ = static_cast<int64_t>(prompt.size());
    branch(0, seq);
    ctx_.seq_free(seq);
  }

  const trie_node& node(int i) const { return nodes_[static_cast<size_t>(i)]; }
  int leaves() const {
    int n = 0;
    for (const trie_node& t : nodes_)
      if (t.kids.empty()) ++n;
    return n;
  }

 private:
  bool inner(int i) const { return !nodes_[static_cast<size_t>(i)].kids.empty(); }

  // `seq` holds the prompt and node i's path, and node i's distribution is known: evaluates every
  // inner node below it, forking `seq` for all but the last child.
  void branch(int i, int32_t seq) {
    std::vector<int> kids;
    for (const auto& [tok, k] : nodes_[static_cast<size_t>(i)].kids)
      if (inner(k)) kids.push_back(k);
    for (size_t j = 0; j < kids.size(); ++j) {
      const bool last = j + 1 == kids.size();
      const int32_t s = last ? seq : ctx_.seq_fork(seq, n_prompt_ + nodes_[static_cast<size_t>(i)].depth);
      chain(kids[j], s);
      if (!last) ctx_.seq_free(s);
    }
  }

  // Evaluates node k and the nodes below it that have one inner child each, in decodes of at most
  // 64 tokens, then branches.
  void chain(int k, int32_t seq) {
    std::vector<int> path = {k};
    for (;;) {
      int only = -1, count = 0;
      for (const auto& [tok, c] : nodes_[static_cast<size_t>(path.back())].kids)
        if (inner(c)) {
          only = c;
          ++count;
        }
      if (count != 1) break;
      path.push_back(only);
    }
    for (size_t off = 0; off < path.size(); off += 64) {
      const size_t end = std::min(path.size(), off + 64);
      std::vector<runtime::token_in> batch;
      for (size_t j = off; j < end; ++j) batch.push_back({seq, nodes_[static_cast<size_t>(path[j])].tok, true});
      const std::vector<std::vector<float>> l = ctx_.decode(batch);
      evaluated_ += static_cast<int64_t>(end - off);
      for (size_t j = off; j < end; ++j) dist_fill(nodes_[static_cast<size_t>(path[j])], l.at(j - off));
    }
    branch(path.back(), seq);
  }

  void dist_fill(trie_node& n, const std::vector<float>& logits) {
    const runtime::log_softmax_norm norm = runtime::log_softmax_normalizer(logits);
    const std::vector<runtime::token_logprob> top = runtime::top_logprobs(logits, 2);
    n.dist.best_id = top.at(0).id;
    n.dist.best_lp = top[0].logprob;
    n.dist.second_lp = top.size() > 1 ? top[1].logprob : top[0].logprob;
    std::vector<float> lps;
    lps.reserve(n.need.size());
    for (int32_t id : n.need) lps.push_back(norm.logprob(logits.at(static_cast<size_t>(id))));
    std::vector<float> sorted = lps;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> higher(sorted.size(), 0);  // higher[i]: vocabulary entries above sorted[i]
    for (float l : logits) {
      const float lp = norm.logprob(l);
      // Every needed value strictly below lp gains one.
      const size_t below = static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), lp) - sorted.begin());
      if (below > 0) ++higher[below - 1];
    }
    for (size_t i = sorted.size(); i-- > 1;) higher[i - 1] += higher[i];
    size_t j = 0;
    for (int32_t id : n.need) {
      const float lp = lps[j++];
      const size_t at = static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), lp) - sorted.begin());
      n.dist.lookup[id] = {lp, higher[at]};
    }
    n.need.clear();
  }

  runtime::context& ctx_;
  int64_t& evaluated_;
  int64_t n_prompt_ = 0;
  std::vector<trie_node> nodes_;
};

// Step k of a response against the exact distribution at it: fidelity and spread over each
// log-prob the server reported for a vocabulary token, and the KL estimate over its alternatives.
void step_measure(oracle_response& o, const prepared& p, size_t k, const node_dist& d) {
  // Fidelity: each reported log-prob of a vocabulary token against the exact one.
  std::vector<std::pair<int32_t, double>> vals = p.alts[k];
  bool chosen_listed = false;
  for (const auto& a : vals) chosen_listed = chosen_listed || a.first == p.ids[k];
  if (p.chosen_lp[k] && !chosen_listed) vals.emplace_back(p.ids[k], *p.chosen_lp[k]);
  std::vector<std::pair<double, double>> server_exact;
  for (const auto& [id, server_lp] : vals) server_exact.emplace_back(server_lp, d.lookup.at(id).first);
  reports::oracle_step_fidelity(o, server_exact);
  const bool finite_alts = std::all_of(p.alts[k].begin(), p.alts[k].end(), [](const auto& a) {
    return std::isfinite(a.second) && a.second >= ORACLE_LOWEST_LOGPROB;
  }) && (!p.chosen_lp[k] || (std::isfinite(*p.chosen_lp[k]) && *p.chosen_lp[k] >= ORACLE_LOWEST_LOGPROB));
  if (finite_alts && !p.alts[k].empty() && (p.chosen_lp[k] || chosen_listed)) {
    reports::kld_step_in a, b;
    a.id = b.id = p.ids[k];
    a.logprob = d.lookup.at(p.ids[k]).first;
    b.logprob = p.chosen_lp[k] ? *p.chosen_lp[k] : 0;
    for (const auto& [id, server_lp] : p.alts[k]) {
      if (id == p.ids[k] && !p.chosen_lp[k]) b.logprob = server_lp;
      a.top.emplace_back(id, d.lookup.at(id).first);
      b.top.emplace_back(id, server_lp);
    }
    auto by_lp = [](const auto& x, const auto& y) { return x.second > y.second; };
    std::stable_sort(a.top.begin(), a.top.end(), by_lp);
    std::stable_sort(b.top.begin(), b.top.end(), by_lp);
    ++o.kl_n;
    o.kl_sum += reports::kld_step(a, b);
  }
}

// Walks a prepared response down its trie, filling the oracle's figures.
oracle_response response_fill(const prepared& p, const item_eval& ev, const tokenizer::vocab& v) {
  oracle_response o;
  o.alignment = p.alignment;
  o.note = p.note;
  o.prompt_hash = ids_hash(p.prompt);
  o.prompt_tokens = static_cast<int64_t>(p.prompt.size());
  int cur = 0;
  for (size_t k = 0; k < p.ids.size(); ++k) {
    const trie_node& n = ev.node(cur);
    const node_dist& d = n.dist;
    oracle_step s;
    s.id = p.ids[k];
    s.token = tokenizer::token_to_piece(v, s.id, true);
    const auto& [lp, rank] = d.lookup.at(s.id);
    s.logprob = lp;
    s.rank = rank;
    s.best_id = d.best_id;
    s.best_token = tokenizer::token_to_piece(v, d.best_id, true);
    s.best_logprob = d.best_lp;
    s.second_logprob = d.second_lp;
    o.steps.push_back(std::move(s));
    step_measure(o, p, k, d);
    cur = n.kids.at(p.ids[k]);
  }
  return o;
}

}  // namespace

void oracle_spec_check(const std::string& spec) {
  const oracle_settings s = settings_parse(spec);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(s.path, ec)) throw input_error("--oracle '" + spec + "': model file '" + s.path + "' not found");
}

void oracle_preflight(const std::string& spec) {
  oracle_spec_check(spec);
  oracle_settings s = settings_parse(spec);
  std::shared_ptr<const model::model> m;
  try {
    m = model::model::load(s.path);
  } catch (const input_error& e) {
    throw input_error("--oracle '" + spec + "': " + e.what());
  }
  s.ctx.n_ctx = 16;
  try {
    runtime::context ctx(m, s.ctx);
  } catch (const input_error& e) {
    throw input_error("--oracle '" + spec + "': " + e.what());
  }
}

reports::oracle_data oracle_evaluate(const std::vector<record>& records, const oracle_options& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  oracle_spec_check(opt.spec);
  oracle_settings s = settings_parse(opt.spec);
  std::shared_ptr<const model::model> m = model::model::load(s.path);
  const tokenizer::vocab& v = m->vocab();
  const piece_map pieces(v);
  reports::oracle_data out;

  // Prepare every response; group by item and prompt tokens.
  std::vector<prepared> ps;
  int64_t post_sampling = 0;
  for (const record& r : records) {
    if (!r.error.empty()) continue;
    prepared p;
    p.rec = &r;
    p.key = reports::record_key(r);
    std::string why;
    std::optional<std::vector<int32_t>> prompt = prompt_tokens(r, *m, s, why);
    if (!prompt) {
      p.skipped = why;
    } else if (prompt->empty()) {
      p.skipped = "its prompt has no tokens";
    } else {
      p.prompt = std::move(*prompt);
      for (int32_t id : p.prompt)
        if (id < 0 || id >= v.size()) {
          p.skipped = "its prompt holds token id " + std::to_string(id) + ", outside this vocabulary";
          break;
        }
      const json* n = r.usage.is_object() && r.usage.contains("prompt_tokens") ? &r.usage["prompt_tokens"] : nullptr;
      if (p.skipped.empty() && n && n->is_number_integer() && n->get<int64_t>() != static_cast<int64_t>(p.prompt.size()))
        p.skipped = "its prompt is " + std::to_string(p.prompt.size()) + " tokens to the oracle and " +
                    std::to_string(n->get<int64_t>()) + " to the server (another template, tokenizer or model file)";
    }
    if (p.skipped.empty()) continuation_map(p, v, pieces);
    if (p.skipped.empty() && p.ids.empty()) p.skipped = "it has no tokens";
    if (p.skipped.empty() && !r.top_logprobs.empty() && r.logprobs_kind != "pre-sampling") ++post_sampling;
    ps.push_back(std::move(p));
  }
  std::map<std::pair<std::string, std::string>, std::vector<size_t>> groups;  // (item, prompt hash) -> responses
  int64_t n_ctx = 16;
  for (size_t i = 0; i < ps.size(); ++i) {
    if (!ps[i].skipped.empty()) continue;
    groups[{ps[i].rec->item_id, ids_hash(ps[i].prompt)}].push_back(i);
    n_ctx = std::max(n_ctx, static_cast<int64_t>(ps[i].prompt.size() + ps[i].ids.size()) + 1);
  }
  s.ctx.n_ctx = n_ctx;
  runtime::context ctx(m, s.ctx);
  out.model = {{"spec", opt.spec},
               {"path", s.path},
               {"sha256", m->sha256()},
               {"numerics", "exact"},
               {"device", ctx.device_description()}};
  int64_t evaluated = 0, scored = 0, leaves = 0, done = 0;
  for (const auto& [key, idx] : groups) {
    if (run_interrupted()) throw interrupted_error("oracle: interrupted");
    item_eval ev(ctx, evaluated);
    for (size_t i : idx) ev.add(ps[i]);
    ev.run(ps[idx.front()].prompt);
    leaves += ev.leaves();
    for (size_t i : idx) {
      out.responses[ps[i].key] = response_fill(ps[i], ev, v);
      scored += static_cast<int64_t>(ps[i].ids.size());
    }
    if (opt.log && ++done % 16 == 0)
      opt.log("oracle: " + std::to_string(done) + "/" + std::to_string(groups.size()) + " prompts");
  }
  int64_t skipped = 0;
  for (const prepared& p : ps)
    if (!p.skipped.empty()) {
      oracle_response o;
      o.skipped = p.skipped;
      out.responses[p.key] = std::move(o);
      ++skipped;
    }
  if (post_sampling > 0)
    out.notes.push_back(std::to_string(post_sampling) +
                        " response(s) report post-sampling probabilities (a trimmed, renormalised list): no fidelity "
                        "is measured for them");
  if (skipped > 0)
    out.notes.push_back(std::to_string(skipped) + " response(s) not evaluated: each row says why");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.cost = {{"seconds", secs},
              {"prompts", static_cast<int64_t>(groups.size())},
              {"prefills", static_cast<int64_t>(groups.size())},
              {"responses", static_cast<int64_t>(ps.size()) - skipped},
              {"distinct_continuations", leaves},
              {"tokens_scored", scored},
              {"tokens_evaluated", evaluated}};
  return out;
}

}  // namespace detaudit::probes
