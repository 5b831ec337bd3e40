// Arrays next to a PROT_NONE page, for the tests that a kernel reads nothing outside its inputs:
// n elements of T in a mapping of their own, the guard page right after their last byte (tail)
// or right before their first (head), so a read one element outside them faults.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <doctest/doctest.h>

namespace detaudit::test {

template <class T>
struct guarded {
  void* base = nullptr;
  size_t len = 0;
  T* p = nullptr;
  // n elements (zero bytes), the guard page after them (tail) or before them.
  explicit guarded(size_t n, bool tail = true) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t bytes = n * sizeof(T);
    const size_t data_pages = bytes == 0 ? 1 : (bytes + page - 1) / page;
    len = (data_pages + 1) * page;
    base = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(base != MAP_FAILED);
    uint8_t* b = static_cast<uint8_t*>(base);
    if (tail) {
      REQUIRE(::mprotect(b + data_pages * page, page, PROT_NONE) == 0);
      p = reinterpret_cast<T*>(b + data_pages * page - bytes);
    } else {
      REQUIRE(::mprotect(b, page, PROT_NONE) == 0);
      p = reinterpret_cast<T*>(b + page);
    }
  }
  // A copy of the n elements at src, guarded as above.
  guarded(const T* src, size_t n, bool tail) : guarded(n, tail) {
    if (n > 0) std::memcpy(p, src, n * sizeof(T));
  }
  ~guarded() { ::munmap(base, len); }
  guarded(const guarded&) = delete;
  guarded& operator=(const guarded&) = delete;
};

}  // namespace detaudit::test
