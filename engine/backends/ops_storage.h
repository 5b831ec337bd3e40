// What every numerics backend shares: activation storage of one element type (f32 or f64) and
// step bookkeeping.
//
// Goals: backends (ops_exact, ops_float, ops_reference) differ only in arithmetic; storage,
// row gathering and the step's token list live here once.
// Non-goals: any arithmetic beyond copying and rounding to f32.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/kv_cache.h"
#include "backends/thread_pool.h"

namespace detaudit::backends {

// Activation storage of element type T (float or double).
template <class T>
class ops_storage : public model::ops {
 public:
  void begin_step(const std::vector<model::step_token>& toks) override {
    toks_ = &toks;
    n_used_ = 0;
  }

  model::act alloc(int64_t rows, int64_t cols) override {
    if (n_used_ == bufs_.size()) {
      bufs_.emplace_back();
      written_.push_back(0);
    }
    bufs_[n_used_].assign(static_cast<size_t>(rows * cols), T(0));
    written_[n_used_] = ++clock_;
    return model::act{static_cast<int32_t>(n_used_++), rows, cols};
  }

  size_t alloc_mark() const override { return n_used_; }
  void alloc_release(size_t mark) override {
    if (mark <= n_used_) n_used_ = mark;
  }

  model::act gather_rows(model::act x, const std::vector<int64_t>& rows) override {
    model::act out = alloc(static_cast<int64_t>(rows.size()), x.cols);
    const writer o = write(out);
    for (size_t i = 0; i < rows.size(); ++i) {
      const T* src = row(x, rows[i]);
      std::copy(src, src + x.cols, o.row(static_cast<int64_t>(i)));
    }
    return out;
  }

  void read_f32(model::act x, float* out) override {
    const T* p = data(x);
    for (int64_t i = 0; i < x.rows * x.cols; ++i) out[i] = static_cast<float>(p[i]);
  }

  void scatter_rows(model::act x, const std::vector<int64_t>& rows, model::act out) override {
    const writer o = write(out);
    for (size_t i = 0; i < rows.size(); ++i) {
      const T* src = row(x, static_cast<int64_t>(i));
      std::copy(src, src + x.cols, o.row(rows[i]));
    }
  }

 protected:
  ops_storage(const model::model& m, thread_pool* pool) : m_(m), hp_(m.hp()), pool_(pool) {}

  // Reading an activation. Writing one goes through write(), which stamps it with a new write
  // generation: whatever a backend derives from an activation (ops_exact's quantized and packed
  // rows) is keyed on generation() and cannot be reused after any op writes that activation.
  const T* data(model::act a) const { return bufs_[static_cast<size_t>(a.id)].data(); }
  const T* row(model::act a, int64_t r) const { return data(a) + r * a.cols; }
  uint64_t generation(model::act a) const { return written_[static_cast<size_t>(a.id)]; }

  // A writable view of one activation. Take it before a parallel region (the stamp is not
  // thread-safe); its pointers are then shared by the threads.
  struct writer {
    T* base;
    int64_t cols;
    T* data() const { return base; }
    T* row(int64_t r) const { return base + r * cols; }
  };
  writer write(model::act a) {
    written_[static_cast<size_t>(a.id)] = ++clock_;
    return writer{bufs_[static_cast<size_t>(a.id)].data(), a.cols};
  }
  const model::step_token& tok(int64_t t) const { return (*toks_)[static_cast<size_t>(t)]; }
  int64_t n_threads() const { return pool_ ? pool_->n_threads() : 1; }
  // Runs fn(i) for i in [0, n) on the pool (or inline).
  template <class F>
  void parallel(int64_t n, F&& fn) {
    if (pool_) pool_->run(n, fn);
    else
      for (int64_t i = 0; i < n; ++i) fn(i);
  }

  const model::model& m_;
  const model::hparams& hp_;
  thread_pool* pool_;
  const std::vector<model::step_token>* toks_ = nullptr;

 private:
  std::vector<std::vector<T>> bufs_;
  std::vector<uint64_t> written_;  // per buffer: the clock_ value of its last write
  uint64_t clock_ = 0;
  size_t n_used_ = 0;
};

}  // namespace detaudit::backends
