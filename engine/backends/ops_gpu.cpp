// --numerics exact on a GPU (--backend vulkan / cuda): the ops of ops_exact.cpp with the arithmetic
// on a kernels::gpu::device, which gives kernels/ref's bytes for every op. Activations live in the
// device's slots (gpu.h) between ops: each activation is at one of three places, the host buffer
// of ops_storage, the device slot of the same id, or both, and is copied only when an op on the
// other side reads it. The device ops (matmul, RMS norm, RoPE, bias, SwiGLU, add, the activations
// geglu, swiglu_oai, softcap and scale, the KV cell quantization) read and write slots; the host
// ops read and write the host buffer: the embedding
// lookup (a row decode, no arithmetic beyond the exact dequantization), the row gather and
// scatter, reading logits, and attention's query gather (the KV cache stays in host memory with
// ops_exact's layout, exact_cell.h, so a cache saved on one backend restores on another; the
// attention call copies a sequence's cells in). The RoPE tables are computed in double on the
// host by the contract. For mixture-of-experts models the routing (moe_route: n_expert logits per
// token) and the row scaling by routing weights (scale_rows, the ref kernel) stay on the host; the
// router and expert matmuls, SwiGLU and the adds run on the device.
//
// Goals: the CPU backend's logits bit for bit, for any batch, chunking or cache history; per step
// and layer, activations cross the bus only for attention and the KV store.
// Non-goals: the KV cache on the device (the next step); fused ops.
#include <cmath>
#include <cstring>
#include <map>
#include <unordered_map>

#include "backends/exact_cell.h"
#include "backends/op_support.h"
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

  // A step's errors are its own: whatever a failed step left queued is waited for and forgotten
  // here, and end_step raises what this step's device checks found.
  void begin_step(const std::vector<model::step_token>& toks) override {
    dev_->finish(false);
    ops_storage<float>::begin_step(toks);
  }
  void end_step() override { dev_->finish(true); }

  model::act alloc(int64_t rows, int64_t cols) override {
    const model::act a = ops_storage<float>::alloc(rows, cols);
    if (static_cast<size_t>(a.id) >= where_.size()) where_.resize(static_cast<size_t>(a.id) + 1);
    where_[static_cast<size_t>(a.id)] = ON_HOST;  // alloc zero-fills the host buffer
    return a;
  }

  model::act gather_rows(model::act x, const std::vector<int64_t>& rows) override {
    host_in(x);
    return ops_storage<float>::gather_rows(x, rows);  // alloc: the result is on the host
  }

  void read_f32(model::act x, float* out) override {
    host_in(x);
    ops_storage<float>::read_f32(x, out);
  }

  // Writes some rows of out: the others must be current on the host first.
  void scatter_rows(model::act x, const std::vector<int64_t>& rows, model::act out) override {
    host_in(x);
    host_in(out);
    ops_storage<float>::scatter_rows(x, rows, out);
    host_out(out);
  }

  void embed(const model::weight& w, model::act out) override {
    float* o = host_out(out);
    for (int64_t t = 0; t < out.rows; ++t) embed_row_exact(w, tok(t).token, o + t * out.cols);
  }

  void rms_norm(model::act x, const std::vector<float>& w, int64_t group, model::act out) override {
    const int32_t sx = dev_in(x);  // inputs before outputs: out may be x
    dev_->rms_norm_slot(sx, x.rows, x.cols, group, w.data(), static_cast<float>(hp_.rms_eps), dev_out(out));
  }

  void matmul(const model::weight& w, model::act x, model::act y) override {
    const kernels::gpu::weight_handle h = weight(w);
    const int32_t sx = dev_in(x);
    dev_->matmul_slot(h, sx, x.rows, w.n_in, w.n_out, dev_out(y));
  }

  void add_bias(model::act x, const std::vector<float>& b) override {
    dev_->add_bias_slot(dev_in(x), x.rows, x.cols, b.data());
    dev_out(x);
  }

  void rope(model::act x, int64_t n_head, const model::rope_params& p) override {
    const bool neox = model::arch_rope_kind(hp_.arch) == model::ROPE_NEOX;
    tables_.resize(static_cast<size_t>(x.rows * hp_.n_rot));
    for (int64_t t = 0; t < x.rows; ++t)
      std::memcpy(tables_.data() + t * hp_.n_rot, rope_.row(p, tok(t).pos), sizeof(float) * static_cast<size_t>(hp_.n_rot));
    dev_->rope_slot(dev_in(x), x.rows, n_head, hp_.head_dim, hp_.n_rot, neox, tables_.data());
    dev_out(x);
  }

  void kv_store(int64_t layer, model::act k, model::act v) override {
    const uint64_t cb = kv_cell_bytes();
    cells_.resize(static_cast<size_t>(k.rows) * cb);
    const int32_t sk = dev_in(k), sv = dev_in(v);
    dev_->kv_quantize_slot(sk, sv, k.rows, hp_.n_head_kv, hp_.head_dim, cells_.data());
    for (int64_t t = 0; t < k.rows; ++t) std::memcpy(tok(t).cache->cell(layer, tok(t).pos), cells_.data() + t * cb, cb);
  }

  // One device call per sequence of the step and first attended position (0, or the sliding
  // window's start: model::attn_first): its query rows gathered, its cells [first, max pos]. The
  // soft cap and the sinks go to the device with the call.
  void attention(int64_t layer, model::act q, model::act out, const model::attn_params& p) override {
    const float kq_scale = static_cast<float>(p.kq_scale);
    kernels::gpu::attention_extras x;
    x.softcap = static_cast<float>(p.softcap);
    x.sinks = p.sinks;
    const int64_t width = q.cols;
    host_in(q);
    float* o = host_out(out);
    using group_key = std::pair<const kv_cache*, int64_t>;
    std::map<group_key, std::vector<int64_t>> groups;
    std::vector<group_key> order;
    for (int64_t t = 0; t < q.rows; ++t) {
      const group_key k{tok(t).cache, model::attn_first(tok(t).pos, p.window)};
      auto [it, fresh] = groups.try_emplace(k);
      if (fresh) order.push_back(k);
      it->second.push_back(t);
    }
    for (const group_key& k : order) {
      const std::vector<int64_t>& rows = groups[k];
      const int64_t n = static_cast<int64_t>(rows.size()), first = k.second;
      q_rows_.resize(static_cast<size_t>(n * width));
      out_rows_.resize(static_cast<size_t>(n * width));
      n_kv_.resize(static_cast<size_t>(n));
      int64_t n_cells = 0;
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(q_rows_.data() + i * width, row(q, rows[i]), sizeof(float) * static_cast<size_t>(width));
        n_kv_[i] = tok(rows[i]).pos + 1 - first;
        n_cells = std::max(n_cells, n_kv_[i]);
      }
      dev_->attention(q_rows_.data(), n, n_kv_.data(), hp_.n_head, hp_.n_head_kv, hp_.head_dim,
                      k.first->cell(layer, first), n_cells, kq_scale, x, out_rows_.data());
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(o + rows[i] * width, out_rows_.data() + i * width, sizeof(float) * static_cast<size_t>(width));
    }
  }

  void swiglu(model::act gate, model::act up, model::act out) override {
    const int32_t sg = dev_in(gate), su = dev_in(up);
    dev_->swiglu_slot(sg, su, gate.rows * gate.cols, dev_out(out));
  }

  void add(model::act a, model::act b, model::act out) override {
    const int32_t sa = dev_in(a), sb = dev_in(b);
    dev_->add_slot(sa, sb, a.rows * a.cols, dev_out(out));
  }

  void geglu(model::act gate, model::act up, model::act out) override {
    activation(kernels::gpu::act::geglu, gate, &up, {}, out);
  }
  void scale(model::act x, float s, model::act out) override {
    kernels::gpu::act_params p;
    p.factor = s;
    activation(kernels::gpu::act::scale, x, nullptr, p, out);
  }
  void swiglu_oai(model::act gate, model::act up, float alpha, float limit, model::act out) override {
    kernels::gpu::act_params p;
    p.alpha = alpha;
    p.limit = limit;
    activation(kernels::gpu::act::swiglu_oai, gate, &up, p, out);
  }
  void softcap(model::act x, float cap, model::act out) override {
    kernels::gpu::act_params p;
    p.cap = cap;
    activation(kernels::gpu::act::softcap, x, nullptr, p, out);
  }

  // Host: n_expert logits per token, by the CPU exact backend's own function.
  void moe_route(model::act logits, int64_t n_used, bool norm, std::vector<int32_t>& ids, std::vector<float>& weights) override {
    moe_route_exact(host_in(logits), logits.rows, logits.cols, n_used, norm, ids, weights);
  }

  // Host: one multiply per element of each expert's output rows (kernels::scale_f32_ref), too little
  // work to pay for a copy to the device and back.
  void scale_rows(model::act x, const std::vector<float>& s, model::act out) override {
    const float* in = host_in(x);
    float* o = host_out(out);
    for (int64_t t = 0; t < x.rows; ++t) kernels::scale_f32_ref(in + t * x.cols, x.cols, s[t], o + t * x.cols);
  }

 private:
  // A gpu::act over every element of a (and b), on the device.
  void activation(kernels::gpu::act k, model::act a, const model::act* b, const kernels::gpu::act_params& p,
                  model::act out) {
    const int32_t sa = dev_in(a);
    const int32_t sb = b ? dev_in(*b) : sa;
    dev_->activation_slot(k, sa, sb, a.rows * a.cols, p, dev_out(out));
  }

  // Where an activation's current value is.
  enum place : uint8_t { ON_HOST, ON_DEVICE, ON_BOTH };
  place& where(model::act a) { return where_[static_cast<size_t>(a.id)]; }

  // For a device op's input: the slot of a, copied from the host when only the host has it.
  int32_t dev_in(model::act a) {
    if (where(a) == ON_HOST) {
      dev_->slot_write(a.id, data(a), a.rows * a.cols);
      where(a) = ON_BOTH;
    }
    return a.id;
  }
  // For a device op's output (taken after its inputs): only the slot will be current.
  int32_t dev_out(model::act a) {
    write(a);  // a new write generation, as on every other backend
    where(a) = ON_DEVICE;
    return a.id;
  }
  // For a host read: the host buffer of a, copied from the slot when only the slot has it.
  const float* host_in(model::act a) {
    if (where(a) == ON_DEVICE) {
      dev_->slot_read(a.id, write(a).data(), a.rows * a.cols);
      where(a) = ON_BOTH;
    }
    return data(a);
  }
  // For a host op that writes every element of a (taken after its inputs): only the host will be current.
  float* host_out(model::act a) {
    where(a) = ON_HOST;
    return write(a).data();
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
  std::vector<place> where_;  // per activation id
};

}  // namespace

std::unique_ptr<model::ops> ops_gpu_create(backend_kind b, int device, const model::model& m, thread_pool* pool,
                                           std::string* description) {
  const kernels::gpu::api a = b == BACKEND_CUDA ? kernels::gpu::api::cuda : kernels::gpu::api::vulkan;
  // backends/op_support.h declares what each backend computes; a model that needs more is refused
  // here, naming every part, before a device is opened or a weight uploaded.
  if (const std::vector<std::string> missing = parts_missing(b, m); !missing.empty()) {
    std::string list;
    for (const std::string& part : missing) list += (list.empty() ? "" : ", ") + part;
    throw input_error(std::string("the ") + kernels::gpu::api_name(a) + " backend does not compute what this " +
                      model::arch_name(m.hp().arch) + " model needs: " + list +
                      " (docs/backends.md lists what each backend computes): use --backend cpu");
  }
  std::unique_ptr<kernels::gpu::device> dev = kernels::gpu::open_device(a, device);
  const kernels::gpu::device_desc& d = dev->desc();
  if (description)
    *description = std::string(kernels::gpu::api_name(a)) + " " + std::to_string(d.index) + ": " + d.name + " [" + d.driver + "]";
  return std::make_unique<ops_gpu>(std::move(dev), m, pool);
}

}  // namespace detaudit::backends
