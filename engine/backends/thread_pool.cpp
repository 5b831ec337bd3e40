#include "backends/thread_pool.h"

#include <algorithm>
#include <stdexcept>

namespace detaudit::backends {

namespace {

constexpr int PAUSE_ITERATIONS = 256;  // busy-wait first (a few microseconds)
constexpr int YIELD_ITERATIONS = 64;   // then yield: on a busy machine the thread we wait for runs
constexpr int64_t TASKS_PER_THREAD = 4;
constexpr int64_t MAX_TASKS = int64_t(1) << 31;  // the claim word's index field

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

inline uint32_t gen_of(uint64_t c) { return static_cast<uint32_t>(c >> 32); }
inline int64_t index_of(uint64_t c) { return static_cast<int64_t>(c & 0xffffffffu); }

}  // namespace

thread_pool::thread_pool(int n_threads) : n_threads_(n_threads) {
  if (n_threads < 1) throw std::logic_error("thread_pool: n_threads must be at least 1");
  // Workers start from generation 0 whenever the OS first runs them, so a run published before a
  // worker's first instruction is still seen as new.
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker(); });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
  }
  cv_work_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void thread_pool::work_on(uint32_t gen) {
  const job& j = jobs_[gen & 1];
  uint64_t c = claim_.load();
  for (;;) {
    if (gen_of(c) != gen) return;
    const int64_t i = index_of(c);
    if (i >= j.n_tasks.load()) return;
    if (!claim_.compare_exchange_weak(c, c + 1)) continue;  // c now holds the current word
    // The claim succeeded: the run of gen cannot end before this task does, so j is still its job.
    const int64_t n = j.n_tasks.load();
    try {
      (*j.fn.load())(i);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
    }
    if (done_.fetch_add(1) + 1 == n && sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lk(mu_);
      cv_done_.notify_all();
    }
    c = claim_.load();
  }
}

void thread_pool::worker() {
  uint32_t seen = 0;
  for (;;) {
    auto news = [&] { return stop_.load() || gen_of(claim_.load()) != seen; };
    if (!spin_until(news)) {
      std::unique_lock<std::mutex> lk(mu_);
      sleepers_.fetch_add(1);
      cv_work_.wait(lk, news);
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = gen_of(claim_.load());
    work_on(seen);
  }
}

void thread_pool::run(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
  if (n_tasks <= 0) return;
  if (workers_.empty() || n_tasks == 1) {
    std::exception_ptr first;
    for (int64_t i = 0; i < n_tasks; ++i) {
      try {
        fn(i);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
    return;
  }
  if (n_tasks >= MAX_TASKS) throw std::logic_error("thread_pool: too many tasks in one run");
  const uint32_t gen = gen_of(claim_.load()) + 1;
  job& j = jobs_[gen & 1];
  j.fn.store(&fn);
  j.n_tasks.store(n_tasks);
  done_.store(0);
  {
    std::lock_guard<std::mutex> lk(mu_);
    error_ = nullptr;
    claim_.store(static_cast<uint64_t>(gen) << 32);  // publishes the run: workers may claim from here
  }
  if (sleepers_.load() > 0) cv_work_.notify_all();
  work_on(gen);
  // Every task is claimed; wait for those other threads are still running.
  auto finished = [&] { return done_.load() == n_tasks; };
  if (!spin_until(finished)) {
    std::unique_lock<std::mutex> lk(mu_);
    sleepers_.fetch_add(1);
    cv_done_.wait(lk, finished);
    sleepers_.fetch_sub(1);
  }
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lk(mu_);
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

int64_t task_count(int64_t n_units, int64_t n_threads) {
  if (n_threads <= 1) return std::min<int64_t>(1, std::max<int64_t>(0, n_units));
  return std::max<int64_t>(0, std::min(n_units, n_threads * TASKS_PER_THREAD));
}

}  // namespace detaudit::backends
