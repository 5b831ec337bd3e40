// text_file_write: POSIX open/write/close, so that errno says why a write failed.
#include "reports/audit/file_write.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace detaudit::reports {

void text_file_write(const std::string& path, const std::string& text, const std::string& what) {
  auto fail = [&](int err) {
    if (errno_disk_full(err)) throw disk_full_error(what + ": writing '" + path + "' failed: " + std::strerror(err));
    throw input_error(what + ": cannot write '" + path + "': " + std::strerror(err));
  };
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(errno);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;  // no progress on a regular file: the disk is full
      ::close(fd);
      fail(err);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) fail(errno);  // NFS and quotas may report a full disk only here
}

}  // namespace detaudit::reports
