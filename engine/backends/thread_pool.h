// A small fixed thread pool: run(n, fn) calls fn(0) .. fn(n-1), task i on thread i % n_threads,
// the calling thread taking part, and returns when all are done. Idle workers and the waiting
// caller spin briefly (about 50 us) before sleeping on a condition variable: generation runs a
// few hundred short run() calls per token, and a sleep/wake per call costs more than the work.
//
// Goals: a static partition (task i always runs on the same worker for the same n), so a backend
// that splits work into one task per thread knows exactly which part each thread computes.
// Non-goals: work stealing, nested run() calls, futures.
//
// Thread-safety: run() is called by one thread at a time (the context's owner).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace detaudit::backends {

class thread_pool {
 public:
  explicit thread_pool(int n_threads);  // n_threads >= 1; n_threads - 1 workers are started
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  int n_threads() const { return n_threads_; }
  // Runs fn(i) for i in [0, n_tasks). The first exception thrown by a task is rethrown here
  // after every task has finished.
  void run(int64_t n_tasks, const std::function<void(int64_t)>& fn);

 private:
  void worker(int index);
  void run_share(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_tasks_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;
  std::exception_ptr error_;
};

// The half-open range [begin, end) of part `part` of n items split into n_parts contiguous
// parts as equal as possible, each starting at a multiple of `align`.
void split_range(int64_t n, int64_t n_parts, int64_t part, int64_t align, int64_t* begin, int64_t* end);

}  // namespace detaudit::backends
