// --numerics exact on a GPU (--backend vulkan / cuda): the ops of ops_exact.cpp with the arithmetic
// on a kernels::gpu::device, which gives kernels/ref's bytes for every op. The activations and the
// KV cache stay in host memory with ops_exact's layouts (the same cache cell, exact_cell.h, so a
// cache saved on one backend restores on another); each op copies its inputs to the device and its result back.
// Weights are uploaded on first use and kept. The embedding lookup (a row decode, no arithmetic
// beyond the exact dequantization) and the row gather stay on the host, as do the RoPE tables
// (computed in double on the host by the contract). For mixture-of-experts models the routing
// (moe_route: n_expert logits per token), the row scaling by routing weights (scale_rows, the ref
// kernel) and the row scatter stay on the host too; the router and expert matmuls, SwiGLU and the
// adds run on the device.
//
// Goals: the CPU backend's logits bit for bit, for any batch, chunking or cache history.
// Non-goals: keeping activations on the device between ops (the copies cost what they cost).
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "backends/exact_cell.h"
#include "backends/ops_storage.h"
#include "kernels/gpu/gpu.h"
#include "util/error.h"

namespace detaudit::backends {
namespace {

class ops_gpu final : public ops_storage<float> {
 public:
  ops_gpu(std::unique_ptr<kernels::gpu::device> dev, const model::model& m, thread_pool* pool)
      : ops_storage<float>(m, pool), dev_(std::move(dev)), cell_(m.hp()), rope_(m) {}

  uint64_t kv_cell_bytes() const override { return cell_.bytes(); }

  void embed(const model::weight& w, model::act out) override {
    const writer o = write(out);
    for (int64_t t = 0; t < out.rows; ++t) embed_row_exact(w, tok(t).token, o.row(t));
  }

  void rms_norm(model::act x, const std::vector<float>& w, int64_t group, model::act out) override {
    dev_->rms_norm(data(x), x.rows, x.cols, group, w.data(), static_cast<float>(hp_.rms_eps), write(out).data());
  }

  void matmul(const model::weight& w, model::act x, model::act y) override {
    dev_->matmul(weight(w), data(x), x.rows, write(y).data());
  }

  void add_bias(model::act x, const std::vector<float>& b) override {
    dev_->add_bias(write(x).data(), x.rows, x.cols, b.data());
  }

  void rope(model::act x, int64_t n_head, const model::rope_params& p) override {
    const bool neox = model::arch_rope_kind(hp_.arch) == model::ROPE_NEOX;
    tables_.resize(static_cast<size_t>(x.rows * hp_.n_rot));
    for (int64_t t = 0; t < x.rows; ++t)
      std::memcpy(tables_.data() + t * hp_.n_rot, rope_.row(p, tok(t).pos), sizeof(float) * static_cast<size_t>(hp_.n_rot));
    dev_->rope(write(x).data(), x.rows, n_head, hp_.head_dim, hp_.n_rot, neox, tables_.data());
  }

  void kv_store(int64_t layer, model::act k, model::act v) override {
    const uint64_t cb = kv_cell_bytes();
    cells_.resize(static_cast<size_t>(k.rows) * cb);
    dev_->kv_quantize(data(k), data(v), k.rows, hp_.n_head_kv, hp_.head_dim, cells_.data());
    for (int64_t t = 0; t < k.rows; ++t) std::memcpy(tok(t).cache->cell(layer, tok(t).pos), cells_.data() + t * cb, cb);
  }

  // One device call per sequence of the step: its query rows gathered, its cells [0, max pos].
  void attention(int64_t layer, model::act q, model::act out, const model::attn_params& p) override {
    if (p.window > 0 || p.softcap > 0 || p.sinks) unsupported("sliding-window, soft-capped or sink attention");
    const float kq_scale = static_cast<float>(p.kq_scale);
    const int64_t width = q.cols;
    const writer o = write(out);
    std::unordered_map<const kv_cache*, std::vector<int64_t>> by_seq;
    std::vector<const kv_cache*> order;
    for (int64_t t = 0; t < q.rows; ++t) {
      auto [it, fresh] = by_seq.try_emplace(tok(t).cache);
      if (fresh) order.push_back(tok(t).cache);
      it->second.push_back(t);
    }
    for (const kv_cache* c : order) {
      const std::vector<int64_t>& rows = by_seq[c];
      const int64_t n = static_cast<int64_t>(rows.size());
      q_rows_.resize(static_cast<size_t>(n * width));
      out_rows_.resize(static_cast<size_t>(n * width));
      n_kv_.resize(static_cast<size_t>(n));
      int64_t n_cells = 0;
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(q_rows_.data() + i * width, row(q, rows[i]), sizeof(float) * static_cast<size_t>(width));
        n_kv_[i] = tok(rows[i]).pos + 1;
        n_cells = std::max(n_cells, n_kv_[i]);
      }
      dev_->attention(q_rows_.data(), n, n_kv_.data(), hp_.n_head, hp_.n_head_kv, hp_.head_dim,
                      tok(rows[0]).cache->cell(layer, 0), n_cells, kq_scale, out_rows_.data());
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(o.row(rows[i]), out_rows_.data() + i * width, sizeof(float) * static_cast<size_t>(width));
    }
  }

  void swiglu(model::act gate, model::act up, model::act out) override {
    dev_->swiglu(data(gate), data(up), gate.rows * gate.cols, write(out).data());
  }

  void add(model::act a, model::act b, model::act out) override {
    dev_->add(data(a), data(b), a.rows * a.cols, write(out).data());
  }

  void geglu(model::act, model::act, model::act) override { unsupported("geglu"); }
  void scale(model::act, float, model::act) override { unsupported("scale"); }
  void swiglu_oai(model::act, model::act, float, float, model::act) override { unsupported("swiglu_oai"); }
  void softcap(model::act, float, model::act) override { unsupported("softcap"); }

  // Host: n_expert logits per token, by the CPU exact backend's own function.
  void moe_route(model::act logits, int64_t n_used, bool norm, std::vector<int32_t>& ids, std::vector<float>& weights) override {
    moe_route_exact(data(logits), logits.rows, logits.cols, n_used, norm, ids, weights);
  }

  // Host: one multiply per element of each expert's output rows (kernels::scale_f32_ref), too little
  // work to pay for a copy to the device and back.
  void scale_rows(model::act x, const std::vector<float>& s, model::act out) override {
    const writer o = write(out);
    for (int64_t t = 0; t < x.rows; ++t) kernels::scale_f32_ref(row(x, t), x.cols, s[t], o.row(t));
  }

 private:
  [[noreturn]] void unsupported(const std::string& op) const {
    throw input_error(std::string("the ") + dev_->desc().name + " backend has no " + op + " op yet (architecture " +
                      model::arch_name(hp_.arch) + "): use --backend cpu");
  }

  // The device copy of a weight, uploaded on first use.
  kernels::gpu::weight_handle weight(const model::weight& w) {
    auto it = weights_.find(w.data);
    if (it != weights_.end()) return it->second;
    return weights_.emplace(w.data, dev_->upload_weight(w.type, w.data, w.n_in, w.n_out)).first->second;
  }

  std::unique_ptr<kernels::gpu::device> dev_;
  exact_cell cell_;
  rope_tables rope_;
  std::unordered_map<const uint8_t*, kernels::gpu::weight_handle> weights_;
  std::vector<float> tables_, q_rows_, out_rows_;
  std::vector<int64_t> n_kv_;
  std::vector<uint8_t> cells_;
};

}  // namespace

std::unique_ptr<model::ops> ops_gpu_create(backend_kind b, int device, const model::model& m, thread_pool* pool,
                                           std::string* description) {
  const kernels::gpu::api a = b == BACKEND_CUDA ? kernels::gpu::api::cuda : kernels::gpu::api::vulkan;
  if (model::arch_gemma_block(m.hp().arch))
    throw input_error(std::string("the ") + kernels::gpu::api_name(a) + " backend lacks ops that " + model::arch_name(m.hp().arch) +
                      " needs (geglu, scale, softcap, sliding-window and soft-capped attention): use --backend cpu");
  if (model::arch_oai_block(m.hp().arch))
    throw input_error(std::string("the ") + kernels::gpu::api_name(a) + " backend lacks ops that " + model::arch_name(m.hp().arch) +
                      " needs (swiglu_oai, attention with sinks, sliding-window attention, mxfp4 weights): use --backend cpu");
  std::unique_ptr<kernels::gpu::device> dev = kernels::gpu::open_device(a, device);
  const kernels::gpu::device_desc& d = dev->desc();
  if (description)
    *description = std::string(kernels::gpu::api_name(a)) + " " + std::to_string(d.index) + ": " + d.name + " [" + d.driver + "]";
  return std::make_unique<ops_gpu>(std::move(dev), m, pool);
}

}  // namespace detaudit::backends
