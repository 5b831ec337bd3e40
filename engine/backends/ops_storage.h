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
    if (n_used_ == bufs_.size()) bufs_.emplace_back();
    bufs_[n_used_].assign(static_cast<size_t>(rows * cols), T(0));
    return model::act{static_cast<int32_t>(n_used_++), rows, cols};
  }

  size_t alloc_mark() const override { return n_used_; }
  void alloc_release(size_t mark) override {
    if (mark <= n_used_) n_used_ = mark;
  }

  model::act gather_rows(model::act x, const std::vector<int64_t>& rows) override {
    model::act out = alloc(static_cast<int64_t>(rows.size()), x.cols);
    for (size_t i = 0; i < rows.size(); ++i) {
      const T* src = row(x, rows[i]);
      std::copy(src, src + x.cols, row(out, static_cast<int64_t>(i)));
    }
    return out;
  }

  void read_f32(model::act x, float* out) override {
    const T* p = data(x);
    for (int64_t i = 0; i < x.rows * x.cols; ++i) out[i] = static_cast<float>(p[i]);
  }

 protected:
  ops_storage(const model::model& m, thread_pool* pool) : m_(m), hp_(m.hp()), pool_(pool) {}

  T* data(model::act a) { return bufs_[static_cast<size_t>(a.id)].data(); }
  T* row(model::act a, int64_t r) { return data(a) + r * a.cols; }
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
  size_t n_used_ = 0;
};

}  // namespace detaudit::backends
