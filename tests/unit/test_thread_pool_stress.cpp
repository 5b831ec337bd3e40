// backends::thread_pool under stress: a task never runs for a run other than its
// own or after its run() returned, exceptions on every thread count, pools destroyed at once.
#include <doctest/doctest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backends/thread_pool.h"

using detaudit::backends::thread_pool;

TEST_CASE("thread pool: no task runs for a finished run, each run's own function") {
  for (int n_threads : {2, 3, 5, 16}) {
    CAPTURE(n_threads);
    thread_pool pool(n_threads);
    constexpr int RUNS = 20000;
    std::vector<std::atomic<int>> finished(RUNS);
    std::atomic<int> late{0}, wrong{0};
    std::vector<std::atomic<int>> hits(8);
    for (int run = 0; run < RUNS; ++run) {
      const int64_t n = 2 + run % 7;
      // A heap function, destroyed right after run() returns, as ops' lambdas are.
      auto fn = std::make_unique<std::function<void(int64_t)>>([&, run, n](int64_t i) {
        if (finished[static_cast<size_t>(run)].load()) late.fetch_add(1);
        if (i < 0 || i >= n) wrong.fetch_add(1);
        hits[static_cast<size_t>(i)].fetch_add(1);
      });
      pool.run(n, *fn);
      finished[static_cast<size_t>(run)].store(1);
      fn.reset();
      for (int64_t i = 0; i < n; ++i) REQUIRE(hits[static_cast<size_t>(i)].exchange(0) == 1);
    }
    CHECK(late.load() == 0);
    CHECK(wrong.load() == 0);
  }
}

TEST_CASE("thread pool: exceptions from workers and caller, every run, pool still usable") {
  thread_pool pool(4);
  for (int run = 0; run < 5000; ++run) {
    std::atomic<int> ran{0};
    const int64_t n = 2 + run % 9;
    bool threw = false;
    try {
      pool.run(n, [&](int64_t i) {
        ran.fetch_add(1);
        if (i == (run % n)) throw std::runtime_error("boom");
      });
    } catch (const std::runtime_error&) {
      threw = true;
    }
    REQUIRE(threw);
    REQUIRE(ran.load() == n);
  }
  std::atomic<int> ok{0};
  pool.run(10, [&](int64_t) { ok.fetch_add(1); });
  CHECK(ok.load() == 10);
}

TEST_CASE("thread pool: pools created and destroyed at once, with and without a run") {
  for (int k = 0; k < 300; ++k) {
    thread_pool a(8);
    if (k % 2) {
      std::atomic<int> s{0};
      a.run(3, [&](int64_t) { s.fetch_add(1); });
      CHECK(s.load() == 3);
    }
  }
}

TEST_CASE("thread pool: a single-thread pool runs every task before rethrowing (documented contract)") {
  // "The first exception thrown by a task is rethrown here after every task has finished."
  for (int n_threads : {1, 2}) {
    CAPTURE(n_threads);
    thread_pool pool(n_threads);
    std::atomic<int> ran{0};
    CHECK_THROWS(pool.run(4, [&](int64_t i) {
      ran.fetch_add(1);
      if (i == 0) throw std::runtime_error("first task fails");
    }));
    CHECK(ran.load() == 4);
  }
}
