// A small fixed thread pool: run(n, fn) calls fn(0) .. fn(n-1) once each, on the calling thread
// and the workers, and returns when all have finished.
//
// Tasks are claimed one at a time from a shared counter, so whichever threads are running do the
// work: on a shared machine a worker that the OS has not scheduled yet (or has preempted) holds
// up at most the one task it has claimed, and a run whose workers never wake is finished by the
// caller alone. The caller waits only for tasks already claimed, never for a worker to check in.
// Callers split work into a few tasks per thread (task_count) so that the last ones balance.
// Idle workers and the waiting caller spin briefly, then yield, then sleep on a condition
// variable: generation runs a few hundred short run() calls per token, and a sleep/wake per call
// costs more than the work.
//
// Goals: every task runs exactly once per run(); any assignment of tasks to threads is allowed,
// so a task must not depend on which thread runs it (the exact backend's outputs never do).
// Non-goals: work stealing across runs, nested run() calls, futures.
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
  // The function and task count of one run; slot g % 2 serves generation g, so a worker that
  // reads a slot late sees either its run's values or those of a run two later (whose claims then
  // fail on the generation).
  struct job {
    std::atomic<const std::function<void(int64_t)>*> fn{nullptr};
    std::atomic<int64_t> n_tasks{0};
  };

  void worker();
  // Claims and runs tasks of generation gen until none is left or gen is over.
  void work_on(uint32_t gen);

  int n_threads_;
  std::vector<std::thread> workers_;
  job jobs_[2];
  // (generation << 32) | index of the next unclaimed task. Claims are compare-exchanges that keep
  // the generation, so a late worker cannot claim a task of a run it did not see begin.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> done_{0};  // tasks of the current run finished
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};  // threads waiting on a condition variable
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::exception_ptr error_;  // under mu_
};

// The half-open range [begin, end) of part `part` of n items split into n_parts contiguous
// parts as equal as possible, each starting at a multiple of `align`.
void split_range(int64_t n, int64_t n_parts, int64_t part, int64_t align, int64_t* begin, int64_t* end);

// How many tasks to split n_units units of work into for a pool of n_threads: a few per thread
// (so that a thread the OS preempts holds back a small part), never more than n_units.
int64_t task_count(int64_t n_units, int64_t n_threads);

}  // namespace detaudit::backends
