#include "runtime/context.h"

#include <map>

#include "kernels/cpu/cpu.h"
#include "model/forward.h"
#include "backends/kv_cache.h"
#include "backends/thread_pool.h"
#include "runtime/seq_file.h"
#include "util/error.h"

namespace detaudit::runtime {

namespace {

struct sequence {
  std::vector<int32_t> tokens;
  backends::kv_cache cache;
};

constexpr int64_t MAX_CTX = int64_t(1) << 24;

}  // namespace

struct context::impl {
  std::shared_ptr<const model::model> m;
  context_params p;
  std::unique_ptr<backends::thread_pool> pool;
  std::unique_ptr<model::ops> ops;
  std::string device;  // device_description()
  backends::repack_stats repacked;
  std::map<int32_t, sequence> seqs;
  int32_t next_id = 0;
  std::vector<token_trace> traces;
  int64_t max_seqs = 0, max_tokens = 0;
  std::map<int32_t, int64_t> last_seqs;  // last_seqs_in_step(), per sequence of the last decode()

  sequence& seq(int32_t id) {
    auto it = seqs.find(id);
    if (it == seqs.end()) throw input_error("sequence " + std::to_string(id) + " does not exist");
    return it->second;
  }
  int32_t add(sequence s) {
    const int32_t id = next_id++;
    seqs.emplace(id, std::move(s));
    return id;
  }
  backends::kv_cache empty_cache() const { return backends::kv_cache(m->hp().n_layer, ops->kv_cell_bytes()); }
  // Checks the batch; returns the position of each entry. Throws input_error, changing nothing.
  std::vector<int64_t> check_batch(const std::vector<token_in>& batch);
  // Runs the forward steps of a checked batch whose caches are already sized.
  std::vector<std::vector<float>> run_steps(const std::vector<token_in>& batch, const std::vector<int64_t>& pos);
};

context::context(std::shared_ptr<const model::model> m, const context_params& p) : p_(std::make_unique<impl>()) {
  if (!m) throw std::logic_error("context: null model");
  if (p.n_ubatch < 1) throw input_error("n_ubatch must be at least 1, found " + std::to_string(p.n_ubatch));
  if (p.n_threads < 1 || p.n_threads > 1024)
    throw input_error("n_threads must be from 1 to 1024, found " + std::to_string(p.n_threads));
  if (p.n_ctx < 0 || p.n_ctx > MAX_CTX)
    throw input_error("n_ctx must be from 0 to " + std::to_string(MAX_CTX) + ", found " + std::to_string(p.n_ctx));
  p_->m = std::move(m);
  p_->p = p;
  if (p_->p.n_ctx == 0) p_->p.n_ctx = std::min(p_->m->hp().n_ctx_train, MAX_CTX);
  if (p.n_threads > 1) p_->pool = std::make_unique<backends::thread_pool>(p.n_threads);
  if (p.backend == BACKEND_CPU) {
    p_->ops = backends::ops_create(p.numerics, *p_->m, p_->pool.get(), p.repack, &p_->repacked);
    p_->device = std::string("cpu ") + (p.numerics == NUMERICS_EXACT ? kernels::cpu::isa_name(kernels::cpu::isa_default()) : "scalar");
  } else {
    if (p.numerics != NUMERICS_EXACT)
      throw input_error(std::string("--backend ") + backend_name(p.backend) + " runs --numerics exact only, not " +
                        numerics_name(p.numerics));
    p_->ops = backends::ops_gpu_create(p.backend, p.device, *p_->m, p_->pool.get(), &p_->device);
  }
}

context::~context() = default;

const model::model& context::model() const { return *p_->m; }
const context_params& context::params() const { return p_->p; }
const std::string& context::device_description() const { return p_->device; }
const backends::repack_stats& context::repack_stats() const { return p_->repacked; }

int32_t context::seq_new() { return p_->add(sequence{{}, p_->empty_cache()}); }

void context::seq_free(int32_t seq) {
  p_->seq(seq);
  p_->seqs.erase(seq);
}

int32_t context::seq_fork(int32_t src, int64_t n) {
  const sequence& s = p_->seq(src);
  if (n < 0 || n > static_cast<int64_t>(s.tokens.size()))
    throw input_error("seq_fork: sequence " + std::to_string(src) + " has " + std::to_string(s.tokens.size()) +
                      " tokens, cannot copy " + std::to_string(n));
  return p_->add(sequence{std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + n), s.cache.prefix(n)});
}

int64_t context::seq_len(int32_t seq) const { return static_cast<int64_t>(p_->seq(seq).tokens.size()); }

const std::vector<int32_t>& context::seq_tokens(int32_t seq) const { return p_->seq(seq).tokens; }

void context::seq_truncate(int32_t seq, int64_t n) {
  sequence& s = p_->seq(seq);
  if (n < 0 || n > static_cast<int64_t>(s.tokens.size()))
    throw input_error("seq_truncate: sequence " + std::to_string(seq) + " has " + std::to_string(s.tokens.size()) +
                      " tokens, cannot keep " + std::to_string(n));
  s.tokens.resize(static_cast<size_t>(n));
  s.cache.resize(n);
}

void context::seq_save(int32_t seq, const std::string& path) const {
  const sequence& s = p_->seq(seq);
  seq_file_write(path, seq_file_header{p_->p.numerics, p_->m->sha256(), p_->m->hp().n_layer, s.cache.cell_bytes()},
                 s.tokens, s.cache);
}

int32_t context::seq_restore(const std::string& path) {
  const seq_file_header want{p_->p.numerics, p_->m->sha256(), p_->m->hp().n_layer, p_->ops->kv_cell_bytes()};
  sequence s{{}, p_->empty_cache()};
  seq_file_read(path, want, p_->p.n_ctx, p_->m->hp().n_vocab, s.tokens, s.cache);
  return p_->add(std::move(s));
}

std::vector<int64_t> context::impl::check_batch(const std::vector<token_in>& batch) {
  std::map<int32_t, int64_t> len;
  std::vector<int64_t> pos(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    const token_in& t = batch[i];
    auto it = len.find(t.seq);
    if (it == len.end()) it = len.emplace(t.seq, static_cast<int64_t>(seq(t.seq).tokens.size())).first;
    if (t.token < 0 || t.token >= m->hp().n_vocab)
      throw input_error("batch entry " + std::to_string(i) + ": token id " + std::to_string(t.token) +
                        " is out of range (vocabulary of " + std::to_string(m->hp().n_vocab) + ")");
    if (it->second >= p.n_ctx)
      throw input_error("sequence " + std::to_string(t.seq) + ": context full at " + std::to_string(p.n_ctx) + " tokens");
    pos[i] = it->second++;
  }
  return pos;
}

std::vector<std::vector<float>> context::impl::run_steps(const std::vector<token_in>& batch,
                                                         const std::vector<int64_t>& pos) {
  const int64_t n_vocab = m->hp().n_vocab;
  std::vector<std::vector<float>> logits;
  model::step_output out;
  for (size_t b0 = 0; b0 < batch.size(); b0 += static_cast<size_t>(p.n_ubatch)) {
    const size_t b1 = std::min(batch.size(), b0 + static_cast<size_t>(p.n_ubatch));
    std::vector<model::step_token> step;
    std::map<int32_t, int> seqs_in_step;
    for (size_t i = b0; i < b1; ++i) {
      step.push_back({&seq(batch[i].seq).cache, pos[i], batch[i].token, batch[i].logits});
      seqs_in_step[batch[i].seq] = 1;
    }
    const int64_t n_seqs = static_cast<int64_t>(seqs_in_step.size());
    max_seqs = std::max(max_seqs, n_seqs);
    for (const auto& [id, unused] : seqs_in_step) last_seqs[id] = std::max(last_seqs[id], n_seqs);
    max_tokens = std::max<int64_t>(max_tokens, static_cast<int64_t>(step.size()));
    model::forward_step(*m, *ops, step, p.trace_hashes, out);
    size_t row = 0;
    for (size_t i = b0; i < b1; ++i) {
      if (batch[i].logits) {
        const float* l = out.logits.data() + row++ * static_cast<size_t>(n_vocab);
        logits.emplace_back(l, l + n_vocab);
      }
      if (p.trace_hashes)
        traces.push_back({batch[i].seq, pos[i], std::move(out.traces[i - b0]),
                          out.routes.empty() ? std::vector<std::vector<int32_t>>{} : std::move(out.routes[i - b0])});
    }
  }
  return logits;
}

std::vector<std::vector<float>> context::decode(const std::vector<token_in>& batch) {
  const std::vector<int64_t> pos = p_->check_batch(batch);
  std::map<int32_t, int64_t> old_len, new_len;
  for (size_t i = 0; i < batch.size(); ++i) {
    old_len.emplace(batch[i].seq, pos[i]);
    new_len[batch[i].seq] = pos[i] + 1;
  }
  p_->traces.clear();
  p_->last_seqs.clear();
  for (auto& [id, n] : new_len) p_->seq(id).cache.resize(n);
  std::vector<std::vector<float>> logits;
  try {
    logits = p_->run_steps(batch, pos);
  } catch (...) {
    for (auto& [id, n] : old_len) p_->seq(id).cache.resize(n);
    p_->traces.clear();
    p_->last_seqs.clear();
    throw;
  }
  for (const token_in& t : batch) p_->seq(t.seq).tokens.push_back(t.token);
  return logits;
}

const std::vector<token_trace>& context::last_traces() const { return p_->traces; }
int64_t context::max_seqs_in_step() const { return p_->max_seqs; }
int64_t context::max_tokens_in_step() const { return p_->max_tokens; }

int64_t context::last_seqs_in_step(int32_t seq) const {
  auto it = p_->last_seqs.find(seq);
  return it == p_->last_seqs.end() ? 0 : it->second;
}

}  // namespace detaudit::runtime
