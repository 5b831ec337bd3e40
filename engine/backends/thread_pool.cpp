#include "backends/thread_pool.h"

#include <algorithm>
#include <stdexcept>

namespace detaudit::backends {

namespace {

constexpr int PAUSE_ITERATIONS = 256;  // busy-wait first (a few microseconds)
constexpr int YIELD_ITERATIONS = 64;   // then yield: on a busy machine the thread we wait for runs

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Waits until done() for a bounded time; true when done() held.
template <class F>
bool spin_until(F&& done) {
  for (int i = 0; i < PAUSE_ITERATIONS; ++i) {
    if (done()) return true;
    cpu_relax();
  }
  for (int i = 0; i < YIELD_ITERATIONS; ++i) {
    if (done()) return true;
    std::this_thread::yield();
  }
  return done();
}

}  // namespace

thread_pool::thread_pool(int n_threads) : n_threads_(n_threads) {
  if (n_threads < 1) throw std::logic_error("thread_pool: n_threads must be at least 1");
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_work_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void thread_pool::run_share(int index) {
  for (int64_t i = index; i < n_tasks_; i += n_threads_) {
    try {
      (*fn_)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void thread_pool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_work_.wait(lk, [&] { return stop_ || generation_.load() != seen; });
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_) return;
      seen = generation_.load();
    }
    run_share(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lk(mu_);
      cv_done_.notify_one();
    }
  }
}

void thread_pool::run(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
  if (n_tasks <= 0) return;
  if (workers_.empty() || n_tasks == 1) {
    for (int64_t i = 0; i < n_tasks; ++i) fn(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    fn_ = &fn;
    n_tasks_ = n_tasks;
    pending_.store(static_cast<int>(workers_.size()));
    error_ = nullptr;
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_work_.notify_all();
  run_share(0);
  std::exception_ptr err;
  spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; });
  {
    std::unique_lock<std::mutex> lk(mu_);
    cv_done_.wait(lk, [&] { return pending_.load() == 0; });
    fn_ = nullptr;
    err = error_;
  }
  if (err) std::rethrow_exception(err);
}

void split_range(int64_t n, int64_t n_parts, int64_t part, int64_t align, int64_t* begin, int64_t* end) {
  const int64_t n_units = (n + align - 1) / align;
  const int64_t per = n_units / n_parts, extra = n_units % n_parts;
  const int64_t u0 = part * per + std::min(part, extra);
  const int64_t u1 = u0 + per + (part < extra ? 1 : 0);
  *begin = std::min(n, u0 * align);
  *end = std::min(n, u1 * align);
}

}  // namespace detaudit::backends
