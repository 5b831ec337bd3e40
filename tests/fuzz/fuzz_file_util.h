// Shared by the fuzz targets whose parser reads a file by path: one in-memory file per process
// (memfd), rewritten with each input and named by its /proc/self/fd path, so an input costs no
// disk write.
#pragma once

#include <cstdint>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

namespace detaudit::fuzz {

// Replaces the file's contents with the input and returns its path; traps when it cannot (the
// run would test nothing).
inline const std::string& fuzz_write_temp(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("detaudit-fuzz", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ftruncate(fd, 0) != 0) __builtin_trap();
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) __builtin_trap();
    done += static_cast<size_t>(n);
  }
  return path;
}

}  // namespace detaudit::fuzz
