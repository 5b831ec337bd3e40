// backends::thread_pool: every task of every run exactly once, errors carried to the caller, runs
// that finish while workers sleep or are starved of CPU, and the range helpers the backends use.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backends/thread_pool.h"

using namespace detaudit;
using backends::thread_pool;

TEST_CASE("thread pool: each task of each run runs exactly once, on any thread count") {
  for (int n_threads : {1, 2, 3, 8}) {
    CAPTURE(n_threads);
    thread_pool pool(n_threads);
    std::vector<std::atomic<int>> hits(257);
    for (int run = 0; run < 2000; ++run) {
      const int64_t n = 1 + run % 257;
      pool.run(n, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
      for (int64_t i = 0; i < n; ++i) {
        if (hits[static_cast<size_t>(i)].exchange(0) != 1) FAIL("task " << i << " of run " << run << " did not run exactly once");
      }
      for (int64_t i = n; i < 257; ++i) REQUIRE(hits[static_cast<size_t>(i)].load() == 0);
    }
  }
}

TEST_CASE("thread pool: a task's exception reaches the caller after every task finished, and the pool goes on") {
  thread_pool pool(4);
  std::atomic<int> ran{0};
  CHECK_THROWS_WITH_AS(pool.run(64,
                                [&](int64_t i) {
                                  ran.fetch_add(1);
                                  if (i == 5 || i == 40) throw std::runtime_error("task failed");
                                }),
                       "task failed", std::runtime_error);
  CHECK(ran.load() == 64);
  ran = 0;
  pool.run(64, [&](int64_t) { ran.fetch_add(1); });
  CHECK(ran.load() == 64);
}

TEST_CASE("thread pool: a slow task holds back only itself, since tasks are claimed rather than assigned") {
  // Tasks 0 and 1 block until the 600 quick tasks are done (or 20 s pass). Claimed tasks: the one
  // free thread runs all 600 whenever the scheduler lets it, and the blocked threads run none.
  // Tasks assigned round-robin would leave 400 of them to the blocked threads: the wait would time
  // out and they would run them after it. No timing enters the verdict, only who ran what.
  thread_pool pool(3);
  std::vector<std::thread::id> who(602);
  std::vector<std::atomic<int>> hits(602);
  std::atomic<int> quick_done{0};
  std::atomic<bool> timed_out{false};
  pool.run(602, [&](int64_t i) {
    if (i < 2) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (quick_done.load() < 600) {
        if (std::chrono::steady_clock::now() > until) {
          timed_out = true;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    } else {
      quick_done.fetch_add(1);
    }
    who[static_cast<size_t>(i)] = std::this_thread::get_id();
    hits[static_cast<size_t>(i)].fetch_add(1);
  });
  int by_blocked = 0;
  for (size_t i = 0; i < hits.size(); ++i) {
    CHECK(hits[i].load() == 1);
    if (i >= 2 && (who[i] == who[0] || who[i] == who[1])) ++by_blocked;
  }
  CHECK_FALSE(timed_out.load());
  CHECK(who[0] != who[1]);
  CHECK(by_blocked == 0);
}

TEST_CASE("thread pool: more threads than cores, runs back to back, all complete") {
  // Oversubscribed (16 threads whatever the core count): workers are often not scheduled when a
  // run starts; the caller claims what they do not, and no run waits for a worker to check in.
  thread_pool pool(16);
  int64_t total = 0;
  for (int run = 0; run < 3000; ++run) {
    std::atomic<int64_t> sum{0};
    pool.run(37, [&](int64_t i) { sum.fetch_add(i + 1); });
    total += sum.load();
  }
  CHECK(total == int64_t(3000) * 37 * 38 / 2);
}

TEST_CASE("thread pool: split_range and task_count") {
  int64_t b = 0, e = 0, covered = 0;
  for (int64_t part = 0; part < 5; ++part) {
    backends::split_range(100, 5, part, 16, &b, &e);
    CHECK(b % 16 == 0);
    CHECK(b == covered);
    covered = e;
  }
  CHECK(covered == 100);
  CHECK(backends::task_count(1000, 1) == 1);
  CHECK(backends::task_count(1000, 2) == 8);
  CHECK(backends::task_count(3, 2) == 3);
  CHECK(backends::task_count(0, 4) == 0);
}
