// --numerics exact: the ops of docs/precision-contract.md. Activations are f32 between ops; every
// matmul quantizes its input rows to int16 blocks and sums on an integer grid, threads splitting
// the OUTPUT ROWS (in panels of 16), which any split leaves bit-identical: integer weight types
// run on the fast kernels of kernels/cpu (the instruction set of cpu::isa_default()), F32/F16/BF16
// weights on the reference kernel, both giving the bits of kernels/ref; RMSNorm, SwiGLU and adds
// are kernels/cpu's twins of the ref kernels; RoPE uses tables computed on the host (rope_tables);
// the KV cache holds the roped K and V as int16 blocks with one exponent per block (exact_cell.h),
// and attention is attention_exact_ref over exactly the positions [0, pos] of the token's own
// sequence (kernels/cpu's grouped attention: the query heads of one KV head together, each with
// attention_exact_ref's bits). No libm anywhere.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "backends/exact_cell.h"
#include "backends/ops_storage.h"
#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"
#include "util/error.h"

namespace detaudit::backends {
namespace {

using numerics::QBLOCK;

// Runs fn, which reads weight w, naming w in an input_error it throws (a NaN or infinite weight,
// a non-finite block scale): without the name, one bad value in a file of hundreds of tensors
// cannot be found.
template <class F>
void weight_reading(const model::weight& w, F&& fn) {
  try {
    fn();
  } catch (const input_error& e) {
    throw input_error("tensor '" + w.name + "': " + e.what());
  }
}

// Repacked matrices shared by every context of the process that computes with the same mapped
// weights: a context holds its model (so the mapping, and the address keying it, stay valid)
// and shared pointers to the packs it uses; the registry only remembers them while one does.
struct pack_registry {
  std::mutex mu;
  // Per instruction set (a pack is laid out for one: kernels::cpu::row_pack::for_isa), by weight address.
  std::unordered_map<const uint8_t*, std::weak_ptr<const kernels::cpu::row_pack>> by_isa[3];
};

pack_registry& registry() {
  static pack_registry r;
  return r;
}

class ops_exact final : public ops_storage<float> {
 public:
  ops_exact(const model::model& m, thread_pool* pool, bool repack, repack_stats* stats)
      : ops_storage<float>(m, pool), cell_(m.hp()), rope_(m), isa_(kernels::cpu::isa_default()) {
    if (repack && isa_ != kernels::cpu::isa::scalar) repack_weights(stats);
  }

  uint64_t kv_cell_bytes() const override { return cell_.bytes(); }

  void embed(const model::weight& w, model::act out) override {
    const writer o = write(out);
    for_ranges(out.rows, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) embed_row_exact(w, tok(t).token, o.row(t));
    });
  }

  void rms_norm(model::act x, const std::vector<float>& w, int64_t group, model::act out) override {
    const float eps = static_cast<float>(hp_.rms_eps);
    const writer o = write(out);
    for_ranges(x.rows, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t g = 0; g < x.cols; g += group) kernels::cpu::rms_norm_f32_cpu(isa_, row(x, t) + g, w.data(), group, eps, o.row(t) + g);
    });
  }

  void matmul(const model::weight& w, model::act x, model::act y) override {
    if (kernels::cpu::matmul_fast_type(w.type) && x.cols % QBLOCK == 0) {
      matmul_fast(w, x, y);
      return;
    }
    if (q_of_ != generation(x)) {
      xq_.resize(static_cast<size_t>(x.rows));
      for (int64_t t = 0; t < x.rows; ++t) numerics::quantize_act(row(x, t), x.cols, xq_[t]);
      q_of_ = generation(x);
    }
    const int64_t n_parts = task_count(w.n_out, n_threads());
    const writer o = write(y);
    weight_reading(w, [&] {
      parallel(n_parts, [&](int64_t part) {
        int64_t r0, r1;
        split_range(w.n_out, n_parts, part, 1, &r0, &r1);
        kernels::matmul_exact_ref(xq_.data(), x.rows, w.type, w.data, w.n_in, w.n_out, o.data(), r0, r1);
      });
    });
  }

  // Repacks every matrix with a packed kernel on this instruction set into 16-row tiles for the generation kernels (load time), or takes
  // the packs another context of the same model made.
  void repack_weights(repack_stats* stats) {
    const auto start = std::chrono::steady_clock::now();
    repack_stats done;
    auto consider = [&](const model::weight& w) {
      if (!kernels::cpu::row_pack_kernel(w.type, isa_) || w.n_in % 256 != 0 || w.n_out < 1 || !w.data || packs_.count(w.data)) return;
      pack_registry& reg = registry();
      {
        std::lock_guard<std::mutex> lk(reg.mu);
        auto& packs = reg.by_isa[static_cast<int>(isa_)];
        auto it = packs.find(w.data);
        if (it != packs.end()) {
          if (std::shared_ptr<const kernels::cpu::row_pack> shared = it->second.lock()) {
            done.tensors += 1;
            done.shared += 1;
            done.bytes += shared->bytes();
            packs_.emplace(w.data, std::move(shared));
            return;
          }
        }
      }
      const int32_t* bounds = nullptr;
      try {
        bounds = row_bounds(w);
      } catch (const input_error&) {
        return;  // a non-finite scale: the mapped layout stays, and the matmul reports it by name
      }
      auto p = std::make_shared<kernels::cpu::row_pack>();
      kernels::cpu::row_pack_init(w.type, w.n_out, w.n_in, isa_, *p);
      std::atomic<bool> ok{true};
      const int64_t n_parts = task_count(p->n_groups, n_threads());
      parallel(n_parts, [&](int64_t part) {
        int64_t g0, g1;
        split_range(p->n_groups, n_parts, part, 1, &g0, &g1);
        if (!kernels::cpu::row_pack_groups(w.data, bounds, g0, g1, *p)) ok = false;
      });
      if (!ok) return;
      done.tensors += 1;
      done.bytes += p->bytes();
      {
        std::lock_guard<std::mutex> lk(reg.mu);
        auto& packs = reg.by_isa[static_cast<int>(isa_)];
        for (auto it = packs.begin(); it != packs.end();)  // forget packs no context holds
          it = it->second.expired() ? packs.erase(it) : std::next(it);
        packs[w.data] = p;
      }
      packs_.emplace(w.data, std::move(p));
    };
    for (const model::layer_weights& l : m_.layers)
      for (const model::weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) consider(*w);
    for (const model::layer_weights& l : m_.layers)
      for (const std::vector<model::weight>* experts : {&l.exp_gate, &l.exp_up, &l.exp_down})
        for (const model::weight& w : *experts) consider(w);
    consider(m_.output);
    done.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (stats) *stats = done;
  }

  // The fast path: x packed once (threads splitting tokens), rows split in panels of 16.
  void matmul_fast(const model::weight& w, model::act x, model::act y) {
    if (pack_of_ != generation(x)) {
      kernels::cpu::act_pack_init(x.rows, x.cols, pack_);
      const int64_t n_parts = std::min<int64_t>(n_threads(), x.rows);
      parallel(n_parts, [&](int64_t part) {
        int64_t t0, t1;
        split_range(x.rows, n_parts, part, 1, &t0, &t1);
        kernels::cpu::act_pack_rows(data(x), t0, t1, pack_);
      });
      pack_of_ = generation(x);
    }
    const int64_t n_parts = task_count((w.n_out + 15) / 16, n_threads());
    const writer o = write(y);
    auto packed = x.rows <= kernels::cpu::GEMV_PACKED_MAX_TOKENS ? packs_.find(w.data) : packs_.end();
    if (packed != packs_.end()) {
      const int32_t* bounds = row_bounds(w);
      parallel(n_parts, [&](int64_t part) {
        int64_t r0, r1;
        split_range(w.n_out, n_parts, part, 16, &r0, &r1);
        kernels::cpu::matmul_exact_cpu_packed(isa_, pack_, *packed->second, bounds, o.data(), r0, r1);
      });
      return;
    }
    weight_reading(w, [&] {
      const int32_t* bounds = row_bounds(w);
      parallel(n_parts, [&](int64_t part) {
        int64_t r0, r1;
        split_range(w.n_out, n_parts, part, 16, &r0, &r1);
        kernels::cpu::matmul_exact_cpu(isa_, pack_, w.type, w.data, w.n_out, bounds, o.data(), r0, r1);
      });
    });
  }

  // The per-row exponent bounds of a weight, computed on first use and kept.
  const int32_t* row_bounds(const model::weight& w) {
    auto it = bounds_.find(w.data);
    if (it != bounds_.end()) return it->second.data();
    std::vector<int32_t> b(static_cast<size_t>(w.n_out));
    const int64_t n_parts = std::min<int64_t>(n_threads(), w.n_out);
    parallel(n_parts, [&](int64_t part) {
      int64_t r0, r1;
      split_range(w.n_out, n_parts, part, 1, &r0, &r1);
      kernels::cpu::weight_row_bounds(w.type, w.data, w.n_in, r0, r1, b.data() + r0);
    });
    return bounds_.emplace(w.data, std::move(b)).first->second.data();
  }

  void add_bias(model::act x, const std::vector<float>& b) override {
    const writer o = write(x);
    for (int64_t t = 0; t < x.rows; ++t)
      kernels::add_f32_ref(row(x, t), b.data(), x.cols, o.row(t));
  }

  void rope(model::act x, int64_t n_head, const model::rope_params& p) override {
    const bool neox = model::arch_rope_kind(hp_.arch) == model::ROPE_NEOX;
    std::vector<const float*> tables(static_cast<size_t>(x.rows));
    for (int64_t t = 0; t < x.rows; ++t) tables[static_cast<size_t>(t)] = rope_.row(p, tok(t).pos);
    const writer o = write(x);
    for_ranges(x.rows, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        kernels::rope_f32_ref(o.row(t), n_head, hp_.head_dim, hp_.n_rot, tok(t).pos, neox, tables[static_cast<size_t>(t)]);
    });
  }

  void kv_store(int64_t layer, model::act k, model::act v) override {
    for_ranges(k.rows, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        uint8_t* cell = tok(t).cache->cell(layer, tok(t).pos);
        store_heads(row(k, t), cell_.k_q(cell), cell_.k_exp(cell));
        store_heads(row(v, t), cell_.v_q(cell), cell_.v_exp(cell));
      }
    });
  }

  void attention(int64_t layer, model::act q, model::act out, const model::attn_params& p) override {
    const float kq_scale = static_cast<float>(p.kq_scale), softcap = static_cast<float>(p.softcap);
    const int64_t group = hp_.n_head / hp_.n_head_kv;  // query heads per KV head
    const writer o = write(out);
    parallel(q.rows * hp_.n_head_kv, [&](int64_t i) {
      const int64_t t = i / hp_.n_head_kv, kvh = i % hp_.n_head_kv, h0 = kvh * group;
      const int64_t p0 = model::attn_first(tok(t).pos, p.window);
      const uint8_t* first = tok(t).cache->cell(layer, p0);
      kernels::cpu::attention_exact_cpu_heads(isa_, row(q, t) + h0 * hp_.head_dim, group, hp_.head_dim, cell_.k_view(first, kvh),
                                              cell_.v_view(first, kvh), tok(t).pos + 1 - p0, kq_scale,
                                              o.row(t) + h0 * hp_.head_dim, softcap, p.sinks ? p.sinks + h0 : nullptr);
    });
  }

  void swiglu(model::act gate, model::act up, model::act out) override {
    const writer o = write(out);
    for_ranges(gate.rows * gate.cols, ELEMENT_CHUNK, [&](int64_t i0, int64_t i1) {
      kernels::cpu::swiglu_f32_cpu(isa_, data(gate) + i0, data(up) + i0, i1 - i0, o.data() + i0);
    });
  }

  void add(model::act a, model::act b, model::act out) override {
    const writer o = write(out);
    for_ranges(a.rows * a.cols, ELEMENT_CHUNK, [&](int64_t i0, int64_t i1) {
      kernels::cpu::add_f32_cpu(isa_, data(a) + i0, data(b) + i0, i1 - i0, o.data() + i0);
    });
  }

  void geglu(model::act gate, model::act up, model::act out) override {
    const writer o = write(out);
    for_ranges(gate.rows * gate.cols, ELEMENT_CHUNK, [&](int64_t i0, int64_t i1) {
      kernels::cpu::geglu_f32_cpu(isa_, data(gate) + i0, data(up) + i0, i1 - i0, o.data() + i0);
    });
  }

  void swiglu_oai(model::act gate, model::act up, float alpha, float limit, model::act out) override {
    const writer o = write(out);
    for_ranges(gate.rows * gate.cols, ELEMENT_CHUNK, [&](int64_t i0, int64_t i1) {
      kernels::cpu::swiglu_oai_f32_cpu(isa_, data(gate) + i0, data(up) + i0, i1 - i0, alpha, limit, o.data() + i0);
    });
  }

  void scale(model::act x, float s, model::act out) override {
    const writer o = write(out);
    for_ranges(x.rows * x.cols, ELEMENT_CHUNK, [&](int64_t i0, int64_t i1) {
      kernels::cpu::scale_f32_cpu(isa_, data(x) + i0, i1 - i0, s, o.data() + i0);
    });
  }

  void softcap(model::act x, float cap, model::act out) override {
    const writer o = write(out);
    for_ranges(x.rows * x.cols, ELEMENT_CHUNK, [&](int64_t i0, int64_t i1) {
      kernels::cpu::softcap_f32_cpu(isa_, data(x) + i0, i1 - i0, cap, o.data() + i0);
    });
  }

  // The routing is n_expert logits per token: host work far below the matmuls around it.
  void moe_route(model::act logits, int64_t n_used, bool norm, std::vector<int32_t>& ids, std::vector<float>& weights) override {
    moe_route_exact(data(logits), logits.rows, logits.cols, n_used, norm, ids, weights);
  }

  // The scalar ref kernel, no SIMD twin yet: it touches each expert output row once (k rows of
  // n_embd per token), next to the three matmuls that made the row.
  void scale_rows(model::act x, const std::vector<float>& s, model::act out) override {
    const writer o = write(out);
    for (int64_t t = 0; t < x.rows; ++t) kernels::scale_f32_ref(row(x, t), x.cols, s[t], o.row(t));
  }

 private:
  static constexpr int64_t ELEMENT_CHUNK = 2048;  // element-wise work below this stays on one thread

  // Runs fn(begin, end) over [0, n) split into at most task_count contiguous ranges of at least
  // min_items items each (element-wise work: any split gives the same bits).
  template <class F>
  void for_ranges(int64_t n, int64_t min_items, F&& fn) {
    const int64_t n_parts = std::max<int64_t>(1, std::min<int64_t>(task_count(n, n_threads()), n / std::max<int64_t>(1, min_items)));
    if (n_parts == 1) {
      fn(0, n);
      return;
    }
    parallel(n_parts, [&](int64_t part) {
      int64_t b, e;
      split_range(n, n_parts, part, 1, &b, &e);
      fn(b, e);
    });
  }

  // Quantizes each KV head of x (n_head_kv, head_dim) into q (n_head_kv, nb * 32), e (n_head_kv, nb).
  void store_heads(const float* x, int16_t* q, int32_t* e) const {
    const int64_t nb = cell_.nb;
    for (int64_t h = 0; h < hp_.n_head_kv; ++h)
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t i0 = b * QBLOCK, n = std::min<int64_t>(QBLOCK, hp_.head_dim - i0);
        e[h * nb + b] = kernels::cpu::quantize_block_cpu(x + h * hp_.head_dim + i0, static_cast<int>(n), q + (h * nb + b) * QBLOCK);
      }
  }

  exact_cell cell_;
  rope_tables rope_;
  kernels::cpu::isa isa_;
  std::vector<numerics::qvec> xq_;  // the quantized rows of the activation written at generation q_of_
  uint64_t q_of_ = 0;               // 0: none (generations start at 1)
  kernels::cpu::act_pack pack_;     // the packed rows of the activation written at generation pack_of_
  uint64_t pack_of_ = 0;
  std::unordered_map<const uint8_t*, std::vector<int32_t>> bounds_;
  // Repacked matrices by their mapped data (shared with the other contexts of the model).
  std::unordered_map<const uint8_t*, std::shared_ptr<const kernels::cpu::row_pack>> packs_;
};

}  // namespace

std::unique_ptr<model::ops> ops_exact_create(const model::model& m, thread_pool* pool, bool repack, repack_stats* stats) {
  return std::make_unique<ops_exact>(m, pool, repack, stats);
}

}  // namespace detaudit::backends
